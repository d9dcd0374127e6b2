"""The HTTP server the loopback fakes share: 127.0.0.1 only, a free port, clean stop.

Subclasses set ``name`` and ``methods`` and implement ``_handle(handler, method)``; faults are
looked up per request key with :meth:`LoopbackServer._fault` (``{"times": N}`` limits a fault to
the first N requests of that key; ``"*"`` matches every key).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LoopbackServer"]


class _QuietHTTPServer(ThreadingHTTPServer):
    """Threads per request; no traceback when a client hangs up (clients under test give up on
    slow answers on purpose); a listen backlog for bursts (socketserver's default of 5 refused
    connections when discovery fetched eight metadata keys at once under load)."""

    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class LoopbackServer:
    """Base of the fakes: lifecycle, address, fault lookup. Use as a context manager."""

    name = "loopback"
    methods: tuple[str, ...] = ("GET",)
    #: the loopback address to listen on: ``127.0.0.1``, or ``::1`` for a client's IPv6 path
    host = "127.0.0.1"

    def __init__(self, faults: Mapping[str, Mapping[str, Any]] | None = None, *, port: int = 0) -> None:
        #: seconds between shutdown checks of the serving loop (http.server's default 0.5 s made
        #: every stop cost half a second)
        self.poll_interval_s = 0.05
        self.faults = {k: dict(v) for k, v in (faults or {}).items()}
        self._fault_hits: dict[str, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._port = port  # 0: a free one

    def start(self):
        """Listen on ``host`` (127.0.0.1; a free port unless one was given) and serve in a daemon thread."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        for method in self.methods:
            setattr(Handler, f"do_{method}", lambda h, m=method: server._handle(h, m))
        server_cls = _QuietHTTPServer
        if ":" in self.host:
            server_cls = type("_QuietHTTPServer6", (_QuietHTTPServer,), {"address_family": socket.AF_INET6})
        self._httpd = server_cls((self.host, self._port), Handler)
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": self.poll_interval_s},
            daemon=True, name=f"fake-{self.name}",
        ).start()
        return self

    def stop(self) -> None:
        """Stop serving; requests held by a ``hang`` fault are released."""
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def _fault(self, key: str) -> dict[str, Any] | None:
        """The fault for this request (counting it), or None."""
        fault = self.faults.get(key) or self.faults.get("*")
        if not fault:
            return None
        with self._lock:
            hits = self._fault_hits.get(key, 0)
            self._fault_hits[key] = hits + 1
        if fault.get("times") is not None and hits >= int(fault["times"]):
            return None
        return fault

    def _delay_or_hang(self, h: BaseHTTPRequestHandler, fault: Mapping[str, Any]) -> bool:
        """Apply ``delay_s`` and ``hang``; True when the request is used up (it hung until stop)."""
        if fault.get("delay_s"):
            self._stop.wait(float(fault["delay_s"]))
        if fault.get("hang"):
            self._stop.wait(600)
            h.close_connection = True
            return True
        return False

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
