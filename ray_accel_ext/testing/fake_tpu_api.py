"""A loopback fake of the Cloud TPU API v2 (REST), faithful in the parts the TPU backend uses.

* ``GET /v2/projects/{p}/locations/{z}/nodes/{n}``: the node as JSON (camelCase, like the real
  API), 404 with a ``google.rpc.Status`` body when unknown.
* ``GET /v2/projects/{p}/locations/{z}/nodes``: ``{"nodes": [...]}``.

Nodes are given in the real JSON shape::

    {"name": "projects/p/locations/z/nodes/n", "acceleratorType": "v5p-16",
     "acceleratorConfig": {"type": "V5P", "topology": "2x2x2"}, "state": "READY",
     "health": "HEALTHY", "networkEndpoints": [{"ipAddress": "10.0.0.2", "port": 8470}, ...]}

Faults, per request path or ``"*"``, as in :mod:`.fake_metadata`: ``{"status": 429,
"retry_after": "1"}``, ``{"hang": true}``, ``{"delay_s": 0.2}``, ``{"times": N}``. Point
``google-cloud-tpu`` at it with ``client_options={"api_endpoint": server.endpoint}``, transport
``"rest"`` and anonymous credentials (``RAY_ACCEL_TPU_API_ENDPOINT`` for the backend).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from ..host.protocol import TPU_API_ENDPOINT_ENV
from .loopback import LoopbackServer

__all__ = ["FakeTpuApi"]


class FakeTpuApi(LoopbackServer):
    """The fake server; use as a context manager."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]] = (), faults: Mapping[str, Mapping[str, Any]] | None = None):
        self.nodes = {str(n["name"]): dict(n) for n in nodes}
        super().__init__(faults)
        self.requests: list[str] = []

    name = "tpu-api"
    methods = ("GET",)

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``, for ``client_options.api_endpoint``."""
        return self.url

    def env(self) -> dict[str, str]:
        """The variable that points the TPU backend at this server."""
        return {TPU_API_ENDPOINT_ENV: self.endpoint}

    # -- handling ---------------------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=UTF-8")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        try:
            h.wfile.write(data)
        except OSError:
            pass

    @staticmethod
    def _status(code: int, message: str) -> dict[str, Any]:
        names = {404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
        return {"error": {"code": code, "message": message, "status": names.get(code, "UNKNOWN")}}

    def _handle(self, h: BaseHTTPRequestHandler, method: str = "GET") -> None:
        path = h.path.split("?", 1)[0]
        resource = path[len("/v2/"):] if path.startswith("/v2/") else path
        with self._lock:
            self.requests.append(resource)
        fault = self._fault(resource)
        if fault:
            if self._delay_or_hang(h, fault):
                return
            if fault.get("status"):
                headers = {"Retry-After": str(fault["retry_after"])} if fault.get("retry_after") is not None else {}
                self._send(h, int(fault["status"]), self._status(int(fault["status"]), "injected fault"), headers)
                return
        if resource in self.nodes:
            self._send(h, 200, self.nodes[resource])
            return
        if resource.endswith("/nodes"):
            prefix = resource + "/"
            self._send(h, 200, {"nodes": [n for k, n in self.nodes.items() if k.startswith(prefix)]})
            return
        self._send(h, 404, self._status(404, f"Resource '{resource}' was not found"))
