"""PCI functions, NUMA nodes and CPU lists as sysfs shows them, read through a :class:`Host`.

Formats (kernel ``drivers/pci/pci-sysfs.c``): ``vendor``/``device``/``subsystem_*`` are
``0x%04x\\n``, ``class`` is ``0x%06x\\n``, ``numa_node`` is ``%d\\n`` with ``-1`` for unknown, and
``local_cpulist`` is a cpulist (``0-47,96-143``). ``/sys/bus/pci/devices/<BDF>`` is a relative
symlink whose resolved path lists every bridge from the host bridge down, which is what PCIe
switch grouping and NCCL path classes are computed from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import HostReadError
from ..host import Host
from ..model import Problem
from ..problems import FILE_UNREADABLE, VALUE_BOUNDED

__all__ = [
    "PciId",
    "PCI_DEVICES",
    "PciFunction",
    "list_functions",
    "read_function",
    "parse_cpulist",
    "format_cpulist",
    "parse_hex_id",
    "BDF_RE",
    "bridge_chain",
]

PCI_DEVICES = "/sys/bus/pci/devices"
BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# The same shape over a NUL-joined listing (no file name holds a NUL): one regex pass over a host's
# thousands of functions instead of one match a name.
_BDF_IN_LISTING = re.compile(r"(?<![^\0])[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7](?![^\0])")
# A listing of nothing but addresses (every real host's): checked in one match, kept as it is.
_ONLY_BDFS = re.compile(r"(?:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\0)*[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_HEX_ID_RE = re.compile(r"^0x[0-9a-fA-F]{1,6}$")


@dataclass(frozen=True, slots=True)
class PciFunction:
    """The sysfs facts of one PCI function that discovery uses."""

    address: str  # 0000:18:00.0
    path: str  # resolved host path: /sys/devices/pci0000:15/.../0000:18:00.0
    vendor: str  # 0x10de
    device: str  # 0x2330
    pci_class: str  # 0x030200
    subsystem_vendor: str | None
    subsystem_device: str | None
    numa_node: int | None
    cpus: tuple[int, ...]

    @property
    def bridges(self) -> tuple[str, ...]:
        """PCI addresses of the bridges/switch ports above this function, top first."""
        return bridge_chain(self.path)[:-1]

    @property
    def root_complex(self) -> str:
        """The ``pciDDDD:BB`` host-bridge component of the resolved path."""
        for part in self.path.split("/"):
            if part.startswith("pci"):
                return part
        return ""


def parse_hex_id(text: str, path: str) -> str:
    value = text.strip().lower()
    if not _HEX_ID_RE.match(value):
        raise HostReadError(path, f"expected a hex id like 0x10de, got {text.strip()[:40]!r}")
    return value


# Linux's NR_CPUS is at most 8192 (x86 MAXSMP); ids are capped so that a corrupt list of many
# ranges cannot make a set of billions of CPUs.
MAX_CPUS = 1 << 16
# Linux numbers NUMA nodes below MAX_NUMNODES, at most 1 << 10 (NODES_SHIFT 10).
MAX_NUMA_NODE = (1 << 10) - 1


class _OutOfBounds(ValueError):
    """A value past what the hardware can hold (a NUMA node, a CPU list): code ``value-bounded``."""


def parse_cpulist(text: str) -> tuple[int, ...]:
    """``0-3,8,10-11`` -> (0, 1, 2, 3, 8, 10, 11). Raises ValueError on malformed input or CPU
    ids of ``MAX_CPUS`` and above."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    if not text.isascii():  # int() takes other scripts' digits too
        raise ValueError(f"cpu list {text[:40]!r} holds non-ASCII characters")
    if len(text) > 8 * MAX_CPUS:  # every id listed once: at most "65535," per CPU
        raise _OutOfBounds(f"cpu list of {len(text)} characters is longer than any of {MAX_CPUS} CPUs")
    total = 0
    for chunk in text.split(","):
        chunk = chunk.strip()
        if "-" in chunk:
            lo_s, _, hi_s = chunk.partition("-")
            lo, hi = int(lo_s), int(hi_s)
            if lo < 0 or hi < lo or hi >= MAX_CPUS:
                raise ValueError(f"bad cpu range {chunk!r}")
            # The total is bounded, not only each range: repeated wide ranges would be billions of steps.
            total += hi - lo + 1
            if total > MAX_CPUS:
                raise _OutOfBounds(f"cpu list names more than {MAX_CPUS} CPUs (ranges repeat)")
            cpus.update(range(lo, hi + 1))
        else:
            cpu = int(chunk)
            if cpu < 0 or cpu >= MAX_CPUS:
                raise _OutOfBounds(f"cpu {chunk!r} outside 0..{MAX_CPUS - 1}")
            cpus.add(cpu)
    return tuple(sorted(cpus))


def format_cpulist(cpus) -> str:
    """Inverse of :func:`parse_cpulist`: (0, 1, 2, 8) -> ``0-2,8``."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def bridge_chain(resolved_path: str) -> tuple[str, ...]:
    """PCI addresses along a resolved sysfs path, top first, the function itself last."""
    return tuple(part for part in resolved_path.split("/") if BDF_RE.match(part))


def list_functions(host: Host) -> list[str]:
    """Addresses of every PCI function on the host, sorted (PCI bus order)."""
    names = host.listdir(PCI_DEVICES)
    joined = "\0".join(names)
    return names if _ONLY_BDFS.fullmatch(joined) else _BDF_IN_LISTING.findall(joined)


def _optional_id(host: Host, path: str) -> str | None:
    text = host.read_optional(path)
    return parse_hex_id(text, path) if text is not None else None


def read_ids(host: Host, address: str) -> tuple[str, str, str]:
    """(vendor, device, class) of a function: the cheap read used to filter before a full read."""
    base = f"{PCI_DEVICES}/{address}"
    vendor = parse_hex_id(host.read_text(f"{base}/vendor"), f"{base}/vendor")
    device = parse_hex_id(host.read_text(f"{base}/device"), f"{base}/device")
    cls_text = host.read_optional(f"{base}/class")
    pci_class = parse_hex_id(cls_text, f"{base}/class") if cls_text is not None else "0x000000"
    return vendor, device, pci_class


def read_function(
    host: Host, address: str, problems: list[Problem] | None = None, ids: tuple[str, str, str] | None = None
) -> PciFunction:
    """Everything discovery needs about one function.

    Missing or corrupt optional files (``numa_node``, ``local_cpulist``) become ``None``/``()``
    and a line in ``problems``; missing ids raise :class:`HostReadError`. ``ids`` is the
    ``(vendor, device, class)`` a caller already read with :func:`read_ids`, to skip reading them again.
    """
    base = f"{PCI_DEVICES}/{address}"
    vendor, device, pci_class = ids if ids is not None else read_ids(host, address)
    path = host.realpath(base)
    numa: int | None = None
    cpus: tuple[int, ...] = ()
    try:
        text = host.read_optional(f"{base}/numa_node")
        if text is not None:
            if not text.isascii():
                raise ValueError(f"numa_node {text[:20]!r} is not an ASCII number")
            value = int(text.strip())
            if value > MAX_NUMA_NODE:
                raise _OutOfBounds(f"numa_node {text.strip()[:24]} is above {MAX_NUMA_NODE}, the most Linux numbers")
            numa = value if value >= 0 else None
    except (HostReadError, ValueError) as exc:
        _note(problems, f"{base}/numa_node", exc)
    try:
        text = host.read_optional(f"{base}/local_cpulist")
        if text is not None:
            cpus = parse_cpulist(text)
    except (HostReadError, ValueError) as exc:
        _note(problems, f"{base}/local_cpulist", exc)
    sub_vendor = sub_device = None
    try:
        sub_vendor = _optional_id(host, f"{base}/subsystem_vendor")
        sub_device = _optional_id(host, f"{base}/subsystem_device")
    except HostReadError as exc:
        _note(problems, f"{base}/subsystem_device", exc)
    return PciFunction(address, path, vendor, device, pci_class, sub_vendor, sub_device, numa, cpus)


def read_listed_function(host: Host, address: str, problems: list[Problem | str], missing: str) -> PciFunction | None:
    """:func:`read_function` for a function another source lists (a driver, a tool): None with
    the problem ``missing`` when sysfs does not show it, None with the read error when its ids
    cannot be read."""
    if not host.exists(f"{PCI_DEVICES}/{address}"):
        problems.append(missing)
        return None
    try:
        return read_function(host, address, problems)
    except HostReadError as exc:
        problems.append(Problem.of(exc))
        return None


def _note(problems: list[Problem] | None, path: str, exc: Exception) -> None:
    if problems is None:
        return
    reason = exc.reason if isinstance(exc, HostReadError) else f"unparsable ({exc})"
    message = f"{path}: {reason}" if not str(reason).startswith(path) else str(reason)
    if isinstance(exc, HostReadError):
        problems.append(Problem.of(exc, message))
    else:
        problems.append(Problem(code=VALUE_BOUNDED if isinstance(exc, _OutOfBounds) else FILE_UNREADABLE, message=message))


@dataclass(frozen=True, slots=True)
class PciId:
    """PCI functions a backend owns: ``vendor`` (``0x10de``) and either exact ``devices`` or, when
    ``devices`` is empty, any device whose class starts with one of ``classes`` (``0x03``)."""

    vendor: str
    devices: frozenset[str] = frozenset()
    classes: tuple[str, ...] = ()

    def matches(self, vendor: str | None, device: str | None, pci_class: str | None) -> bool:
        """True for a function with these sysfs ``vendor``/``device``/``class`` values."""
        if (vendor or "").lower() != self.vendor:
            return False
        if self.devices:
            return (device or "").lower() in self.devices
        return any((pci_class or "").lower().startswith(c) for c in self.classes)
