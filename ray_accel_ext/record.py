"""Capture what discovery reads on a host into a snapshot directory (``ray-accel record``).

The role of hwloc's ``hwloc-gather-topology``: run discovery once on a :class:`RecordingHost`, a
wrapper of the real host that notes every path read, listed, tested or resolved, every
environment variable read, every metadata answer, every tool output and every library reading,
then write them in the test-snapshot format (``testing/snapshots.py``)::

    rootfs/                files copied byte for byte, directories, symlinks recreated as
                           relative symlinks (device nodes become empty files)
    env.json               only the variables discovery read
    metadata.json          GCE / EC2 answers, and faults (429, 5xx, timeout) as fake-server faults
    libraries/<name>.json  library readings (NVML)
    commands/<tool>.json   tool output, or {"missing": true}
    expected.json          golden of the recorded run (discovery + Ray spec)
    README.md              machine, date, command, what was left out

Secrets never reach the directory: variables and metadata paths whose name looks like a
credential (``*TOKEN*``, ``*SECRET*``, ``*PASSW*``, ``*KEY*``, ``*CREDENTIAL*``, ``*AUTH*``, which
covers ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``) are dropped, the
IMDSv2 token is never recorded (only GET answers are), and ``KEY: 'value'``/``KEY=value`` lines
of a metadata answer whose key looks like a credential are removed. The endpoint overrides
(``GCE_METADATA_HOST`` ...) are how this run reached metadata, not facts of the machine, and are
left out too.

A snapshot recorded from a snapshot-rooted host (``--root DIR``) gives the same description as
the original (``tests/test_ops_record.py``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shlex
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import CommandError, HostReadError, MetadataRateLimited, MetadataTimeout, ProviderError
from .host import MAX_READ_BYTES, PASSTHROUGH_ENV, ROOT_ENV, FsHost
from .redact import redact

__all__ = ["RecordingHost", "RecordingEnv", "RecordingMetadata", "record", "is_secret_name", "SECRET_RE"]

SECRET_RE = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|KEY|AUTH|COOKIE|SESSION", re.IGNORECASE)
_MAX_LINK_HOPS = 40
# Variables that say how this run was made, not what the machine is.
_RUN_ENV = frozenset(PASSTHROUGH_ENV) | {ROOT_ENV}
_SECRET_LINE_RE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*[:=]")


def is_secret_name(name: str) -> bool:
    """True for a variable or metadata key that may hold a credential."""
    return bool(SECRET_RE.search(name))


def _scrub_text(text: str) -> str:
    """``text`` without ``KEY: value`` / ``KEY=value`` lines whose key looks like a credential."""
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if not ((m := _SECRET_LINE_RE.match(ln)) and is_secret_name(m.group(1)))]
    return "".join(kept)


class RecordingEnv(Mapping[str, str]):
    """A read-only environment that remembers which variables were asked for."""

    def __init__(self, inner: Mapping[str, str]) -> None:
        self._inner = inner
        self.read: set[str] = set()
        self.iterated = False
        self._lock = threading.Lock()

    def _note(self, key: object) -> None:
        if isinstance(key, str):
            with self._lock:
                self.read.add(key)

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return self._inner[key]

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return key in self._inner

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return self._inner.get(key, default)

    def __iter__(self) -> Iterator[str]:
        self.iterated = True
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)

    def recorded(self) -> tuple[dict[str, str], list[str]]:
        """(variables to write, names left out as secrets). A backend that iterated the whole
        environment gets every variable recorded, since any of them may have mattered."""
        names = set(self._inner) if self.iterated else {k for k in self.read if k in self._inner}
        names -= _RUN_ENV
        secret = sorted(n for n in names if is_secret_name(n))
        return {n: self._inner[n] for n in sorted(names) if n not in secret}, secret


class RecordingMetadata:
    """Wraps a :class:`~ray_accel_ext.metadata.MetadataClient`; notes answers and faults."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.answers: dict[str, dict[str, str | None]] = {"gce": {}, "ec2": {}}
        self.faults: dict[str, dict[str, dict[str, Any]]] = {"gce": {}, "ec2": {}}
        self.used: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _call(self, kind: str, path: str, fetch: Callable[[], str | None]) -> str | None:
        with self._lock:
            self.used.add(kind)
        try:
            value = fetch()
        except ProviderError as exc:
            key = "api/token" if kind == "ec2" and exc.endpoint.endswith("/latest/api/token") else path
            with self._lock:
                self.faults[kind].setdefault(key, _fault_of(exc))
            raise
        with self._lock:
            self.answers[kind][path] = value
        return value

    def gce(self, path: str) -> str | None:
        """See :meth:`MetadataClient.gce`."""
        return self._call("gce", path.lstrip("/"), lambda: self._inner.gce(path))

    def gce_attribute(self, key: str) -> str | None:
        """See :meth:`MetadataClient.gce_attribute`."""
        return self._call("gce", f"instance/attributes/{key}", lambda: self._inner.gce_attribute(key))

    def imds(self, path: str) -> str | None:
        """See :meth:`MetadataClient.imds`."""
        return self._call("ec2", path.lstrip("/"), lambda: self._inner.imds(path))

    def recorded(self) -> tuple[dict[str, Any], list[str]]:
        """(``metadata.json`` content, metadata paths left out as secrets)."""
        out: dict[str, Any] = {}
        dropped: list[str] = []
        for kind in ("gce", "ec2"):
            if kind not in self.used:
                continue
            values: dict[str, str] = {}
            for path, value in sorted(self.answers[kind].items()):
                if is_secret_name(path):
                    dropped.append(f"{kind}:{path}")
                elif value is not None:  # None was a 404: the fake answers 404 for unknown keys
                    values[path] = redact(_scrub_text(value))  # and `export X_TOKEN=...` pairs
            out[kind] = values
            faults = {p: f for p, f in sorted(self.faults[kind].items()) if p == "api/token" or not is_secret_name(p)}
            if faults:
                out[f"{kind}_faults"] = faults
        return out, dropped


def _fault_of(exc: ProviderError) -> dict[str, Any]:
    """The fake-server fault that reproduces ``exc``."""
    if isinstance(exc, MetadataTimeout):
        return {"hang": True}
    if isinstance(exc, MetadataRateLimited):
        fault: dict[str, Any] = {"status": 429}
        if exc.retry_after_s is not None:
            fault["retry_after"] = f"{exc.retry_after_s:g}"
        return fault
    if exc.status is not None:
        return {"status": exc.status}
    return {"reset": True}


class RecordingHost:
    """A host that forwards to ``inner`` and remembers everything discovery asked of it.

    Satisfies the :class:`~ray_accel_ext.host.Host` protocol; ``errors`` keeps every structured
    error the host raised (``ray-accel doctor`` explains them).
    """

    def __init__(self, inner: FsHost) -> None:
        self.inner = inner
        self.root = inner.root
        self.live = inner.live
        self.deadline = inner.deadline
        self.env = RecordingEnv(inner.env)
        self.metadata = RecordingMetadata(inner.metadata)
        self.paths: dict[str, bool] = {}  # host path -> content needed
        self.listed: dict[str, list[str]] = {}
        self.commands: dict[str, dict[str, Any]] = {}
        self.libraries: dict[str, Any] = {}
        self.errors: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"RecordingHost({self.inner!r})"

    def _path(self, path: str, content: bool) -> None:
        with self._lock:
            self.paths[path] = self.paths.get(path, False) or content

    def _error(self, exc: Exception) -> None:
        data = exc.to_dict() if hasattr(exc, "to_dict") else {"error": type(exc).__name__, "message": str(exc)}
        with self._lock:
            self.errors.append(data)

    # -- files ---------------------------------------------------------------------------------

    def read_optional(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str | None:
        """See :meth:`FsHost.read_optional`."""
        try:
            text = self.inner.read_optional(path, max_bytes=max_bytes)
        except HostReadError as exc:
            self._path(path, True)  # a broken link, a directory, binary junk: copy what is there
            self._error(exc)
            raise
        if text is not None:
            self._path(path, True)
        return text

    def read_text(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str:
        """See :meth:`FsHost.read_text`."""
        text = self.read_optional(path, max_bytes=max_bytes)
        if text is None:
            exc = HostReadError(path, "no such file")
            self._error(exc)
            raise exc
        return text

    def exists(self, path: str) -> bool:
        """See :meth:`FsHost.exists`."""
        found = self.inner.exists(path)
        if found:
            self._path(path, False)
        return found

    def is_dir(self, path: str) -> bool:
        """See :meth:`FsHost.is_dir`."""
        found = self.inner.is_dir(path)
        if found:
            self._path(path, False)
        return found

    def listdir(self, path: str) -> list[str]:
        """See :meth:`FsHost.listdir`."""
        try:
            names = self.inner.listdir(path)
        except HostReadError as exc:
            self._error(exc)
            raise
        with self._lock:
            self.listed[path] = list(names)
        return names

    def realpath(self, path: str) -> str:
        """See :meth:`FsHost.realpath`."""
        try:
            resolved = self.inner.realpath(path)
        except HostReadError as exc:
            self._error(exc)
            self._path(path, False)
            raise
        self._path(path, False)
        return resolved

    # -- tools and libraries -------------------------------------------------------------------

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        """See :meth:`FsHost.run`."""
        name = os.path.basename(argv[0]) if argv else "?"
        try:
            out = self.inner.run(argv, timeout_s=timeout_s)
        except CommandError as exc:
            self._error(exc)
            with self._lock:
                self.commands[name] = _command_failure(argv, exc.reason)
            raise
        with self._lock:
            self.commands[name] = {"argv": list(argv), "stdout": out, "returncode": 0}
        return out

    def library(self, name: str, live_reader: Callable[[], Any]) -> Any:
        """See :meth:`FsHost.library`."""
        try:
            value = self.inner.library(name, live_reader)
        except Exception as exc:
            self._error(exc)
            raise
        if value is not None:
            with self._lock:
                self.libraries[name] = value
        return value

    # -- writing -------------------------------------------------------------------------------

    def write(self, outdir: str | os.PathLike[str]) -> dict[str, Any]:
        """Write everything recorded as a snapshot under ``outdir`` (created; must be empty).

        Returns a summary: counts and what was left out (secrets, unreadable files).
        """
        out = Path(outdir)
        if out.exists() and any(out.iterdir()):
            raise FileExistsError(f"{out} is not empty")
        rootfs = out / "rootfs"
        rootfs.mkdir(parents=True)
        copier = _Replicator(self.inner.root, rootfs)
        with self._lock:
            paths = dict(self.paths)
            listed = dict(self.listed)
        for path, names in sorted(listed.items()):
            copier.replicate(path, content=False)
            for name in names:
                copier.replicate(path.rstrip("/") + "/" + name, content=False)
        for path in sorted(paths, key=lambda p: paths[p]):  # bare entries first, content last
            copier.replicate(path, content=paths[path])
        _keep_empty_directories(rootfs)

        env, env_secrets = self.env.recorded()
        (out / "env.json").write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
        metadata, md_secrets = self.metadata.recorded()
        # A backend that looked at the endpoint override (to tell it is on GCE/EC2) must find a
        # server on replay too, even when it asked nothing.
        for kind, names in (("gce", ("GCE_METADATA_HOST", "GCE_METADATA_IP")), ("ec2", ("AWS_EC2_METADATA_SERVICE_ENDPOINT",))):
            if kind not in metadata and any(n in self.env.read and self.inner.env.get(n) for n in names):
                metadata[kind] = {}
        if metadata:
            (out / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        if self.libraries:
            (out / "libraries").mkdir()
            for name, value in sorted(self.libraries.items()):
                (out / "libraries" / f"{name}.json").write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")
        if self.commands:
            (out / "commands").mkdir()
            for name, rec in sorted(self.commands.items()):
                (out / "commands" / f"{name}.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
        return {
            "files": copier.files,
            "links": copier.links,
            "dirs": copier.dirs,
            "unreadable": copier.unreadable,
            "env": sorted(env),
            "secrets_dropped": env_secrets + md_secrets,
            "commands": sorted(self.commands),
            "libraries": sorted(self.libraries),
        }


def _command_failure(argv: list[str], reason: str) -> dict[str, Any]:
    if reason == "not installed":
        return {"argv": list(argv), "missing": True}
    m = re.match(r"^exit status (-?\d+) ?(.*)$", reason, re.DOTALL)
    if m:
        return {"argv": list(argv), "stdout": "", "returncode": int(m.group(1)), "stderr": m.group(2)}
    # a timeout or an OS error: no exit status; recorded as a failure that says what happened
    return {"argv": list(argv), "stdout": "", "returncode": 124 if "timed out" in reason else 1, "stderr": reason}


class _Replicator:
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
        stack: list[str] = []
        pending = list(reversed([p for p in path.split("/") if p]))
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if stack:
                    stack.pop()
                continue
            cand = "/" + "/".join([*stack, part])
            try:
                st = os.lstat(self._src(cand))
            except OSError:
                return  # the rest does not exist on the source either
            dst = self._dst(cand)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(self._src(cand))
                self._link(dst, target, "/" + "/".join(stack))
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    return  # a loop: the links made so far reproduce it
                if target.startswith("/"):
                    stack = []
                pending.extend(reversed(target.split("/")))
                continue
            if stat.S_ISDIR(st.st_mode):
                if not dst.is_dir():
                    dst.mkdir(parents=True, exist_ok=True)
                    self.dirs += 1
                stack.append(part)
                continue
            if pending:  # a file in the middle of a path: nothing below it exists
                return
            self._file(cand, dst, st, content)
            return

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
        if content and stat.S_ISREG(st.st_mode):
            try:
                with open(self._src(host_path), "rb") as fh:
                    data = fh.read(MAX_READ_BYTES + 1)
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


def _machine(host: FsHost) -> str:
    def read(path: str) -> str | None:
        try:
            text = host.read_optional(path)
        except HostReadError:
            return None
        return text.strip() if text else None

    vendor = read("/sys/class/dmi/id/sys_vendor")
    product = read("/sys/class/dmi/id/product_name")
    name = read("/proc/sys/kernel/hostname")
    kernel = read("/proc/sys/kernel/osrelease") or (platform.release() if host.live else None)
    parts = [p for p in (vendor, product) if p]
    return (" ".join(parts) or "unknown machine") + (f", host {name}" if name else "") + (f", kernel {kernel}" if kernel else "")


def record(host: FsHost, outdir: str | os.PathLike[str], *, command: list[str] | None = None) -> dict[str, Any]:
    """Discover ``host`` through a recording wrapper and write the snapshot to ``outdir``.

    Returns the summary of :meth:`RecordingHost.write` plus ``golden`` (the ``expected.json``
    written, i.e. what discovery found on ``host``).
    """
    from . import __version__
    from .adapter import to_ray_node
    from .discovery import discover
    from .testing.snapshots import golden_of

    machine = _machine(host)
    rec = RecordingHost(host)
    inventory = discover(rec)
    summary = rec.write(outdir)
    out = Path(outdir)
    golden = golden_of(inventory, to_ray_node(inventory))
    (out / "expected.json").write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n")
    source = "this machine" if host.live else f"the host rooted at {getattr(host, 'snapshot_dir', None) or host.root}"
    cmd = " ".join(shlex.quote(a) for a in (command or ["ray-accel", "record", str(outdir)]))
    lines = [
        f"# Recorded host: {machine}",
        "",
        f"Recorded from {source} on {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} "
        f"with `{cmd}` (ray_accel_ext {__version__}, Python {sys.version.split()[0]}).",
        "",
        "Only what discovery read is here: "
        f"{summary['files']} files, {summary['links']} symlinks, {summary['dirs']} directories; "
        f"{len(summary['env'])} environment variables; "
        f"commands: {', '.join(summary['commands']) or 'none'}; libraries: {', '.join(summary['libraries']) or 'none'}.",
        "",
        f"Discovery found: {', '.join(d['backend'] + ' x' + str(len(d['devices'])) for d in golden['descriptions']) or 'no accelerators'}"
        f"{' (degraded: ' + '; '.join(inventory.reasons()) + ')' if inventory.degraded else ''}.",
    ]
    if summary["secrets_dropped"]:
        lines += ["", f"Left out as secrets: {', '.join(summary['secrets_dropped'])}."]
    if summary["unreadable"]:
        lines += ["", f"Could not be copied: {', '.join(summary['unreadable'])}."]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    summary["golden"] = golden
    summary["degraded"] = inventory.degraded
    return summary


def _keep_empty_directories(rootfs: Path) -> None:
    """Put the keep marker in every empty directory, so the snapshot survives a git commit."""
    from .host import KEEP_MARKER

    for dirpath, dirnames, filenames in os.walk(rootfs):
        if not dirnames and not filenames:
            (Path(dirpath) / KEEP_MARKER).write_text("")
