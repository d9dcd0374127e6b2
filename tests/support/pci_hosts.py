"""Minimal host snapshots built on the fly: N accelerator PCI functions of one id, as each backend
reads them, for tests that walk many ids (``tests/backends/test_pciids_snapshots.py``).

Each device sits behind its own root port (``pci0000:<bus>``), NUMA node ``i % 2``; files and
formats are the kernel's (``reference/hardware.md`` 2.1, 2.6, 2.8; KFD ``properties``; the
habanalabs driver's ``sysfs-driver-habanalabs`` ABI). Nothing here is a recorded machine: the
shipped snapshots under ``tests/data/hosts`` are those.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["amd_host", "gaudi_host", "neuron_host", "nvidia_host", "write_function"]

_CPUS = ("0-15", "16-31")


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(root: Path, rel: str, target_rel: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(os.path.relpath(root / target_rel.lstrip("/"), path.parent))


def write_function(root: Path, bus: int, vendor: str, device: str, pci_class: str, *,
                   subsystem: tuple[str, str] | None = None, numa: int = 0) -> str:
    """One PCI function ``0000:<bus>:00.0`` below root port ``0000:<bus-1>:01.0``; its BDF."""
    rc = f"pci0000:{bus - 1:02x}"
    port = f"0000:{bus - 1:02x}:01.0"
    bdf = f"0000:{bus:02x}:00.0"
    path = f"/sys/devices/{rc}/{port}/{bdf}"
    _write(root, f"/sys/devices/{rc}/{port}/class", "0x060400\n")
    sub = subsystem or (vendor, "0x0000")
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class), ("subsystem_vendor", sub[0]),
                        ("subsystem_device", sub[1]), ("numa_node", str(numa)), ("local_cpulist", _CPUS[numa % 2])):
        _write(root, f"{path}/{name}", value + "\n")
    _link(root, f"/sys/bus/pci/devices/{bdf}", path)
    return bdf


def _snapshot(directory: Path, env: dict[str, str] | None = None) -> Path:
    (directory / "rootfs/sys/bus/pci/devices").mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps(env or {}) + "\n")
    _write(directory / "rootfs", "/proc/sys/kernel/hostname", directory.name + "\n")
    _write(directory / "rootfs", "/sys/devices/system/node/online", "0-1\n")
    for node, cpus in enumerate(_CPUS):
        _write(directory / "rootfs", f"/sys/devices/system/node/node{node}/cpulist", cpus + "\n")
    return directory


def nvidia_host(directory: Path, device_id: str, *, count: int = 1, subsystem: tuple[str, str] | None = None,
                nvml_name: str | None = None, memory_mib: int | None = None, pci_class: str = "0x030200") -> Path:
    """``count`` NVIDIA GPUs; with ``nvml_name`` also an NVML reading (``libraries/nvml.json``)."""
    snap = _snapshot(directory)
    bdfs = [write_function(snap / "rootfs", 0x11 + 0x10 * i, "0x10de", device_id, pci_class, subsystem=subsystem, numa=i % 2)
            for i in range(count)]
    if nvml_name is not None:
        devices = [{
            "index": i, "bus_id": "0000" + bdf.upper(), "uuid": f"GPU-00000000-0000-0000-0000-{i:012d}",
            "name": nvml_name, "memory_total": memory_mib << 20 if memory_mib else None,
            "nvlinks": [], "fabric": None, "errors": [],
        } for i, bdf in enumerate(bdfs)]
        (snap / "libraries").mkdir()
        (snap / "libraries/nvml.json").write_text(json.dumps({"format": 1, "driver_version": "580.126.20",
                                                              "error": None, "devices": devices}) + "\n")
    return snap


def amd_host(directory: Path, device_id: str, *, count: int = 1, subsystem: tuple[str, str] | None = None,
             pci_class: str = "0x120000", amdsmi: bool = False, memory_bytes: int | None = None) -> Path:
    """``count`` AMD GPUs: PCI functions, KFD nodes (CPU node 0, then one per GPU) and ``/dev/kfd``;
    with ``amdsmi`` also an AMD SMI reading (``libraries/amdsmi.json``)."""
    snap = _snapshot(directory)
    root = snap / "rootfs"
    kfd = "/sys/class/kfd/kfd/topology/nodes"
    _write(root, f"{kfd}/0/properties", "cpu_cores_count 32\nsimd_count 0\nvendor_id 0\ndevice_id 0\n")
    for i in range(count):
        bus = 0x11 + 0x10 * i
        write_function(root, bus, "0x1002", device_id, pci_class, subsystem=subsystem, numa=i % 2)
        _write(root, f"{kfd}/{i + 1}/properties", "".join(f"{k} {v}\n" for k, v in (
            ("cpu_cores_count", 0), ("simd_count", 1216), ("simd_per_cu", 4), ("gfx_target_version", 90402),
            ("vendor_id", 0x1002), ("device_id", int(device_id, 16)), ("location_id", bus << 8), ("domain", 0),
            ("drm_render_minor", 128 + i), ("hive_id", 0), ("unique_id", 0x1000 + i))))
        _write(root, f"{kfd}/{i + 1}/gpu_id", f"{1000 + i}\n")
    _write(root, "/dev/kfd", "")
    if amdsmi:
        devices = [{"bdf": f"0000:{0x11 + 0x10 * i:02x}:00.0", "kfd_node": i + 1, "uuid": None, "market_name": None,
                    "device_id": device_id, "memory_total": memory_bytes, "compute_partition": None,
                    "memory_partition": None, "driver_version": None, "errors": []} for i in range(count)]
        (snap / "libraries").mkdir()
        (snap / "libraries/amdsmi.json").write_text(json.dumps({"format": 1, "error": None, "devices": devices}) + "\n")
    return snap


def gaudi_host(directory: Path, device_id: str, *, count: int = 1, device_type: str = "GAUDI3") -> Path:
    """``count`` Gaudi devices bound to habanalabs, with ``accel<N>`` class devices and module ids."""
    snap = _snapshot(directory)
    root = snap / "rootfs"
    for i in range(count):
        bus = 0x11 + 0x10 * i
        bdf = write_function(root, bus, "0x1da3", device_id, "0x120000", subsystem=("0x1da3", device_id), numa=i % 2)
        pci = f"/sys/devices/pci0000:{bus - 1:02x}/0000:{bus - 1:02x}:01.0/{bdf}"
        for name, value in (("device_type", device_type), ("module_id", str(i)), ("pci_addr", bdf), ("status", "Operational")):
            _write(root, f"{pci}/{name}", value + "\n")
        _write(root, f"{pci}/accel/accel{i}/dev", f"261:{i}\n")
        _link(root, f"{pci}/accel/accel{i}/device", pci)
        _link(root, f"/sys/class/accel/accel{i}", f"{pci}/accel/accel{i}")
        _link(root, f"/sys/bus/pci/drivers/habanalabs/{bdf}", pci)
        _write(root, f"/dev/accel/accel{i}", "")
    return snap


def neuron_host(directory: Path, device_id: str, *, count: int = 1) -> Path:
    """``count`` Neuron devices: PCI functions, the driver's virtual class devices and ``/dev/neuronN``."""
    snap = _snapshot(directory)
    root = snap / "rootfs"
    for i in range(count):
        write_function(root, 0x11 + 0x10 * i, "0x1d0f", device_id, "0x088000", numa=i % 2)
        _write(root, f"/sys/devices/virtual/neuron_device/neuron{i}/dev", f"245:{i}\n")
        _link(root, f"/sys/class/neuron_device/neuron{i}", f"/sys/devices/virtual/neuron_device/neuron{i}")
        _write(root, f"/dev/neuron{i}", "")
    return snap
