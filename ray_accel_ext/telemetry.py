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
:func:`state_series`:

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

from .cluster.nodes import node_views
from .labels import (
    ACCELERATOR_TYPE,
    DISCOVERY,
    FABRIC_DOMAIN,
    FABRIC_HOSTS,
    FABRIC_TOPOLOGY,
    GENERATION,
    LEVELS,
    RACK,
    SKU,
    TPU_TOPOLOGY,
    VENDOR,
)

__all__ = [
    "emit",
    "discovery_event",
    "placement_event",
    "inventory_metrics",
    "state_series",
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


def inventory_metrics(nodes) -> dict[tuple[str, str, str, str], int]:
    """Alive nodes (``NodeView``s or ``ray.nodes()`` dicts) counted by ``(generation, topology,
    discovery, vendor)``, the ``rayaccel_nodes`` series."""
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
    return counts


Series = dict[str, list[tuple[dict[str, str], float]]]


def state_series(nodes, claims: dict[str, dict[str, Any]] | None = None, health: dict[str, dict[str, Any]] | None = None,
                 pg_table: dict[str, dict[str, Any]] | None = None, waiters: int = 0,
                 levels: tuple[str, ...] = ()) -> Series:
    """Every state gauge's series (tags, value) from the node table, the claim registry's
    snapshot, the health registry's marks and ``placement_group_table()`` (the hosts each held
    group's bundles sit on). Pure: the metrics process sets what it returns. ``levels``:
    placement levels to report even when nothing is held there (value 0)."""
    from .placement.ranks import rank_domains

    views = node_views(nodes)
    health = health or {}
    claims = claims or {}
    out: Series = {name: [] for name in STATE_GAUGES}
    for (gen, topo, disc, vendor), n in sorted(inventory_metrics(views).items()):
        out["rayaccel_nodes"].append(({"generation": gen, "topology": topo, "discovery": disc, "vendor": vendor}, n))
    ranks = rank_domains(views, FABRIC_DOMAIN)
    index = {h.node_id: h.index for d in ranks.values() for h in d.hosts}
    by_id = {}
    for node in views:
        labels = node.labels
        by_id[node.node_id] = node
        out["rayaccel_node_info"].append(({
            "node": node.node_id, "hostname": node.hostname, "vendor": _tag(labels.get(VENDOR)),
            "sku": _tag(labels.get(SKU)), "generation": _tag(labels.get(GENERATION)),
            "accelerator_type": _tag(labels.get(ACCELERATOR_TYPE)), "fabric_domain": _tag(labels.get(FABRIC_DOMAIN)),
            "host_index": _tag(index.get(node.node_id)), "rack": _tag(labels.get(RACK)),
            "discovery": _tag(labels.get(DISCOVERY)),
        }, 1.0))
        mark = health.get(node.node_id) or {}
        degraded = labels.get(DISCOVERY) == "degraded" or mark.get("status") == "degraded"
        degraded = degraded or mark.get("device_status") == "failed"
        out["rayaccel_node_degraded"].append(({"node": node.node_id, "hostname": node.hostname}, 1.0 if degraded else 0.0))
        for dev in mark.get("devices", []):
            out["rayaccel_device_health"].append(({"node": node.node_id, "device": str(dev.get("device")),
                                                   "index": _tag(dev.get("index"))}, float(dev.get("health", 1))))
    for domain, r in ranks.items():
        out["rayaccel_domain_hosts"].append(({"domain": domain}, float(r.size)))
    held: dict[str, int] = dict.fromkeys(levels, 0)
    hosts: dict[tuple[str, str, str], int] = {}
    level_of = {key: level for level, key in LEVELS.items()}
    for claim_key, entry in sorted(claims.items()):
        if entry.get("pg") is None:
            continue  # claimed, placement group not made yet: not a reservation
        label_key = claim_key.partition("=")[0]
        level = level_of.get(label_key, label_key)
        held[level] = held.get(level, 0) + 1
        placed = set(((pg_table or {}).get(entry["pg"]) or {}).get("bundles_to_node_id", {}).values()) & set(by_id)
        members = [by_id[n] for n in sorted(placed) or entry.get("nodes", ()) if n in by_id]
        first = members[0].labels if members else {}
        key = (level, _tag(first.get(GENERATION)), _tag(first.get(FABRIC_TOPOLOGY) or first.get(TPU_TOPOLOGY)))
        hosts[key] = hosts.get(key, 0) + len(placed)
    for level, n in sorted(held.items()):
        out["rayaccel_reserved_domains"].append(({"level": level}, float(n)))
    for (level, gen, topo), n in sorted(hosts.items()):
        out["rayaccel_placement_hosts"].append(({"level": level, "generation": gen, "topology": topo}, float(n)))
    out["rayaccel_placement_waiters"].append(({}, float(waiters)))
    return out


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
