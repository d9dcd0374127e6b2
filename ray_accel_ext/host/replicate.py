"""Recreate host paths of a source root inside a snapshot's ``rootfs/``: directories, relative
symlinks, copied files (only where content is needed), empty files for device nodes. Only regular
files are ever opened: a FIFO, socket or device node whose content was asked for is listed as not
copied.

Symlinks are followed with the same in-root walk the host uses (:class:`~.fs.InRootWalk`), so a
snapshot reproduces exactly what discovery saw, loops included.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .protocol import MAX_READ_BYTES
from .regular import read_regular, special_kind
from .walk import InRootWalk, LinkLoop

__all__ = ["Replicator"]


class Replicator:
    """Recreates host paths of a source root inside a new rootfs: directories, relative
    symlinks, copied files (only where content is needed), empty files for device nodes."""

    def __init__(self, src_root: Path, dst_root: Path) -> None:
        self.src = str(src_root)
        self.dst = dst_root
        self.files = 0
        self.links = 0
        self.dirs = 0
        self.unreadable: list[str] = []
        self._done: dict[str, bool] = {}

    def _src(self, host_path: str) -> str:
        return host_path if self.src == "/" else self.src + host_path

    def _dst(self, host_path: str) -> Path:
        return self.dst / host_path.lstrip("/")

    def replicate(self, path: str, *, content: bool) -> None:
        """Recreate ``path`` and every symlink and directory on the way to it."""
        if self._done.get(path, False) or (path in self._done and not content):
            return
        self._done[path] = content
        try:
            for step in InRootWalk(self._src, "/", [p for p in path.split("/") if p]):
                if step.st is None:
                    return  # the rest does not exist on the source either
                dst = self._dst(step.path)
                if step.target is not None:
                    self._link(dst, step.target, step.parent)
                elif stat.S_ISDIR(step.st.st_mode):
                    if not dst.is_dir():
                        dst.mkdir(parents=True, exist_ok=True)
                        self.dirs += 1
                elif not step.last:
                    return  # a file in the middle of a path: nothing below it exists
                else:
                    self._file(step.path, dst, step.st, content)
                    return
        except (LinkLoop, OSError):
            return  # a loop (the links made so far reproduce it) or an unreadable component

    def _link(self, dst: Path, target: str, link_dir: str) -> None:
        if dst.is_symlink():
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        rel = os.path.relpath(target, link_dir) if target.startswith("/") else target
        os.symlink(rel, dst)
        self.links += 1

    def _file(self, host_path: str, dst: Path, st: os.stat_result, content: bool) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = b""
        kind = special_kind(st.st_mode)
        if content and kind is not None:
            # A FIFO, socket or device where discovery wanted content: never opened, not copied.
            self.unreadable.append(f"{host_path} (is {kind}, not a regular file)")
            return
        if content and stat.S_ISREG(st.st_mode):
            try:
                data = read_regular(self._src(host_path), MAX_READ_BYTES)
            except OSError as exc:
                self.unreadable.append(f"{host_path} ({exc.strerror or exc})")
                if dst.exists():
                    return
        elif dst.exists():
            return
        existed = dst.exists()
        dst.write_bytes(data)
        if not existed:
            self.files += 1


