"""AMD GPU health after start from the amdgpu driver's RAS counters in sysfs.

``/sys/bus/pci/devices/<bdf>/ras/<block>_err_count`` (``umc``, ``gfx``, ``sdma``, ``xgmi_wafl``,
...) reads ``ue: <uncorrectable>\\nce: <correctable>`` (UMC adds ``de: <deferred>``;
drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c ``amdgpu_ras_sysfs_read``). An uncorrectable count that
grows after start is a ``ras_uncorrectable`` health event
(:mod:`ray_accel_ext.cluster.device_health`); correctable counts are not faults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import HostReadError
from ...hw.pci import PCI_DEVICES

__all__ = ["uncorrectable_counts", "ras_events"]


def uncorrectable_counts(host: Any, addresses: Iterable[str]) -> dict[str, int]:
    """Uncorrectable RAS errors per PCI address, all blocks together (0 where the driver has none)."""
    out: dict[str, int] = {}
    for addr in addresses:
        base = f"{PCI_DEVICES}/{addr}/ras"
        total = 0
        try:
            names = host.listdir(base)
        except HostReadError:
            names = []
        for name in names:
            if not name.endswith("_err_count"):
                continue
            text = host.read_optional(f"{base}/{name}") or ""
            for line in text.splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "ue" and value.strip().isdigit():
                    total += int(value)
        out[addr] = total
    return out


def ras_events(host: Any, devices: Iterable[Mapping[str, Any]], baseline: dict[str, int]) -> list[dict[str, Any]]:
    """A ``ras_uncorrectable`` event per device whose count grew past ``baseline`` (updated)."""
    by_addr = {d["pci_address"]: d for d in devices if d.get("pci_address")}
    events = []
    for addr, count in uncorrectable_counts(host, by_addr).items():
        if count > baseline.get(addr, count):
            events.append({"device": by_addr[addr]["id"], "kind": "ras_uncorrectable", "count": count - baseline[addr]})
        baseline[addr] = max(count, baseline.get(addr, 0))
    return events
