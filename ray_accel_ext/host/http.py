"""One HTTP/1.1 exchange on a plain socket, bounded as a whole.

``http.client`` bounds each socket read, not the exchange: a server that drips its header bytes,
or sends ``100 Continue`` lines without end, keeps a call (and a thread the process waits for at
exit) alive forever. Here one point in time, ``end``, bounds everything: name lookup (in a daemon
thread, since ``getaddrinfo`` has no timeout), connect, TLS handshake, sending, the status line,
headers and body. Sizes are bounded too: the head (status line and headers) at
:data:`MAX_HEAD_BYTES`, interim ``1xx`` answers at :data:`MAX_INTERIM`, the body at the caller's
``max_body``. Redirects are never followed (the caller sees the 3xx).

Only what metadata servers speak is implemented: ``Content-Length``, ``chunked`` and
close-delimited bodies, ``Connection: close`` on every request (RFC 9112).
"""

from __future__ import annotations

import ipaddress
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import SplitResult

__all__ = ["ProtocolError", "Response", "exchange", "MAX_HEAD_BYTES", "MAX_INTERIM"]

MAX_HEAD_BYTES = 64 * 1024
MAX_INTERIM = 8
MAX_HEADERS = 100
_CHUNK = 64 * 1024


class ProtocolError(Exception):
    """The server's answer is not well-formed HTTP/1.1, or larger than allowed."""


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes


def _left(end: float, what: str) -> float:
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{what} when the call's time was up")
    return left


def _resolve(host: str, port: int, end: float) -> list[tuple]:
    """``getaddrinfo`` with a deadline: IP literals directly, names in a daemon thread that is
    abandoned (never waited for) when the lookup outlasts ``end``."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    result: list = []

    def lookup() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            result.append(exc)

    worker = threading.Thread(target=lookup, name="ray-accel-resolve", daemon=True)
    worker.start()
    worker.join(_left(end, f"resolving {host}"))
    if not result:
        raise TimeoutError(f"name lookup of {host} still running when the call's time was up")
    if isinstance(result[0], OSError):
        raise result[0]
    return result[0]


def _connect(parts: SplitResult, end: float) -> socket.socket:
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    last: OSError | None = None
    for family, kind, proto, _, address in _resolve(host, port, end):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(end, f"connecting to {host}:{port}"))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise TimeoutError("no answer") from None  # no connection within the time
            last = exc
            continue
        if parts.scheme == "https":
            return _tls(sock, host, end)
        return sock
    raise last or OSError(f"no address for {host}")


def _tls(sock: socket.socket, host: str, end: float) -> socket.socket:
    """A TLS handshake stepped by hand, so the whole handshake (not each read) is bounded."""
    sock.setblocking(False)
    tls = ssl.create_default_context().wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    try:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                select.select([tls], [], [], _left(end, "TLS handshake still running"))
            except ssl.SSLWantWriteError:
                select.select([], [tls], [], _left(end, "TLS handshake still running"))
    except BaseException:
        tls.close()
        raise
    return tls


class _Reader:
    """Buffered reads from ``sock``, each one cut to what is left before ``end``."""

    def __init__(self, sock: socket.socket, end: float) -> None:
        self.sock, self.end, self.buf = sock, end, b""
        self.answered = False  # any byte of an answer (an interim one included) arrived

    def _fill(self, what: str) -> bool:
        self.sock.settimeout(_left(self.end, what))
        try:
            data = self.sock.recv(_CHUNK)
        except TimeoutError:
            raise TimeoutError(what if what == "no answer" else f"{what} when the call's time was up") from None
        self.answered = self.answered or bool(data)
        self.buf += data
        return bool(data)

    def head(self) -> bytes:
        """Bytes up to and including the blank line that ends a response head."""
        while True:
            cut = self.buf.find(b"\r\n\r\n")
            if cut >= 0:
                head, self.buf = self.buf[: cut + 4], self.buf[cut + 4:]
                return head
            if len(self.buf) > MAX_HEAD_BYTES:
                raise ProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
            if not self._fill("headers still arriving" if self.buf or self.answered else "no answer"):
                if not self.answered:  # what http.client calls RemoteDisconnected
                    raise ConnectionResetError("the server closed the connection without an answer")
                raise ProtocolError("connection closed before the end of the response head")

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill("body still arriving"):
                raise ProtocolError(f"truncated answer: {len(self.buf)} of {n} bytes")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD_BYTES:
                raise ProtocolError("chunk header line too long")
            if not self._fill("body still arriving"):
                raise ProtocolError("connection closed inside a chunked body")
        data, _, self.buf = self.buf.partition(b"\r\n")
        return data

    def rest(self, limit: int) -> bytes:
        while len(self.buf) <= limit and self._fill("body still arriving"):
            pass
        return self.buf


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    try:
        text = head.decode("iso-8859-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise ProtocolError("undecodable response head") from None
    lines = text.split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isascii() or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    fields = [ln for ln in lines[1:] if ln]
    if len(fields) > MAX_HEADERS:
        raise ProtocolError(f"more than {MAX_HEADERS} header fields")
    for field in fields:
        name, sep, value = field.partition(":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"malformed header field {field[:80]!r}")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    return int(code), reason.strip(), headers


def _body(reader: _Reader, method: str, status: int, headers: dict[str, str], max_body: int) -> bytes:
    if method == "HEAD" or status in (204, 304):
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        size = 0
        while True:
            size_text = reader.line().split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 8 or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
                raise ProtocolError(f"malformed chunk size {size_text[:20]!r}")
            n = int(size_text, 16)
            if n == 0:
                return b"".join(chunks)
            size += n
            if size > max_body:
                raise ProtocolError(f"answer larger than {max_body} bytes")
            chunks.append(reader.exactly(n))
            reader.exactly(2)  # the CRLF after the chunk
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.isascii() or not declared.isdigit() or len(declared) > 12:
            raise ProtocolError(f"malformed Content-Length {declared[:20]!r}")
        if int(declared) > max_body:
            raise ProtocolError(f"answer larger than {max_body} bytes (Content-Length {declared})")
        return reader.exactly(int(declared))
    data = reader.rest(max_body)
    if len(data) > max_body:
        raise ProtocolError(f"answer larger than {max_body} bytes")
    return data


def exchange(method: str, parts: SplitResult, headers: dict[str, str], *, end: float, max_body: int) -> Response:
    """Send one request to ``parts`` (a parsed ``http://`` or ``https://`` URL) and read the answer,
    all before the monotonic time ``end``.

    Raises ``TimeoutError`` when ``end`` comes first, :class:`ProtocolError` for a malformed or
    oversized answer, ``OSError`` for connection failures.
    """
    if parts.scheme not in ("http", "https"):
        raise ProtocolError(f"unsupported URL scheme {parts.scheme!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}", "Connection: close", "Accept-Encoding: identity",
             *(f"{k}: {v}" for k, v in headers.items())]
    if method in ("PUT", "POST"):
        lines.append("Content-Length: 0")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    sock = _connect(parts, end)
    try:
        sock.settimeout(_left(end, "sending the request"))
        try:
            sock.sendall(request)
        except TimeoutError:
            raise TimeoutError("request still being sent when the call's time was up") from None
        reader = _Reader(sock, end)
        for _ in range(MAX_INTERIM + 1):
            status, reason, fields = _parse_head(reader.head())
            if not 100 <= status < 200:
                return Response(status, reason, fields, _body(reader, method, status, fields, max_body))
        raise ProtocolError(f"more than {MAX_INTERIM} interim (1xx) responses before the answer")
    finally:
        sock.close()
