"""Discovery cost as the host's PCI tree grows: the 8x H100 snapshot against the same snapshot with
``--extra`` non-accelerator functions added (NVMe drives, ``144d:a80a``), with and without the
kernel's one-file summary ``/proc/bus/pci/devices`` that a real host has (``hw/pci_index.py``).

    .venv/bin/python benchmarks/pci_scale.py [--extra 4000] [--runs 30]

Prints one table, measured in this run: the median ``discover(open_host(...))`` of each host (the
first two taken in turn, so load weighs on both alike) and its ratio to the snapshot without extra
functions (target: within 1.3x with 4,000 extra functions and the summary), plus the raw floor of
the extra functions: one ``os.listdir`` of the PCI device directory and one read of the summary,
which any walk pays. Without the summary (a snapshot recorded without it; every Linux host with
procfs has it) each function's vendor file is read once, for every backend and the host checks.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "tests" / "data" / "hosts" / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
_BDF = re.compile(r"[0-9a-f]{4}:([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")


def build(dest: Path, extra: int, summary: bool) -> Path:
    """A copy of the snapshot with ``extra`` NVMe functions (and the kernel's summary)."""
    shutil.copytree(SNAPSHOT, dest, symlinks=True)
    sysfs = dest / "rootfs" / "sys" / "bus" / "pci" / "devices"
    for i in range(extra):
        domain = 1 + i // 2048
        bdf = f"{domain:04x}:{(i // 8) % 256:02x}:00.{i % 8}"
        dev = dest / "rootfs" / "sys" / "devices" / f"pci{domain:04x}:00" / bdf
        dev.mkdir(parents=True)
        for name, value in {"vendor": "0x144d", "device": "0xa80a", "class": "0x010802", "numa_node": "0"}.items():
            (dev / name).write_text(value + "\n")
        os.symlink(os.path.relpath(dev, sysfs), sysfs / bdf)
    if summary:
        rows = []
        for name in sorted(os.listdir(sysfs)):
            m = _BDF.fullmatch(name)
            if m:
                vendor = (sysfs / name / "vendor").read_text().strip()[2:]
                device = (sysfs / name / "device").read_text().strip()[2:]
                devfn = (int(m.group(2), 16) << 3) | int(m.group(3))
                rows.append(f"{m.group(1)}{devfn:02x}\t{vendor:0>4}{device:0>4}\t0\n")
        proc = dest / "rootfs" / "proc" / "bus" / "pci"
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "devices").write_text("".join(rows))
    return dest


def median_discoveries(roots: list[Path], runs: int) -> list[float]:
    """The median ``discover(open_host(root))`` of each root, the roots taken in turn within each
    run so that the machine's load weighs on every one alike."""
    for root in roots:
        discover(open_host(root))  # backends imported, entry points scanned
    times: list[list[float]] = [[] for _ in roots]
    for _ in range(runs):
        for root, series in zip(roots, times):
            started = time.perf_counter()
            inventory = discover(open_host(root))
            series.append(time.perf_counter() - started)
            assert len(inventory.descriptions[0].devices) == 8, "the GPUs must still be found"
    return [statistics.median(series) for series in times]


def floor(root: Path, runs: int) -> float:
    sysfs = root / "rootfs" / "sys" / "bus" / "pci" / "devices"
    summary = root / "rootfs" / "proc" / "bus" / "pci" / "devices"
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        os.listdir(sysfs)
        if summary.exists():
            summary.read_bytes()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}   load average {os.getloadavg()[0]:.1f}   runs {args.runs}")
    with tempfile.TemporaryDirectory(prefix="rayaccel-pci-scale-") as tmp:
        hosts = {
            "8x H100 snapshot": build(Path(tmp) / "base", 0, summary=True),
            f"+{args.extra} NVMe, with /proc/bus/pci/devices": build(Path(tmp) / "summary", args.extra, summary=True),
            f"+{args.extra} NVMe, sysfs only": build(Path(tmp) / "sysfs", args.extra, summary=False),
        }
        print(f"{'host':<44} {'discovery':>10} {'ratio':>7} {'listing floor':>14}")
        names, roots = list(hosts), list(hosts.values())
        # The two hosts with the summary in turn; the slow sysfs-only host on its own, fewer runs.
        medians = median_discoveries(roots[:2], args.runs) + median_discoveries(roots[2:], max(3, args.runs // 5))
        for name, root, t in zip(names, roots, medians):
            print(f"{name:<44} {t * 1000:>8.1f}ms {t / medians[0]:>6.2f}x {floor(root, args.runs) * 1000:>12.2f}ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
