"""Discovery and placement events: one structured JSON log line per event, and Ray metrics.

Logger ``ray_accel_ext.telemetry``; each record's message is a JSON object with ``event`` and the
fields an incident review needs.

Ray metrics (``ray.util.metrics``; Ray exports them with its own Prometheus metrics, each name
prefixed ``ray_``) are recorded only in a process connected to Ray; ``ray`` is imported lazily so
the start hook and discovery stay free of it. Tag values are never ``"none"``: an unknown value is
the empty string. Events, counted where they happen:

* ``rayaccel_placements`` (Counter) tags ``outcome, reason, level, step, fallback, generation,
  topology``; ``reason`` is the class of a failure (:data:`REASON_CLASSES`: ``never-fits`` no
  domain could ever hold it, ``no-domain-free`` fitting domains were all held, ``timeout`` their
  placement groups did not become ready, ``error`` anything else), empty when ready
* ``rayaccel_placement_wait_seconds`` (Histogram) tags ``outcome, reason, level, step``
* ``rayaccel_serve_requests`` (Counter, the Serve example's routing) tags ``route, outcome``

State, set by the cluster's one metrics process (:mod:`ray_accel_ext.cluster.exporter`) again and
again, faster than Ray forgets a gauge that is not set (:func:`refresh_interval_s`), from
:func:`ray_accel_ext.cluster.state.state_series` (the cluster side reads the node table; this
module imports nothing above the label schema, so the start hook loads no cluster code):

* ``rayaccel_nodes`` alive nodes by ``generation, topology, discovery, vendor``
* ``rayaccel_node_info`` 1 per alive node: ``node, hostname, vendor, sku, generation,
  accelerator_type, fabric_domain, host_index, rack, discovery``
* ``rayaccel_node_degraded`` per alive node (``node, hostname``): 1 when it started degraded or
  its health monitor reports a device missing, else 0
* ``rayaccel_domain_hosts`` alive hosts per fabric domain (``domain``)
* ``rayaccel_reserved_domains`` domains held cluster-wide (``level``)
* ``rayaccel_placement_hosts`` hosts in held reservations (``level, generation, topology``)
* ``rayaccel_placement_waiters`` callers waiting in line for a domain
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from .labels import (
    FABRIC_DOMAIN,
    FABRIC_HOSTS,
    FABRIC_TOPOLOGY,
)

__all__ = [
    "emit",
    "discovery_event",
    "placement_event",
    "set_state",
    "refresh_interval_s",
    "STATE_GAUGES",
    "REASON_CLASSES",
    "REASON_NEVER_FITS",
    "REASON_NO_DOMAIN_FREE",
    "REASON_TIMEOUT",
    "REASON_ERROR",
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
        problems=[{"code": p.code, "backend": p.backend, "message": p.message} for p in inventory.all_problems()],
    )


# -- Ray metrics (lazy: only where Ray is connected) -------------------------------------------------

REASON_NEVER_FITS = "never-fits"
REASON_NO_DOMAIN_FREE = "no-domain-free"
REASON_TIMEOUT = "timeout"
REASON_ERROR = "error"
REASON_CLASSES = (REASON_NEVER_FITS, REASON_NO_DOMAIN_FREE, REASON_TIMEOUT, REASON_ERROR)

_WAIT_BOUNDARIES = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0]
_metrics: dict[str, Any] = {}
_metrics_lock = threading.Lock()

# name -> (description, tag keys) of the state gauges the metrics process sets.
STATE_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "rayaccel_nodes": ("Alive nodes by discovery result", ("generation", "topology", "discovery", "vendor")),
    "rayaccel_node_info": ("One series per alive node, value 1: what it is and where", (
        "node", "hostname", "vendor", "sku", "generation", "accelerator_type", "fabric_domain", "host_index", "rack",
        "discovery")),
    "rayaccel_node_degraded": ("1 when the node started degraded or a device of it went missing", ("node", "hostname")),
    "rayaccel_device_health": ("Per device after start: 1 healthy, 0 failed (device fault)", ("node", "device", "index")),
    "rayaccel_domain_hosts": ("Alive hosts of a fabric domain", ("domain",)),
    "rayaccel_reserved_domains": ("Domains held by reservations, cluster-wide", ("level",)),
    "rayaccel_placement_hosts": ("Hosts in held reservations", ("level", "generation", "topology")),
    "rayaccel_placement_waiters": ("Callers waiting in line for a domain", ()),
}


def refresh_interval_s(report_interval_ms: float | None = None) -> float:
    """How often the state gauges are set again: a quarter of the time Ray keeps a gauge value
    that is not set again (twice its export interval, at least 1 s: Ray 2.60
    ``ray/_private/telemetry/open_telemetry_metric_recorder.py`` ``_resolve_gauge_ttl_seconds``;
    the value is exported once per interval, then forgotten)."""
    if report_interval_ms is None:
        import ray

        report_interval_ms = ray._config.metrics_report_interval_ms()
    ttl_s = 2 * max(float(report_interval_ms), 1000.0) / 1000.0
    return ttl_s / 4


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
                    "rayaccel_placements", "Domain placements by outcome, failure reason and fallback step",
                    tag_keys=("outcome", "reason", "level", "step", "fallback", "generation", "topology"),
                ),
                wait=Histogram(
                    "rayaccel_placement_wait_seconds", "Time from request to ready (or failure)",
                    boundaries=_WAIT_BOUNDARIES, tag_keys=("outcome", "reason", "level", "step"),
                ),
                serve=Counter("rayaccel_serve_requests", "Requests by route", tag_keys=("route", "outcome")),
            )
            for name, (description, keys) in STATE_GAUGES.items():
                _metrics[name] = Gauge(name, description, tag_keys=keys)
        return _metrics


def _tag(value: Any) -> str:
    return "" if value is None else str(value)


def placement_event(fields: dict[str, Any]) -> dict[str, Any]:
    """One placement (ready or failed): a ``placement`` log line plus Ray metrics."""
    record = emit("placement", **fields)
    m = metrics()
    if m is not None:
        outcome, level, step = _tag(fields.get("outcome")), _tag(fields.get("level")), _tag(fields.get("step"))
        reason = _tag(fields.get("reason_class"))
        m["placements"].inc(1, tags={"outcome": outcome, "reason": reason, "level": level, "step": step,
                                     "fallback": "true" if fields.get("fallback") else "false",
                                     "generation": _tag(fields.get("generation")),
                                     "topology": _tag(fields.get("topology"))})
        if fields.get("wait_s") is not None:
            m["wait"].observe(float(fields["wait_s"]), tags={"outcome": outcome, "reason": reason, "level": level,
                                                             "step": step})
    return record


# name -> rows of (tags, value): what :func:`set_state` sets (:func:`ray_accel_ext.cluster.state.state_series`).
Series = dict[str, list[tuple[dict[str, str], float]]]


def set_state(series: Series) -> int:
    """Set every series of :func:`state_series` on this process's gauges; how many were set."""
    m = metrics()
    if m is None:
        return 0
    count = 0
    for name, rows in series.items():
        for tags, value in rows:
            m[name].set(value, tags=tags)
            count += 1
    return count


def serve_request(route: str, outcome: str = "ok", **fields: Any) -> dict[str, Any]:
    """One routed Serve request: a ``serve_request`` log line plus ``rayaccel_serve_requests``."""
    record = emit("serve_request", route=route, outcome=outcome, **fields)
    m = metrics()
    if m is not None:
        m["serve"].inc(1, tags={"route": route, "outcome": outcome})
    return record
