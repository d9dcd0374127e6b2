"""CPU of the node-start commands in fresh processes, against their floor.

    .venv/bin/python benchmarks/node_start_cost.py [--runs 9]

Each row is a fresh interpreter (the 8x H100 snapshot as the host), run ``--runs`` times with the
rows interleaved; the CPU is the child's user + system time (``getrusage(RUSAGE_CHILDREN)``), which
the machine's load stretches far less than wall time. Rows:

* ``python -c pass``: the interpreter alone;
* ``import ray_accel_ext``: the package's import;
* the floor: ``import ray_accel_ext`` plus one discovery of the snapshot (``discover()``, the
  entry-point scan and the in-tree backends, its 8 GPUs checked), which any node start pays;
* ``ray-accel ray-args --format json`` (what the KubeRay path runs) and the start hook's
  ``node_spec()`` (what ``ray start`` runs through ``RAY_START_HOOK``), each with its ratio to the
  floor (target: within 4x).

``tests/meta/test_node_start_imports.py`` lists the modules the same two paths import.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "tests" / "data" / "hosts" / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
# discover() reads RAY_ACCEL_ROOT as the hook does; the assertion keeps the floor honest
_DISCOVER = "from ray_accel_ext.node.discovery import discover; assert len(discover().descriptions[0].devices) == 8"


def rows() -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "import ray_accel_ext": [py, "-c", "import ray_accel_ext"],
        "floor: import + discover()": [py, "-c", _DISCOVER],
        "ray-accel ray-args --format json": [py, "-m", "ray_accel_ext.tools.cli", "ray-args", "--format", "json"],
        "start hook: node_spec()": [py, "-c", "from ray_accel_ext.ray_hook import node_spec; node_spec()"],
    }


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """User + system seconds of one run of ``argv`` (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True, env=env, cwd=REPO, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args(argv)
    env = dict(os.environ, RAY_ACCEL_ROOT=str(SNAPSHOT), RAY_ACCEL_HEALTH_WATCH="0")
    cases = rows()
    times: dict[str, list[float]] = {name: [] for name in cases}
    print(f"python {sys.version.split()[0]}   load average {os.getloadavg()[0]:.1f}   runs {args.runs}", flush=True)
    for run in range(args.runs):
        for name, command in cases.items():
            times[name].append(child_cpu(command, env))
        print(f"\rrun {run + 1}/{args.runs}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    medians = {name: statistics.median(series) for name, series in times.items()}
    floor = medians["floor: import + discover()"]
    print(f"{'fresh process':<42} {'CPU median':>11} {'min':>8} {'vs floor':>9}")
    for name, series in times.items():
        print(f"{name:<42} {medians[name] * 1000:>9.1f}ms {min(series) * 1000:>6.1f}ms {medians[name] / floor:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
