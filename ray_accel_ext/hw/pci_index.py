"""One walk of the PCI tree per discovery, shared by every backend.

A host with thousands of functions that are no accelerator (SR-IOV virtual functions, NVMe
drives) used to cost every backend a read of every function's ids: 0.2 ms a function, 33x the
8x H100 snapshot's discovery with 4,000 NVMe functions added. :func:`pci_index` gives each host
one :class:`PciIndex`: the listing and each function's ids are read once, whichever backend asks
first, and :meth:`PciIndex.functions_of` names only the functions that may belong to the given
vendors.

That last step reads ``/proc/bus/pci/devices`` where the host has it: one line per function with
its bus, devfn, vendor and device (kernel ``drivers/pci/proc.c`` ``show_device``:
``"%02x%02x\\t%04x%04x..."``; no PCI domain, so a (bus, devfn) stands for that function in every
domain). A function whose (bus, devfn) no line gives one of the vendors is skipped without a read;
where several domains have a (bus, devfn) and the summary gives fewer of those lines to the vendors,
they are told apart by their vendor files alone, read only until the summary's count is met. The
host checks (``node/discovery.py``) read no vendor file at all. The file is trusted only while
every line has its shape and it lists exactly as many functions as sysfs does; a stale or partial
one (a hand-built snapshot, a recording of another moment) is ignored: then each function's vendor
file alone is read, once for every backend and the host checks, and its device and class only
where a backend asked for that vendor.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import Counter
from collections.abc import Iterable

from ..errors import HostReadError
from ..host import Host
from .pci import PCI_DEVICES, list_functions, parse_hex_id, read_ids

__all__ = ["PROC_PCI_DEVICES", "PciIndex", "pci_index", "functions_of"]

PROC_PCI_DEVICES = "/proc/bus/pci/devices"
_MAX_PROC_BYTES = 4 << 20
# bus and devfn, vendor and device, then the IRQ, BARs and driver: one function a line
_PROC_TEXT = re.compile(r"(?:[0-9a-fA-F]{4}\t[0-9a-fA-F]{8}\t[^\n]*\n)*", re.ASCII)

_ATTR = "_rayaccel_pci_index"
_lock = threading.Lock()


class PciIndex:
    """The PCI functions of one host, read once: the listing, each function's (vendor, device,
    class), and the kernel's one-file summary of every function's vendor where it holds."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._lock = threading.RLock()
        self._addresses: list[str] | HostReadError | None = None
        self._ids: dict[str, tuple[str, str, str] | HostReadError] = {}
        self._proc: str | None | bool = False  # False: not read yet
        self._vendor_slots: dict[str, Counter[str]] = {}
        self.asked: set[str] = set()  # the vendors functions_of was asked for, in this process

    def addresses(self) -> list[str]:
        """Every function's address (:func:`~.pci.list_functions`); raises its HostReadError."""
        with self._lock:
            if self._addresses is None:
                try:
                    self._addresses = list_functions(self._host)
                except HostReadError as exc:
                    self._addresses = exc.with_traceback(None)
            if isinstance(self._addresses, HostReadError):
                raise self._addresses
            return self._addresses

    def ids(self, address: str) -> tuple[str, str, str]:
        """(vendor, device, class) of a function (:func:`~.pci.read_ids`), read once."""
        with self._lock:
            found = self._ids.get(address)
            if found is None:
                try:
                    found = read_ids(self._host, address)
                except HostReadError as exc:
                    found = exc.with_traceback(None)
                self._ids[address] = found
        if isinstance(found, HostReadError):
            raise found
        return found

    def summary(self) -> str | None:
        """The kernel's ``/proc/bus/pci/devices``, read once; None where the host has no such file,
        a line of it has another shape, or it lists another number of functions than sysfs."""
        if self._proc is False:
            with self._lock:
                if self._proc is False:
                    self._proc = self._read_proc()
        return self._proc  # type: ignore[return-value]

    def _read_proc(self) -> str | None:
        try:
            text = self._host.read_optional(PROC_PCI_DEVICES, max_bytes=_MAX_PROC_BYTES)
            addresses = self.addresses()
        except HostReadError:
            return None
        if not text or not _PROC_TEXT.fullmatch(text) or text.count("\n") != len(addresses):
            return None  # a line of another shape, or a summary of another moment
        return text.lower()

    def _slots(self, vendor: str) -> Counter[str]:
        """``"BB:DD.F"`` of every function the summary gives to ``vendor`` (``0x10de``), with the
        number of its lines that name it (one for each PCI domain that has it)."""
        with self._lock:
            found = self._vendor_slots.get(vendor)
            if found is None:
                # Each line is "BBDF\tVVVVDDDD\t...": the vendor's tab-prefixed id found where a line
                # starts four characters before it; only its own lines cost a step.
                text, key, slots = self._proc, f"\t{vendor[2:].zfill(4)}", Counter()
                at = text.find(key)
                while at != -1:
                    if at == 4 or (at > 4 and text[at - 5] == "\n"):
                        devfn = int(text[at - 2:at], 16)
                        slots[f"{text[at - 4:at - 2]}:{devfn >> 3:02x}.{devfn & 7}"] += 1
                    at = text.find(key, at + 1)
                found = self._vendor_slots[vendor] = slots
            return found

    def functions_of(self, vendors: Iterable[str]) -> list[str]:
        """The addresses that may be functions of ``vendors`` (``0x10de`` ...), bus order; the
        caller still reads their ids (:meth:`ids`), so a candidate of another vendor is harmless."""
        addresses = self.addresses()
        wanted = {v.lower() for v in vendors}
        self.asked |= wanted
        if self.summary() is None:
            return [a for a in addresses if self._vendor_may_be(a, wanted)]
        slots: Counter[str] = Counter()
        for vendor in wanted:
            slots.update(self._slots(vendor))
        # Each (bus, devfn) looked up in every PCI domain of the sorted listing: the cost follows
        # the vendor's functions, not the host's thousands of others. Where more domains have the
        # (bus, devfn) than the summary gives to these vendors, another vendor's function shares
        # it: each is told apart by its vendor file alone.
        found = []
        domains = self._domains(addresses) if slots else ()
        for slot, lines in slots.items():
            here = []
            for domain in domains:
                address = f"{domain}:{slot}"
                at = bisect.bisect_left(addresses, address)
                if at < len(addresses) and addresses[at] == address:
                    here.append(address)
            found += here if len(here) <= lines else self._told_apart(here, lines, wanted)
        return sorted(found)

    def _told_apart(self, here: list[str], lines: int, vendors: set[str]) -> list[str]:
        """The functions of one (bus, devfn) in several domains that may be ``vendors``', where the
        summary gives those vendors ``lines`` of them: vendor files read in turn, only until the
        summary's count is met either way (its lines of these vendors all seen: the rest are
        others'; its lines of other vendors all seen: the rest are these vendors')."""
        kept, seen, others = [], 0, 0
        for at, address in enumerate(here):
            if seen == lines:
                break
            if others == len(here) - lines:
                kept += here[at:]
                break
            vendor = self._vendor(address)
            if vendor is None:
                kept.append(address)  # unreadable: a candidate that settles nothing; its reader reports it
            elif vendor in vendors:
                kept.append(address)
                seen += 1
            else:
                others += 1
        return kept

    @staticmethod
    def _domains(addresses: list[str]) -> list[str]:
        """The PCI domains of a sorted listing, one bisection each."""
        domains, at = [], 0
        while at < len(addresses):
            domains.append(addresses[at][:4])
            at = bisect.bisect_left(addresses, f"{domains[-1]};", at)  # ";" sorts right after ":"
        return domains

    def _vendor_may_be(self, address: str, vendors: set[str]) -> bool:
        """Without the summary: the function's vendor file alone (read once for every backend,
        the read the host checks share), so its device and class are read only for the vendors
        asked for. A function whose vendor cannot be read stays a candidate: its reader reports it."""
        vendor = self._vendor(address)
        return vendor is None or vendor in vendors

    def _vendor(self, address: str) -> str | None:
        """The function's vendor id from its vendor file alone; None where it cannot be read."""
        path = f"{PCI_DEVICES}/{address}/vendor"
        try:
            text = self._host.read_optional(path)
            return parse_hex_id(text, path) if text is not None else None
        except HostReadError:
            return None


def pci_index(host: Host) -> PciIndex:
    """The one :class:`PciIndex` of ``host``, kept on the host itself (made on first use, gone with
    the host); a host that takes no attribute gets a fresh index each call."""
    index = getattr(host, _ATTR, None)
    if isinstance(index, PciIndex):
        return index
    with _lock:
        index = getattr(host, _ATTR, None)
        if not isinstance(index, PciIndex):
            index = PciIndex(host)
            try:
                setattr(host, _ATTR, index)
            except AttributeError:  # __slots__, a frozen host
                pass
        return index


def functions_of(host: Host, vendors: Iterable[str]) -> list[str]:
    """:meth:`PciIndex.functions_of` of ``host``'s index."""
    return pci_index(host).functions_of(vendors)
