"""Builds the Neuron health snapshot in this folder (the tree is committed too): the inf2.xlarge
host with the driver's hardware ECC counters at zero in sysfs and a recorded stream of later
readings (``libraries/neuron_hw_counters.json``): a repairable DRAM error, then an uncorrected one.

    .venv/bin/python tests/data/hosts/neuron/build_health_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/neuron/inf2-xlarge-ecc-fatal

README.md is not touched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
COUNTERS = ("mem_ecc_uncorrected", "mem_ecc_repairable_uncorrected", "sram_ecc_uncorrected")


def build_ecc(name: str, hostname: str, samples: list[dict]) -> None:
    src, dst = HERE / "inf2-xlarge", HERE / name
    for sub in ("rootfs", "libraries", "commands"):
        if (dst / sub).exists():
            shutil.rmtree(dst / sub)
    dst.mkdir(exist_ok=True)
    shutil.copytree(src / "rootfs", dst / "rootfs", symlinks=True)
    shutil.copytree(src / "commands", dst / "commands")
    for f in ("env.json", "metadata.json"):
        shutil.copy(src / f, dst / f)
    (dst / "rootfs/proc/sys/kernel/hostname").write_text(f"{hostname}\n")
    # neuron-sysfs-user-guide.rst: each counter is a directory with `total` and `present`.
    hardware = dst / "rootfs/sys/devices/virtual/neuron_device/neuron0/stats/hardware"
    for counter in COUNTERS:
        (hardware / counter).mkdir(parents=True)
        (hardware / counter / "total").write_text("0\n")
        (hardware / counter / "present").write_text("0\n")
    (dst / "libraries").mkdir()
    stream = {"format": 1, "samples": samples}
    (dst / "libraries/neuron_hw_counters.json").write_text(json.dumps(stream, indent=1) + "\n")


if __name__ == "__main__":
    build_ecc("inf2-xlarge-ecc-fatal", "inf2-ecc-3", [
        {"neuron0": {"mem_ecc_repairable_uncorrected": 1, "mem_ecc_uncorrected": 0, "sram_ecc_uncorrected": 0}},
        {"neuron0": {"mem_ecc_repairable_uncorrected": 1, "mem_ecc_uncorrected": 2, "sram_ecc_uncorrected": 0}},
    ])
    print("built")
