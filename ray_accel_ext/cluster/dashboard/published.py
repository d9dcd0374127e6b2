"""The ``/api/cluster`` bodies the server sends, serialised only when a client asks for one.

A refresh that returns the document already held (the same object) changes nothing; a new one
only drops the bodies made from the old. A body is made on the first request after that (and
ahead of the next request while clients keep asking), once per view, whatever the number of
clients: with no client the server serialises nothing. The small ``dashboard`` part (generation,
error, refresh interval) is joined to the serialised document per request.

Two views of one document: ``full`` (the document as built) and ``overview``: per node only
what the overview draws and filters on (identity, labels, health, occupancy, each description's
SKU and interconnect, each device's latest utilisation), no holders list: about a sixth of the
bytes, which the page fetches first so that it is interactive before the whole document has
arrived.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Published", "overview", "VIEWS"]

VIEWS = ("full", "overview")
_EMPTY: dict[str, Any] = {"nodes": [], "domains": [], "placement_groups": []}
_NODE_KEYS = ("node_id", "hostname", "is_head", "labels", "health", "degraded", "occupancy")
_DESCRIPTION_KEYS = ("backend", "sku", "resource_name", "resource_quantity", "interconnect")
_DEVICE_KEYS = ("index", "utilization")


def _pick(row: Any, keys: tuple[str, ...]) -> Any:
    return {k: row[k] for k in keys if k in row} if isinstance(row, Mapping) else row


def _overview_node(node: Any) -> Any:
    if not isinstance(node, Mapping):
        return node
    out = _pick(node, _NODE_KEYS)
    inventory = node.get("inventory")
    if isinstance(inventory, Mapping) and isinstance(inventory.get("descriptions"), list):
        out["inventory"] = {"descriptions": [_pick(d, _DESCRIPTION_KEYS) for d in inventory["descriptions"]]}
    devices = node.get("devices")
    if isinstance(devices, Mapping):
        out["devices"] = {b: [_pick(r, _DEVICE_KEYS) for r in rows] if isinstance(rows, list) else rows
                          for b, rows in devices.items()}
    return out


def overview(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``overview`` view of a document (``"view": "overview"`` at the top)."""
    nodes = doc.get("nodes")
    out = dict(doc, view="overview", holders=[])
    if isinstance(nodes, list):
        out["nodes"] = [_overview_node(n) for n in nodes]
    return out


def _dump(doc: Mapping[str, Any] | None, view: str) -> bytes:
    data = {k: v for k, v in (doc if doc is not None else _EMPTY).items() if k != "dashboard"}
    if view == "overview":
        data = overview(data)
    return json.dumps(data, sort_keys=True, allow_nan=False, default=str, separators=(",", ":")).encode()


class Published:
    """The document the server holds and its serialised views (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the fields below
        self._dumping = threading.Lock()  # one serialisation at a time: concurrent clients wait for it
        self._doc: Mapping[str, Any] | None = None
        self._version = 0
        self._bodies: dict[str, tuple[int, bytes]] = {}
        self._asked: dict[str, float] = {}

    def set(self, doc: Mapping[str, Any]) -> bool:
        """Hold ``doc``; False when it is the document already held (nothing to make again)."""
        with self._lock:
            if doc is self._doc:
                return False
            self._doc, self._version = doc, self._version + 1
            self._bodies.clear()
            return True

    def asked_within(self, seconds: float) -> list[str]:
        """The views a client asked for in the last ``seconds``."""
        since = time.monotonic() - seconds
        with self._lock:
            return [view for view, at in self._asked.items() if at >= since]

    def serialised(self, view: str, *, asked: bool = True) -> bytes:
        """The held document's ``view``, serialised once per document (``dashboard`` left out)."""
        with self._lock:
            if asked:
                self._asked[view] = time.monotonic()
            made = self._bodies.get(view)
        if made is not None:
            return made[1]
        with self._dumping:
            with self._lock:
                doc, version, made = self._doc, self._version, self._bodies.get(view)
            if made is not None:
                return made[1]
            body = _dump(doc, view)
            with self._lock:
                if self._version == version:
                    self._bodies[view] = (version, body)
            return body

    def prepare(self, views: Iterable[str]) -> None:
        """Serialise ``views`` ahead of a request; one that cannot be is said when it is asked for."""
        for view in views:
            try:
                self.serialised(view, asked=False)
            except (TypeError, ValueError):
                pass

    def body(self, view: str, dashboard: Mapping[str, Any]) -> bytes:
        """The response body: ``dashboard`` joined to the serialised ``view``."""
        inner = self.serialised(view)
        head = b'{"dashboard":' + json.dumps(dashboard, sort_keys=True, default=str, separators=(",", ":")).encode()
        return head + (b"," + inner[1:] if len(inner) > 2 else b"}")
