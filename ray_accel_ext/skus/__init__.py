"""The SKU database: PCI ids (and subsystem ids) -> canonical SKU, for every accelerator family.

Data lives in ``data/<family>.json`` (schema in ``SCHEMA.md``); more files come from the
directories in ``RAY_ACCEL_SKU_DIR`` (``os.pathsep``-separated) and ``/etc/ray_accel_ext/skus.d``,
and an entry there replaces the built-in one with the same key. Everything is read on first use,
once per process (:func:`reload` reads again). A bad extra file is skipped and reported by
:func:`load_problems`; nothing here raises on bad data or stops a node.

Typical use::

    from ray_accel_ext import skus
    entry = skus.lookup("0x10de", "0x2330")              # Entry(sku="h100-sxm5-80gb", ...)
    who = skus.identify("0x10de", "0x2b85", nvml_name="NVIDIA GeForce RTX 5090")
    who.sku, who.ray_accelerator_type                    # "geforce-rtx-5090", "GeForce-RTX-5090"
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from ._identify import VENDORS, Identity, memory_gib_from_bytes, sku_slug
from ._identify import identify as _identify
from ._load import BUILTIN_FAMILIES, ENV_VAR, SYSTEM_DIR, Database, check_file
from ._load import extra_dirs as _extra_dirs
from ._load import load as _load
from ._schema import SCHEMA_VERSION, Entry, LeftOut, SkuFileError
from .pciids import norm_id

__all__ = [
    "ENV_VAR",
    "FAMILIES",
    "SCHEMA_VERSION",
    "SYSTEM_DIR",
    "VENDORS",
    "Entry",
    "Identity",
    "LeftOut",
    "SkuFileError",
    "check_file",
    "entries",
    "extra_dirs",
    "identify",
    "left_out",
    "load_problems",
    "loaded_files",
    "lookup",
    "machine_type",
    "memory_gib_from_bytes",
    "reload",
    "scope",
    "sku_slug",
]

FAMILIES = BUILTIN_FAMILIES

_db: Database | None = None
_lock = threading.Lock()


def _database() -> Database:
    global _db
    db = _db
    if db is None:
        with _lock:
            if _db is None:
                _db = _load()
            db = _db
    return db


def reload(env: Mapping[str, str] | None = None) -> None:
    """Read the built-in and extra files again (from ``env``, default ``os.environ``)."""
    global _db
    with _lock:
        _db = _load(env)


def _subsystem(subsystem: object) -> tuple[str, str] | None:
    """``("0x10de", "0x14a9")`` from a pair or ``"10de:14a9"``; None when absent or malformed."""
    if subsystem is None:
        return None
    try:
        if isinstance(subsystem, str):
            vendor, _, device = subsystem.partition(":")
            return norm_id(vendor), norm_id(device)
        vendor, device = subsystem  # type: ignore[misc]
        return norm_id(vendor), norm_id(device)
    except (TypeError, ValueError):
        return None


def lookup(vendor_id: object, device_id: object, subsystem: object = None) -> Entry | None:
    """The entry for a PCI function, or None.

    ``subsystem`` (``("0x10de", "0x14a9")`` or ``"0x10de:0x14a9"``, as sysfs ``subsystem_vendor``
    and ``subsystem_device`` read) picks between boards that share a device id: an entry for
    that exact subsystem wins, then one for that subsystem device under any vendor
    (``*:0x004e``), then the entry for the device id alone. Malformed ids give None.
    """
    try:
        vid, did = norm_id(vendor_id), norm_id(device_id)
    except ValueError:
        return None
    table = _database().entries
    sub = _subsystem(subsystem)
    if sub is not None:
        for key in (f"{sub[0]}:{sub[1]}", f"*:{sub[1]}"):
            hit = table.get((vid, did, key))
            if hit is not None:
                return hit
    return table.get((vid, did, None))


def identify(
    vendor_id: object,
    device_id: object,
    subsystem: object = None,
    *,
    nvml_name: str | None = None,
    memory_bytes: int | None = None,
    root: str | os.PathLike[str] = "/",
) -> Identity:
    """SKU, product, generation, memory and Ray type of a device, with fallbacks.

    The database answers when it knows the id. Otherwise the driver's name (``nvml_name``) gives
    the SKU slug and product, then the host's own ``pci.ids`` under ``root``
    (``/usr/share/hwdata/pci.ids`` or ``/usr/share/misc/pci.ids``); the generation is then
    ``unknown`` and memory comes from ``memory_bytes`` (:func:`memory_gib_from_bytes`). The
    Ray type is what Ray 2.60 derives on that host: for NVIDIA from the NVML name (none without
    one and no entry, as Ray without NVML), for AMD from Ray's device-id table, else the entry's.
    Raises ValueError when ``vendor_id`` or ``device_id`` is not a 16-bit PCI id (a corrupted
    sysfs file): callers decide how to report that device.
    """
    vid, did = norm_id(vendor_id), norm_id(device_id)
    return _identify(lookup(vid, did, subsystem), vid, did, _subsystem(subsystem),
                     nvml_name=nvml_name, memory_bytes=memory_bytes, root=root)


def entries(family: str | None = None) -> tuple[Entry, ...]:
    """Every entry (after overrides), sorted by family, vendor id, device id and subsystem."""
    found = (e for e in _database().entries.values() if family is None or e.family == family)
    return tuple(sorted(found, key=lambda e: (e.family, e.vendor_id, e.device_id, e.subsystem or "")))


def left_out(family: str | None = None) -> tuple[LeftOut, ...]:
    """pci.ids ids in scope that are deliberately not entries, each with its reason."""
    found = (lo for lo in _database().left_out if family is None or lo.family == family)
    return tuple(sorted(found, key=lambda lo: (lo.family, lo.vendor_id, lo.device_id)))


def scope() -> Mapping[str, tuple]:
    """PCI vendor id -> compiled patterns of the pci.ids device names the database covers."""
    return _database().scope


def machine_type(name: str) -> tuple[Entry, int] | None:
    """The entry and devices per host of a cloud machine or instance type (``ct6e-standard-4t``)."""
    key = name.strip().lower()
    for entry in entries():
        for machine, count in entry.machine_types:
            if machine == key:
                return entry, count
    return None


def extra_dirs() -> tuple[Path, ...]:
    """Where extra SKU files are read from, highest precedence first."""
    return _extra_dirs()


def load_problems() -> tuple[str, ...]:
    """One line per file or directory that was skipped, naming it and the field at fault."""
    return _database().problems


def loaded_files() -> tuple[str, ...]:
    """The files the database was built from, lowest precedence first."""
    return _database().files
