"""Reading a regular file and nothing else.

A FIFO, socket or device node where a file is expected is refused and never opened: ``stat``
first, then ``open`` with ``O_NONBLOCK`` (a file swapped for a FIFO in between cannot block the
open) and ``O_NOCTTY``, then ``fstat`` of what was opened (a swapped file is refused before any
read). The host (:mod:`.fs`), the snapshot copier (:mod:`.replicate`) and the backend registry
(special metadata files) use it.
"""

from __future__ import annotations

import os
import stat

__all__ = ["SpecialFile", "read_regular", "special_kind"]

_FIRST_READ_BYTES = 8192
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def special_kind(mode: int) -> str | None:
    """What a non-regular file is (``a FIFO (named pipe)``), None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class SpecialFile(OSError):
    """A FIFO, socket or device node where a regular file was expected (never opened for reading)."""


def read_regular(fs_path: str, max_bytes: int, *, nofollow: bool = False, st: os.stat_result | None = None) -> bytes:
    """At most ``max_bytes + 1`` bytes of the regular file ``fs_path`` (see the module doc).

    ``st`` is the caller's own ``stat`` of ``fs_path`` when it has one (saves the syscall).
    Raises ``FileNotFoundError`` / ``PermissionError`` / ``OSError`` as ``open`` does, and
    ``IsADirectoryError`` for a directory; any other non-regular file is a :class:`SpecialFile`
    whose ``strerror`` says what it is (``is a FIFO (named pipe), not a regular file``).
    """
    kind = special_kind((st or os.stat(fs_path)).st_mode)
    if kind == "a directory":
        raise IsADirectoryError(fs_path)
    if kind is not None:
        raise SpecialFile(0, f"is {kind}, not a regular file; not opened")
    fd = os.open(fs_path, _OPEN_FLAGS | (os.O_NOFOLLOW if nofollow else 0))
    try:
        opened = os.fstat(fd)
        kind = special_kind(opened.st_mode)
        if kind is not None:
            raise SpecialFile(0, f"is {kind}, not a regular file (it changed while being opened); not read")
        # A small first read: asking for max_bytes at once allocates that much per call, which
        # made a 10-byte sysfs read 2.5x slower than the read itself.
        chunks = [os.read(fd, min(_FIRST_READ_BYTES, max_bytes + 1))]
        size = len(chunks[0])
        # Done when the read returned the whole size fstat gave (a file on disk); sysfs and
        # procfs attributes report 4096 or 0 whatever they hold, so those read on to EOF.
        while chunks[-1] and size <= max_bytes and size != opened.st_size:
            chunks.append(os.read(fd, max_bytes + 1 - size))
            size += len(chunks[-1])
        return b"".join(chunks)
    finally:
        os.close(fd)
