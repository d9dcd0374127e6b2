"""Discovery and placement events: one structured JSON log line per event.

Logger ``ray_accel_ext.telemetry``; each record's message is a JSON object with ``event`` and the
fields an incident review needs. Ray metrics for placement live in :mod:`ray_accel_ext.placement`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["emit", "discovery_event", "TELEMETRY_LOGGER"]

TELEMETRY_LOGGER = "ray_accel_ext.telemetry"
_log = logging.getLogger(TELEMETRY_LOGGER)


def emit(event: str, **fields: Any) -> dict[str, Any]:
    """Log one event as a JSON line and return it."""
    record = {"event": event, "ts": round(time.time(), 3), **fields}
    _log.info(json.dumps(record, sort_keys=True, default=str))
    return record


def discovery_event(inventory, spec) -> dict[str, Any]:
    """The node-discovery event: what was found, how long it took, and why it is degraded."""
    primary = inventory.descriptions[0] if inventory.descriptions else None
    return emit(
        "discovery",
        outcome="degraded" if inventory.degraded else "ok",
        elapsed_ms=round(inventory.elapsed_s * 1000, 2),
        families=[d.backend for d in inventory.descriptions],
        generation=primary.sku.generation if primary else None,
        devices=sum(len(d.devices) for d in inventory.descriptions),
        fabric_domain=spec.labels.get("rayaccel.io/fabric-domain"),
        fabric_hosts=spec.labels.get("rayaccel.io/fabric-hosts"),
        topology=spec.labels.get("rayaccel.io/fabric-topology"),
        reasons=inventory.reasons(),
    )
