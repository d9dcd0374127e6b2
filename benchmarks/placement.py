"""Domain placement against Ray's own tools, measured in one run on one simulated cluster.

    .venv/bin/python benchmarks/placement.py [--rounds 5] [--contention-rounds 15] [--skip-ray]

Cluster: a head (no accelerators) and two TPU v6e 4x4 slices of four hosts each, every node a real
``ray start`` through the start hook from a copy of the GKE v6e 4x4 worker snapshot with its own
``TPU_NAME``/``TPU_WORKER_ID`` (``tests.support.domains.tpu_slice``). Prints:

1. time to ready for a whole v6e 4x4 slice: ``placement.reserve`` against Ray's alpha
   ``ray.util.tpu.slice_placement_group(topology="4x4", accelerator_version="v6e")``, interleaved,
   first (cold) call and the median of the rest; both are awaited with ``PlacementGroup.wait``;
2. split rate under contention: two requests for 4 hosts x 4 chips made at the same moment, per
   round; ours (two threads calling ``reserve``) against two plain
   ``placement_group([{"TPU": 4}] * 4, strategy="STRICT_SPREAD")``, as a user without slice
   awareness writes it; a group is split when its bundles sit on more than one slice;
3. the cost of ``choose_domain`` over synthetic inventories of 1,000 and 10,000 nodes (v6e 4x4
   slices, a quarter of them held), sizes interleaved with GC off, best and median of repeats,
   and the ratio of the best times (linear growth = 10x).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_ext.compat import require_feature  # noqa: E402
from ray_accel_ext.placement import DomainRequest, choose_domain, reserve  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, tpu_slice  # noqa: E402

FABRIC = "rayaccel.io/fabric-domain"
SLICE = DomainRequest(selector={"ray.io/accelerator-type": "TPU-V6E", "ray.io/tpu-topology": "4x4"},
                      complete=True, deadline_s=60, name="v6e-4x4")


def synthetic(n_nodes: int) -> tuple[list[dict], set[str]]:
    """``n_nodes`` v6e 4x4 slice hosts (4 per slice); every 4th slice held."""
    nodes, busy = [], set()
    for i in range(n_nodes):
        s = i // 4
        nodes.append({
            "NodeID": f"n{i:06d}", "Alive": True, "Resources": {"CPU": 8.0, "TPU": 4.0},
            "Labels": {FABRIC: f"slice-{s}", "rayaccel.io/fabric-hosts": "4", "ray.io/accelerator-type": "TPU-V6E",
                       "ray.io/tpu-topology": "4x4", "rayaccel.io/generation": "v6e"},
        })
        if s % 4 == 0:
            busy.add(f"{FABRIC}=slice-{s}")
    return nodes, busy


def bench_choose(repeats: int = 21) -> None:
    """Sizes interleaved, GC off while timing, best of ``repeats`` (the machine is shared)."""
    print("\n3. choose_domain over a synthetic inventory (whole v6e 4x4 slice, 1/4 of slices held)")
    sizes = (1_000, 10_000)
    inventories = {n: synthetic(n) for n in sizes}
    runs: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            nodes, busy = inventories[n]
            gc.collect()
            gc.disable()
            try:
                t = time.perf_counter()
                choose_domain(nodes, SLICE, busy_domains=busy)
                runs[n].append(time.perf_counter() - t)
            finally:
                gc.enable()
    best = {n: min(runs[n]) for n in sizes}
    for n in sizes:
        print(f"   {n:>6} nodes: best {best[n] * 1000:8.2f} ms ({best[n] / n * 1e6:.2f} us/node), "
              f"median {statistics.median(runs[n]) * 1000:8.2f} ms")
    ratio = best[10_000] / best[1_000]
    print(f"   ratio 10k/1k (best) = {ratio:.2f} (10.00 = linear; "
          f"{'linear' if ratio <= 12.5 else 'WORSE THAN LINEAR'} within 25%)")


def slice_of(pg, labels_by_node) -> set[str]:
    from ray.util import placement_group_table

    return {labels_by_node[n] for n in (placement_group_table(pg).get("bundles_to_node_id") or {}).values()}


def bench_ready(rounds: int) -> None:
    from ray.util.tpu import slice_placement_group

    require_feature("tpu_slice_placement_group")
    ours, theirs = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        r = reserve(SLICE)
        ours.append((time.perf_counter() - t, r.domain))
        r.release()
        t = time.perf_counter()
        sp = slice_placement_group(topology="4x4", accelerator_version="v6e")
        assert sp.placement_group.wait(60), "slice_placement_group not ready"
        theirs.append((time.perf_counter() - t, "?"))
        sp.release_head_pgs()
        sp.shutdown()
        time.sleep(0.2)
    print("\n1. time to ready, whole v6e 4x4 slice (4 hosts x 4 chips)")
    print(f"   {'':34}{'first':>10}{'median rest':>14}")
    for label, runs in (("ours: placement.reserve", ours), ("ray.util.tpu.slice_placement_group", theirs)):
        rest = statistics.median(x for x, _ in runs[1:]) if len(runs) > 1 else runs[0][0]
        print(f"   {label:34}{runs[0][0] * 1000:8.1f}ms{rest * 1000:12.1f}ms")
    ours_med = statistics.median(x for x, _ in ours[1:]) if len(ours) > 1 else ours[0][0]
    theirs_med = statistics.median(x for x, _ in theirs[1:]) if len(theirs) > 1 else theirs[0][0]
    print(f"   ratio ours/ray (median rest) = {ours_med / theirs_med:.2f} "
          f"({'ours no slower' if ours_med <= theirs_med else 'OURS SLOWER'})")
    print(f"   ratio ours/ray (first call) = {ours[0][0] / theirs[0][0]:.2f} "
          "(ours includes creating the claim registry actor, once per cluster)")
    print(f"   domains ours got: {sorted({d for _, d in ours})}")


def bench_split(rounds: int) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    labels_by_node = {n["NodeID"]: n["Labels"].get(FABRIC) for n in ray.nodes()}
    ours_split = ours_total = plain_split = plain_total = 0
    for _ in range(rounds):
        got, lock = [], threading.Lock()

        def one(got=got, lock=lock):
            r = reserve(SLICE)
            with lock:
                got.append(r)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in got:
            ours_total += 1
            ours_split += len(slice_of(r.placement_group, labels_by_node)) > 1
        assert len({r.domain for r in got}) == len(got)
        for r in got:
            r.release()

        pgs = [placement_group([{"TPU": 4}] * 4, strategy="STRICT_SPREAD") for _ in range(2)]
        for pg in pgs:
            assert pg.wait(60), "plain STRICT_SPREAD group not ready"
        for pg in pgs:
            plain_total += 1
            plain_split += len(slice_of(pg, labels_by_node)) > 1
        for pg in pgs:
            remove_placement_group(pg)
        time.sleep(0.3)
    print("\n2. split rate under contention (2 concurrent 4-host x 4-chip requests per round, 2 slices)")
    print(f"   ours: placement.reserve            {ours_split:>3}/{ours_total:<3} split ({ours_split / ours_total:.0%})")
    print(f"   plain placement_group STRICT_SPREAD {plain_split:>3}/{plain_total:<3} split ({plain_split / plain_total:.0%})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--contention-rounds", type=int, default=15)
    parser.add_argument("--skip-ray", action="store_true", help="only the synthetic chooser benchmark")
    args = parser.parse_args(argv)
    if not args.skip_ray:
        from ray_accel_ext.testing.cluster import SimulatedCluster

        with tempfile.TemporaryDirectory(prefix="placement-bench") as tmp, SimulatedCluster() as c:
            t = time.perf_counter()
            c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
            specs = [(s, {"name": s.name}) for name in ("slice-a", "slice-b") for s in tpu_slice(Path(tmp), name, 4)]
            add_in_batches(c, specs)
            c.connect(logging_level="WARNING")
            print(f"cluster: head + 2 x v6e 4x4 slices ({len(c.nodes)} nodes) up in {time.perf_counter() - t:.1f}s")
            bench_ready(args.rounds)
            bench_split(args.contention_rounds)
    bench_choose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
