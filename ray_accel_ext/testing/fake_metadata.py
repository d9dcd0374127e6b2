"""Loopback fakes of the GCE metadata server and EC2 IMDSv2, faithful in the parts discovery uses.

* GCE: ``GET /computeMetadata/v1/<path>`` requires ``Metadata-Flavor: Google`` (403 without),
  answers plain text with ``Metadata-Flavor: Google`` set, 404 for unknown paths. A directory
  (``instance/``) lists its entries, one a line, subdirectories with a trailing ``/``; with
  ``?recursive=true`` it answers JSON as the real server does
  (https://cloud.google.com/compute/docs/metadata/querying-metadata): built-in keys camelCase
  (``machine-type`` -> ``machineType``), numbered directories as arrays
  (``network-interfaces/0/ip`` -> ``networkInterfaces[0].ip``), ``id`` a JSON number, custom
  attributes and service-account names as they are.
* IMDSv2: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` returns a token;
  ``GET /latest/meta-data/<path>`` requires ``X-aws-ec2-metadata-token`` (401 without or wrong).

Faults, per path (``"*"`` for every path; for IMDS the token call is the path ``api/token``)::

    {"delay_s": 0.2}                 answer late
    {"hang": true}                   never answer (until the server stops)
    {"status": 429, "retry_after": "1"}   or any status; retry_after optional
    {"reset": true}                  close the connection without answering
    {"body": "..."}                  answer this instead of the stored value
    {"truncate": 10}                 send only the first N bytes of the body (Content-Length kept)
    {"oversize": 1000000}            answer N bytes of junk
    {"html": true}                   answer 200 with an HTML error page (a captive portal, a proxy)
    {"binary": 64}                   answer 200 with N bytes of binary (NUL bytes, invalid UTF-8)
    {"drip_s": 0.3}                  send the body one byte every N seconds (each read is "on time")
    {"times": 2}                     apply the fault to the first N requests only

``status`` may be combined with ``html`` (a 503 page from a proxy). :data:`FAULT_CLASSES` names one
fault per class, for tests that try them all.

A recursive read of a directory takes the fault of its own path, else the first fault set on a key
inside it (a key the server fails to serve fails the whole answer), else ``"*"``; a ``body`` fault
on a key inside it only replaces that key's value in the JSON.

Point clients at them with ``GCE_METADATA_HOST=127.0.0.1:<port>`` and
``AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:<port>`` (see :meth:`env`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from ..host.metadata import NAME_DIRS, camel
from ..host.protocol import GCE_METADATA_HOST_ENV, IMDS_ENDPOINT_ENV
from .loopback import LoopbackServer

__all__ = ["FakeGceMetadata", "FakeImds", "MetadataServers", "FAULT_CLASSES", "HTML_ERROR_PAGE"]

HTML_ERROR_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    "<body><h1>Bad Gateway</h1><p>The proxy server received an invalid response.</p>"
    "<script>location.href='http://portal.example/login?next=x'</script></body></html>\n"
)

# One fault per class that a metadata server can show (``testing/fake_metadata`` fault syntax).
FAULT_CLASSES: dict[str, dict[str, Any]] = {
    "delay (within timeout)": {"delay_s": 0.2},
    "delay (past timeout)": {"delay_s": 2.0},
    "hang": {"hang": True},
    "connection reset": {"reset": True},
    "429 with Retry-After": {"status": 429, "retry_after": "0.1"},
    "429 with long Retry-After": {"status": 429, "retry_after": "3600"},
    "429 without Retry-After": {"status": 429},
    "500": {"status": 500},
    "503 HTML page": {"status": 503, "html": True},
    "truncated body": {"truncate": 3},
    "oversized body": {"oversize": 400_000},
    "HTML instead of value": {"html": True},
    "binary body": {"binary": 64},
    "empty body": {"body": ""},
    "slow drip": {"drip_s": 0.3},
    "transient 503 (once)": {"status": 503, "times": 1},
    "transient 429 with Retry-After (once)": {"status": 429, "retry_after": "0.2", "times": 1},
}


class _Server(LoopbackServer):
    flavor = "base"
    methods = ("GET", "PUT")

    def __init__(self, values: Mapping[str, str] | None = None, faults: Mapping[str, Mapping[str, Any]] | None = None,
                 *, port: int = 0):
        super().__init__(faults, port=port)
        self.name = self.flavor
        self.values = dict(values or {})
        self.requests: list[tuple[str, str]] = []  # (method, path) in arrival order

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for _, p in self.requests if path is None or p == path)

    # request handling
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: str | bytes, headers: Mapping[str, str] | None = None,
              fault: Mapping[str, Any] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else body
        length = len(data)
        if fault and "truncate" in fault:
            data = data[: int(fault["truncate"])]
        headers = dict(headers or {})
        h.send_response(status)
        h.send_header("Content-Type", headers.pop("Content-Type", "text/plain"))
        h.send_header("Content-Length", str(length))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        try:
            if fault and fault.get("drip_s"):
                for i in range(len(data)):
                    if self._stop.wait(float(fault["drip_s"])):
                        break
                    h.wfile.write(data[i:i + 1])
                    h.wfile.flush()
            else:
                h.wfile.write(data)
                h.wfile.flush()
        except OSError:
            pass
        if fault and "truncate" in fault:
            h.close_connection = True

    def _apply_fault(self, h: BaseHTTPRequestHandler, fault: Mapping[str, Any] | None) -> bool:
        """Apply a fault; True when the request has been fully handled by it."""
        if not fault:
            return False
        if self._delay_or_hang(h, fault):
            return True
        if fault.get("reset"):
            h.close_connection = True
            try:
                h.connection.shutdown(2)
            except OSError:
                pass
            return True
        if fault.get("oversize"):
            self._send(h, 200, "x" * int(fault["oversize"]), self._flavor_headers())
            return True
        if fault.get("status"):
            headers = dict(self._flavor_headers())
            if fault.get("retry_after") is not None:
                headers["Retry-After"] = str(fault["retry_after"])
            body = f"fault {fault['status']}\n"
            if fault.get("html"):
                body, headers["Content-Type"] = HTML_ERROR_PAGE, "text/html"
            self._send(h, int(fault["status"]), body, headers)
            return True
        if fault.get("html"):
            self._send(h, 200, HTML_ERROR_PAGE, {**self._flavor_headers(), "Content-Type": "text/html"}, fault)
            return True
        if fault.get("binary"):
            n = int(fault["binary"])
            junk = (b"\x00\xff\xfe\x89PNG\r\n\x1a\n\xc3\x28" * (n // 12 + 1))[:n]
            self._send(h, 200, junk, {**self._flavor_headers(), "Content-Type": "application/octet-stream"}, fault)
            return True
        return False

    def _flavor_headers(self) -> dict[str, str]:
        return {}

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class FakeGceMetadata(_Server):
    """GCE metadata server. ``values`` maps ``instance/attributes/tpu-env``-style paths to text."""

    flavor = "gce"
    PREFIX = "/computeMetadata/v1/"

    def _flavor_headers(self) -> dict[str, str]:
        return {"Metadata-Flavor": "Google"}

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path, _, query = h.path.partition("?")
        key = path[len(self.PREFIX):] if path.startswith(self.PREFIX) else path
        recursive = "recursive=true" in query.lower().split("&")
        with self._lock:
            self.requests.append((method, key))
        if method != "GET":
            self._send(h, 405, "method not allowed\n", self._flavor_headers())
            return
        if h.headers.get("Metadata-Flavor") != "Google":
            self._send(h, 403, "Missing required header: Metadata-Flavor\n")
            return
        directory = key.endswith("/") and path.startswith(self.PREFIX)
        inside = sorted(k for k in self.values if directory and k.startswith(key))
        fault = self._directory_fault(key) if recursive and directory else self._fault(key)
        if self._apply_fault(h, fault):
            return
        if fault and "body" in fault:
            self._send(h, 200, str(fault["body"]), self._flavor_headers(), fault)
            return
        if key in self.values and path.startswith(self.PREFIX):
            self._send(h, 200, self.values[key], self._flavor_headers(), fault)
        elif inside and recursive:
            doc = self._tree(key, inside)
            self._send(h, 200, json.dumps(doc), {**self._flavor_headers(), "Content-Type": "application/json"}, fault)
        elif inside:
            entries = sorted({k[len(key):].split("/", 1)[0] + ("/" if "/" in k[len(key):] else "") for k in inside})
            self._send(h, 200, "".join(e + "\n" for e in entries), self._flavor_headers(), fault)
        else:
            self._send(h, 404, "not found\n", self._flavor_headers())

    def _directory_fault(self, key: str) -> dict[str, Any] | None:
        """The fault of a recursive read: its own, else one set on a key inside (``body`` faults
        excepted: they change a value, see :meth:`_tree`), else ``"*"``."""
        if key in self.faults:
            return self._fault(key)
        for k in sorted(self.faults):
            if k.startswith(key) and "body" not in self.faults[k]:
                return self._fault(k)
        return self._fault(key)

    def _tree(self, key: str, inside: list[str]) -> Any:
        """The recursive JSON of directory ``key``, built the way the real server spells it."""
        root: dict[str, Any] = {}
        for k in inside:
            fault = self.faults.get(k)
            value: Any = str(fault["body"]) if fault and "body" in fault else self.values[k]
            parts = k[len(key):].split("/")
            parent = key.rstrip("/").rpartition("/")[2]
            node = root
            for i, part in enumerate(parts):
                name = part if parent in NAME_DIRS else camel(part)
                if i == len(parts) - 1:
                    if name == "id" and node is root and key == "instance/" and value.isdigit():
                        value = int(value)
                    node[name] = value
                else:
                    node = node.setdefault(name, {})
                parent = part
        return _arrays(root)

    def env(self) -> dict[str, str]:
        return {GCE_METADATA_HOST_ENV: self.address}


def _arrays(node: Any) -> Any:
    """Numbered directories (``0``, ``1``, ...) become JSON arrays, as in the real server's answer."""
    if not isinstance(node, dict):
        return node
    out = {k: _arrays(v) for k, v in node.items()}
    if out and all(k.isdigit() for k in out):
        return [out[k] for k in sorted(out, key=int)]
    return out


class FakeImds(_Server):
    """EC2 IMDSv2. ``values`` maps ``instance-type``-style meta-data paths to text."""

    flavor = "imds"

    def __init__(self, values=None, faults=None, *, port: int = 0):
        super().__init__(values, faults, port=port)
        self.tokens: set[str] = set()

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        if method == "PUT" and path == "/latest/api/token":
            with self._lock:
                self.requests.append((method, "api/token"))
            fault = self._fault("api/token")
            if self._apply_fault(h, fault):
                return
            if not h.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                self._send(h, 400, "missing TTL header\n")
                return
            token = str(fault["body"]) if fault and "body" in fault else secrets.token_urlsafe(24)
            with self._lock:
                self.tokens.add(token)
            self._send(h, 200, token, {"X-aws-ec2-metadata-token-ttl-seconds": h.headers["X-aws-ec2-metadata-token-ttl-seconds"]}, fault)
            return
        prefix = "/latest/meta-data/"
        key = path[len(prefix):] if path.startswith(prefix) else path
        with self._lock:
            self.requests.append((method, key))
        if method != "GET":
            self._send(h, 405, "method not allowed\n")
            return
        if h.headers.get("X-aws-ec2-metadata-token") not in self.tokens:
            self._send(h, 401, "Unauthorized\n")
            return
        fault = self._fault(key)
        if self._apply_fault(h, fault):
            return
        if fault and "body" in fault:
            self._send(h, 200, str(fault["body"]), None, fault)
            return
        if not path.startswith(prefix) or key not in self.values:
            self._send(h, 404, "Not Found\n")
            return
        self._send(h, 200, self.values[key], None, fault)

    def env(self) -> dict[str, str]:
        return {IMDS_ENDPOINT_ENV: f"http://{self.address}"}


class MetadataServers:
    """The fakes a snapshot's ``metadata.json`` asks for, started together.

    ``metadata.json``: ``{"gce": {path: text}, "gce_faults": {...}, "ec2": {path: text},
    "ec2_faults": {...}}``; either part may be absent.
    """

    def __init__(self, spec: Mapping[str, Any] | None) -> None:
        spec = spec or {}
        self.gce = FakeGceMetadata(spec.get("gce"), spec.get("gce_faults")) if "gce" in spec or "gce_faults" in spec else None
        self.imds = FakeImds(spec.get("ec2"), spec.get("ec2_faults")) if "ec2" in spec or "ec2_faults" in spec else None

    def start(self) -> "MetadataServers":
        for s in (self.gce, self.imds):
            if s is not None:
                s.start()
        return self

    def stop(self) -> None:
        for s in (self.gce, self.imds):
            if s is not None:
                s.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for s in (self.gce, self.imds):
            if s is not None:
                out.update(s.env())
        return out
