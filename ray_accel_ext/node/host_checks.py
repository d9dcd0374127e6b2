"""What no backend can report, checked on the host during discovery (on its own thread): entry
directories that cannot be listed, PCI functions that cannot be reached or whose vendor id is
unreadable, directories or special files the backends met, and extra SKU files that were skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..errors import HostReadError
from ..host import Host
from ..hw.pci import PCI_DEVICES
from ..hw.pci_index import pci_index
from ..model import Problem
from ..problems import FILE_UNREADABLE, SKU_FILE

__all__ = ["host_problems", "access_problems", "sku_file_problems"]

_HEX_ID = re.compile(r"0x[0-9a-fA-F]{1,6}")
# Directories the backends' detect() start from. detect() never raises, so one that exists but
# cannot be listed (mode 000, a symlink loop) would read as "no accelerators, ok"; it is reported.
_ENTRY_DIRS = (PCI_DEVICES, "/dev")


def host_problems(host: Host, backends_done: Callable[[], Iterable[str]] | None = None) -> list[Problem]:
    """What no backend can report, since ``detect()`` never raises: an entry directory that cannot
    be listed, PCI functions that cannot be reached (a directory on their path cannot be searched)
    and PCI functions whose vendor file is there but whose vendor, device or class id is unreadable
    or garbage (a backend skips such a function, so its device would silently not exist).

    Device and class ids are checked only for the vendors some backend read functions of: those
    asked in this process (:attr:`~ray_accel_ext.hw.pci_index.PciIndex.asked`) and those
    ``backends_done`` returns once it has waited for the backends (the vendors their worker
    processes asked for), so the answer does not depend on which thread ran first."""
    out: list[Problem] = []
    index = pci_index(host)
    names: list[str] = []
    for path in _ENTRY_DIRS:
        try:
            if path == PCI_DEVICES:
                names = index.addresses()  # the backends' listing, not a second one
            else:
                host.listdir(path)
        except HostReadError as exc:
            out.append(Problem.of(exc, str(exc), backend="host", stage="detect", error=type(exc).__name__))
    bad: list[str] = []
    present: list[tuple[str, str, str]] = []  # (address, resolved path, vendor id) of each function there
    if index.summary() is not None:
        names = []  # the kernel's summary says whose each function is: a backend reads its own
    for name in names:
        entry = f"{PCI_DEVICES}/{name}"
        try:
            real = host.realpath(entry)
        except HostReadError as exc:
            bad.append(f"{name} ({exc.reason})")
            continue
        # A dangling link or a function without a vendor file is a device that went away
        # (hot-unplug, SR-IOV teardown): not counted, not a problem. A vendor file that is there
        # but unreadable or garbage is.
        if not host.exists(real):
            continue
        try:
            text = host.read_optional(f"{entry}/vendor")  # the path the backends read: one read
        except HostReadError as exc:
            bad.append(f"{name} ({exc.reason})")
            continue
        if text is None:
            continue
        if not _HEX_ID.fullmatch(text.strip()):
            bad.append(f"{name} (vendor id {text.strip()[:20]!r})")
            continue
        present.append((name, real, text.strip().lower()))
    asked = set(backends_done()) if backends_done is not None and present else set()
    asked |= index.asked  # read after the wait: the in-process backends have asked by then
    for name, real, vendor in present:
        if vendor not in asked:
            continue  # no backend here reads this vendor's functions
        # With its vendor there, the function is present: a device or class id that cannot be read
        # would make the backend skip it (the read is shared with the backends: pci_index).
        try:
            index.ids(name)
        except HostReadError as exc:
            bad.append(f"{name} ({exc.reason})")
            continue
        if not host.exists(f"{real}/class"):
            bad.append(f"{name} (no class file)")
    if bad:
        out.append(Problem(
            code=FILE_UNREADABLE, backend="host", stage="detect", error="HostReadError",
            message=f"{len(bad)} PCI function(s) without readable ids ({', '.join(bad[:4])}"
                    f"{', ...' if len(bad) > 4 else ''}): devices there are not counted",
        ))
    return out


def access_problems(host: Host, already: list[Problem]) -> list[Problem]:
    """Directories some backend or check could not list or search (``FsHost.access_errors``),
    special files where a file was read (``FsHost.special_files``) and what the host noted with a
    code of its own (``FsHost.coded_notes``: dangling entries, an unusable ``env.json``): a backend
    usually reads past them (an optional hint, or "no such device"), so the host names them."""
    errors = dict(getattr(host, "access_errors", None) or {})
    special = dict(getattr(host, "special_files", None) or {})
    said = " ".join(p.message for p in already)
    out = []
    for path, reason in sorted(errors.items()):
        if f"{path}: " not in said:
            out.append(Problem(code=FILE_UNREADABLE, backend="host", stage="detect", error="HostReadError",
                               message=f"{path}: {reason}; it cannot be listed or searched, so devices under it are "
                                       "not counted"))
    for path, what in sorted(special.items()):
        if f"{path}: " not in said:
            out.append(Problem(code=FILE_UNREADABLE, backend="host", stage="detect", error="HostReadError",
                               message=f"{path}: {what}"))
    for (path, code), what in sorted(dict(getattr(host, "coded_notes", None) or {}).items()):
        out.append(Problem(code=code, backend="host", stage="detect", error="HostReadError", message=f"{path}: {what}"))
    return out


def sku_file_problems() -> list[Problem]:
    """Extra SKU files that were skipped (bad JSON, a schema error): the node starts on the
    built-in data and says which file and field (``ray_accel_ext/skus/SCHEMA.md``)."""
    from .. import skus

    return [Problem(code=SKU_FILE, backend="skus", stage="load", error="SkuFileError", message=line)
            for line in skus.load_problems()]
