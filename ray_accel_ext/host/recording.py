"""A host wrapper that notes everything discovery asks of the machine, and writes it as a snapshot.

The role of hwloc's ``hwloc-gather-topology`` (``ray-accel record``): every path read, listed,
tested or resolved, every environment variable read, every metadata answer, every tool output and
every library reading is noted, then written in the snapshot format
(:mod:`ray_accel_ext.host.snapshot`). Secrets never reach the directory: variables and metadata
paths whose name looks like a credential are dropped, the IMDSv2 token is never recorded (only GET
answers are), and secret-looking values inside answers are removed or redacted
(:mod:`ray_accel_ext.redact` owns the vocabulary, by name and by structure: PEM blocks, URL
userinfo, bearer tokens, long high-entropy tokens, in every recorded value, tool output and
library reading). The endpoint overrides (``GCE_METADATA_HOST``
...) are how this run reached metadata, not facts of the machine, and are left out too.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import (
    CommandError,
    HostReadError,
    MetadataRateLimited,
    MetadataTimeout,
    ProviderError,
)
from ..redact import is_secret_name, keep_tpu_env, redact, scrub_secret_lines
from . import snapshot as _snapshot
from .fs import FsHost
from .protocol import (
    GCE_METADATA_HOST_ENV,
    GCE_METADATA_IP_ENV,
    IMDS_ENDPOINT_ENV,
    MAX_READ_BYTES,
    PASSTHROUGH_ENV,
    ROOT_ENV,
)
from .replicate import Replicator

__all__ = ["RecordingHost", "RecordingEnv", "RecordingMetadata", "redact_strings"]

_TPU_ENV = "instance/attributes/tpu-env"

# Variables that say how this run was made, not what the machine is.
_RUN_ENV = frozenset(PASSTHROUGH_ENV) | {ROOT_ENV}


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
        # Values are redacted too: a proxy URL with a password, a PEM key, a token under any name.
        return {n: redact(self._inner[n]) for n in sorted(names) if n not in secret}, secret


class RecordingMetadata:
    """Wraps a :class:`~ray_accel_ext.host.metadata.MetadataClient`; notes answers and faults."""

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
                elif value is not None and path == _TPU_ENV:
                    kept, left_out = keep_tpu_env(value)  # an allowlist: what discovery parses
                    values[path] = redact(kept)
                    dropped.extend(f"{kind}:{path}:{key}" for key in left_out)
                elif value is not None:  # None was a 404: the fake answers 404 for unknown keys
                    values[path] = redact(scrub_secret_lines(value))  # and `export X_TOKEN=...` pairs
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

    Satisfies the :class:`~ray_accel_ext.host.fs.Host` protocol; ``errors`` keeps every structured
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
            self.commands[name] = {"argv": list(argv), "stdout": redact(out), "returncode": 0}
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
                self.libraries[name] = redact_strings(value)
        return value

    # -- writing -------------------------------------------------------------------------------

    def write(self, outdir: str | os.PathLike[str]) -> dict[str, Any]:
        """Write everything recorded as a snapshot under ``outdir`` (created; must be empty).

        Returns a summary: counts and what was left out (secrets, unreadable files).
        """
        out = Path(outdir)
        if out.exists() and any(out.iterdir()):
            raise FileExistsError(f"{out} is not empty")
        rootfs = out / _snapshot.ROOTFS
        rootfs.mkdir(parents=True)
        copier = Replicator(self.inner.root, rootfs)
        with self._lock:
            paths = dict(self.paths)
            listed = dict(self.listed)
        for path, names in sorted(listed.items()):
            copier.replicate(path, content=False)
            for name in names:
                copier.replicate(path.rstrip("/") + "/" + name, content=False)
        for path in sorted(paths, key=lambda p: paths[p]):  # bare entries first, content last
            copier.replicate(path, content=paths[path])
        _snapshot.keep_empty_directories(rootfs)

        env, env_secrets = self.env.recorded()
        _snapshot.write_json(out / _snapshot.ENV_FILE, env)
        metadata, md_secrets = self.metadata.recorded()
        # A backend that looked at the endpoint override (to tell it is on GCE/EC2) must find a
        # server on replay too, even when it asked nothing.
        for kind, names in (("gce", (GCE_METADATA_HOST_ENV, GCE_METADATA_IP_ENV)), ("ec2", (IMDS_ENDPOINT_ENV,))):
            if kind not in metadata and any(n in self.env.read and self.inner.env.get(n) for n in names):
                metadata[kind] = {}
        if metadata:
            _snapshot.write_json(out / _snapshot.METADATA_FILE, metadata)
        if self.libraries:
            (out / _snapshot.LIBRARIES_DIR).mkdir()
            for name, value in sorted(self.libraries.items()):
                _snapshot.write_json(out / _snapshot.LIBRARIES_DIR / f"{name}.json", value)
        if self.commands:
            (out / _snapshot.COMMANDS_DIR).mkdir()
            for name, rec in sorted(self.commands.items()):
                _snapshot.write_json(out / _snapshot.COMMANDS_DIR / f"{name}.json", rec)
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


def redact_strings(value: Any) -> Any:
    """``value`` (JSON-shaped) with :func:`~ray_accel_ext.redact.redact` applied to every string."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_strings(v) for v in value]
    return value


def _command_failure(argv: list[str], reason: str) -> dict[str, Any]:
    if reason == "not installed":
        return {"argv": list(argv), "missing": True}
    m = re.match(r"^exit status (-?\d+) ?(.*)$", reason, re.DOTALL)
    if m:
        return {"argv": list(argv), "stdout": "", "returncode": int(m.group(1)), "stderr": redact(m.group(2))}
    # a timeout or an OS error: no exit status; recorded as a failure that says what happened
    return {"argv": list(argv), "stdout": "", "returncode": 124 if "timed out" in reason else 1, "stderr": redact(reason)}


