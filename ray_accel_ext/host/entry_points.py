"""Reading one entry-point group from the installed distributions, one distribution at a time.

A distribution's metadata is outside text: its ``entry_points.txt`` may be a FIFO (a read would
block for ever), hold bytes that are not UTF-8 or a line that is not ``name = module:attr``, and
its ``METADATA`` may be Latin-1. Each of these skips that distribution only, with a line that
names it; every other distribution's entry points are still read. The backend registry
(``ray_accel_ext.backends``) and the SKU database (``ray_accel_ext.skus``) read their groups here.

The scan reads each ``*.dist-info`` / ``*.egg-info`` directory on ``sys.path`` itself: the
``entry_points.txt`` of every distribution, and the ``METADATA`` headers (name and version) only
of those that declare the group. What one ``sys.path`` directory holds is kept for the process and
read again when that directory changes (a distribution installed or removed) or an
``entry_points.txt`` read from it does; a directory or file changed in the last two seconds is
not kept (file-system clocks are coarse: a change in the same tick leaves the time as it was).
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Iterator
from importlib import metadata as importlib_metadata

from .regular import read_regular, special_kind

__all__ = ["group_entry_points"]

_INFO_SUFFIXES = (".dist-info", ".egg-info")
_MAX_BYTES = 4 << 20
_RECENT_NS = 2_000_000_000
Entry = tuple[str, str, str]


class _Skip(Exception):
    """One distribution skipped: the message says which and why."""


def _stat_key(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode


def _read(info: str, name: str) -> bytes | None:
    """A metadata file's bytes; None when absent; _Skip when it is a special file."""
    path = os.path.join(info, name)
    try:
        st = os.stat(path)
    except OSError:
        return None
    kind = special_kind(st.st_mode)
    if kind is not None:
        raise _Skip(f"{path} is {kind}, not a regular file; distribution skipped")
    data = read_regular(path, _MAX_BYTES, st=st)
    if len(data) > _MAX_BYTES:
        raise ValueError(f"{name} is larger than {_MAX_BYTES >> 20} MiB")
    return data


def _section(text: str, group: str) -> list[tuple[str, str]]:
    """``(name, value)`` of the lines under ``[group]`` (the standard library's reading of
    ``entry_points.txt``); ValueError for a line there that is not ``name = value``."""
    found: list[tuple[str, str]] = []
    inside = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line.strip("[]") == group
        elif inside:
            name, eq, value = line.partition("=")
            if not eq:
                raise ValueError(f"line {number} of entry_points.txt is not 'name = value': {line[:80]!r}")
            found.append((name.strip(), value.strip()))
    return found


def _label(info: str, fallback: str) -> str:
    """``"name version"`` from the headers of METADATA (or PKG-INFO); the body is not read as text."""
    data = _read(info, "METADATA") or _read(info, "PKG-INFO") or b""
    head = data.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].decode("utf-8")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        if colon and not line[:1].isspace():
            fields.setdefault(key.strip().lower(), value.strip())
    name, _, version = fallback.partition("-")
    return f"{fields.get('name', name)} {fields.get('version', version)}"


def _distribution(info: str, label_hint: str, group: str) -> tuple[list[Entry], tuple[int, ...] | None]:
    """Entries of ``group`` in one metadata directory, and the key of the entry_points.txt read
    (None when it declares nothing)."""
    data = _read(info, "entry_points.txt")
    if not data or f"[{group}]".encode() not in data:
        return [], None
    found = _section(data.decode("utf-8"), group)
    if not found:
        return [], None
    label = _label(info, label_hint)
    return [(name, value, label) for name, value in found], _stat_key(os.path.join(info, "entry_points.txt"))


def _infos(root: str) -> list[tuple[str, str]]:
    """``(metadata directory, "name-version" hint)`` in one ``sys.path`` directory, by name."""
    try:
        with os.scandir(root) as it:
            names = sorted(e.name for e in it if e.name.lower().endswith(_INFO_SUFFIXES))
    except OSError:
        names = []
    found = [(os.path.join(root, n), n.rpartition(".")[0]) for n in names]
    base = os.path.basename(root.rstrip(os.sep))
    if base.lower().endswith(".egg") and os.path.isdir(os.path.join(root, "EGG-INFO")):
        found.append((os.path.join(root, "EGG-INFO"), base.rpartition(".")[0]))
    return found


def _read_directory(root: str, group: str) -> tuple[list[Entry], list[str], list[tuple[str, object]]]:
    """Entries, skipped lines and the files read (path, key) of one ``sys.path`` directory."""
    entries: list[Entry] = []
    skipped: list[str] = []
    watched: list[tuple[str, object]] = []
    for info, hint in _infos(root):
        try:
            found, key = _distribution(info, hint, group)
        except _Skip as exc:
            skipped.append(str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - whatever broken metadata makes decoding or parsing raise
            skipped.append(f"{info}: its metadata cannot be read ({type(exc).__name__}: {str(exc)[:200]}); "
                           "distribution skipped")
            continue
        entries.extend(found)
        if key is not None:
            watched.append((os.path.join(info, "entry_points.txt"), key))
    return entries, skipped, watched


def _read_archive(root: str, group: str) -> tuple[list[Entry], list[str]]:
    """A zip archive on ``sys.path``: read through the standard library, per distribution."""
    entries: list[Entry] = []
    skipped: list[str] = []
    for dist in importlib_metadata.distributions(path=[root]):
        try:
            found = [(ep.name, ep.value) for ep in dist.entry_points.select(group=group)]
            entries += [(name, value, f"{dist.name} {dist.version}") for name, value in found]
        except Exception as exc:  # noqa: BLE001 - as for a directory
            skipped.append(f"{root}: its metadata cannot be read ({type(exc).__name__}: {str(exc)[:200]}); "
                           "distribution skipped")
    return entries, skipped


_cache: dict[tuple[str, str], tuple[object, list[Entry], list[str], list[tuple[str, object]]]] = {}


def _path_entry(entry: str, group: str) -> tuple[list[Entry], list[str]]:
    """What one ``sys.path`` entry holds of ``group``: from the cache while nothing changed."""
    root = entry or "."
    key = _stat_key(root)
    if key is None:
        return [], []
    cached = _cache.get((root, group))
    if cached is not None and cached[0] == key and all(_stat_key(p) == k for p, k in cached[3]):
        return cached[1], cached[2]
    if stat.S_ISDIR(key[3]):
        entries, skipped, watched = _read_directory(root, group)
    elif stat.S_ISREG(key[3]):
        (entries, skipped), watched = _read_archive(root, group), []
    else:
        return [], []
    recent = time.time_ns() - _RECENT_NS
    if key[1] < recent and all(k is not None and k[1] < recent for _, k in watched):  # type: ignore[index]
        _cache[(root, group)] = (key, entries, skipped, watched)
    else:
        _cache.pop((root, group), None)
    return entries, skipped


def group_entry_points(group: str, skipped: list[str] | None = None) -> Iterator[Entry]:
    """``(name, value, "dist version")`` for every entry point of ``group``, from every installed
    distribution that declares it, ``sys.path`` in order. A distribution seen twice on
    ``sys.path`` yields the same entries twice. A distribution whose metadata is a special file or
    cannot be parsed is skipped, and said in ``skipped``."""
    for entry in list(sys.path):
        entries, said = _path_entry(entry, group)
        if skipped is not None:
            skipped.extend(said)
        yield from entries
