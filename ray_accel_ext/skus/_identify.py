"""What a device is when the database may not know it: database, then NVML name, then pci.ids."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from . import pciids, ray_names
from ._schema import Entry

__all__ = ["VENDORS", "Identity", "identify", "memory_gib_from_bytes", "sku_slug"]

_GIB = 1 << 30
# PCI vendor id -> the vendor word used in SKU slugs and rayaccel.io/vendor (pci.ids vendor lines).
VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x1ae0": "google", "0x1d0f": "aws", "0x1da3": "intel", "0x8086": "intel"}
_LEADING_VENDOR = re.compile(r"^(nvidia|amd|ati|google|amazon|aws|intel|habana)-")


def memory_gib_from_bytes(total_bytes: int | None, *, ecc_reserve: bool = False) -> int | None:
    """A device-reported memory total (bytes) in the database's unit: whole GiB, rounded up.

    Drivers report the capacity left after their own reserve (NVML: 81559 MiB on an 80 GiB
    H100, 189471 MiB on a 186 GiB GB200), so rounding up gives the marketed figure for HBM
    parts. GDDR parts with ECC enabled also lose 1/16 of the memory to check bits (an L40S reads
    46068 MiB = 45 GiB of 48); ``ecc_reserve=True`` adds that back before rounding.
    """
    if total_bytes is None or isinstance(total_bytes, bool) or not isinstance(total_bytes, int) or total_bytes <= 0:
        return None
    total = total_bytes * 16 // 15 if ecc_reserve else total_bytes
    return -(-total // _GIB)  # integer ceiling: no float rounding at exact GiB


def sku_slug(name: str | None) -> str | None:
    """A SKU slug from a product string (``NVIDIA GeForce RTX 5090`` -> ``geforce-rtx-5090``).

    pci.ids names keep the product in brackets after the chip code (``GB202 [GeForce RTX
    5090]``); the bracketed part is used when present.
    """
    if not name:
        return None
    bracket = re.search(r"\[([^\]]+)\]", name)
    text = bracket.group(1) if bracket else name
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    slug = _LEADING_VENDOR.sub("", slug)
    if len(slug) > 63:
        slug = slug[:63].rstrip("-.")
    return slug or None


@dataclass(frozen=True, slots=True)
class Identity:
    """The answer of :func:`identify`.

    ``source`` is ``database``, ``nvml`` (the driver's name), ``pci.ids`` (the host's file) or
    ``none``; only a database answer knows the generation (``unknown`` otherwise).
    """

    vendor: str
    vendor_id: str
    device_id: str
    sku: str
    product: str | None
    generation: str
    memory_gib: int | None
    ray_accelerator_type: str | None
    source: str
    entry: Entry | None = None

    @property
    def known(self) -> bool:
        return self.entry is not None


def _ray_type(vendor_id: str, device_id: str, nvml_name: str | None, entry: Entry | None) -> str | None:
    """What Ray 2.60 derives on the host: NVIDIA from the live NVML name, AMD from the id."""
    if vendor_id == "0x10de":
        if nvml_name is not None:
            return ray_names.nvidia_accelerator_type(nvml_name)
        return entry.ray_accelerator_type if entry else None
    if vendor_id == "0x1002":
        return ray_names.amd_accelerator_type(device_id)
    return entry.ray_accelerator_type if entry else None


def identify(
    entry: Entry | None,
    vendor_id: str,
    device_id: str,
    subsystem: tuple[str, str] | None = None,
    *,
    nvml_name: str | None = None,
    memory_bytes: int | None = None,
    root: str | os.PathLike[str] = "/",
) -> Identity:
    vendor = VENDORS.get(vendor_id, f"pci-{vendor_id[2:]}")
    ray_type = _ray_type(vendor_id, device_id, nvml_name, entry)
    measured = memory_gib_from_bytes(memory_bytes)
    if entry is not None:
        return Identity(entry.vendor, vendor_id, device_id, entry.sku, nvml_name or entry.nvml_name or entry.product,
                        entry.generation, entry.memory_gib if entry.memory_gib is not None else measured,
                        ray_type, "database", entry)
    slug = sku_slug(nvml_name)
    if slug:
        return Identity(vendor, vendor_id, device_id, slug, nvml_name, "unknown", measured, ray_type, "nvml")
    name = pciids.host_device_name(vendor_id, device_id, subsystem, root)
    slug = sku_slug(name)
    if slug:
        return Identity(vendor, vendor_id, device_id, slug, name, "unknown", measured, ray_type, "pci.ids")
    return Identity(vendor, vendor_id, device_id, f"{vendor}-unknown-{device_id}", None, "unknown", measured, ray_type, "none")
