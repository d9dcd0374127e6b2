"""What the claim registry and the metrics exporter cost as removed placement groups pile up.

    .venv/bin/python benchmarks/placement_history.py [--sizes 2000,10000] [--repeats 9]

Ray keeps every placement group it ever made in its table, ``REMOVED`` ones included, so a read
of the whole table (``ray.util.placement_group_table()``) grows with the cluster's history. The
registry and the exporter read only the groups of the claims they hold. Cluster: a head and two
GB200 NVLink domains of one tray each (``ray start`` through the start hook, ``tests.support.domains``),
one domain held by a reservation throughout. At 0 removed groups, then after making and removing
groups until the table holds each size of ``--sizes``, prints the median of ``--repeats`` of:

1. Ray's whole-table read from a driver (what the exporter's every refresh and the registry's
   stale-claim check each read before);
2. one refresh of the metrics exporter (``refresh()`` of its actor: nodes, claims, line, health,
   the held groups, the gauges set);
3. the registry's ``look`` with its stale-claim check (called just after its 1 s throttle ran out);
4. the registry's ``claim`` + ``release`` of the other domain (its calls on a placement's hot path);
5. ``reserve`` + ``release`` of the other domain, end to end (1.5 s apart: Ray gives a removed
   group's bundle resources back to the node asynchronously, and a group made at once waits for a
   retry of Ray's scheduler, about 1 s);

and each one's ratio to its cost at 0 removed groups (1.0 = the cost does not follow the history).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_ext.placement import DomainRequest, reserve  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402

FABRIC = "rayaccel.io/fabric-domain"
SETTLE_S = 10.0
ONE_TRAY = DomainRequest(hosts=1, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=60, name="one-tray")


def median_ms(fn: Callable[[], object], repeats: int, before: Callable[[], object] | None = None) -> float:
    runs = []
    for _ in range(repeats):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1000


def make_removed(count: int) -> float:
    """Make and remove ``count`` one-bundle groups; seconds it took."""
    from ray.util.placement_group import placement_group, remove_placement_group

    t = time.perf_counter()
    for _ in range(count):
        remove_placement_group(placement_group([{"CPU": 0.001}]))
    return time.perf_counter() - t


def measure(repeats: int) -> dict[str, float]:
    import ray
    from ray.util import placement_group_table

    from ray_accel_ext.cluster.exporter import ensure_exporter
    from ray_accel_ext.placement.claims import claims_registry

    exporter, registry = ensure_exporter(), claims_registry()
    held = {k: v["owner"] for k, v in ray.get(registry.snapshot.remote()).items()}
    free = next(n for n in ray.nodes() if n["Alive"] and n["Labels"].get(FABRIC) and
                f"{FABRIC}={n['Labels'][FABRIC]}" not in held)
    key = f"{FABRIC}={free['Labels'][FABRIC]}"

    def claim_release():
        assert ray.get(registry.claim.remote(key, [free["NodeID"]], "bench", 60.0)) == "ok"
        assert ray.get(registry.release.remote(key, "bench"))

    return {
        "whole-table read (before)": median_ms(placement_group_table, repeats),
        "exporter refresh": median_ms(lambda: ray.get(exporter.refresh.remote()), repeats),
        "registry look + stale check": median_ms(lambda: ray.get(registry.look.remote()), repeats,
                                                 before=lambda: time.sleep(1.05)),
        "registry claim + release": median_ms(claim_release, repeats),
        "reserve + release": median_ms(lambda: reserve(ONE_TRAY).release(), repeats,
                                       before=lambda: time.sleep(1.5)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,10000", help="removed groups to reach, comma-separated")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from ray.util import placement_group_table

    from ray_accel_ext.testing.cluster import SimulatedCluster

    with tempfile.TemporaryDirectory(prefix="history-bench") as tmp, SimulatedCluster() as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        add_in_batches(c, [(s, {"name": s.name}) for clique in (61, 62) for s in gb200_domain(Path(tmp), clique, 1)])
        c.connect(logging_level="WARNING")
        held = reserve(ONE_TRAY)
        measure(2)  # warm: actors started, code paths loaded
        rows = {0: measure(args.repeats)}
        for size in sizes:
            removed = sum(1 for e in placement_group_table().values() if e.get("state") == "REMOVED")
            took = make_removed(max(0, size - removed))
            time.sleep(SETTLE_S)  # the GCS and raylets finish the removals before timing
            table = placement_group_table()
            print(f"made and removed groups up to {size} removed in {took:.1f}s "
                  f"(table: {len(table)} groups, {sum(e.get('state') != 'REMOVED' for e in table.values())} alive)")
            rows[size] = measure(args.repeats)
        held.release()
    print(f"\nmedian of {args.repeats} (ms); ratio to 0 removed groups in brackets")
    names = list(rows[0])
    for n in names:
        print(f"{n:>28}" + "".join(f"{size:>9} removed: {row[n]:8.2f} ({row[n] / rows[0][n]:6.2f}x)"
                                   for size, row in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
