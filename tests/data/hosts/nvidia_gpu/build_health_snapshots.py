"""Builds the health snapshots in this folder (the trees are committed too): the 8x H100 host with
one GPU's NVLinks down, and one-L4 hosts with a recorded device-event stream
(``libraries/device_events.json``: a fatal Xid 79, an application Xid 13).

    .venv/bin/python tests/data/hosts/nvidia_gpu/build_health_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/nvidia_gpu

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


def build_events(name: str, hostname: str, events: list[dict]) -> None:
    src, dst = HERE / "l4-single-pcie", HERE / name
    for sub in ("rootfs", "libraries"):
        if (dst / sub).exists():
            shutil.rmtree(dst / sub)
    dst.mkdir(exist_ok=True)
    shutil.copytree(src / "rootfs", dst / "rootfs", symlinks=True)
    shutil.copytree(src / "libraries", dst / "libraries")
    shutil.copy(src / "env.json", dst / "env.json")
    (dst / "rootfs/proc/sys/kernel/hostname").write_text(f"{hostname}\n")
    uuid = json.loads((src / "libraries/nvml.json").read_text())["devices"][0]["uuid"]
    stream = {"format": 1, "events": [{**e, "device": uuid} for e in events]}
    (dst / "libraries/device_events.json").write_text(json.dumps(stream, indent=1) + "\n")


if __name__ == "__main__":
    build_nvlink_down()
    # Xid 79: "GPU has fallen off the bus" (NVIDIA Xid catalog, RESTART_BM); single-bit ECC is informational.
    build_events("l4-xid-fatal", "l4-vm-7", [{"kind": "ecc_sbe"}, {"kind": "xid", "xid": 79}])
    # Xid 13: "Graphics Engine Exception", application-caused (device plugin's list); never drains.
    build_events("l4-xid-application", "l4-vm-8", [{"kind": "xid", "xid": 13}, {"kind": "xid", "xid": 31}])
    print("built")
