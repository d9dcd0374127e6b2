"""The one reader of ``ray.nodes()``: what every node published, as typed views.

Placement, the cluster inventory, health monitors, telemetry and the demo all read nodes through
:func:`node_views` / :func:`alive_nodes`, so a change in Ray's node-table shape is fixed here once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NodeView", "node_views", "alive_nodes", "recent_alive_nodes", "HEAD_RESOURCE"]

# Every head node carries this resource (Ray's NODE_ID_PREFIX + "__internal_head__").
HEAD_RESOURCE = "node:__internal_head__"


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the cluster side needs of a node: id, labels, total resources, where it is."""

    node_id: str
    labels: Mapping[str, str]
    resources: Mapping[str, float]
    address: str = ""
    hostname: str = field(default="", compare=False)
    manager_port: int | None = field(default=None, compare=False)  # the raylet's gRPC port
    metrics_port: int | None = field(default=None, compare=False)  # Ray's Prometheus export port

    @property
    def is_head(self) -> bool:
        return HEAD_RESOURCE in self.resources


def node_views(nodes: Iterable[Mapping[str, Any] | NodeView]) -> list[NodeView]:
    """Alive nodes from ``ray.nodes()``-shaped dicts (``NodeID``/``Labels``/``Resources``/``Alive``),
    plain ``{"node_id", "labels", "resources"}`` dicts, or views (passed through)."""
    out = []
    for n in nodes:
        if isinstance(n, NodeView):
            out.append(n)
            continue
        if not n.get("Alive", n.get("alive", True)):
            continue
        node_id = str(n.get("NodeID") or n.get("node_id"))
        labels = n.get("Labels") if "Labels" in n else n.get("labels", {})
        resources = n.get("Resources") if "Resources" in n else n.get("resources", {})
        address = str(n.get("NodeManagerAddress") or n.get("address") or "")
        hostname = str(n.get("NodeManagerHostname") or n.get("hostname") or address or node_id[:12])
        out.append(
            NodeView(
                node_id,
                {str(k): str(v) for k, v in (labels or {}).items()},
                {str(k): float(v) for k, v in (resources or {}).items()},
                address,
                hostname,
                _port(n.get("NodeManagerPort")),
                _port(n.get("MetricsExportPort")),
            )
        )
    return out


def _port(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def alive_nodes() -> list[NodeView]:
    """The alive nodes of the connected Ray cluster (public ``ray.nodes()``)."""
    import ray

    return node_views(ray.nodes())


_lock = threading.Lock()
_last: dict[str, Any] = {}


def recent_alive_nodes(max_age_s: float) -> list[NodeView]:
    """:func:`alive_nodes` as this process's last call here read them, if that read began at most
    ``max_age_s`` ago on the same connection, else read now (callers at the same moment share one
    read; ``0`` always reads)."""
    import ray

    ctx = ray.get_runtime_context()
    where = (ctx.gcs_address, ctx.get_job_id())
    with _lock:
        if _last.get("where") == where and time.monotonic() - _last["at"] <= max_age_s:
            return _last["views"]
        at = time.monotonic()
        views = alive_nodes()
        _last.update(where=where, at=at, views=views)
        return views
