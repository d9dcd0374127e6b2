"""Scratch folders for the damaged host copies the reliability tests write by the ten thousand.

In memory (``/dev/shm``, a tmpfs) where the machine has one: unlinking the copies' files there
costs a tenth of what it costs on a disk file system (a journal write per file). Files cannot be
hard-linked into it from the source tree, so copies are real copies there; the snapshots' files
are small. Each test removes its copies when it is done, which keeps the memory they take to one
snapshot's worth.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["scratch_dir"]

SHM = "/dev/shm"
# Containers often mount a 64 MiB /dev/shm (Docker's default); below this much free space the
# copies go to the disk's temporary folder instead.
SHM_MIN_FREE = 1 << 30


def _shm_usable() -> bool:
    try:
        st = os.statvfs(SHM)
    except OSError:
        return False
    return os.access(SHM, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize >= SHM_MIN_FREE


def scratch_dir(prefix: str) -> Path:
    """A new world-traversable folder (user nobody can reach what is inside), in memory where /dev/shm has room;
    remove it with :func:`ray_accel_ext.testing.corrupt.remove_copy`."""
    base = SHM if _shm_usable() else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    os.chmod(path, 0o755)
    return path
