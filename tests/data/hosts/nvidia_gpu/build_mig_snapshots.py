"""Builds the MIG host snapshots in this folder (the generated trees are committed too).

    .venv/bin/python tests/data/hosts/nvidia_gpu/build_mig_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/nvidia_gpu

Profiles and their memory slices follow NVIDIA's MIG user guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): on the
80 GB A100 and H100 a GPU has 8 memory slices and 7 compute slices; ``1g.10gb`` takes 1 of each,
``2g.20gb`` 2 and 2, ``3g.40gb`` 4 memory slices and 3 compute slices. An instance's memory here is
its memory slices over 8 of the GPU's NVML total. README.md and expected.json are not touched.
"""

from __future__ import annotations

import uuid

from build_snapshots import INTEL, MELLANOX, NVIDIA, Tree, nvml_device

# profile -> (gpu slices, memory eighths)
PROFILES = {"1g.10gb": (1, 1), "2g.20gb": (2, 2), "3g.40gb": (3, 4), "4g.40gb": (4, 4), "7g.80gb": (7, 8)}
# GPU-instance ids as nvidia-smi shows them for these placements on an 80 GB A100/H100.
HOMOGENEOUS = [("1g.10gb", gi) for gi in (7, 8, 9, 10, 11, 12, 13)]
MIXED = [("3g.40gb", 2), ("2g.20gb", 3), ("1g.10gb", 9)]


def _mig_uuid(seed: str) -> str:
    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"ray-accel-ext-fixture/mig/{seed}"))


def mig(bdf: str, memory_mib: int, layout: list[tuple[str, int]]) -> dict:
    """A GPU's ``mig`` reading in MIG mode with one full-size compute instance per GPU instance."""
    instances = []
    for profile, gi in layout:
        slices, eighths = PROFILES[profile]
        instances.append({"uuid": _mig_uuid(f"{bdf}/{gi}/0"), "gpu_instance": gi, "compute_instance": 0,
                          "profile": profile, "memory_total": (memory_mib * eighths // 8) << 20,
                          "gpu_slices": slices, "compute_slices": slices})
    return {"current": 1, "pending": 1, "instances": instances}


def _pcie_host(t: Tree, gpus: list[tuple[str, str, int]]) -> None:
    """Root ports on two sockets, each with one GPU (``bdf``, device id, socket) and a ConnectX-7 beside it."""
    cpus = {0: "0-31,64-95", 1: "32-63,96-127"}
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x09a2", "0x060000")
    for n, (bdf, device, socket) in enumerate(gpus):
        rc = f"pci0000:{int(bdf[5:7], 16) - 1:02x}"
        root = f"0000:{int(bdf[5:7], 16) - 1:02x}:01.0"
        t.function(rc, [root], INTEL, "0x352a", "0x060400", numa=socket)
        t.function(rc, [root, bdf], NVIDIA, device, "0x030200", numa=socket, cpus=cpus[socket], subsys=(NVIDIA, "0x1463"))
        nic_root = f"0000:{int(bdf[5:7], 16) - 1:02x}:02.0"
        nic_bdf = f"0000:{int(bdf[5:7], 16) + 1:02x}:00.0"
        t.function(rc, [nic_root], INTEL, "0x352a", "0x060400", numa=socket)
        nic = t.function(rc, [nic_root, nic_bdf], MELLANOX, "0x1021", "0x020700", numa=socket, cpus=cpus[socket],
                         subsys=(MELLANOX, "0x0023"))
        t.ib(nic, f"mlx5_{n}", f"ibp{int(nic_bdf[5:7], 16)}s0")


def build_a100_homogeneous() -> None:
    t = Tree("a100-80gb-mig-homogeneous")
    t.hostname("a100-mig-1")
    t.env()
    _pcie_host(t, [("0000:41:00.0", "0x20b2", 0)])
    dev = nvml_device(0, "0000:41:00.0", "NVIDIA A100-SXM4-80GB", 81920, [], None)
    dev["mig"] = mig("0000:41:00.0", 81920, HOMOGENEOUS)
    t.nvml({"format": 2, "driver_version": "580.126.20", "error": None, "devices": [dev]})


def build_h100_mixed() -> None:
    t = Tree("h100-80gb-mig-mixed")
    t.hostname("h100-mig-1")
    t.env()
    _pcie_host(t, [("0000:41:00.0", "0x2330", 0)])
    dev = nvml_device(0, "0000:41:00.0", "NVIDIA H100 80GB HBM3", 81559, [], None)
    dev["mig"] = mig("0000:41:00.0", 81559, MIXED)
    t.nvml({"format": 2, "driver_version": "580.126.20", "error": None, "devices": [dev]})


def build_partly_mig() -> None:
    """Two H100s on two sockets: GPU 0 in MIG mode (7 x 1g.10gb), GPU 1 whole (MIG capable, off)."""
    t = Tree("h100-partly-mig")
    t.hostname("h100-mig-2")
    t.env()
    _pcie_host(t, [("0000:41:00.0", "0x2330", 0), ("0000:c1:00.0", "0x2330", 1)])
    first = nvml_device(0, "0000:41:00.0", "NVIDIA H100 80GB HBM3", 81559, [], None)
    first["mig"] = mig("0000:41:00.0", 81559, HOMOGENEOUS)
    second = nvml_device(1, "0000:c1:00.0", "NVIDIA H100 80GB HBM3", 81559, [], None)
    second["mig"] = {"current": 0, "pending": 0, "instances": []}
    t.nvml({"format": 2, "driver_version": "580.126.20", "error": None, "devices": [first, second]})


def main() -> None:
    for build in (build_a100_homogeneous, build_h100_mixed, build_partly_mig):
        build()
        print("built", build.__name__)


if __name__ == "__main__":
    main()
