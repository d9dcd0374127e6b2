"""The dashboard's HTTP server: the page's files, ``/api/cluster``, ``/healthz``; standard library only.

Hardening, because the page shows a whole cluster to whoever reaches the port:

* binds 127.0.0.1 by default; any other address needs a token (``Authorization: Bearer``, or
  the cookie set by opening ``/?token=...`` once), else :class:`DashboardRefused` says how to
  proceed;
* checks the ``Host`` header, so a page on another site cannot reach the server through a name
  that resolves to this machine (DNS rebinding): only IP literals, ``localhost``, the bound
  address, this machine's names and ``allowed_hosts`` are served;
* a fixed pool of ``max_connections`` handler threads; a connection's request head (request line
  and headers) must arrive within ``head_timeout_s`` in all, not per read (a client sending one
  byte every few seconds is cut off), an idle one is closed after ``idle_timeout_s``; when the
  pool is full, the connection that has waited longest for its request head is closed to make room
  (32 half-open sockets no longer starve real clients), and only when none is waiting does a new
  connection get ``503`` at once;
* the page is static files (no data in the HTML, nothing built from strings); a strict
  Content-Security-Policy allows only this origin's own scripts, styles and fetches.

The document is gathered every ``refresh_s`` and serialised only when a client asks for it
(:mod:`.published`): with no client, a refresh costs the source's gathering and nothing more.
"""

from __future__ import annotations

import hmac
import io
import ipaddress
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ...errors import RayAccelError
from .published import Published

__all__ = ["DashboardServer", "DashboardRefused", "TOKEN_ENV", "COOKIE", "is_loopback", "asset_names"]

TOKEN_ENV = "RAY_ACCEL_DASHBOARD_TOKEN"
COOKIE = "rayaccel_dashboard"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".svg": "image/svg+xml"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class DashboardRefused(RayAccelError):
    """The server will not start as configured (an address beyond loopback without a token)."""

    layer = "usage"  # `ray-accel dashboard` exits 2: the invocation must change


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _assets() -> dict[str, bytes]:
    root = resources.files(__package__) / "assets"
    return {f.name: f.read_bytes() for f in root.iterdir() if f.is_file() and f.name.rsplit(".", 1)[-1] in ("html", "js", "css", "svg")}


def asset_names() -> list[str]:
    """The page's files, as shipped in the package."""
    return sorted(_assets())


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each bounded by the idle timeout and, while a request head is read, by
    what is left of its deadline (``handler.head_deadline``): a per-read timeout alone lets a
    client keep a connection for ever with one byte every few seconds."""

    def __init__(self, sock: socket.socket, handler: Any, idle_timeout_s: float) -> None:
        super().__init__()
        self._sock, self._handler, self._idle = sock, handler, idle_timeout_s

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        deadline = self._handler.head_deadline
        timeout = self._idle
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                raise TimeoutError("the request head did not arrive in time")
        self._sock.settimeout(timeout)
        return self._sock.recv_into(buffer)


class _PoolServer(HTTPServer):
    """An HTTPServer whose requests run on a fixed pool; a connection beyond it gets 503."""

    def __init__(self, address, handler, max_connections: int, family: int) -> None:
        self.address_family = family
        self._slots = threading.BoundedSemaphore(max_connections)
        self._heads: dict[socket.socket, float] = {}  # connections waiting for a request head, since when
        self._conns_lock = threading.Lock()
        super().__init__(address, handler)
        # named after the port, so that each server's handler threads can be told apart
        self._pool = ThreadPoolExecutor(max_workers=max_connections,
                                        thread_name_prefix=f"ray-accel-dashboard-conn-{self.server_port}")

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # HTTPServer's would look the address up in DNS
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def waiting(self, conn: socket.socket, since: float | None) -> None:
        """Note that ``conn`` waits for a request head since ``since`` (None: it is being served)."""
        with self._conns_lock:
            if since is None:
                self._heads.pop(conn, None)
            else:
                self._heads[conn] = since

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for its request head; True if one was."""
        with self._conns_lock:
            if not self._heads:
                return False
            victim = min(self._heads, key=self._heads.__getitem__)
            del self._heads[victim]
        try:
            victim.shutdown(socket.SHUT_RDWR)  # its handler reads EOF, ends, and frees the slot
        except OSError:
            pass
        return True

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False) and not (self._make_room() and self._slots.acquire(timeout=1.0)):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self._pool.submit(self._work, request, client_address)

    def _work(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one bad connection never stops the server
            self.handle_error(request, client_address)
        finally:
            self.waiting(request, None)
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        pass  # a client that went away mid-request is not worth a traceback on the console

    def server_close(self) -> None:
        super().server_close()
        pool = getattr(self, "_pool", None)  # None when binding failed (TCPServer closes, then raises)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class DashboardServer:
    """Serves the page and ``/api/cluster``; ``source()`` returns the document (a dict)."""

    def __init__(
        self,
        source: Callable[[], dict[str, Any]],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        refresh_s: float = 2.0,
        token: str | None = None,
        allowed_hosts: Iterable[str] = (),
        max_connections: int = 32,
        idle_timeout_s: float = 15.0,
        head_timeout_s: float = 10.0,
    ) -> None:
        if not is_loopback(host) and not token:
            raise DashboardRefused(
                f"refusing to serve the dashboard on {host} without a token: anyone who reaches the port would see "
                f"the cluster. Set {TOKEN_ENV} (or pass --token-file FILE) to require one, or keep the default "
                "127.0.0.1 and reach it through `ssh -L 8266:127.0.0.1:8266 <head>` or `kubectl port-forward`"
            )
        self.source = source
        self.refresh_s = refresh_s
        self.token = token or None
        self.host = host
        names = {"localhost", host.strip("[]").lower()} | {h.lower() for h in allowed_hosts}
        if not is_loopback(host):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self._names = names
        self._files = _assets()
        self._published = Published()
        self._error: str | None = None
        self._generation = 0
        self._lock = threading.Lock()
        self._fresh = threading.Condition(self._lock)
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_timeout_s  # StreamRequestHandler: socket timeout, closes idle connections
            server_version = "ray-accel-dashboard"
            sys_version = ""

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                self.head_deadline: float | None = None
                self.rfile.close()  # the socket's own file: replaced by one that keeps the head deadline
                self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self, idle_timeout_s))

            def handle_one_request(self) -> None:
                now = time.monotonic()
                self.head_deadline = now + head_timeout_s
                server._httpd.waiting(self.connection, now)
                super().handle_one_request()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._head_done()
                server._serve(self, head=False)

            def do_HEAD(self) -> None:  # noqa: N802
                self._head_done()
                server._serve(self, head=True)

            def _head_done(self) -> None:
                self.head_deadline = None
                server._httpd.waiting(self.connection, None)

        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self._httpd = _PoolServer((host.strip("[]"), port), Handler, max_connections, family)
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "localhost") else self.host
        host = f"[{host.strip('[]')}]" if ":" in host else host
        return f"http://{host}:{self.port}/"

    @property
    def error(self) -> str | None:
        """Why the last gathering failed (the page shows the one before), or None."""
        with self._lock:
            return self._error

    @property
    def generation(self) -> int:
        """How many documents have been gathered so far."""
        with self._lock:
            return self._generation

    def start(self) -> DashboardServer:
        """Serve in daemon threads; gather and serialise once before returning so that the first
        page has data at once."""
        self._refresh_once()
        self._published.prepare(("overview", "full"))
        serve = lambda: self._httpd.serve_forever(poll_interval=0.1)  # noqa: E731 - stop() waits one interval
        for target, name in ((serve, "http"), (self._refresh_loop, "refresh")):
            t = threading.Thread(target=target, name=f"ray-accel-dashboard-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def close(self) -> None:
        """Release the port of a server that was never started."""
        self._httpd.server_close()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wait_for_generation(self, generation: int, timeout_s: float = 30.0) -> bool:
        """Block until at least ``generation`` documents have been gathered."""
        end = time.monotonic() + timeout_s
        with self._fresh:
            while self._generation < generation:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._fresh.wait(left)
        return True

    def _refresh_once(self) -> None:
        try:
            data, error = self.source(), None
        except Exception as exc:  # noqa: BLE001 - keep serving the last document, say why it is stale
            data, error = None, f"{type(exc).__name__}: {exc}"
        changed = data is not None and self._published.set(data)
        with self._fresh:
            self._error = error
            self._generation += 1
            self._fresh.notify_all()
        if changed:  # serialised now only for the views clients are polling (their next request is due)
            self._published.prepare(self._published.asked_within(2 * self.refresh_s + 1))

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self._refresh_once()

    # -- requests ---------------------------------------------------------------------------

    def _host_allowed(self, header: str | None) -> bool:
        if not header:
            return False
        name = urlsplit(f"//{header}").hostname or ""
        if name in self._names:
            return True
        try:
            ipaddress.ip_address(name)
            return True  # an IP literal cannot be a rebinding attack: that needs a name
        except ValueError:
            return False

    def _authorized(self, h: BaseHTTPRequestHandler) -> bool:
        if self.token is None:
            return True
        auth = h.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), self.token.encode()):
            return True
        for part in h.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == COOKIE and hmac.compare_digest(value.encode(), self.token.encode()):
                return True
        return False

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str, head: bool,
              extra: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in {**_HEADERS, **(extra or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        if not self._host_allowed(h.headers.get("Host")):
            self._send(h, 421, b"this dashboard is not served under that host name\n", "text/plain; charset=utf-8", head)
            return
        url = urlsplit(h.path)
        path = url.path
        if path == "/healthz":
            self._send(h, 200, b"ok\n", "text/plain; charset=utf-8", head)
            return
        offered = parse_qs(url.query).get("token", [None])[0] if path in ("/", "/index.html") else None
        if self.token is not None and offered is not None:
            if hmac.compare_digest(offered.encode(), self.token.encode()):
                cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                self._send(h, 303, b"", "text/plain", head, {"Location": "/", "Set-Cookie": cookie})
                return
        if not self._authorized(h):
            self._send(h, 401, b"a token is required: open /?token=TOKEN once, or send Authorization: Bearer TOKEN\n",
                       "text/plain; charset=utf-8", head, {"WWW-Authenticate": "Bearer"})
            return
        if path in ("/", "/index.html"):
            self._send(h, 200, self._files["index.html"], _TYPES[".html"], head)
        elif path == "/api/cluster":
            view = "overview" if parse_qs(url.query).get("view") == ["overview"] else "full"
            with self._lock:
                dashboard = {"generation": self._generation, "error": self._error, "refresh_s": self.refresh_s}
            try:
                body = self._published.body(view, dashboard)
            except (TypeError, ValueError) as exc:  # a value JSON cannot hold (NaN, a key of no JSON type)
                self._send(h, 500, f"the document cannot be sent: {exc}\n".encode(), "text/plain; charset=utf-8", head)
                return
            self._send(h, 200, body, "application/json", head)
        elif path.startswith("/assets/") and path[8:] in self._files:
            name = path[8:]
            self._send(h, 200, self._files[name], _TYPES["." + name.rsplit(".", 1)[-1]], head)
        else:
            self._send(h, 404, b"not found\n", "text/plain; charset=utf-8", head)
