"""Everything the ``/api/cluster`` document needs, gathered from the connected Ray cluster."""

from __future__ import annotations

import time
from typing import Any

from ..collect import InventoryCollector
from ..nodes import alive_nodes
from .document import accelerator_resources, build_document
from .holders import ray_dashboard_url, read_holders
from .metrics import MetricsHistory

__all__ = ["ClusterSource"]


class ClusterSource:
    """Gathers the inventory, the holders and a metrics round on each :meth:`document` call.

    Node probes run once per node (:class:`InventoryCollector`); metric history accumulates across
    calls (``keep`` samples per series), so the dashboard's sparklines grow as it refreshes.
    """

    def __init__(self, address: str | None = None, *, probe_timeout_s: float = 60.0, keep: int = 60,
                 holders: bool = True, metrics: bool = True) -> None:
        self.collector = InventoryCollector(address, probe_timeout_s=probe_timeout_s)
        self.history = MetricsHistory(keep) if metrics else None
        self.holders = holders

    def document(self) -> dict[str, Any]:
        """One ``/api/cluster`` document of the cluster as it is now."""
        started = time.monotonic()
        inv = self.collector.gather()
        views = alive_nodes()
        dashboard = ray_dashboard_url()
        report = read_holders(views, accelerator_resources(inv), dashboard) if self.holders else None
        if self.history is not None:
            self.history.gather({v.node_id: f"http://{v.address}:{v.metrics_port}/metrics" for v in views if v.address and v.metrics_port})
        doc = build_document(inv, holders=report, metrics=self.history, ray_dashboard=dashboard)
        doc["sources"]["gather_s"] = round(time.monotonic() - started, 3)
        return doc
