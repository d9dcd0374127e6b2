"""Builds the Acme snapshots next to this file, as docs/vendors.md's shell block does (then run
``python -m ray_accel_ext.testing.snapshots --update tests/hosts`` for the goldens)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    npus = HERE / "acme-4npu"
    shutil.rmtree(npus / "rootfs", ignore_errors=True)
    for i in range(4):
        d = npus / f"rootfs/sys/class/acme_npu/npu{i}"
        d.mkdir(parents=True)
        (d / "serial").write_text(f"ACME-00{i}\n")
        (d / "firmware").write_text("2.1.0\n")
    empty = HERE / "empty"
    shutil.rmtree(empty / "rootfs", ignore_errors=True)
    (empty / "rootfs/proc/sys/kernel").mkdir(parents=True)  # git keeps no empty directory
    (empty / "rootfs/proc/sys/kernel/hostname").write_text("cpu-only\n")
    for snap in (npus, empty):
        (snap / "env.json").write_text(json.dumps({}) + "\n")


if __name__ == "__main__":
    main()
