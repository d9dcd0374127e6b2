"""``ray-accel cluster``: every node of a running Ray cluster, grouped by accelerator domain.

Domains are TPU slices, NVLink domains and UltraServers (``rayaccel.io/fabric-domain``), else
racks (``rayaccel.io/rack``), else single hosts. Each node is probed once with a zero-CPU task
pinned to it, which runs discovery there; ``--format json`` prints the dashboard's ``/api/cluster``
document (every node's NodeDescription, labels, resources, health marks, PCIe paths, occupancy,
advice; placement groups; the tasks and actors holding devices; one round of device metrics).
"""

from __future__ import annotations

import argparse

from ...cluster.collect import gather
from ...cluster.dashboard import ClusterSource
from ...cluster.inventory import ClusterInventory
from ...labels import FABRIC_WORKER
from ._common import add_format_option, print_json, table


def register(sub) -> None:
    p = sub.add_parser("cluster", help="list the cluster's nodes grouped by accelerator domain", description=__doc__)
    p.add_argument("--address", metavar="ADDR", help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="time allowed for connecting, and for the node probes (default 60)")
    add_format_option(p)
    p.set_defaults(func=run)


def render_table(inv: ClusterInventory) -> str:
    """The human-readable view: one block per domain, then placement groups and degraded nodes."""
    lines: list[str] = []
    s = inv.to_dict()["summary"]
    lines.append(f"{s['nodes']} nodes in {s['domains']} domains, {s['devices']} accelerators, "
                 f"{s['degraded']} degraded, {s['placement_groups']} placement groups")
    for dom in inv.domains:
        lines.append("")
        hosts = f"{len(dom.node_ids)}" + (f"/{dom.expected_hosts}" if dom.expected_hosts else "")
        extra = ", ".join(x for x in (dom.product, dom.topology and f"topology {dom.topology}") if x)
        pgs = f", placement groups: {', '.join(_pg_name(inv, p) for p in dom.placement_groups)}" if dom.placement_groups else ""
        lines.append(f"{dom.kind} {dom.id} ({hosts} hosts{', ' + extra if extra else ''}{pgs})")
        rows = []
        for nid in dom.node_ids:
            n = inv.node(nid)
            descs = n.inventory.descriptions if n.inventory else ()
            acc = "; ".join(f"{len(d.devices)} x {d.sku.name}" for d in descs) or "-"
            links = "; ".join(f"{len(d.links)} {d.interconnect}" for d in descs if d.links) or "-"
            nics = sum(len(d.nics) for d in descs)
            status = "degraded" if n.degraded else "ok"
            rows.append((n.hostname, nid, "head" if n.is_head else "", n.labels.get(FABRIC_WORKER, ""),
                         acc, links, nics, status))
        lines.append(table(rows, ("host", "node", "role", "worker", "accelerators", "links", "nics", "status")))
    if inv.placement_groups:
        lines.append("")
        lines.append(table(
            [(p.name or "-", p.pg_id, p.state, p.strategy, len(p.bundles), ", ".join(p.domains) or "-") for p in inv.placement_groups],
            ("placement group", "id", "state", "strategy", "bundles", "domains"),
        ))
    bad = [n for n in inv.nodes if n.degraded]
    if bad:
        lines.append("")
        lines.append("degraded nodes:")
        for n in bad:
            for reason in n.reasons():
                lines.append(f"  {n.hostname} ({n.node_id}): {reason}")
    return "\n".join(lines)


def _pg_name(inv: ClusterInventory, pg_id: str) -> str:
    pg = next((p for p in inv.placement_groups if p.pg_id == pg_id), None)
    return (pg.name or pg_id) if pg else pg_id


def run(args: argparse.Namespace) -> int:
    if args.format == "json":
        print_json(ClusterSource(args.address, probe_timeout_s=args.timeout).document())
    else:
        print(render_table(gather(args.address, probe_timeout_s=args.timeout)))
    return 0
