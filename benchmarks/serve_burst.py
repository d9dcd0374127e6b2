"""The Serve example under bursts through a node kill, measured on one simulated cluster.

    .venv/bin/python benchmarks/serve_burst.py [--burst-size 200] [--mean-gap 2] [--seed 15]

Cluster: a head (router and slice replica run there), two GB200 NVLink domains of two trays
each (copies of the GB200 NVL72 tray snapshot, ``tests.support.domains.gb200_domain``) and an L4
node (the fallback pool), every node a real ``ray start`` through the start hook. Load:
``examples/serve_slice/loadgen.py``, open loop, bursts of ``--burst-size`` concurrent requests
whose starts are a Poisson process (mean gap ``--mean-gap`` s, seeded). After ``--warm-bursts``
bursts, a tray of the replica's domain is killed while the next burst is in flight; the load goes
on until the replica serves from another whole domain, then ``--tail-bursts`` more.

Prints, per phase (before the kill, kill to back on a domain, after): requests, errors, p50 and
p99 latency, routes; the requests that met the dead shard (all answered by the pool); the time
from the kill to the first request served on the new domain, and the replica's own account of
it (reserve, shard start); and the p99 ratios against the phase before the kill.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

from ray_accel_ext.testing.cluster import NODE_NAME_LABEL, SimulatedCluster, free_port
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "serve_slice"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"serve_slice_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _phase(loadgen, records) -> dict:
    s = loadgen.summarize(records)
    return {k: s[k] for k in ("sent", "errors", "p50_ms", "p99_ms", "routes")}


def run(args) -> dict:
    import ray
    from ray import serve

    app_mod, loadgen = _load("app"), _load("loadgen")
    with tempfile.TemporaryDirectory(prefix="serve-bench") as tmp, \
            SimulatedCluster(system_config=json.dumps({"health_check_period_ms": 1000})) as cluster:
        t = time.perf_counter()
        cluster.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        specs = [(s, {"name": s.name}) for clique in (61, 62) for s in gb200_domain(Path(tmp), clique, trays=2)]
        specs.append((SNAPSHOTS / "nvidia_gpu" / "l4-single-pcie", {"name": "l4"}))
        add_in_batches(cluster, specs)
        cluster.connect(logging_level="WARNING")
        print(f"cluster: head + 2 GB200 domains x 2 trays + L4 ({len(cluster.nodes)} nodes) up in "
              f"{time.perf_counter() - t:.1f}s")
        port = free_port()
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        serve.run(app_mod.build_app(slice_capacity=args.slice_capacity, work_s=0.05, check_s=0.5,
                                    replica_selector={NODE_NAME_LABEL: "head"}), name="slice-app", route_prefix="/")
        status = serve.get_deployment_handle("SliceModel", app_name="slice-app").status
        deadline = time.monotonic() + 180
        while not status.remote().result()["slice"]:
            if time.monotonic() > deadline:
                raise SystemExit("the slice replica got no domain within 180 s")
            time.sleep(0.5)
        before = status.remote().result()
        victim = next(n for n in cluster.nodes if n.node_id == before["nodes"][1])
        killed: list[float] = []

        def kill(burst: int) -> None:
            if burst == args.warm_bursts:
                killed.append(time.monotonic())
                cluster.kill_node(victim)

        def more(records) -> bool:
            later = {r["burst"] for r in records if r.get("body", {}).get("route") == "slice"
                     and r["body"].get("domain") != before["domain"]}
            return len(later) < args.tail_bursts

        records = loadgen.run_load(port, bursts=args.warm_bursts + 1, burst_size=args.burst_size,
                                   mean_gap_s=args.mean_gap, seed=args.seed, max_seconds=args.max_seconds,
                                   on_burst=kill, more_while=more)
        after = status.remote().result()
        serve.delete("slice-app")
        serve.shutdown()
        ray.shutdown()

    on_new = [r["sent_at"] for r in records if r.get("body", {}).get("route") == "slice"
              and r["body"].get("domain") != before["domain"]]
    back_at = min(on_new) if on_new else None
    kill_at = killed[0] if killed else None
    phases = {
        "before kill": [r for r in records if kill_at is None or r.get("sent_at", 0) < kill_at],
        "kill to back": [r for r in records if kill_at is not None and kill_at <= r.get("sent_at", 0)
                         and (back_at is None or r["sent_at"] < back_at)],
        "back on a domain": [r for r in records if back_at is not None and r.get("sent_at", 0) >= back_at],
    }
    return {
        "burst_size": args.burst_size, "mean_gap_s": args.mean_gap, "seed": args.seed,
        "total": loadgen.summarize(records),
        "phases": {name: _phase(loadgen, rs) for name, rs in phases.items() if rs},
        "met_dead_shard": sum(1 for r in records if r.get("body", {}).get("slice_reason") == "lost"),
        "back_on_domain_s": round(back_at - kill_at, 2) if back_at and kill_at else None,
        "domains": [before["domain"], after.get("domain")],
        "recovery": [h for h in after.get("history", []) if h["event"] in ("lost", "reserved")][-2:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst-size", type=int, default=200)
    parser.add_argument("--mean-gap", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--warm-bursts", type=int, default=2)
    parser.add_argument("--tail-bursts", type=int, default=2)
    parser.add_argument("--slice-capacity", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return 0
    total = result["total"]
    print(f"\nbursts of {args.burst_size} (Poisson gaps, mean {args.mean_gap}s, seed {args.seed}), a tray killed "
          f"during burst {args.warm_bursts}: {total['sent']} requests, {total['errors']} errors")
    print(f"   {'phase':18}{'requests':>9}{'errors':>7}{'p50 ms':>9}{'p99 ms':>9}  routes")
    for name, p in result["phases"].items():
        print(f"   {name:18}{p['sent']:>9}{p['errors']:>7}{p['p50_ms'] or 0:>9.0f}{p['p99_ms'] or 0:>9.0f}  {p['routes']}")
    print(f"   requests that met the dead shard: {result['met_dead_shard']} (all answered by the pool)")
    print(f"   time back on a domain (kill -> first request served on {str(result['domains'][1])[-8:]}): "
          f"{result['back_on_domain_s']} s")
    for h in result["recovery"]:
        extra = f"reserve {h.get('reserve_s')} s, shards {h.get('shards_s')} s" if h["event"] == "reserved" else h.get("reason")
        print(f"     replica: {h['event']:8} {h['domain'][-8:]}  {extra}")
    base = result["phases"].get("before kill", {}).get("p99_ms")
    for name in ("kill to back", "back on a domain"):
        p99 = result["phases"].get(name, {}).get("p99_ms")
        if base and p99:
            print(f"   ratio p99 {name} / before kill = {p99 / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
