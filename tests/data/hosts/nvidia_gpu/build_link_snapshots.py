"""Builds the NVLink-health snapshot in this folder from the 8x H100 one (the tree is committed too).

    .venv/bin/python tests/data/hosts/nvidia_gpu/build_link_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/nvidia_gpu/h100-sxm-nvlink-down

README.md and expected.json are not touched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOWN_GPU = 5  # NVML index of the GPU whose links are all down


def build_nvlink_down() -> None:
    src, dst = HERE / "h100-sxm-8gpu-dgx", HERE / "h100-sxm-nvlink-down"
    for sub in ("rootfs", "libraries"):
        if (dst / sub).exists():
            shutil.rmtree(dst / sub)
    dst.mkdir(exist_ok=True)
    shutil.copytree(src / "rootfs", dst / "rootfs", symlinks=True)
    shutil.copy(src / "env.json", dst / "env.json")
    reading = json.loads((src / "libraries/nvml.json").read_text())
    reading["devices"][DOWN_GPU]["nvlinks"] = []
    (dst / "libraries").mkdir()
    (dst / "libraries/nvml.json").write_text(json.dumps(reading, indent=1) + "\n")
    (dst / "rootfs/proc/sys/kernel/hostname").write_text("dgx-h100-018\n")


if __name__ == "__main__":
    build_nvlink_down()
    print("built build_nvlink_down")
