"""The host seam: the only code that touches the operating system.

Backends read files, environment variables, cloud metadata, external tools and libraries only
through a :class:`Host`. Three kinds exist:

* the live host (root ``/``): the real machine;
* a root directory (``RAY_ACCEL_ROOT=DIR`` or ``--root DIR``), like hwloc's ``HWLOC_FSROOT``:
  ``/sys``, ``/proc``, ``/dev`` are read from ``DIR/sys`` ... and nothing outside ``DIR``;
* a host snapshot: a directory holding ``rootfs/`` plus ``env.json`` (the environment the node
  saw), ``libraries/<name>.json`` (recorded library readings, e.g. NVML) and
  ``commands/<tool>.json`` (recorded tool output). Cloud metadata is not stored in the host: tests
  serve a snapshot's ``metadata.json`` from a loopback server reached through the standard
  ``GCE_METADATA_HOST`` / ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` overrides.

Paths are host-absolute strings (``/sys/bus/pci/devices``). Symlinks are resolved inside the root:
an absolute link target or a ``..`` chain can never leave it, and link loops are an error.

Only regular files are read (:mod:`.regular`): a FIFO, socket or device node where a file is
expected is refused with a :class:`HostReadError` and never opened. Under a root the canonical
path is opened with ``O_NOFOLLOW``, so a last component swapped for a symlink cannot lead outside it.
Directories that cannot be listed or searched (:attr:`FsHost.access_errors`) and what the host
notes with a code (:attr:`FsHost.coded_notes`) are reported by discovery.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import CommandError, HostReadError
from ..problems import SNAPSHOT_ENV_INVALID, TOOL_NOT_RECORDED
from . import snapshot as _snapshot
from .metadata import MetadataClient
from .protocol import MAX_READ_BYTES, ROOT_ENV, Deadline
from .regular import SpecialFile, read_regular
from .walk import MANY_ENTRIES, InRootWalk, LinkLoop, many_entries

__all__ = ["FsHost", "open_host", "host_from_env"]


class FsHost:
    """A host rooted at a directory: ``/`` for the live machine, else a snapshot or test tree."""

    def __init__(
        self,
        root: str | os.PathLike[str] = "/",
        *,
        env: Mapping[str, str] | None = None,
        budget_s: float | None = None,
        snapshot_dir: str | os.PathLike[str] | None = None,
        deadline: Deadline | None = None,
        run_tools: bool | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.snapshot_dir = Path(snapshot_dir).resolve() if snapshot_dir is not None else None
        self.live = str(self.root) == "/" and self.snapshot_dir is None
        #: whether a tool without a recording is executed: on the live host only, unless the caller
        #: (never a snapshot's own data) asks for it; a snapshot is data, never a program to run
        self.run_tools = self.live if run_tools is None else bool(run_tools)
        self.env = MappingProxyType(dict(os.environ if env is None else env))
        if deadline is None:
            deadline = Deadline(budget_s) if budget_s is not None else Deadline.from_env(self.env)
        self.deadline = deadline
        self.metadata = MetadataClient(self.env, self.deadline, live=self.live)
        self._resolved: dict[str, str] = {}
        # Canonical host paths already seen by lstat to be no symlink: later walks through the
        # same directories (every PCI device shares its bridges' path) skip the syscall.
        self._not_links: set[str] = set()
        self._reads: dict[str, tuple[str | None, int, str | None]] = {}
        self._listed: dict[str, list[str]] = {}  # directories of MANY_ENTRIES or more, dangling links left out
        self._many_lock = threading.Lock()
        self._root_str = "" if str(self.root) == "/" else str(self.root)
        self._lock = threading.Lock()
        #: directories that exist but could not be listed or searched: host path -> reason
        self.access_errors: dict[str, str] = {}
        #: FIFOs, sockets and device nodes found where a file was read: host path -> what it is
        self.special_files: dict[str, str] = {}
        #: what the host itself found, with its problem code: (path, code) -> what
        self.coded_notes: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:
        where = self.snapshot_dir or self.root
        return f"{type(self).__name__}({str(where)!r})"

    # -- paths ---------------------------------------------------------------------------------

    def _fs(self, host_path: str) -> str:
        return self._root_str + host_path

    def realpath(self, path: str) -> str:
        if not path.startswith("/"):
            raise HostReadError(path, "host paths must be absolute")
        cached = self._resolved.get(path)
        if cached is not None:
            return cached
        parent, _, leaf = path.rstrip("/").rpartition("/")
        base = self.realpath(parent) if parent else "/"
        resolved = None
        if leaf not in ("", ".", ".."):
            resolved = self._child(base, leaf, path)
            if resolved is None:
                resolved = self._follow_known(base, leaf)
        if resolved is None:
            resolved = self._walk(base, [leaf] if leaf else [], path)
        with self._lock:
            self._resolved[path] = resolved
        return resolved

    def _child(self, base: str, leaf: str, original: str) -> str | None:
        """``base/leaf`` for a canonical ``base`` when ``leaf`` is no symlink (or absent); None
        when it is a symlink, which :meth:`_walk` then follows."""
        candidate = (base if base != "/" else "") + "/" + leaf
        if candidate in self._not_links:
            return candidate
        st = self._lstat(base, candidate, original)
        if st is None:
            return candidate
        if stat.S_ISLNK(st.st_mode):
            return None
        self._not_links.add(candidate)
        return candidate

    def _lstat(self, base: str, candidate: str, original: str) -> os.stat_result | None:
        """``lstat`` of the host path ``candidate`` in the canonical directory ``base``; None when
        absent. Raises HostReadError (naming ``original``) when it cannot be examined."""
        try:
            return os.lstat(self._fs(candidate))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                self._note_access(base, "permission denied")
            raise HostReadError(original, f"cannot stat {candidate}: {exc.strerror or exc}") from None

    def _follow_known(self, base: str, leaf: str) -> str | None:
        """Where the symlink ``leaf`` in the canonical directory ``base`` leads, when that is
        plain: a relative target ``../../x/y`` whose directory is already known to be no link
        (every ``/sys/bus/pci/devices/*`` link after the first under a bridge). One ``readlink``
        and one ``lstat`` then replace a component-by-component :meth:`_walk`; None: walk it."""
        link = (base if base != "/" else "") + "/" + leaf
        try:
            target = os.readlink(self._fs(link))
        except OSError:
            return None
        names = target.split("/")
        ups = 0
        while ups < len(names) and names[ups] == "..":
            ups += 1
        names = names[ups:]
        if not names or target.startswith("/") or any(n in ("", ".", "..") for n in names):
            return None
        dirs = [d for d in base.split("/") if d]
        parent = "/" + "/".join([*dirs[: max(0, len(dirs) - ups)], *names[:-1]])
        if parent != "/" and parent not in self._not_links:
            return None
        candidate = (parent if parent != "/" else "") + "/" + names[-1]
        try:
            st = os.lstat(self._fs(candidate))
        except FileNotFoundError:
            return candidate  # a dangling link: its target, as the walk gives it
        except OSError:
            return None  # the walk reports it
        if stat.S_ISLNK(st.st_mode):
            return None
        self._not_links.add(candidate)
        return candidate

    def _walk(self, base: str, parts: list[str], original: str) -> str:
        walk = InRootWalk(self._fs, base, parts, plain=self._not_links)
        try:
            for step in walk:
                if step.target is None and step.st is not None:
                    self._not_links.add(step.path)
        except LinkLoop:
            raise HostReadError(original, "too many levels of symbolic links (loop)") from None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename:
                # lstat of a component failed: the directory holding it cannot be searched.
                self._note_access(str(exc.filename).rpartition("/")[0] or "/", "permission denied")
            raise HostReadError(original, exc.strerror or str(exc)) from None
        return walk.path

    def _note_access(self, path: str, reason: str) -> None:
        with self._lock:
            self.access_errors.setdefault(path, reason)

    def _real(self, path: str) -> str:
        return self._fs(self.realpath(path)) if not self.live else path

    def _leaf(self, path: str) -> tuple[str, os.stat_result | None]:
        """The file-system path of ``path`` under the root and its ``lstat`` (None: absent).

        Only the directory part goes through :meth:`realpath`; a leaf that is no symlink (almost
        every file read) costs this one ``lstat``, which the read reuses, instead of a cached
        resolution plus a second ``stat``."""
        parent, _, leaf = path.rstrip("/").rpartition("/")
        if leaf in ("", ".", ".."):
            resolved = self.realpath(path)
            return self._fs(resolved), self._lstat(resolved.rpartition("/")[0] or "/", resolved, path)
        base = self.realpath(parent) if parent else "/"
        resolved = (base if base != "/" else "") + "/" + leaf
        st = self._lstat(base, resolved, path)
        if st is None or not stat.S_ISLNK(st.st_mode):
            return self._fs(resolved), st
        resolved = self.realpath(path)  # a symlink: followed inside the root
        st = self._lstat(resolved.rpartition("/")[0] or "/", resolved, path)
        if st is None:
            raise HostReadError(path, "broken symbolic link")
        return self._fs(resolved), st

    # -- files ---------------------------------------------------------------------------------

    def read_optional(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str | None:
        # One discovery run reads one point in time: every backend scans the same PCI ids, so a
        # file is read once per host object and its answer (text, absent, or error) reused.
        cached = self._reads.get(path)
        if cached is not None:
            text, size, error = cached
            if error is not None:
                raise HostReadError(path, error)
            if size > max_bytes:
                raise HostReadError(path, f"larger than {max_bytes} bytes")
            return text
        try:
            text = self._read_uncached(path, max_bytes)
        except HostReadError as exc:
            if not exc.reason.startswith("larger than"):
                self._reads[path] = (None, 0, exc.reason)
            raise
        self._reads[path] = (text, len(text.encode("utf-8")) if text is not None else 0, None)
        return text

    def _read_uncached(self, path: str, max_bytes: int) -> str | None:
        st = None
        if self.live:
            fs_path = path
        else:
            fs_path, st = self._leaf(path)
            if st is None:
                return None
        try:
            data = read_regular(fs_path, max_bytes, nofollow=not self.live, st=st)
        except FileNotFoundError:
            if os.path.lexists(fs_path) or self._is_dangling(path):
                raise HostReadError(path, "broken symbolic link") from None
            return None
        except IsADirectoryError:
            raise HostReadError(path, "is a directory, expected a file") from None
        except PermissionError:
            raise HostReadError(path, "permission denied (root-only file?)") from None
        except SpecialFile as exc:
            with self._lock:
                self.special_files.setdefault(path, exc.strerror)
            raise HostReadError(path, exc.strerror) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise HostReadError(path, "too many levels of symbolic links (loop)") from None
            raise HostReadError(path, exc.strerror or str(exc)) from None
        if len(data) > max_bytes:
            raise HostReadError(path, f"larger than {max_bytes} bytes")
        if b"\x00" in data:
            raise HostReadError(path, "binary content where text was expected")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise HostReadError(path, "not valid UTF-8 text") from None

    def _is_dangling(self, path: str) -> bool:
        if self.live:
            return os.path.islink(path)
        try:
            parent = self.realpath(path.rstrip("/").rpartition("/")[0] or "/")
        except HostReadError:
            return False
        return os.path.islink(self._fs(parent.rstrip("/") + "/" + path.rstrip("/").rpartition("/")[2]))

    def read_text(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str:
        text = self.read_optional(path, max_bytes=max_bytes)
        if text is None:
            raise HostReadError(path, "no such file")
        return text

    def exists(self, path: str) -> bool:
        try:
            return os.path.exists(self._real(path))
        except HostReadError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return os.path.isdir(self._real(path))
        except HostReadError:
            return False

    def listdir(self, path: str) -> list[str]:
        fs_path = self._real(path)
        if path in self._listed:
            return list(self._listed[path])
        try:
            names = os.listdir(fs_path)
            if _snapshot.KEEP_MARKER in names and self.snapshot_dir is not None:
                names.remove(_snapshot.KEEP_MARKER)
            if len(names) <= MANY_ENTRIES:  # past that, more than any machine has: each entry would cost a walk
                return sorted(names)
            with self._many_lock:  # one thread filters, the others wait for its answer
                if path not in self._listed:
                    self._listed[path], notes = many_entries(fs_path, names)
                    self.coded_notes.update(((path, code), what) for code, what in notes)
            return list(self._listed[path])
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError:
            self._note_access(path, "permission denied")
            raise HostReadError(path, "permission denied") from None
        except OSError as exc:
            self._note_access(path, exc.strerror or str(exc))
            raise HostReadError(path, exc.strerror or str(exc)) from None

    # -- tools and libraries -------------------------------------------------------------------

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        if not argv or not argv[0].startswith("/"):
            raise CommandError(argv or ["?"], "tools run only from fixed absolute paths")
        recorded = _snapshot.recorded_command(self.snapshot_dir, argv) if self.snapshot_dir is not None else None
        if recorded is not None:
            return recorded
        exe = self._real(argv[0])
        if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            raise CommandError(argv, "not installed")
        if not self.run_tools:
            raise CommandError(argv, "not recorded; the program in the root is not run (under a root other than / "
                                     "only recordings are read)", code=TOOL_NOT_RECORDED)
        timeout = self.deadline.clamp(timeout_s)
        if timeout <= 0:
            raise CommandError(argv, "discovery budget spent before the tool could run")
        # Its own session: when the time is up the tool and whatever it started die together (a
        # child left holding the pipes would otherwise outlive the tool).
        try:
            proc = subprocess.Popen(
                [exe, *argv[1:]],
                shell=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                start_new_session=True,
            )
        except OSError as exc:
            raise CommandError(argv, exc.strerror or str(exc)) from None
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandError(argv, f"timed out after {timeout:.2f}s") from None
        finally:
            _kill_group(proc)
        if proc.returncode != 0:
            err = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise CommandError(argv, f"exit status {proc.returncode} {err[0][:200]}".strip())
        return stdout[: 4 * MAX_READ_BYTES].decode("utf-8", "replace")

    def library(self, name: str, live_reader: Callable[[], Any]) -> Any:
        if self.snapshot_dir is not None:
            return _snapshot.recorded_library(self.snapshot_dir, name)
        if not self.live:
            return None
        return live_reader()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass  # unkillable for now (a read stuck in the kernel): the thread moves on


def open_host(
    root: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    budget_s: float | None = None,
    deadline: Deadline | None = None,
) -> FsHost:
    """The host discovery should read.

    ``root`` None means the live machine. A snapshot directory gives its recorded environment
    (``env.json``) plus the pass-through variables of ``environ``; a plain directory gives
    ``environ`` unchanged. ``deadline`` (the node path's one deadline) wins over ``budget_s``.
    """
    environ = os.environ if environ is None else environ
    if root is None or str(root) in ("", "/"):
        return FsHost("/", env=environ, budget_s=budget_s, deadline=deadline)
    if not Path(root).is_dir():
        raise HostReadError(str(root), "host root is not a directory")
    if _snapshot.is_snapshot_dir(root):
        env, unusable = _snapshot.usable_env(root, environ)
        host = FsHost(Path(root) / _snapshot.ROOTFS, env=env, budget_s=budget_s, snapshot_dir=root, deadline=deadline)
        if unusable is not None:  # the node is degraded, not lost: its files are still read
            host.coded_notes[(_snapshot.ENV_FILE, SNAPSHOT_ENV_INVALID)] = unusable
        return host
    return FsHost(root, env=environ, budget_s=budget_s, deadline=deadline)


def host_from_env(
    environ: Mapping[str, str] | None = None, *, budget_s: float | None = None, deadline: Deadline | None = None
) -> FsHost:
    """The host named by ``RAY_ACCEL_ROOT`` (the live machine when unset)."""
    environ = os.environ if environ is None else environ
    return open_host(environ.get(ROOT_ENV) or None, environ=environ, budget_s=budget_s, deadline=deadline)
