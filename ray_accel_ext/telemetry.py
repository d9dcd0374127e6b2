"""Discovery and placement events: one structured JSON log line per event.

Logger ``ray_accel_ext.telemetry``; each record's message is a JSON object with ``event`` and the
fields an incident review needs.

Ray metrics (``ray.util.metrics``; Ray exports them with its own Prometheus metrics, each name
prefixed ``ray_``) are recorded only by the functions below that say so, and only in a process
connected to Ray; ``ray`` is imported lazily so the start hook and discovery stay free of it:

* ``rayaccel_placements`` (Counter) tags ``outcome, level, step, fallback, generation, topology``
* ``rayaccel_placement_wait_seconds`` (Histogram) tags ``outcome, level, step``
* ``rayaccel_placement_hosts`` (Gauge, hosts of the last placement) tags ``level, generation, topology``
* ``rayaccel_reserved_domains`` (Gauge, domains this process holds) tag ``level``
* ``rayaccel_nodes`` (Gauge, nodes by discovery result) tags ``generation, topology, discovery, vendor``
* ``rayaccel_serve_requests`` (Counter, the Serve example's routing) tags ``route, outcome``
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from .cluster.nodes import node_views
from .labels import (
    DISCOVERY,
    FABRIC_DOMAIN,
    FABRIC_HOSTS,
    FABRIC_TOPOLOGY,
    GENERATION,
    TPU_TOPOLOGY,
    VENDOR,
)

__all__ = [
    "emit",
    "discovery_event",
    "placement_event",
    "reservation_released",
    "inventory_metrics",
    "serve_request",
    "metrics",
    "TELEMETRY_LOGGER",
]

TELEMETRY_LOGGER = "ray_accel_ext.telemetry"
_log = logging.getLogger(TELEMETRY_LOGGER)


def emit(event: str, **fields: Any) -> dict[str, Any]:
    """Log one event as a JSON line and return it."""
    record = {"event": event, "ts": round(time.time(), 3), **fields}
    _log.info(json.dumps(record, sort_keys=True, default=str))
    return record


def discovery_event(inventory, spec) -> dict[str, Any]:
    """The node-discovery event: what was found, how long it took, and why it is degraded."""
    primary = inventory.primary
    return emit(
        "discovery",
        outcome="degraded" if inventory.degraded else "ok",
        elapsed_ms=round(inventory.elapsed_s * 1000, 2),
        families=[d.backend for d in inventory.descriptions],
        generation=primary.sku.generation if primary else None,
        devices=sum(len(d.devices) for d in inventory.descriptions),
        fabric_domain=spec.labels.get(FABRIC_DOMAIN),
        fabric_hosts=spec.labels.get(FABRIC_HOSTS),
        topology=spec.labels.get(FABRIC_TOPOLOGY),
        reasons=inventory.reasons(),
    )


# -- Ray metrics (lazy: only where Ray is connected) -------------------------------------------------

_WAIT_BOUNDARIES = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0]
_metrics: dict[str, Any] = {}
_held: dict[str, int] = {}
_metrics_lock = threading.Lock()


def metrics() -> dict[str, Any] | None:
    """This process's Ray metric objects (created once), or None when Ray is not connected."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    with _metrics_lock:
        if not _metrics:
            from ray.util.metrics import Counter, Gauge, Histogram

            _metrics.update(
                placements=Counter(
                    "rayaccel_placements", "Domain placements by outcome and fallback step",
                    tag_keys=("outcome", "level", "step", "fallback", "generation", "topology"),
                ),
                wait=Histogram(
                    "rayaccel_placement_wait_seconds", "Time from request to ready (or failure)",
                    boundaries=_WAIT_BOUNDARIES, tag_keys=("outcome", "level", "step"),
                ),
                hosts=Gauge(
                    "rayaccel_placement_hosts", "Hosts in the last placement",
                    tag_keys=("level", "generation", "topology"),
                ),
                reserved=Gauge("rayaccel_reserved_domains", "Domains this process holds", tag_keys=("level",)),
                nodes=Gauge(
                    "rayaccel_nodes", "Alive nodes by discovery result",
                    tag_keys=("generation", "topology", "discovery", "vendor"),
                ),
                serve=Counter("rayaccel_serve_requests", "Requests by route", tag_keys=("route", "outcome")),
            )
        return _metrics


def _tag(value: Any) -> str:
    return "none" if value is None or value == "" else str(value)


def placement_event(fields: dict[str, Any]) -> dict[str, Any]:
    """One placement (ready or failed): a ``placement`` log line plus Ray metrics."""
    record = emit("placement", **fields)
    m = metrics()
    if m is not None:
        outcome, level, step = _tag(fields.get("outcome")), _tag(fields.get("level")), _tag(fields.get("step"))
        gen, topo = _tag(fields.get("generation")), _tag(fields.get("topology"))
        m["placements"].inc(1, tags={"outcome": outcome, "level": level, "step": step,
                                     "fallback": "true" if fields.get("fallback") else "false",
                                     "generation": gen, "topology": topo})
        if fields.get("wait_s") is not None:
            m["wait"].observe(float(fields["wait_s"]), tags={"outcome": outcome, "level": level, "step": step})
        if outcome == "ready":
            m["hosts"].set(float(fields.get("hosts") or 0), tags={"level": level, "generation": gen, "topology": topo})
            with _metrics_lock:
                _held[level] = _held.get(level, 0) + 1
                held = _held[level]
            m["reserved"].set(held, tags={"level": level})
    return record


def reservation_released(level: str) -> None:
    """A reservation of this process was released: lower ``rayaccel_reserved_domains``."""
    m = metrics()
    with _metrics_lock:
        _held[level] = max(0, _held.get(level, 0) - 1)
        held = _held[level]
    if m is not None:
        m["reserved"].set(held, tags={"level": _tag(level)})


def inventory_metrics(nodes) -> dict[tuple[str, str, str, str], int]:
    """Set ``rayaccel_nodes`` from node labels (``NodeView``s or ``ray.nodes()`` dicts, :mod:`ray_accel_ext.cluster.nodes`).

    Discovery itself runs in the ``ray start`` process before the node exists, where no Ray
    metric can be recorded; this publishes its results, as the nodes carry them, cluster-side.
    """
    counts: dict[tuple[str, str, str, str], int] = {}
    for node in node_views(nodes):
        labels = node.labels
        key = (
            _tag(labels.get(GENERATION)),
            _tag(labels.get(FABRIC_TOPOLOGY) or labels.get(TPU_TOPOLOGY)),
            _tag(labels.get(DISCOVERY)),
            _tag(labels.get(VENDOR)),
        )
        counts[key] = counts.get(key, 0) + 1
    m = metrics()
    if m is not None:
        for (gen, topo, disc, vendor), n in counts.items():
            m["nodes"].set(n, tags={"generation": gen, "topology": topo, "discovery": disc, "vendor": vendor})
    return counts


def serve_request(route: str, outcome: str = "ok", **fields: Any) -> dict[str, Any]:
    """One routed Serve request: a ``serve_request`` log line plus ``rayaccel_serve_requests``."""
    record = emit("serve_request", route=route, outcome=outcome, **fields)
    m = metrics()
    if m is not None:
        m["serve"].inc(1, tags={"route": route, "outcome": outcome})
    return record
