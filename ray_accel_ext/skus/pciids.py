"""A reader for the PCI ID Repository's ``pci.ids`` format (vendors, devices, subsystems).

Format (https://pci-ids.ucw.cz/, header of ``pci.ids``): ``vendor  name``, then
``<TAB>device  name``, then ``<TAB><TAB>subvendor subdevice  name``; ids are four lower-case hex
digits, ``#`` starts a comment, and the device-class section (lines from ``C xx  name`` on) ends
the vendor list. Reading is bounded: a file over ``MAX_BYTES`` is refused, an over-long or
malformed line is skipped and counted, never fatal.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = [
    "HOST_PATHS",
    "MAX_BYTES",
    "PciDevice",
    "PciIds",
    "PciIdsError",
    "host_device_name",
    "host_pci_ids",
    "load",
    "norm_id",
    "parse",
]

MAX_BYTES = 16 << 20  # the 2026 file is 1.6 MiB
_MAX_LINE = 1024
# Distribution copies: hwdata (Fedora/RHEL/Arch: /usr/share/hwdata), pciutils on Debian/Ubuntu
# (/usr/share/misc), as lspci's own search order has them.
HOST_PATHS = ("usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids")

_VENDOR = re.compile(r"^([0-9a-f]{4})\s+(.+)$")
_DEVICE = re.compile(r"^\t([0-9a-f]{4})\s+(.+)$")
_SUBSYS = re.compile(r"^\t\t([0-9a-f]{4})\s([0-9a-f]{4})\s+(.+)$")
_HEADER = re.compile(r"^#\s*(Version|Date):\s*(.+?)\s*$")
_ID = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,4})$")


class PciIdsError(ValueError):
    """A ``pci.ids`` file that cannot be read at all (missing, unreadable, too large)."""


def norm_id(value: object) -> str:
    """``0x10de`` for ``"10DE"``, ``"0x10de"`` or ``0x10de``; raises ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0xFFFF:
        return f"0x{value:04x}"
    if isinstance(value, str):
        m = _ID.match(value.strip())
        if m:
            return f"0x{int(m.group(1), 16):04x}"
    raise ValueError(f"not a 16-bit PCI id: {value!r}")


@dataclass(frozen=True, slots=True)
class PciDevice:
    """One device line and its subsystem lines; ids in ``0x10de`` form."""

    vendor_id: str
    device_id: str
    name: str
    subsystems: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def subsystem_name(self, subsystem: tuple[str, str] | None) -> str | None:
        return self.subsystems.get(subsystem) if subsystem else None


@dataclass(frozen=True, slots=True)
class PciIds:
    """A parsed file: its version and date lines, vendor names and devices."""

    version: str | None
    date: str | None
    vendor_names: Mapping[str, str]
    devices: Mapping[tuple[str, str], PciDevice]
    skipped_lines: int = 0

    def device(self, vendor_id: object, device_id: object) -> PciDevice | None:
        return self.devices.get((norm_id(vendor_id), norm_id(device_id)))

    def vendor_devices(self, vendor_id: object) -> tuple[PciDevice, ...]:
        vendor = norm_id(vendor_id)
        return tuple(d for (v, _), d in sorted(self.devices.items()) if v == vendor)

    def name(self, vendor_id: object, device_id: object, subsystem: tuple[str, str] | None = None) -> str | None:
        """The subsystem's name when listed, else the device's; None for an unlisted id."""
        dev = self.device(vendor_id, device_id)
        if dev is None:
            return None
        return dev.subsystem_name(subsystem) or dev.name


def parse(text: str, vendors: Iterable[object] | None = None) -> PciIds:
    """Parse ``pci.ids`` text, keeping only ``vendors`` when given (ids in any accepted form)."""
    keep = None if vendors is None else {norm_id(v) for v in vendors}
    version = date = None
    names: dict[str, str] = {}
    devices: dict[tuple[str, str], PciDevice] = {}
    subsystems: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
    vendor: str | None = None
    device: tuple[str, str] | None = None
    skipped = 0
    for line in text.splitlines():
        if len(line) > _MAX_LINE:
            skipped += 1
            continue
        if line.startswith("#"):
            m = _HEADER.match(line)
            if m and m.group(1) == "Version":
                version = m.group(2)
            elif m:
                date = m.group(2)
            continue
        if not line.strip():
            continue
        if line.startswith("C "):  # the class section: no more vendors
            break
        if not line.startswith("\t"):
            m = _VENDOR.match(line)
            if not m:
                skipped += 1
                vendor = device = None
                continue
            vendor, device = f"0x{m.group(1)}", None
            if keep is None or vendor in keep:
                names[vendor] = m.group(2).strip()
            continue
        if vendor is None or (keep is not None and vendor not in keep):
            continue
        if line.startswith("\t\t"):
            m = _SUBSYS.match(line)
            if m and device is not None:
                subsystems[device][(f"0x{m.group(1)}", f"0x{m.group(2)}")] = m.group(3).strip()
            elif not m:
                skipped += 1
            continue
        m = _DEVICE.match(line)
        if not m:
            skipped += 1
            device = None
            continue
        device = (vendor, f"0x{m.group(1)}")
        subsystems[device] = {}
        devices[device] = PciDevice(vendor, device[1], m.group(2).strip(), {})
    frozen = {
        key: PciDevice(d.vendor_id, d.device_id, d.name, MappingProxyType(subsystems[key]))
        for key, d in devices.items()
    }
    return PciIds(version, date, MappingProxyType(names), MappingProxyType(frozen), skipped)


def load(path: str | os.PathLike[str], vendors: Iterable[object] | None = None) -> PciIds:
    """Read and parse one file; raises :class:`PciIdsError` naming the path when it cannot."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PciIdsError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise PciIdsError(f"{p}: larger than {MAX_BYTES} bytes, not a pci.ids file")
    return parse(data.decode("utf-8", errors="replace"), vendors)


def host_pci_ids(root: str | os.PathLike[str] = "/") -> Path | None:
    """The host's own ``pci.ids`` under ``root`` (hwdata first, as lspci looks), or None."""
    for rel in HOST_PATHS:
        candidate = Path(root) / rel
        if candidate.is_file():
            return candidate
    return None


_CACHE: dict[tuple[str, int, int, str], PciIds] = {}
_LOCK = threading.Lock()


def host_device_name(
    vendor_id: object, device_id: object, subsystem: tuple[str, str] | None = None, root: str | os.PathLike[str] = "/"
) -> str | None:
    """The name the host's ``pci.ids`` gives a device; None when there is no file or no entry.

    Each file is parsed once per process for each vendor asked about (keyed by path, size and
    mtime); an unreadable file is treated as absent.
    """
    path = host_pci_ids(root)
    if path is None:
        return None
    vendor = norm_id(vendor_id)
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns, vendor)
    with _LOCK:
        parsed = _CACHE.get(key)
        if parsed is None:
            try:
                parsed = load(path, vendors=[vendor])
            except PciIdsError:
                return None
            _CACHE[key] = parsed
    return parsed.name(vendor, device_id, subsystem)
