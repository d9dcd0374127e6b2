"""The cluster's state gauges as series: alive nodes, where they sit, what is degraded, what is
held. Pure (the metrics process, :mod:`.exporter`, reads the tables and sets what this returns
through :func:`ray_accel_ext.telemetry.set_state`); the gauges are :data:`~ray_accel_ext.telemetry.STATE_GAUGES`."""

from __future__ import annotations

from typing import Any

from ..labels import (
    ACCELERATOR_TYPE,
    DISCOVERY,
    FABRIC_DOMAIN,
    FABRIC_TOPOLOGY,
    GENERATION,
    LEVELS,
    RACK,
    SKU,
    TPU_TOPOLOGY,
    VENDOR,
)
from ..placement.ranks import rank_domains
from ..telemetry import STATE_GAUGES, Series
from .nodes import node_views

__all__ = ["inventory_metrics", "state_series"]


def _tag(value: Any) -> str:
    return "" if value is None else str(value)


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


def state_series(nodes, claims: dict[str, dict[str, Any]] | None = None, health: dict[str, dict[str, Any]] | None = None,
                 pg_table: dict[str, dict[str, Any]] | None = None, waiters: int = 0,
                 levels: tuple[str, ...] = ()) -> Series:
    """Every state gauge's series (tags, value) from the node table, the claim registry's
    snapshot, the health registry's marks and ``placement_group_table()`` (the hosts each held
    group's bundles sit on). Pure: the metrics process sets what it returns. ``levels``:
    placement levels to report even when nothing is held there (value 0)."""
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
