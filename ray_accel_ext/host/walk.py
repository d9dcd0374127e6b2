"""The one in-root symlink walk: host paths resolved component by component under a root, so no
path can leave it. The host (:class:`~.fs.FsHost`) and ``ray-accel record``'s copier
(:mod:`.replicate`) both use it."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..problems import ENTRIES_CAPPED, ENTRIES_DANGLING

__all__ = ["InRootWalk", "WalkStep", "LinkLoop", "MAX_LINK_HOPS", "MANY_ENTRIES", "MAX_ENTRIES", "without_dangling",
           "many_entries"]

MAX_LINK_HOPS = 40


class LinkLoop(Exception):
    """More than :data:`MAX_LINK_HOPS` symlinks on one path: a loop."""


@dataclass(frozen=True)
class WalkStep:
    """One component of an in-root walk: its host path, ``lstat`` result (None: absent), and the
    link target when it is a symlink; ``last`` when no component follows it."""

    path: str
    st: os.stat_result | None
    target: str | None
    parent: str
    last: bool


class InRootWalk:
    """Walk a host path component by component under a root, following symlinks *inside* it.

    ``fs_of`` maps a host path to the file-system path under the root. An absolute link target
    restarts at the root and ``..`` stops at it, so no walk can leave the root. Iterating yields a
    :class:`WalkStep` per component (components in ``plain``, known to be no symlink, are taken
    without a syscall and not yielded); afterwards :attr:`path` is the canonical host path.
    Raises :class:`LinkLoop` after :data:`MAX_LINK_HOPS` links and ``OSError`` when a component
    cannot be examined. The host (:class:`FsHost`) and ``ray-accel record``'s copier share it.
    """

    def __init__(self, fs_of: Callable[[str], str], base: str, parts: list[str], *, plain: set[str] | frozenset[str] = frozenset()) -> None:
        self._fs_of = fs_of
        # The host path of each directory walked into so far ("/a", "/a/b", ...): ".." pops one
        # and a component appends one, with no re-joining of the whole path per component.
        self._stack: list[str] = []
        for name in base.split("/"):
            if name:
                self._stack.append(f"{self._stack[-1] if self._stack else ''}/{name}")
        self._pending = list(reversed(parts))
        self._plain = plain

    @property
    def path(self) -> str:
        return self._stack[-1] if self._stack else "/"

    def __iter__(self) -> Iterator[WalkStep]:
        stack, pending, plain = self._stack, self._pending, self._plain
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if stack:
                    stack.pop()
                continue
            parent = stack[-1] if stack else ""
            candidate = f"{parent}/{part}"
            if candidate in plain:
                stack.append(candidate)
                continue
            try:
                st: os.stat_result | None = os.lstat(self._fs_of(candidate))
            except FileNotFoundError:
                st = None
            except OSError as exc:
                raise OSError(exc.errno, f"cannot stat {candidate}: {exc.strerror or exc}", candidate) from None
            parent = parent or "/"
            if st is None or not stat.S_ISLNK(st.st_mode):
                yield WalkStep(candidate, st, None, parent, not pending)
                stack.append(candidate)
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise LinkLoop(candidate)
            try:
                target = os.readlink(self._fs_of(candidate))
            except OSError as exc:
                raise OSError(exc.errno, f"cannot read link {candidate}: {exc.strerror or exc}", candidate) from None
            yield WalkStep(candidate, st, target, parent, False)
            if target.startswith("/"):
                stack.clear()
            pending.extend(reversed(target.split("/")))


# More entries than any directory discovery lists holds on a real machine (PCI functions: a few
# thousand at most). Past this, a listing leaves out first the links the operating system finds
# dangling: resolving each in the root costs about 50 us, and 200,000 dangling
# /sys/bus/pci/devices entries took the whole discovery budget.
MANY_ENTRIES = 4096
# At most this many entries of one directory are read (in name order), so 200,000 dangling entries
# cost a listing, a sort and MAX_ENTRIES readlinks (about 50 ms), not the discovery budget.
MAX_ENTRIES = 4 * MANY_ENTRIES


def many_entries(fs_path: str, names: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """A listing of more than :data:`MANY_ENTRIES` names: the first :data:`MAX_ENTRIES` in name
    order, less the dangling links (:func:`without_dangling`), sorted; and ``(problem code,
    what)`` for what was left out (``entries-capped``, ``entries-dangling``)."""
    notes: list[tuple[str, str]] = []
    names = sorted(names)
    if len(names) > MAX_ENTRIES:
        notes.append((ENTRIES_CAPPED, f"{len(names)} entries, more than any machine has: the first {MAX_ENTRIES} "
                                      "in name order are read, the rest left out"))
        names = names[:MAX_ENTRIES]
    kept = without_dangling(fs_path, names)
    if len(kept) < len(names):
        notes.append((ENTRIES_DANGLING, f"{len(names) - len(kept)} of {len(names)} entries read are dangling links; "
                                        "left out"))
    return kept, notes


def without_dangling(fs_path: str, names: list[str]) -> list[str]:
    """``names`` of directory ``fs_path`` less the symbolic links whose target is not there.

    One ``readlink`` per entry, then one listing per distinct target directory (200,000 dangling
    links into a few directories cost 200,000 readlinks and a few listings, not 200,000 path
    walks). An absolute target, or one whose directory cannot be listed for another reason than
    its absence, is kept: the in-root walk says what it is."""
    listed: dict[str, frozenset[str] | None] = {}
    kept = []
    fd = os.open(fs_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                kept.append(name)  # not a link (or gone): nothing to decide here
                continue
            if target.startswith("/"):
                kept.append(name)
                continue
            parent, _, leaf = target.rstrip("/").rpartition("/")
            if parent not in listed:
                try:
                    listed[parent] = frozenset(os.listdir(os.path.join(fs_path, parent)))
                except (FileNotFoundError, NotADirectoryError):
                    listed[parent] = frozenset()
                except OSError:
                    listed[parent] = None
            entries = listed[parent]
            if entries is None or leaf in entries or leaf in ("", ".", ".."):
                kept.append(name)
    finally:
        os.close(fd)
    return kept
