"""Reading one entry-point group from the installed distributions, one distribution at a time.

A distribution's metadata is outside text: its ``entry_points.txt`` may be a FIFO (a read would
block for ever), hold bytes that are not UTF-8 or a line that is not ``name = module:attr``, and
its ``METADATA`` may be Latin-1. Each of these skips that distribution only, with a line that
names it; every other distribution's entry points are still read. A distribution is parsed only
when its ``entry_points.txt`` names the group (looked for in its bytes), so one group's reader
names only the broken distributions that declare that group. The backend registry
(``ray_accel_ext.backends``) and the SKU database (``ray_accel_ext.skus``) read their groups here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib import metadata as importlib_metadata

from .regular import SpecialFile, read_regular, special_kind

__all__ = ["group_entry_points"]

_MAX_ENTRY_POINTS_BYTES = 1 << 20  # far more than any distribution declares


def _special_metadata(dist: importlib_metadata.Distribution) -> str | None:
    """What is wrong with a distribution's metadata files, when one is not a regular file (a FIFO
    there would block the read for ever); None when they are fine or not files at all."""
    base = getattr(dist, "_path", None)  # PathDistribution: the .dist-info / .egg-info directory
    if base is None:
        return None
    for name in ("entry_points.txt", "METADATA", "PKG-INFO"):
        try:
            kind = special_kind(os.stat(os.path.join(str(base), name)).st_mode)
        except OSError:
            continue
        if kind is not None:
            return f"{base}/{name} is {kind}, not a regular file; distribution skipped"
    return None


def _where(dist: importlib_metadata.Distribution) -> str:
    return str(getattr(dist, "_path", None) or "a distribution")


def _declares(dist: importlib_metadata.Distribution, group: str) -> bool:
    """Whether the distribution's ``entry_points.txt`` names ``group``, from its bytes (True when
    it cannot be told: the parser decides)."""
    base = getattr(dist, "_path", None)
    if base is None:
        return True
    try:
        return f"[{group}]".encode() in read_regular(os.path.join(str(base), "entry_points.txt"), _MAX_ENTRY_POINTS_BYTES)
    except FileNotFoundError:
        return False
    except SpecialFile:
        raise  # swapped for a FIFO since it was looked at: that distribution is skipped
    except OSError:
        return True


def _entries(dist: importlib_metadata.Distribution, group: str) -> list[tuple[str, str, str]]:
    """``(name, value, "dist version")`` of ``group`` in one distribution; raises what its
    metadata makes the standard library raise (UnicodeDecodeError, ValueError ...)."""
    if not _declares(dist, group):
        return []
    text = dist.read_text("entry_points.txt")
    if not text or f"[{group}]" not in text:
        return []
    found = [(ep.name, ep.value) for ep in dist.entry_points.select(group=group)]
    label = f"{dist.name} {dist.version}" if found else ""
    return [(name, value, label) for name, value in found]


def group_entry_points(group: str, skipped: list[str] | None = None) -> Iterator[tuple[str, str, str]]:
    """``(name, value, "dist version")`` for every entry point of ``group``, from every installed
    distribution that declares it (parsed only there: about 1.5 ms instead of 3.2 ms for
    ``importlib.metadata.entry_points(group=...)`` among the ~100 distributions Ray brings). A
    distribution seen twice on ``sys.path`` yields the same entries twice. A distribution whose
    metadata is a special file or cannot be parsed is skipped, and said in ``skipped``."""
    for dist in importlib_metadata.distributions():
        special = _special_metadata(dist)
        if special is None:
            try:
                yield from _entries(dist, group)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever a broken distribution makes the parser raise
                special = (f"{_where(dist)}: its metadata cannot be read ({type(exc).__name__}: {str(exc)[:200]}); "
                           "distribution skipped")
        if skipped is not None:
            skipped.append(special)
