"""Watch a backend call for side effects: process state it changes and network it touches.

* :class:`ProcessState` records what a pure backend must leave alone (``os.environ``, the working
  directory, ``sys.path``, the umask, signal handlers, the root logger, running threads, the
  module-level containers and ``functools`` caches of the backend's own modules) and lists every
  difference after the call.
* :class:`NetworkGuard` counts socket use while active: name lookups and connections are recorded
  with the caller, connections to anything but loopback are refused (so a test never reaches a
  real metadata server), and calls made through ``host.metadata`` are told apart from a backend
  opening sockets itself.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProcessState", "NetworkGuard", "NetworkAttempt"]

_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGCHLD", None)) if s is not None)
_METADATA_MODULE = "ray_accel_ext.host.metadata"


def _module_state(modules: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in modules:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            key = f"{name}.{attr}"
            if isinstance(value, (dict, list, set, bytearray)):
                try:
                    out[key] = ("len", len(value), repr(sorted(map(repr, value)))[:2000])
                except Exception:  # noqa: BLE001 - unorderable contents: length only
                    out[key] = ("len", len(value), None)
            cache_info = getattr(value, "cache_info", None)
            if (
                callable(cache_info)
                and isinstance(value, functools._lru_cache_wrapper)  # type: ignore[attr-defined]
                and getattr(value, "__module__", None) == name  # its own caches, not urllib's
            ):
                out[key] = ("lru_cache", value.cache_info().currsize, None)
    return out


@dataclass
class ProcessState:
    """A comparable picture of the process-wide state a backend call must not change."""

    environ: dict[str, str]
    cwd: str
    sys_path: list[str]
    umask: int
    handlers: dict[int, Any]
    root_logger: tuple[int, tuple[int, ...]]
    threads: set[int]
    modules: dict[str, Any]
    watched: list[str] = field(default_factory=list)

    @classmethod
    def capture(cls, backend_modules: list[str] | None = None) -> "ProcessState":
        """Record the state now; ``backend_modules`` are module names whose globals are watched."""
        umask = os.umask(0o022)
        os.umask(umask)
        root = logging.getLogger()
        watched = sorted(set(backend_modules or []))
        return cls(
            environ=dict(os.environ),
            cwd=os.getcwd(),
            sys_path=list(sys.path),
            umask=umask,
            handlers={s: signal.getsignal(s) for s in _SIGNALS},
            root_logger=(root.level, tuple(id(h) for h in root.handlers)),
            threads={t.ident for t in threading.enumerate() if t.ident is not None},
            modules=_module_state(watched),
            watched=watched,
        )

    def changes_since(self, before: "ProcessState") -> list[str]:
        """Every difference from ``before``, one human-readable line each."""
        out: list[str] = []
        for key in sorted(set(before.environ) | set(self.environ)):
            old, new = before.environ.get(key), self.environ.get(key)
            if old != new:
                verb = "set" if old is None else "removed" if new is None else "changed"
                out.append(f"os.environ[{key!r}] {verb} ({old!r} -> {new!r})")
        if self.cwd != before.cwd:
            out.append(f"working directory changed ({before.cwd} -> {self.cwd})")
        if self.sys_path != before.sys_path:
            out.append("sys.path changed")
        if self.umask != before.umask:
            out.append(f"umask changed ({before.umask:o} -> {self.umask:o})")
        for sig, handler in self.handlers.items():
            if before.handlers.get(sig) != handler:
                out.append(f"signal handler for {signal.Signals(sig).name} replaced")
        if self.root_logger != before.root_logger:
            out.append("root logger level or handlers changed (configure only your own logger's messages)")
        left = [t for t in _new_threads(before.threads) if t.is_alive()]
        if left:
            out.append(f"left {len(left)} thread(s) running: {', '.join(t.name for t in left)}")
        for key in sorted(set(before.modules) | set(self.modules)):
            if before.modules.get(key) != self.modules.get(key):
                kind = (self.modules.get(key) or before.modules.get(key))[0]
                what = "functools cache filled" if kind == "lru_cache" else "module-level container changed"
                out.append(f"{key}: {what} (a global cache; backends must hold no state between calls)")
        return out


def _new_threads(known: set[int]) -> list[threading.Thread]:
    """Threads started since ``known`` that are not the fake metadata servers' request handlers,
    after a short grace for threads that are finishing."""
    new = [
        t for t in threading.enumerate()
        if t.ident not in known and "process_request_thread" not in t.name and not t.name.startswith("fake-")
    ]
    for t in new:
        t.join(0.2)
    return new


@dataclass(frozen=True)
class NetworkAttempt:
    """One name lookup or connection made while a :class:`NetworkGuard` was active."""

    kind: str  # "resolve" | "connect"
    target: str
    via_host_metadata: bool
    refused: bool

    def __str__(self) -> str:
        how = "through host.metadata" if self.via_host_metadata else "directly (not through host.metadata)"
        return f"{self.kind} {self.target} {how}{' [refused: not loopback]' if self.refused else ''}"


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _via_metadata() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") == _METADATA_MODULE:
            return True
        frame = frame.f_back
    return False


class NetworkGuard:
    """Record (and keep on loopback) every name lookup and connection while active.

    Process-wide: use it only around a single backend call. Loopback traffic (the fake metadata
    servers) goes through; anything else fails the way an offline machine would, so the call
    cannot reach a real endpoint whatever the backend does.
    """

    def __init__(self) -> None:
        self.attempts: list[NetworkAttempt] = []
        self._lock = threading.Lock()

    def _record(self, kind: str, host: str, port: Any) -> bool:
        refused = not _is_loopback(str(host))
        with self._lock:
            self.attempts.append(NetworkAttempt(kind, f"{host}:{port}", _via_metadata(), refused))
        return refused

    @contextlib.contextmanager
    def active(self) -> Iterator["NetworkGuard"]:
        real_getaddrinfo = socket.getaddrinfo
        real_connect = socket.socket.connect
        real_connect_ex = socket.socket.connect_ex
        guard = self

        def getaddrinfo(host, port, *args, **kwargs):
            if host is not None and guard._record("resolve", host, port):
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known (network blocked by the conformance suite)")
            return real_getaddrinfo(host, port, *args, **kwargs)

        def _target(address: Any) -> tuple[str, Any]:
            if isinstance(address, tuple) and address:
                return str(address[0]), address[1] if len(address) > 1 else ""
            return "localhost", str(address)  # AF_UNIX paths are local

        def connect(sock, address):
            host, port = _target(address)
            if guard._record("connect", host, port):
                raise OSError(101, "Network is unreachable (blocked by the conformance suite)")
            return real_connect(sock, address)

        def connect_ex(sock, address):
            host, port = _target(address)
            if guard._record("connect", host, port):
                return 101
            return real_connect_ex(sock, address)

        socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        try:
            yield self
        finally:
            socket.getaddrinfo = real_getaddrinfo  # type: ignore[assignment]
            socket.socket.connect = real_connect  # type: ignore[method-assign]
            socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]

    def direct(self) -> list[NetworkAttempt]:
        """Attempts the backend made without going through ``host.metadata``."""
        return [a for a in self.attempts if not a.via_host_metadata]
