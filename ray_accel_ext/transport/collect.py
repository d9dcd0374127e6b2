"""Ray side: the facts of reserved hosts, gathered once per plan from the nodes themselves.

For each node a reservation placed bundles on, ``ray.nodes()`` gives its address, labels and
resources, and one zero-CPU task pinned to the node (``NodeAffinitySchedulingStrategy(soft=False)``)
runs discovery there (:func:`ray_accel_ext.cluster.collect.probe_node`, the node's own host, inherited
``RAY_ACCEL_ROOT``) and reads which local interface holds the node's address (``psutil``). A node
whose probe fails or times out is planned from its labels alone (the plan warns).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import NodeInventory
from .model import HostFacts, ReservedDomain
from .plan import TransportPlan, plan_transport
from .view import reserved_resources

__all__ = ["facts_of", "plan_reservation", "interface_of", "probe_host"]


def interface_of(address: str) -> str | None:
    """The local network interface that holds ``address`` (None when none does)."""
    import psutil

    for name, addrs in sorted(psutil.net_if_addrs().items()):
        for a in addrs:
            if str(a.address).split("%", 1)[0] == address:
                return name
    return None


def probe_host(address: str) -> dict[str, Any]:
    """Runs on the node: discovery's inventory, the hostname, and the interface of ``address``."""
    from ..cluster.collect import probe_node

    out = probe_node()
    out["socket_ifname"] = interface_of(address)
    return out


def _probe_all(nodes: Mapping[str, Mapping[str, Any]], timeout_s: float) -> dict[str, dict[str, Any] | str]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0, max_retries=0)(probe_host)
    refs = {nid: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nid, soft=False),
                                name="ray_accel_ext.transport.probe").remote(str(node.get("NodeManagerAddress", "")))
            for nid, node in nodes.items()}
    deadline = time.monotonic() + timeout_s
    out: dict[str, dict[str, Any] | str] = {}
    for nid, ref in refs.items():
        try:
            out[nid] = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - a node that cannot answer is planned from its labels
            ray.cancel(ref, force=True)
            out[nid] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return out


def facts_of(reservations: Sequence[Any], *, probe_timeout_s: float = 60.0) -> list[ReservedDomain]:
    """One :class:`ReservedDomain` per reservation, hosts in bundle order, facts probed once."""
    import ray

    alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
    layouts: list[tuple[Any, dict[str, list[Mapping[str, float]]]]] = []
    for r in reservations:
        on_node: dict[str, list[Mapping[str, float]]] = {}
        for index, node_id in sorted(r.bundle_nodes().items()):
            on_node.setdefault(node_id, []).append(r.bundles[index])
        layouts.append((r, on_node))
    wanted = {nid: alive[nid] for _, on_node in layouts for nid in on_node if nid in alive}
    probes = _probe_all(wanted, probe_timeout_s)
    domains = []
    for r, on_node in layouts:
        hosts = []
        for nid, bundles in on_node.items():
            node = alive.get(nid, {})
            probe = probes.get(nid)
            descriptions: tuple = ()
            hostname = node.get("NodeManagerHostname")
            ifname = None
            error = probe if isinstance(probe, str) else None
            if isinstance(probe, Mapping):
                try:
                    descriptions = NodeInventory.from_dict(probe["inventory"]).descriptions
                except Exception as exc:  # noqa: BLE001 - an unreadable description: plan from labels
                    descriptions, error = (), f"unreadable description: {type(exc).__name__}"
                hostname = probe.get("hostname") or hostname
                ifname = probe.get("socket_ifname")
            hosts.append(HostFacts(
                node_id=nid,
                address=str(node.get("NodeManagerAddress", "")),
                labels=dict(node.get("Labels") or {}),
                resources=dict(node.get("Resources") or {}),
                descriptions=descriptions,
                hostname=hostname,
                socket_ifname=ifname,
                reserved=reserved_resources(bundles),
                probe_error=error,
            ))
        domains.append(ReservedDomain(domain=r.domain, hosts=tuple(hosts), label_key=r.choice.key))
    return domains


def plan_reservation(*reservations: Any, units_per_rank: int | None = None, ports: Mapping[str, int] | None = None,
                     probe_timeout_s: float = 60.0) -> TransportPlan:
    """The transport plan of one or more ready reservations (``placement.reserve``)."""
    return plan_transport(facts_of(reservations, probe_timeout_s=probe_timeout_s),
                          units_per_rank=units_per_rank, ports=ports)
