"""A GCE metadata server that breaks HTTP on purpose (the hostile-host kit, with :mod:`.hostile`).

:class:`HostileGce` answers like the real server (``Metadata-Flavor: Google`` required, 404 for
unknown keys) from a dict of values, except on the paths it is told to be hostile on, where it
does one of :data:`BEHAVIOURS`. It writes raw bytes on a plain socket (``http.server`` would not
send a malformed answer), listens on 127.0.0.1 only, and every connection ends when the client
hangs up, the server stops, or after :data:`MAX_HOSTILE_S`::

    with HostileGce(metadata_spec(snapshot)["gce"], "header-drip", paths={"instance/zone"}) as gce:
        env = gce.env()                    # GCE_METADATA_HOST=127.0.0.1:<port>

Hostile *values* (nested JSON, a huge instance id) need no special server: put them in the values.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from ..host.protocol import GCE_METADATA_HOST_ENV
from .fake_metadata import FakeGceMetadata

__all__ = ["BEHAVIOURS", "HostileGce", "nested_json"]

MAX_HOSTILE_S = 120.0
_DRIP_S = 0.2

BEHAVIOURS: Mapping[str, str] = {
    "header-drip": "sends the status line, then one header byte every 0.2 s, never ending the head",
    "status-drip": "sends the status line one byte every 0.2 s",
    "endless-continue": "sends '100 Continue' heads without end, never the answer",
    "huge-body": "answers 200 without Content-Length and sends body bytes without end",
    "huge-declared": "answers 200 with Content-Length 10 GB",
    "redirect": "answers 302 Found with Location on another host",
}


def nested_json(depth: int = 100_000) -> str:
    """A JSON document nested ``depth`` levels deep (``[[[...]]]``)."""
    return "[" * depth + "]" * depth


class HostileGce:
    """GCE metadata on loopback, hostile on ``paths`` (every path when None); see the module doc."""

    def __init__(self, values: Mapping[str, str] | None, behaviour: str, paths: Iterable[str] | None = None) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r} (known: {', '.join(BEHAVIOURS)})")
        self.values = {k.lstrip("/"): v for k, v in (values or {}).items()}
        self.behaviour = behaviour
        self.paths = None if paths is None else {p.lstrip("/") for p in paths}
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> "HostileGce":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.settimeout(0.1)
        self._sock = sock
        threading.Thread(target=self._accept, name="hostile-gce", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "HostileGce":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def address(self) -> str:
        assert self._sock is not None, "server not started"
        return f"127.0.0.1:{self._sock.getsockname()[1]}"

    def env(self) -> dict[str, str]:
        return {GCE_METADATA_HOST_ENV: self.address}

    # -- serving --------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            sock = self._sock
            if sock is None:
                return
            try:
                conn, _ = sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="hostile-gce-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(MAX_HOSTILE_S)
            try:
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                lines = head.decode("latin-1").split("\r\n")
                method, _, rest = lines[0].partition(" ")
                target = rest.partition(" ")[0]
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                path, _, query = target.partition("?")
                path = path.removeprefix("/computeMetadata/v1/")
                inside = sorted(k for k in self.values if path.endswith("/") and k.startswith(path))
                with self._lock:
                    self.requests.append(path)
                if headers.get("metadata-flavor") != "Google":
                    self._send(conn, 403, b"Missing Metadata-Flavor:Google header.")
                elif self.paths is None or path in self.paths or any(k in self.paths for k in inside):
                    self._hostile(conn)  # a recursive read of a directory holding a hostile key too
                elif path in self.values:
                    self._send(conn, 200, self.values[path].encode())
                elif inside and "recursive=true" in query.lower():
                    # The recursive JSON, spelled as the well-behaved fake spells it.
                    doc = FakeGceMetadata._tree(SimpleNamespace(faults={}, values=self.values), path, inside)
                    self._send(conn, 200, json.dumps(doc).encode())
                else:
                    self._send(conn, 404, b"not found")
            except OSError:
                return  # the client gave up: what a hostile server wants

    @staticmethod
    def _send(conn: socket.socket, status: int, body: bytes) -> None:
        reason = {200: "OK", 403: "Forbidden", 404: "Not Found"}[status]
        conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/text\r\nMetadata-Flavor: Google\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if self._stop.wait(_DRIP_S):
                return
            conn.sendall(data[i:i + 1])

    def _hostile(self, conn: socket.socket) -> None:
        end = MAX_HOSTILE_S
        b = self.behaviour
        if b == "header-drip":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            self._drip(conn, b"X-Drip: " + b"d" * int(end / _DRIP_S))
        elif b == "status-drip":
            self._drip(conn, b"HTTP/1.1 200 OK" + b" " * int(end / _DRIP_S))
        elif b == "endless-continue":
            while not self._stop.wait(0.005):
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 16)
        elif b == "huge-body":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/text\r\nConnection: close\r\n\r\n")
            chunk = b"x" * 65536
            while not self._stop.is_set():
                conn.sendall(chunk)
        elif b == "huge-declared":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/text\r\nContent-Length: 10000000000\r\n\r\n")
            self._stop.wait(end)
        elif b == "redirect":
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://metadata.attacker.example/computeMetadata/v1/\r\n"
                         b"Content-Length: 0\r\nConnection: close\r\n\r\n")
