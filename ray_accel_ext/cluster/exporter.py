"""The cluster's one metrics process: sets the state gauges again and again while Ray runs.

Ray exports a gauge value once and forgets it after about twice its export interval (measured
on Ray 2.60: a gauge set once is gone from ``/metrics`` within 30 s), so a state such as "this
domain is reserved" must be set again for as long as it holds, and by one process, not by
whichever driver reserved it (Ray exports each process's gauges as separate series, told apart
by ``WorkerId``). This is a named detached actor (``rayaccel-metrics`` in namespace
``rayaccel``, zero CPUs, on the head node, restarted when it dies) whose thread reads
the node table, the claim registry, the health marks and the held placement groups every
:func:`ray_accel_ext.telemetry.refresh_interval_s` (5 s at Ray's default 10 s export) and sets
:func:`ray_accel_ext.cluster.state.state_series`. A series whose subject is gone (a dead node) is no
longer set and leaves the export by Ray's own expiry.

The claim registry (:mod:`ray_accel_ext.placement.claims`) starts it with itself and asks it to
refresh when its claims or line change (:func:`refresh_soon`; at most every 0.5 s, the last change
always); :func:`ensure_exporter` starts it without placing anything.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["EXPORTER_ACTOR", "EXPORTER_NAMESPACE", "ensure_exporter", "refresh_soon", "exporter_status"]

EXPORTER_ACTOR = "rayaccel-metrics"
EXPORTER_NAMESPACE = "rayaccel"
_log = logging.getLogger(__name__)
# The shortest time between two refreshes that pokes ask for (Ray exports a gauge every 10 s by default).
POKE_GAP_S = 0.5


def _exporter_class():
    import ray

    from .nodes import HEAD_RESOURCE

    @ray.remote(num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1, max_task_retries=-1, max_concurrency=4)
    class MetricsExporter:
        """Sets the state gauges from the cluster's state, every ``interval_s``."""

        def __init__(self, interval_s: float | None = None) -> None:
            from ray_accel_ext import telemetry

            self._interval = float(interval_s or telemetry.refresh_interval_s())
            self._wake = threading.Event()
            self._lock = threading.Lock()
            self._levels: set[str] = set()
            self._status: dict[str, Any] = {"refreshes": 0, "series": 0, "last_error": None, "interval_s": self._interval}
            threading.Thread(target=self._loop, name="rayaccel-metrics", daemon=True).start()

        def _loop(self) -> None:
            while True:
                started = time.monotonic()
                try:
                    self.refresh()
                except Exception as exc:  # noqa: BLE001 - keep exporting; say why this round failed
                    self._status["last_error"] = f"{type(exc).__name__}: {exc}"
                    _log.warning("metrics refresh failed: %s", exc)
                self._wake.wait(self._interval)
                # Every reservation and release pokes: the pokes of a burst share one refresh.
                time.sleep(max(0.0, started + min(POKE_GAP_S, self._interval) - time.monotonic()))
                self._wake.clear()

        def refresh(self) -> dict[str, Any]:
            import ray

            from ray_accel_ext import telemetry
            from ray_accel_ext.cluster.health import registry_marks
            from ray_accel_ext.cluster.nodes import alive_nodes
            from ray_accel_ext.cluster.state import state_series
            from ray_accel_ext.placement.claims import claims_registry
            from ray_accel_ext.placement.groups import group_entries

            with self._lock:
                registry = claims_registry()
                claims_ref, queue_ref = registry.snapshot.remote(), registry.queue.remote()
                nodes = alive_nodes()
                health = registry_marks(timeout_s=5.0)
                claims = ray.get(claims_ref, timeout=30)
                waiters = len(ray.get(queue_ref, timeout=30))
                # The held groups only, one read each: the whole table grows with every group
                # ever made (removed ones stay in it).
                pg_table = group_entries(c["pg"] for c in claims.values() if c.get("pg"))
                series = state_series(nodes, claims, health, pg_table, waiters, tuple(sorted(self._levels)))
                self._levels |= {tags["level"] for tags, _ in series["rayaccel_reserved_domains"]}
                count = telemetry.set_state(series)
                self._status.update(refreshes=self._status["refreshes"] + 1, series=count, last_error=None,
                                    at=time.time())
                return dict(self._status)

        def poke(self) -> None:
            self._wake.set()

        def status(self) -> dict[str, Any]:
            return dict(self._status)

    return MetricsExporter


_lock = threading.Lock()
_cls: list[Any] = []
_handles: dict[str, Any] = {}


def ensure_exporter():
    """The cluster's metrics process (started if it is not running); its actor handle."""
    import ray

    cluster = ray.get_runtime_context().gcs_address
    with _lock:
        if cluster in _handles:
            return _handles[cluster]
        if not _cls:
            _cls.append(_exporter_class())
        handle = _handles[cluster] = _cls[0].options(
            name=EXPORTER_ACTOR, namespace=EXPORTER_NAMESPACE, lifetime="detached", get_if_exists=True).remote()
        return handle


def refresh_soon() -> None:
    """Ask the metrics process to set the gauges now (starting it if needed); does not wait."""
    ensure_exporter().poke.remote()


def exporter_status(timeout_s: float = 30.0) -> dict[str, Any]:
    """The metrics process's counters: refreshes, series set, interval, last error."""
    import ray

    return ray.get(ensure_exporter().status.remote(), timeout=timeout_s)
