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
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from .errors import CommandError, HostReadError
from .metadata import MetadataClient

__all__ = [
    "Host",
    "FsHost",
    "Deadline",
    "host_from_env",
    "open_host",
    "ROOT_ENV",
    "BUDGET_ENV",
    "DEFAULT_BUDGET_S",
    "is_snapshot_dir",
]

ROOT_ENV = "RAY_ACCEL_ROOT"
BUDGET_ENV = "RAY_ACCEL_BUDGET_S"
DEFAULT_BUDGET_S = 3.0
MAX_READ_BYTES = 1 << 20
_FIRST_READ_BYTES = 8192
_MAX_LINK_HOPS = 40
# Placed by `ray-accel record` in directories that are empty on the host: git keeps no empty
# directory, and a missing one reads differently (a NIC's net/<ifname>, say). Snapshot hosts
# do not list it.
KEEP_MARKER = ".rayaccel-keep"

# Variables taken from the real process even when the host is a snapshot: they say how to reach
# the (fake or real) metadata servers and how to run discovery, not what the machine is.
PASSTHROUGH_ENV = (
    "GCE_METADATA_HOST",
    "GCE_METADATA_IP",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
    "AWS_EC2_METADATA_DISABLED",
    "RAY_ACCEL_AWS_TOPOLOGY",
    "RAY_ACCEL_BUDGET_S",
    "RAY_ACCEL_DISABLE",
    "RAY_ACCEL_METADATA_TIMEOUT_S",
    "RAY_ACCEL_TPU_API_ENDPOINT",
    "RAY_ACCEL_EC2_API_ENDPOINT",
)


class Deadline:
    """A point in time after which discovery stops waiting for anything."""

    __slots__ = ("budget_s", "_end")

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._end = time.monotonic() + budget_s

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def clamp(self, timeout_s: float) -> float:
        """``timeout_s`` cut to what is left of the budget."""
        return min(timeout_s, self.remaining())


@runtime_checkable
class Host(Protocol):
    """What a backend may ask of the machine. Every method is side-effect free."""

    root: Path
    env: Mapping[str, str]
    deadline: Deadline
    live: bool
    metadata: MetadataClient

    def read_text(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str:
        """Contents of a text file; raises HostReadError if missing, unreadable, binary or huge."""

    def read_optional(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str | None:
        """Like read_text, but None when the file does not exist."""

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Sorted entry names; empty when the directory does not exist."""

    def realpath(self, path: str) -> str:
        """Host-absolute canonical path, symlinks resolved inside the root."""

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        """Stdout of a tool at a fixed absolute path, never through a shell; raises CommandError."""

    def library(self, name: str, live_reader: Callable[[], Any]) -> Any:
        """A library reading (``nvml``): recorded on a snapshot, ``live_reader()`` on a live host,
        None where neither exists."""


class FsHost:
    """A host rooted at a directory: ``/`` for the live machine, else a snapshot or test tree."""

    def __init__(
        self,
        root: str | os.PathLike[str] = "/",
        *,
        env: Mapping[str, str] | None = None,
        budget_s: float | None = None,
        snapshot_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.snapshot_dir = Path(snapshot_dir).resolve() if snapshot_dir is not None else None
        self.live = str(self.root) == "/" and self.snapshot_dir is None
        self.env = MappingProxyType(dict(os.environ if env is None else env))
        if budget_s is None:
            budget_s = _float_env(self.env, BUDGET_ENV, DEFAULT_BUDGET_S)
        self.deadline = Deadline(budget_s)
        self.metadata = MetadataClient(self.env, self.deadline, live=self.live)
        self._resolved: dict[str, str] = {}
        # Canonical host paths already seen by lstat to be no symlink: later walks through the
        # same directories (every PCI device shares its bridges' path) skip the syscall.
        self._not_links: set[str] = set()
        self._reads: dict[str, tuple[str | None, int, str | None]] = {}
        self._root_str = "" if str(self.root) == "/" else str(self.root)
        self._lock = threading.Lock()

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
        resolved = self._child(base, leaf, path) if leaf not in ("", ".", "..") else None
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
        try:
            st = os.lstat(self._fs(candidate))
        except FileNotFoundError:
            return candidate
        except OSError as exc:
            raise HostReadError(original, f"cannot stat {candidate}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(st.st_mode):
            return None
        self._not_links.add(candidate)
        return candidate

    def _walk(self, base: str, parts: list[str], original: str) -> str:
        stack = [p for p in base.split("/") if p]
        pending = list(reversed(parts))
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if stack:
                    stack.pop()
                continue
            candidate = "/" + "/".join([*stack, part])
            if candidate in self._not_links:
                stack.append(part)
                continue
            try:
                st = os.lstat(self._fs(candidate))
            except FileNotFoundError:
                stack.append(part)
                continue
            except OSError as exc:
                raise HostReadError(original, f"cannot stat {candidate}: {exc.strerror or exc}") from None
            if not stat.S_ISLNK(st.st_mode):
                self._not_links.add(candidate)
                stack.append(part)
                continue
            hops += 1
            if hops > _MAX_LINK_HOPS:
                raise HostReadError(original, "too many levels of symbolic links (loop)")
            try:
                target = os.readlink(self._fs(candidate))
            except OSError as exc:
                raise HostReadError(original, f"cannot read link {candidate}: {exc.strerror or exc}") from None
            if target.startswith("/"):
                stack = []
            pending.extend(reversed(target.split("/")))
        return "/" + "/".join(stack)

    def _real(self, path: str) -> str:
        return self._fs(self.realpath(path)) if not self.live else path

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
        fs_path = self._real(path)
        try:
            with open(fs_path, "rb") as fh:
                # A small first read: asking for max_bytes at once allocates that much per call,
                # which made a 10-byte sysfs read 2.5x slower than the read itself.
                first = min(_FIRST_READ_BYTES, max_bytes + 1)
                data = fh.read(first)
                if len(data) == first:
                    data += fh.read(max_bytes + 1 - first)
        except FileNotFoundError:
            if os.path.lexists(fs_path) or self._is_dangling(path):
                raise HostReadError(path, "broken symbolic link") from None
            return None
        except IsADirectoryError:
            raise HostReadError(path, "is a directory, expected a file") from None
        except PermissionError:
            raise HostReadError(path, "permission denied (root-only file?)") from None
        except OSError as exc:
            if exc.errno == 40:  # ELOOP on the live host
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
        try:
            names = os.listdir(fs_path)
            if KEEP_MARKER in names and self.snapshot_dir is not None:
                names.remove(KEEP_MARKER)
            return sorted(names)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError:
            raise HostReadError(path, "permission denied") from None
        except OSError as exc:
            raise HostReadError(path, exc.strerror or str(exc)) from None

    # -- tools and libraries -------------------------------------------------------------------

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        if not argv or not argv[0].startswith("/"):
            raise CommandError(argv or ["?"], "tools run only from fixed absolute paths")
        recorded = self._recorded_command(argv)
        if recorded is not None:
            return recorded
        exe = self._real(argv[0])
        if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            raise CommandError(argv, "not installed")
        timeout = self.deadline.clamp(timeout_s)
        if timeout <= 0:
            raise CommandError(argv, "discovery budget spent before the tool could run")
        try:
            proc = subprocess.run(
                [exe, *argv[1:]],
                shell=False,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CommandError(argv, f"timed out after {timeout:.2f}s") from None
        except OSError as exc:
            raise CommandError(argv, exc.strerror or str(exc)) from None
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise CommandError(argv, f"exit status {proc.returncode} {err[0][:200]}".strip())
        return proc.stdout[: 4 * MAX_READ_BYTES].decode("utf-8", "replace")

    def _recorded_command(self, argv: list[str]) -> str | None:
        if self.snapshot_dir is None:
            return None
        path = self.snapshot_dir / "commands" / (os.path.basename(argv[0]) + ".json")
        if not path.is_file():
            return None
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(argv, f"recorded output {path.name} unreadable: {exc}") from None
        if rec.get("missing"):
            raise CommandError(argv, "not installed")
        if rec.get("returncode", 0) != 0:
            raise CommandError(argv, f"exit status {rec['returncode']} {rec.get('stderr', '')[:200]}".strip())
        return str(rec.get("stdout", ""))

    def library(self, name: str, live_reader: Callable[[], Any]) -> Any:
        if self.snapshot_dir is not None:
            path = self.snapshot_dir / "libraries" / f"{name}.json"
            if not path.is_file():
                return None
            try:
                return json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise HostReadError(f"libraries/{name}.json", f"unreadable recording: {exc}") from None
        if not self.live:
            return None
        return live_reader()


def _float_env(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(env.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def is_snapshot_dir(path: str | os.PathLike[str]) -> bool:
    """True for a host snapshot directory (it holds ``rootfs/``)."""
    return (Path(path) / "rootfs").is_dir()


def open_host(
    root: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    budget_s: float | None = None,
) -> FsHost:
    """The host discovery should read.

    ``root`` None means the live machine. A snapshot directory gives its recorded environment
    (``env.json``) plus the pass-through variables of ``environ``; a plain directory gives
    ``environ`` unchanged.
    """
    environ = os.environ if environ is None else environ
    if root is None or str(root) in ("", "/"):
        return FsHost("/", env=environ, budget_s=budget_s)
    if not Path(root).is_dir():
        raise HostReadError(str(root), "host root is not a directory")
    if is_snapshot_dir(root):
        env: dict[str, str] = {}
        env_file = Path(root) / "env.json"
        if env_file.is_file():
            try:
                loaded = json.loads(env_file.read_text())
            except ValueError as exc:
                raise HostReadError(str(env_file), f"not JSON: {exc}") from None
            env.update({str(k): str(v) for k, v in loaded.items()})
        env.update({k: environ[k] for k in PASSTHROUGH_ENV if k in environ})
        return FsHost(Path(root) / "rootfs", env=env, budget_s=budget_s, snapshot_dir=root)
    return FsHost(root, env=environ, budget_s=budget_s)


def host_from_env(environ: Mapping[str, str] | None = None, *, budget_s: float | None = None) -> FsHost:
    """The host named by ``RAY_ACCEL_ROOT`` (the live machine when unset)."""
    environ = os.environ if environ is None else environ
    return open_host(environ.get(ROOT_ENV) or None, environ=environ, budget_s=budget_s)
