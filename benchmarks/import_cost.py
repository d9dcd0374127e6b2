"""What device isolation costs a Python process that imports Ray.

    .venv/bin/python benchmarks/import_cost.py [--runs 15]

``ray_accel_ext_devices.pth`` runs in every Python process of an environment that has this package
installed. It checks one environment variable (``RAY_ACCEL_RAY_DEVICES``) and, only where a node
handed a vendor family on, imports ``_ray_accel_ext_devices``, which adds its adapters to Ray's
registry when Ray's registry is imported. Prints the median over ``--runs`` fresh interpreters,
interleaved, of the ``import ray`` time ``python -X importtime`` reports and of the whole
``python -c "import ray"`` run, in three environments:

* **without**: a scratch virtualenv that sees this environment's packages through one plain path
  entry, so none of this environment's ``.pth`` files runs (Ray imports from the same files);
* **installed**: this environment (the ``.pth`` file runs; no family handed on);
* **active**: this environment with a family handed on (the hook module imported and the adapter
  installed).

The ratios installed/without and active/without are the cost; the minimum over the runs is printed
next to the median (the least disturbed run). Also the ``.pth`` line's own cost where no family is
handed on, executed in-process (``timeit``). No timed assertion: numbers move with the machine's
load (``docs/vendors.md`` quotes a run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import timeit
import venv
from pathlib import Path

FAMILY = [{"resource": "bench_npu", "backend": "bench_npu", "entry": "", "env_var": "BENCH_VISIBLE_DEVICES", "devices": []}]


def _scratch_python(root: Path) -> str:
    """A virtualenv whose only link to this environment is a path entry (no .pth of ours runs)."""
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(site, "bench_link.pth").write_text(ours + "\n")
    return str(python)


def _one(python: str, env: dict[str, str]) -> tuple[float, float]:
    """(import ray as -X importtime reports, whole process wall time), both in ms."""
    started = time.perf_counter()
    done = subprocess.run([python, "-X", "importtime", "-c", "import ray"], env=env, capture_output=True, text=True, check=True)
    wall = (time.perf_counter() - started) * 1000
    line = next(x for x in done.stderr.splitlines() if re.search(r"\|\s+ray$", x))
    return int(line.split("|")[1]) / 1000, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ACCEL", "PYTHON"))}
    with tempfile.TemporaryDirectory(prefix="bench-import") as tmp:
        cases = {
            "without": (_scratch_python(Path(tmp) / "venv"), base),
            "installed": (sys.executable, base),
            "active": (sys.executable, {**base, "RAY_ACCEL_RAY_DEVICES": json.dumps(FAMILY)}),
        }
        for python, env in cases.values():
            _one(python, env)  # warm the file cache
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, (python, env) in cases.items():
                found[name].append(_one(python, env))
    stats = {name: (statistics.median(r[0] for r in runs), min(r[0] for r in runs), statistics.median(r[1] for r in runs))
             for name, runs in found.items()}
    load = os.getloadavg()[0]
    print(f"import ray, {args.runs} fresh interpreters each (load average {load:.1f})")
    print(f"{'case':<10} {'median (ms)':>12} {'min (ms)':>9} {'process (ms)':>13} {'median ratio':>13} {'min ratio':>10}")
    for name, (med, low, wall) in stats.items():
        print(f"{name:<10} {med:>12.1f} {low:>9.1f} {wall:>13.1f} {med / stats['without'][0]:>13.3f} {low / stats['without'][1]:>10.3f}")
    line = Path(sysconfig.get_paths()["purelib"], "ray_accel_ext_devices.pth").read_text().strip()
    saved = os.environ.pop("RAY_ACCEL_RAY_DEVICES", None)
    try:
        per = min(timeit.repeat(lambda: exec(line, {}), number=10000, repeat=5)) / 10000 * 1e6
    finally:
        if saved is not None:
            os.environ["RAY_ACCEL_RAY_DEVICES"] = saved
    print(f"the .pth line with no family handed on: {per:.2f} us per interpreter start")


if __name__ == "__main__":
    main()
