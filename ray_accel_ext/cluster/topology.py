"""The PCIe picture of one node, computed on the node by the inventory probe.

A :class:`~ray_accel_ext.model.NodeDescription` keeps only each device's *nearest* NICs. The
dashboard's host diagram and its ``nvidia-smi topo -m`` style matrix need more: the path class
between every device and every NIC (and between devices), and where each NIC sits (host bridge,
PCIe switch). The probe runs on the node, so it reads sysfs through the same host seam as
discovery and applies the same rules (:func:`ray_accel_ext.hw.nics.path_class`).

Shape, one entry per description (keyed by backend)::

    {"nvidia_gpu": {
        "devices": [{"index": 0, "root": "pci0000:15", "switch": "0000:16:00.0"}, ...],
        "nics": [{"name": "mlx5_0", "root": "pci0000:15", "switch": "0000:16:00.0"}, ...],
        "device_nic": [["PIX", "SYS", ...], ...],      # [device][nic], None where unreadable
        "device_device": [[None, "PXB", ...], ...],     # [device][device], None on the diagonal
        "nic_nic": [[None, "PIX", ...], ...]}}          # [nic][nic]
"""

from __future__ import annotations

from typing import Any

from ..errors import HostReadError
from ..host import Host
from ..hw.nics import path_class, pcie_switch_of
from ..hw.pci import PciFunction, read_function
from ..model import NodeInventory

__all__ = ["pcie_paths"]


def _function(host: Host, address: str | None) -> PciFunction | None:
    if not address:
        return None
    try:
        return read_function(host, address)
    except (HostReadError, ValueError, OSError):
        return None


def _place(fn: PciFunction | None) -> dict[str, Any]:
    return {"root": fn.root_complex or None, "switch": pcie_switch_of(fn)} if fn is not None else {"root": None, "switch": None}


def pcie_paths(host: Host, inventory: NodeInventory) -> dict[str, dict[str, Any]]:
    """Every device-NIC and device-device PCIe path class, per description; see the module doc."""
    out: dict[str, dict[str, Any]] = {}
    for desc in inventory.descriptions:
        devs = [_function(host, d.pci_address) for d in desc.devices]
        nics = [_function(host, n.pci_address) for n in desc.nics]
        if not any(devs):
            continue

        # A backend whose devices reach the CPU over NVLink-C2C says so (``<prefix>/cpu-link=c2c``);
        # nvidia-smi then prints SYS across root complexes (hw.nics).
        coherent = any(k.endswith("/cpu-link") and v == "c2c" for k, v in desc.attributes.items())

        def cls(a: PciFunction | None, b: PciFunction | None, coherent: bool = coherent) -> str | None:
            return path_class(a, b, coherent) if a is not None and b is not None else None

        out[desc.backend] = {
            "devices": [{"index": d.index, **_place(fn)} for d, fn in zip(desc.devices, devs)],
            "nics": [{"name": n.name, **_place(fn)} for n, fn in zip(desc.nics, nics)],
            "device_nic": [[cls(a, b) for b in nics] for a in devs],
            "device_device": [[None if i == j else cls(a, b) for j, b in enumerate(devs)] for i, a in enumerate(devs)],
            "nic_nic": [[None if i == j else cls(a, b) for j, b in enumerate(nics)] for i, a in enumerate(nics)],
        }
    return out
