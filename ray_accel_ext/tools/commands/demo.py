"""``ray-accel demo``: a local Ray cluster of simulated accelerator nodes, started through the hook.

Each node is a real ``ray start`` with ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook`` and
``RAY_ACCEL_ROOT`` pointing at a host snapshot bundled with the package (or given with
``--snapshots``). The demo prints every node's accelerator resources and labels, then places work
by label: one task per accelerator family (2 GPUs, 4 TPU chips, 4 NeuronCores), each showing the
visible-devices variable Ray set and the task's devices, NUMA CPUs and nearest NICs, and one task
per multi-host fabric domain.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import tarfile
import tempfile
import time
from importlib import resources
from pathlib import Path

from ...host import is_snapshot_dir
from ...host.snapshot import metadata_spec
from ...labels import (
    DISCOVERY,
    FABRIC_DOMAIN,
    FABRIC_HOSTS,
    INTERCONNECT,
    NODE_ID,
    PROJECT_PREFIX,
    RAY_PREFIX,
    SKU,
    key_prefix,
)
from ._common import port_number, print_json, table

METADATA_ENDPOINTS = ("GCE_METADATA_HOST", "GCE_METADATA_IP", "AWS_EC2_METADATA_SERVICE_ENDPOINT")


def register(sub) -> None:
    p = sub.add_parser("demo", help="run a simulated multi-node cluster from bundled host snapshots", description=__doc__)
    p.add_argument("--snapshots", nargs="+", metavar="DIR", help="host snapshot directories (default: the bundled ones)")
    p.add_argument("--format", choices=["table", "json"], default="table", help="output format (default table)")
    p.add_argument("--keep", action="store_true",
                   help="keep the cluster up afterwards and serve `ray-accel dashboard` on it until Ctrl-C")
    p.add_argument("--port", type=port_number, default=8266, metavar="N",
                   help="with --keep: the dashboard's port on 127.0.0.1 (default 8266; 0 picks one)")
    p.set_defaults(func=run)


def bundled_snapshots(into: Path) -> list[Path]:
    """Unpack the host snapshots shipped with the package into ``into``; head first.

    They ship as a tarball because wheels turn symlinks into copies, and the resolved sysfs links
    are what PCIe topology is computed from.
    """
    with resources.as_file(resources.files("ray_accel_ext") / "demo_hosts.tar.gz") as tarball:
        with tarfile.open(tarball) as tar:
            tar.extractall(into, filter="data")
    order = (into / "ORDER").read_text().split()
    return [into / name for name in order if is_snapshot_dir(into / name)]


def _progress(fmt: str, message: str) -> None:
    # Progress goes to stderr so that --format json keeps stdout to exactly one document.
    print(message, file=sys.stderr if fmt == "json" else sys.stdout, flush=True)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="ray-accel-demo") as tmp:
        snapshots = [Path(s) for s in args.snapshots] if args.snapshots else bundled_snapshots(Path(tmp))
        return _run(args, snapshots)


def _run(args: argparse.Namespace, snapshots: list[Path]) -> int:
    import ray

    from ...testing.cluster import SimulatedCluster

    bad = [str(s) for s in snapshots if not is_snapshot_dir(s)]
    if bad:
        print(f"ray-accel demo: not host snapshots (no rootfs/): {', '.join(bad)}", file=sys.stderr)
        return 2
    fmt = args.format
    started = time.monotonic()
    report: dict = {"nodes": [], "placements": []}
    with SimulatedCluster() as cluster, contextlib.ExitStack() as stack:
        server = _listen(args, cluster.address) if args.keep else None  # a busy port fails before the demo
        if server is not None:
            stack.callback(server.close)
        head, *workers = snapshots
        _progress(fmt, f"[1/4] starting head node from {head.name} (ray start + hook) ...")
        cluster.add_node(head, name=head.name)
        _progress(fmt, f"      up after {time.monotonic() - started:.1f}s")
        if workers:
            _progress(fmt, f"[2/4] starting {len(workers)} worker node(s): {', '.join(w.name for w in workers)} ...")
            cluster.add_nodes([(w, {"name": w.name}) for w in workers])
            _progress(fmt, f"      up after {time.monotonic() - started:.1f}s")
        cluster.connect(logging_level="ERROR", log_to_driver=False)

        rows = []
        for sim in cluster.nodes:
            node = cluster.ray_node(sim.name)
            labels = {k: v for k, v in node["Labels"].items() if key_prefix(k) in (RAY_PREFIX, PROJECT_PREFIX) and k != NODE_ID}
            res = {k: v for k, v in node["Resources"].items()
                   if not k.startswith(("node:", "memory", "object_store_memory", "CPU"))}
            report["nodes"].append({"name": sim.name, "node_id": node["NodeID"], "resources": res, "labels": labels})
            rows.append((
                sim.name,
                ", ".join(f"{k}={v:g}" for k, v in sorted(res.items())) or "-",
                labels.get(SKU, "-"),
                labels.get(INTERCONNECT, "-"),
                labels.get(FABRIC_DOMAIN, "-"),
                labels.get(DISCOVERY, "-"),
            ))
        if fmt == "table":
            print("\n[3/4] nodes, as Ray sees them")
            print(table(rows, ("node", "resources", "sku", "interconnect", "fabric-domain", "discovery")))
            for entry in report["nodes"]:
                print(f"\n  {entry['name']} labels:")
                for k, v in sorted(entry["labels"].items()):
                    print(f"    {k}={v}")

        _progress(fmt, "\n[4/4] placing work by label")
        report["placements"] = _place(ray, report["nodes"])
        if fmt == "table":
            for p in report["placements"]:
                print(f"  {p['what']}\n    selector {p['selector']} -> node {p['node']}")
                for k, v in p.get("details", {}).items():
                    print(f"      {k}: {v}")
        report["elapsed_s"] = round(time.monotonic() - started, 1)
        if fmt == "json":
            print_json(report)
        if server is not None:
            return _keep(args, server, cluster.address)
    if fmt == "table":
        print(f"\ndone in {report['elapsed_s']}s; cluster stopped")
    return 0


def _listen(args: argparse.Namespace, address: str):
    from ...cluster.dashboard import ClusterSource
    from .dashboard import listen

    return listen(ClusterSource(address), host="127.0.0.1", port=args.port, refresh_s=3.0)


def _keep(args: argparse.Namespace, server, address: str) -> int:
    """Serve the dashboard on the demo's cluster until Ctrl-C; the cluster stops when it ends."""
    from .dashboard import serve

    _progress(args.format, f"\ncluster kept up at {address} (token auth off, as for every demo node): "
                           f"RAY_AUTH_MODE=disabled ray-accel cluster --address {address}")
    try:
        serve(server, refresh_s=3.0, prefix="ray-accel demo: dashboard")
    except KeyboardInterrupt:
        _progress(args.format, "stopping the cluster")
    return 0


def _place(ray, nodes: list[dict]) -> list[dict]:
    names = {n["node_id"]: n["name"] for n in nodes}

    @ray.remote(num_cpus=0)
    def where(variable: str | None):
        import os

        out = {"node": ray.get_runtime_context().get_node_id()}
        if variable:
            from ray_accel_ext.hw.pci import format_cpulist
            from ray_accel_ext.worker import my_devices

            topo = my_devices()
            out["details"] = {
                f"{variable} (set by Ray)": os.environ.get(variable),
                "devices": ", ".join(f"{d.index}@{d.pci_address}" for d in topo.devices),
                "NUMA CPUs": format_cpulist(topo.cpus),
                "nearest NICs": ", ".join(n.name for n in topo.nics) or "-",
                "NCCL env": " ".join(f"{k}={v}" for k, v in topo.nccl_env.items()) or "-",
            }
        return out

    placements = []
    by_resource = (
        ("GPU", "num_gpus", 2, "CUDA_VISIBLE_DEVICES"),
        ("TPU", "TPU", 4, "TPU_VISIBLE_CHIPS"),
        ("neuron_cores", "neuron_cores", 4, "NEURON_RT_VISIBLE_CORES"),
    )
    for resource, option, amount, variable in by_resource:
        node = next((n for n in nodes if n["resources"].get(resource, 0) >= amount and n["labels"].get(SKU)), None)
        if node is None:
            continue
        sku = node["labels"][SKU]
        selector = {SKU: sku}
        opts = {"num_gpus": amount} if option == "num_gpus" else {"resources": {option: amount}}
        got = ray.get(where.options(label_selector=selector, **opts).remote(variable), timeout=120)
        placements.append({"what": f"a task asking {resource}={amount} on a {sku} node", "selector": selector,
                           "node": names.get(got["node"], got["node"]), "details": got.get("details", {})})
    domains = sorted({n["labels"][FABRIC_DOMAIN] for n in nodes if n["labels"].get(FABRIC_HOSTS, "1") != "1"})
    for domain in domains:
        selector = {FABRIC_DOMAIN: domain}
        got = ray.get(where.options(label_selector=selector).remote(None), timeout=120)
        placements.append({"what": "a task inside one multi-host fabric domain", "selector": selector,
                           "node": names.get(got["node"], got["node"])})
    return placements


def served_metadata(root: str) -> dict[str, str]:
    """The variables naming loopback servers that answer with snapshot ``root``'s ``metadata.json``
    (stopped when the process ends); none where the environment names its own servers."""
    from ...testing.fake_metadata import MetadataServers

    if not is_snapshot_dir(root) or any(os.environ.get(v) for v in METADATA_ENDPOINTS):
        return {}
    spec = metadata_spec(root)
    if not spec:
        return {}
    servers = MetadataServers(spec).start()
    atexit.register(servers.stop)
    return servers.env()
