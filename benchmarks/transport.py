"""The cost of planning a reservation's transport, without Ray, at 1,000 hosts.

    .venv/bin/python benchmarks/transport.py [--hosts 1000] [--repeats 9]

Each case is one reservation of ``--hosts`` hosts planned by ``transport.plan_transport`` from
the facts a live cluster delivers: one recorded snapshot discovered once, then copied per host
with its own identity and its *own* description objects (decoded from the description's dict per
host, as ``transport.facts_of`` decodes each node's probe), so nothing is shared by accident
between hosts. Cases, largest first: DGX H100 (8 ranks per host, one per GPU, with rail NICs:
8,000 ranks), GB200 NVL72 trays (4 ranks per host), Trn2 (one rank per host, 64 cores, EFA),
TPU v5p-16 as 500 slices of 2 hosts (multi-slice: every rank gets ``MEGASCALE_*``).

Prints, per case, the best and the median of ``--repeats`` runs, wall time and this process's CPU
time (the machine is shared: the CPU time is what planning itself costs), the ranks planned, and
the ratio of the best time to the 50 ms budget. GC stays on (planning allocates; so does real use).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_ext.model import NodeDescription  # noqa: E402
from ray_accel_ext.transport import ReservedDomain, plan_transport  # noqa: E402
from tests.support.domains import SNAPSHOTS  # noqa: E402
from tests.support.transport_hosts import replicate, snapshot_facts  # noqa: E402

BUDGET_MS = 50.0


def hosts_like(snapshot: str, count: int, domain: str) -> list:
    template = snapshot_facts(SNAPSHOTS / snapshot, "n", "198.18.0.1")
    out = []
    for facts in replicate(template, count, domain=domain):
        fresh = tuple(NodeDescription.from_dict(d.to_dict()) for d in facts.descriptions)
        out.append(dataclasses.replace(facts, descriptions=fresh))
    return out


def cases(n: int) -> dict[str, list[ReservedDomain]]:
    per_slice = 2
    slices = hosts_like("tpu/gce-v5p-16-worker1", n, "slice")
    def one(name: str, snapshot: str) -> list[ReservedDomain]:
        return [ReservedDomain(name, tuple(hosts_like(snapshot, n, name)))]

    return {
        "DGX H100, 8 GPU + 8 NDR NICs per host": one("h100", "nvidia_gpu/h100-sxm-8gpu-dgx"),
        "GB200 NVL72 tray, 4 GPU per host": one("nvl", "nvidia_gpu/gb200-nvl72-tray"),
        "Trn2, 64 NeuronCores + 16 EFA per host": one("trn2", "neuron/trn2-48xlarge"),
        f"TPU v5p-16, {n // per_slice} slices of {per_slice} hosts": [
            ReservedDomain(f"slice-{s}", tuple(slices[s * per_slice:(s + 1) * per_slice]))
            for s in range(n // per_slice)],
    }


def measure(domains: list[ReservedDomain], repeats: int) -> tuple[list[float], list[float], int]:
    walls, cpus, ranks = [], [], 0
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        plan = plan_transport(domains)
        walls.append((time.perf_counter() - w0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
        ranks = plan.world_size
    return walls, cpus, ranks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    print(f"planning one reservation of {args.hosts} hosts (best / median of {args.repeats}; budget {BUDGET_MS:g} ms)")
    print(f"{'case':46} {'ranks':>6} {'wall best':>10} {'wall med':>9} {'cpu best':>9} {'cpu med':>8} "
          f"{'best/budget':>12}")
    worst = 0.0
    for name, domains in cases(args.hosts).items():
        walls, cpus, ranks = measure(domains, args.repeats)
        best = min(cpus)
        worst = max(worst, best)
        print(f"{name:46} {ranks:6d} {min(walls):8.1f}ms {statistics.median(walls):7.1f}ms "
              f"{best:7.1f}ms {statistics.median(cpus):6.1f}ms {best / BUDGET_MS:11.2f}x")
    print(f"slowest case: {worst:.1f} ms of CPU for {args.hosts} hosts ({'within' if worst < BUDGET_MS else 'OVER'} "
          f"the {BUDGET_MS:g} ms budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
