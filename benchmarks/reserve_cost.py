"""What a reservation costs next to a plain placement group, measured in one run on one cluster.

    .venv/bin/python benchmarks/reserve_cost.py [--domains 20] [--rounds 40] [--bursts 5]

Cluster: a head (no accelerators) and ``--domains`` GB200 NVLink domains of one tray each, every
node a real ``ray start`` through the start hook from a copy of the GB200 tray snapshot
(``tests.support.domains.gb200_domain``). Both sides ask for the same bundle (the tray's four
GPUs); the plain side is ``ray.util.placement_group(...)`` + ``ready()`` + ``remove_placement_group``
as a user without domains writes it. Prints:

1. reserve + release by one caller: p50 and p90 of ``--rounds`` of ``placement.reserve(...)``
   + ``release()`` against the plain group made ready and removed, in alternating blocks of ten
   (a group made on a node whose group was removed a moment before waits for a retry of Ray's
   scheduler, so neither side runs right after the other's removals);
2. CPU per reservation: ``psutil`` user + system time of the driver, the claim registry's and the
   metrics exporter's actor processes and the GCS, before and after each side's rounds, divided
   by the rounds (the raylets' share is printed beside it);
3. ``--domains`` concurrent callers (threads) over as many free domains, ``--bursts`` times:
   reservations per second from the first call to the last ready group, and a check that no
   domain and no node was given twice, read from the claim registry and from each group's
   bundles in Ray's placement-group table; the same burst of plain groups beside it.

Each section ends with its ratio to the plain side (and the target); the load average is printed
when the cluster is up and at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_ext.placement import DomainRequest, claims_snapshot, reserve  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402

FABRIC = "rayaccel.io/fabric-domain"
BLOCK = 10
ONE_TRAY = DomainRequest(hosts=1, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=120, name="one-tray")


COUNTED = ("driver", "claims actor", "exporter", "GCS")


def cluster_pids(cluster) -> dict[str, list[int]]:
    """The processes whose CPU is counted (:data:`COUNTED`), and the raylets."""
    import psutil
    import ray

    from ray_accel_ext.cluster.exporter import ensure_exporter
    from ray_accel_ext.placement.claims import claims_registry

    def pid_of(actor) -> int:
        return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))

    gcs, raylets = [], []
    for node in cluster.nodes:
        for child in psutil.Process(node.process.pid).children(recursive=True):
            name = child.name()
            (gcs if name == "gcs_server" else raylets if name == "raylet" else []).append(child.pid)
    return {"driver": [os.getpid()], "claims actor": [pid_of(claims_registry())],
            "exporter": [pid_of(ensure_exporter())], "GCS": gcs, "raylets": raylets}


def cpu_s(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


class Side:
    """One way of taking a domain and giving it back: its latencies and CPU by process."""

    def __init__(self, name: str, once: Callable[[], None]) -> None:
        self.name, self.once = name, once
        self.runs: list[float] = []
        self.cpu: dict[str, float] = {}

    def round(self, pids: dict[str, list[int]]) -> None:
        before = {k: cpu_s(v) for k, v in pids.items()}
        t = time.perf_counter()
        self.once()
        self.runs.append(time.perf_counter() - t)
        for k, v in pids.items():
            self.cpu[k] = self.cpu.get(k, 0.0) + cpu_s(v) - before[k]

    def counted_ms(self) -> float:
        return sum(self.cpu[k] for k in COUNTED) / len(self.runs) * 1000

    def pct(self, q: float) -> float:
        return statistics.quantiles(self.runs, n=10)[int(q * 10) - 1] if len(self.runs) > 1 else self.runs[0]


def plain_once(bundles) -> Callable[[], None]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    def once() -> None:
        pg = placement_group([dict(b) for b in bundles])
        ray.get(pg.ready(), timeout=120)
        remove_placement_group(pg)

    return once


def bench_one_caller(cluster, rounds: int) -> None:
    probe = reserve(ONE_TRAY)
    bundles = probe.bundles
    probe.release()
    ours = Side("ours: reserve + release", lambda: reserve(ONE_TRAY).release())
    plain = Side("plain placement_group + remove", plain_once(bundles))
    pids = cluster_pids(cluster)
    for _ in range(3):  # warm: worker threads, code paths, the exporter's first refreshes
        ours.once()
        plain.once()
    time.sleep(1.0)
    for block in range(0, rounds, BLOCK):
        for side in (ours, plain):
            for _ in range(min(BLOCK, rounds - block)):
                side.round(pids)
            time.sleep(1.0)  # the other side's removed groups are back on their nodes
    print(f"\n1. reserve + release, one caller, {rounds} rounds in blocks of {BLOCK} (bundle {dict(bundles[0])})")
    for side in (ours, plain):
        print(f"   {side.name:34} p50 {side.pct(0.5) * 1000:7.1f} ms   p90 {side.pct(0.9) * 1000:7.1f} ms")
    print(f"   ratio ours/plain p50 = {ours.pct(0.5) / plain.pct(0.5):.2f} (target <= 2), "
          f"p90 = {ours.pct(0.9) / plain.pct(0.9):.2f}")
    print("\n2. CPU per reservation (driver + claims actor + exporter + GCS; each, and the raylets, beside)")
    for side in (ours, plain):
        each = "  ".join(f"{k} {side.cpu[k] / rounds * 1000:.1f}" for k in (*COUNTED, "raylets"))
        print(f"   {side.name:34} {side.counted_ms():7.2f} ms   ({each})")
    print(f"   ratio ours/plain = {ours.counted_ms() / max(plain.counted_ms(), 1e-6):.2f} (target <= 3)")


def burst(count: int, take: Callable[[], object]) -> tuple[float, list]:
    """``count`` threads calling ``take`` at once; seconds from the start to the last answer."""
    got, errors, lock = [], [], threading.Lock()
    gate = threading.Barrier(count + 1)

    def one() -> None:
        gate.wait()
        try:
            value = take()
        except Exception as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)
            return
        with lock:
            got.append(value)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} of {count} callers failed: {errors[0]!r}")
    return took, got


def check_distinct(reservations, labels_by_node: dict[str, str]) -> None:
    """No domain and no node given twice: the registry's claims and Ray's bundle placement."""
    claims = claims_snapshot()
    owners = {r.owner for r in reservations}
    held = {k: v for k, v in claims.items() if v["owner"] in owners}
    assert len(held) == len(reservations), f"{len(held)} claims for {len(reservations)} reservations"
    claimed_nodes = [n for v in held.values() for n in v["nodes"]]
    assert len(claimed_nodes) == len(set(claimed_nodes)), "a node claimed twice"
    placed: list[str] = []
    for r in reservations:
        nodes = set(r.bundle_nodes().values())
        assert {labels_by_node[n] for n in nodes} == {r.domain}, f"group of {r.domain} outside it: {nodes}"
        placed += nodes
    assert len(placed) == len(set(placed)), "a node holds bundles of two reservations"
    assert len({r.domain for r in reservations}) == len(reservations), "a domain given twice"


def bench_burst(domains: int, bursts: int) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    labels_by_node = {n["NodeID"]: n["Labels"].get(FABRIC, "") for n in ray.nodes() if n["Alive"]}
    bundles = [{"GPU": 4.0}]
    ours, plain = [], []
    for _ in range(bursts):
        took, got = burst(domains, lambda: reserve(ONE_TRAY))
        check_distinct(got, labels_by_node)
        ours.append(domains / took)
        for r in got:
            r.release()
        time.sleep(1.5)  # Ray hands a removed group's resources back to the raylet asynchronously

        def plain_ready():
            pg = placement_group(bundles)
            ray.get(pg.ready(), timeout=120)
            return pg

        took, pgs = burst(domains, plain_ready)
        plain.append(domains / took)
        for pg in pgs:
            remove_placement_group(pg)
        time.sleep(1.5)
    print(f"\n3. {domains} concurrent callers over {domains} free domains, {bursts} bursts "
          "(checked each time: no domain or node given twice)")
    print(f"   ours: reserve             median {statistics.median(ours):7.1f} /s   "
          f"min {min(ours):7.1f} /s (target >= 50/s)")
    print(f"   plain placement_group     median {statistics.median(plain):7.1f} /s   min {min(plain):7.1f} /s")
    print(f"   ratio ours/plain (median) = {statistics.median(ours) / statistics.median(plain):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--bursts", type=int, default=5)
    args = parser.parse_args(argv)

    from ray_accel_ext.testing.cluster import SimulatedCluster

    with tempfile.TemporaryDirectory(prefix="reserve-cost") as tmp, SimulatedCluster() as c:
        t = time.perf_counter()
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        add_in_batches(c, [(s, {"name": s.name}) for clique in range(args.domains)
                           for s in gb200_domain(Path(tmp), 100 + clique, 1)])
        c.connect(logging_level="WARNING")
        print(f"cluster: head + {args.domains} one-tray GB200 domains up in {time.perf_counter() - t:.1f}s; "
              f"load average {os.getloadavg()[0]:.1f}")
        bench_one_caller(c, args.rounds)
        bench_burst(args.domains, args.bursts)
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
