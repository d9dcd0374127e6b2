"""Gathering the cluster inventory from a live Ray cluster: one discovery probe per node (a Ray
task pinned to it), Ray's node and placement-group tables, health marks; :func:`.inventory.assemble`
turns them into a :class:`~.inventory.ClusterInventory`."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from ..errors import ClusterUnreachable
from ..host.protocol import ROOT_ENV
from .inventory import ClusterInventory, assemble
from .nodes import alive_nodes
from .reach import CONNECT_TIMEOUT_S, INIT_TIMEOUT_S, bounded_init, check_reachable, check_token, resolve_address

__all__ = ["InventoryCollector", "gather", "probe_node"]


def probe_node() -> dict[str, Any]:
    """Run discovery on the node this runs on (inside a Ray task); a JSON-able dict."""
    from ..host import host_from_env
    from ..hw.cloud import hostname
    from ..node.discovery import discover
    from .topology import pcie_paths

    host = host_from_env()
    inventory = discover(host)
    return {"inventory": inventory.to_dict(), "hostname": hostname(host), "root": os.environ.get(ROOT_ENV),
            "pcie": pcie_paths(host, inventory)}


def _ensure_ray(address: str | None, timeout_s: float = INIT_TIMEOUT_S):
    import ray

    if not ray.is_initialized():
        target = resolve_address(address)
        deadline = time.monotonic() + timeout_s
        check_reachable(target, min(CONNECT_TIMEOUT_S, timeout_s))
        check_token(target, min(CONNECT_TIMEOUT_S, timeout_s))
        try:
            bounded_init(lambda: ray.init(address=target, logging_level="ERROR", log_to_driver=False,
                                          namespace="ray_accel_ext"), target, timeout_s, deadline)
        except ConnectionError as exc:
            raise ClusterUnreachable(
                f"no Ray cluster at {target}: {exc} (pass --address HOST:PORT, or set RAY_ADDRESS; a cluster "
                "with token auth also needs RAY_AUTH_TOKEN)"
            ) from None
    return ray


def _topology_strategies() -> dict[str, dict[str, str]]:
    """``topology_strategy`` per placement group from the State API; empty when it is unreachable
    (it needs the dashboard, which is optional) or Ray predates the field (2.57)."""
    from ..compat import has_feature

    if not has_feature("topology_strategy"):
        return {}
    try:
        from ray.util.state import list_placement_groups

        rows = list_placement_groups(detail=True, raise_on_missing_output=False, timeout=2)
    except Exception:  # noqa: BLE001 - no dashboard: the field is optional
        return {}
    out = {}
    for row in rows:
        data = row if isinstance(row, Mapping) else getattr(row, "__dict__", {})
        strategy = data.get("topology_strategy")
        if strategy:
            out[str(data.get("placement_group_id"))] = dict(strategy)
    return out


class InventoryCollector:
    """Gathers the inventory again and again (the dashboard), probing each node only once.

    Discovery describes hardware that does not change while a node runs (changes are the health
    monitor's job), so a node's probe result is kept for as long as the node is alive.
    """

    def __init__(self, address: str | None = None, *, probe_timeout_s: float = 60.0, topology: bool = True) -> None:
        self.address = address
        self.probe_timeout_s = probe_timeout_s
        self.topology = topology
        self._probes: dict[str, dict[str, Any] | str] = {}

    def gather(self) -> ClusterInventory:
        """One inventory of the cluster as it is now."""
        ray = _ensure_ray(self.address, self.probe_timeout_s)
        from ray.util import placement_group_table
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from ..compat import ray_version
        from .health import registry_marks

        ray_nodes = alive_nodes()
        alive = {n.node_id for n in ray_nodes}
        self._probes = {k: v for k, v in self._probes.items() if k in alive}
        missing = [nid for nid in alive if nid not in self._probes or isinstance(self._probes[nid], str)]
        if missing:
            remote = ray.remote(num_cpus=0, max_retries=0)(probe_node)
            refs = {
                nid: remote.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nid, soft=False),
                    name="ray_accel_ext.cluster.inventory.probe",
                ).remote()
                for nid in missing
            }
            deadline = time.monotonic() + self.probe_timeout_s
            for nid, ref in refs.items():
                try:
                    self._probes[nid] = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                except Exception as exc:  # noqa: BLE001 - a node that cannot answer keeps its labels
                    ray.cancel(ref, force=True)
                    self._probes[nid] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        return assemble(
            ray_nodes,
            self._probes,
            placement_group_table(),
            health=registry_marks(),
            topology_strategies=_topology_strategies() if self.topology else None,
            ray_version=ray_version(),
        )


def gather(address: str | None = None, *, probe_timeout_s: float = 60.0) -> ClusterInventory:
    """The inventory of the cluster at ``address`` (or the one this process is connected to)."""
    return InventoryCollector(address, probe_timeout_s=probe_timeout_s).gather()
