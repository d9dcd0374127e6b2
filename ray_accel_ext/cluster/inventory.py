"""Cluster inventory: the full description of every alive node of a running Ray cluster.

Gathered through public Ray APIs only:

* ``ray.nodes()``: node ids, addresses, resources and labels;
* one zero-CPU task per node, pinned with ``NodeAffinitySchedulingStrategy(soft=False)``, runs
  discovery on that node with the node's own host (the worker inherits the raylet's environment,
  so ``RAY_ACCEL_ROOT`` and the metadata endpoints of a simulated node apply) and returns
  ``NodeInventory.to_dict()``;
* ``ray.util.placement_group_table()``: every placement group, its bundles' nodes, and from them
  the domains it occupies (the State API's experimental ``topology_strategy`` is added when the
  dashboard's state endpoint is reachable);
* the health registry actor of :mod:`ray_accel_ext.cluster.health` (a named detached actor), for devices
  that disappeared or appeared after a node started.

Nodes are grouped by domain: the ``rayaccel.io/fabric-domain`` label (TPU slice, NVLink domain,
UltraServer), else ``rayaccel.io/rack``, else the host. Labels decide the grouping so a node whose
probe failed is still placed; the probe adds devices, links and NICs. Within a domain nodes are in
rank order, each with its ``host_index`` (:mod:`ray_accel_ext.placement.ranks`: hardware indices
where the hosts publish them, else a stable cluster-side order).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterUnreachable
from ..labels import (
    DISCOVERY,
    FABRIC_DOMAIN,
    FABRIC_HOSTS,
    FABRIC_TOPOLOGY,
    RACK,
)
from ..model import NodeInventory, Problem, reason_line
from ..placement.groups import UNPLACED
from ..placement.ranks import rank_domains
from ..problems import DEGRADED, DEVICE_FAULT, PROBE_FAILED, START_DEGRADED
from .nodes import NodeView, node_views

__all__ = [
    "ClusterNode",
    "Domain",
    "PlacementGroupInfo",
    "ClusterInventory",
    "assemble",
    "ClusterUnreachable",
    "DOMAIN_LABEL",
    "RACK_LABEL",
]

DOMAIN_LABEL = FABRIC_DOMAIN
RACK_LABEL = RACK
DISCOVERY_LABEL = DISCOVERY


@dataclass
class ClusterNode:
    """One alive node: what Ray says about it, what discovery found on it, and its health marks."""

    node_id: str
    address: str
    hostname: str
    is_head: bool
    labels: dict[str, str]
    resources: dict[str, float]
    inventory: NodeInventory | None = None
    probe_error: str | None = None
    health: dict[str, Any] | None = None
    domain_level: str = "host"
    domain_id: str = ""
    pcie: dict[str, Any] | None = None  # every device-NIC path class (cluster.topology.pcie_paths)
    host_index: int | None = None

    @property
    def degraded(self) -> bool:
        return bool(self.reasons())

    def problems(self) -> list[Problem]:
        """Why this node is degraded, as coded problems: discovery at start (the probe's
        inventory), the probe, and health after start."""
        out: list[Problem] = []
        if self.inventory is not None:
            out += self.inventory.all_problems()
        elif self.labels.get(DISCOVERY_LABEL) == "degraded":
            out.append(Problem(code=START_DEGRADED, message=f"started with {DISCOVERY}=degraded (see the node's ray start log)"))
        if self.probe_error:
            out.append(Problem(code=PROBE_FAILED, message=f"inventory probe failed: {self.probe_error}"))
        if self.health and self.health.get("status") not in (None, "ok"):
            out += _health_problems(self.health)
        if self.health and self.health.get("device_status") == "failed":
            out += [Problem(code=str(p.get("code")), message=str(p.get("message", "")), device=p.get("device"))
                    for p in self.health.get("device_problems", []) if p.get("code") == DEVICE_FAULT]
        return out

    def reasons(self) -> list[str]:
        """Why this node is degraded, one line each (:meth:`problems` in words)."""
        return [reason_line(p) if p.backend else p.message for p in self.problems()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.address,
            "hostname": self.hostname,
            "is_head": self.is_head,
            "labels": dict(sorted(self.labels.items())),
            "resources": dict(sorted(self.resources.items())),
            "inventory": self.inventory.to_dict() if self.inventory is not None else None,
            "probe_error": self.probe_error,
            "health": self.health,
            "domain": {"level": self.domain_level, "id": self.domain_id, "host_index": self.host_index},
            "pcie": self.pcie,
            "degraded": self.degraded,
            "reasons": self.reasons(),
            "problems": [p.to_dict() for p in self.problems()],
        }


def _health_problems(health: Mapping[str, Any]) -> list[Problem]:
    """The health monitor's coded problems (its ``problems``; a plain ``reasons`` line, from a
    monitor that sends none, gets the generic code)."""
    coded = health.get("problems")
    if isinstance(coded, list):
        return [Problem(code=str(p.get("code") or DEGRADED), message=str(p.get("message", ""))) for p in coded
                if isinstance(p, Mapping)]
    return [Problem(code=DEGRADED, message=str(r)) for r in health.get("reasons", [])]


@dataclass
class Domain:
    """A group of nodes: one fabric domain, rack, or host."""

    level: str  # "fabric" | "rack" | "host"
    id: str
    kind: str  # fabric kind (tpu-slice, nvlink-domain, ultraserver, host) or "rack"
    node_ids: list[str] = field(default_factory=list)
    expected_hosts: int | None = None
    topology: str | None = None
    product: str | None = None
    placement_groups: list[str] = field(default_factory=list)
    rank_source: str | None = None

    @property
    def complete(self) -> bool | None:
        """True when every host of the domain is in the cluster (None when unknown)."""
        return None if self.expected_hosts is None else len(self.node_ids) >= self.expected_hosts

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "id": self.id,
            "kind": self.kind,
            "nodes": list(self.node_ids),
            "expected_hosts": self.expected_hosts,
            "complete": self.complete,
            "topology": self.topology,
            "product": self.product,
            "placement_groups": list(self.placement_groups),
            "rank_source": self.rank_source,
        }


@dataclass
class PlacementGroupInfo:
    """A placement group, where its bundles are, and which domains that makes it occupy."""

    pg_id: str
    name: str
    state: str
    strategy: str
    bundles: list[dict[str, Any]]  # {"index", "resources", "node_id"}
    domains: list[str] = field(default_factory=list)  # "<level>:<id>"
    topology_strategy: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pg_id,
            "name": self.name,
            "state": self.state,
            "strategy": self.strategy,
            "bundles": self.bundles,
            "domains": list(self.domains),
            "topology_strategy": self.topology_strategy,
        }


@dataclass
class ClusterInventory:
    """Every alive node, grouped by domain, with the placement groups that occupy them."""

    nodes: list[ClusterNode]
    domains: list[Domain]
    placement_groups: list[PlacementGroupInfo]
    gathered_at: float
    ray_version: str | None = None

    def node(self, node_id: str) -> ClusterNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def domain_of(self, node_id: str) -> Domain:
        return next(d for d in self.domains if node_id in d.node_ids)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "gathered_at": self.gathered_at,
            "ray_version": self.ray_version,
            "summary": {
                "nodes": len(self.nodes),
                "domains": len(self.domains),
                "degraded": sum(1 for n in self.nodes if n.degraded),
                "placement_groups": len(self.placement_groups),
                "devices": sum(len(d.devices) for n in self.nodes if n.inventory for d in n.inventory.descriptions),
            },
            "domains": [d.to_dict() for d in self.domains],
            "nodes": [n.to_dict() for n in self.nodes],
            "placement_groups": [p.to_dict() for p in self.placement_groups],
        }


# -- assembly (pure: from Ray's answers to the inventory) ---------------------------------------


def _domain_of(labels: Mapping[str, str], hostname: str) -> tuple[str, str]:
    if labels.get(DOMAIN_LABEL):
        return "fabric", labels[DOMAIN_LABEL]
    if labels.get(RACK_LABEL):
        return "rack", labels[RACK_LABEL]
    return "host", hostname


def _primary_fabric(inventory: NodeInventory | None):
    primary = inventory.primary if inventory is not None else None
    return primary.fabric if primary is not None else None


def assemble(
    ray_nodes: Iterable[Mapping[str, Any] | NodeView],
    probes: Mapping[str, Mapping[str, Any] | str],
    pg_table: Mapping[str, Mapping[str, Any]],
    health: Mapping[str, Mapping[str, Any]] | None = None,
    topology_strategies: Mapping[str, Mapping[str, str]] | None = None,
    ray_version: str | None = None,
) -> ClusterInventory:
    """Build the inventory from ``ray.nodes()``, probe results (dict, or an error string) per
    node id, ``placement_group_table()`` and health marks per node id."""
    health = health or {}
    nodes = [_cluster_node(view, probes.get(view.node_id), health) for view in node_views(ray_nodes)]
    ranks = _rank_nodes(nodes)
    domains = _group_domains(nodes, ranks)
    pgs = _placement_groups(pg_table, nodes, domains, topology_strategies or {})
    kinds = ("tpu-slice", "nvlink-domain", "ultraserver", "xgmi-hive")
    ordered = sorted(domains.values(), key=lambda d: (
        {"fabric": 0, "rack": 1, "host": 2}[d.level], kinds.index(d.kind) if d.kind in kinds else len(kinds), d.id))
    return ClusterInventory(nodes=nodes, domains=ordered, placement_groups=pgs, gathered_at=time.time(), ray_version=ray_version)


def _cluster_node(view: NodeView, probe: Mapping[str, Any] | str | None,
                  health: Mapping[str, Mapping[str, Any]]) -> ClusterNode:
    """One node from Ray's view of it, its probe's answer (or error) and its health marks."""
    inventory = None
    error = None
    name = view.hostname
    pcie = None
    if isinstance(probe, Mapping):
        pcie = probe.get("pcie") if isinstance(probe.get("pcie"), Mapping) else None
        try:
            inventory = NodeInventory.from_dict(probe["inventory"])
        except Exception as exc:  # noqa: BLE001 - a node from another version: keep its labels
            error = f"unreadable inventory: {exc}"
        name = str(probe.get("hostname") or name)
    elif probe is not None:
        error = str(probe)
    labels = dict(view.labels)
    node = ClusterNode(
        node_id=view.node_id,
        address=view.address,
        hostname=name,
        is_head=view.is_head,
        labels=labels,
        resources=dict(view.resources),
        inventory=inventory,
        probe_error=error,
        health=dict(health[view.node_id]) if view.node_id in health else None,
        pcie=dict(pcie) if pcie is not None else None,
    )
    node.domain_level, node.domain_id = _domain_of(labels, name)
    return node


def _rank_nodes(nodes: list[ClusterNode]) -> dict[str, dict[str, Any]]:
    """Each node's ``host_index`` in its fabric domain or rack; sorts ``nodes`` into domain and rank
    order; the ranks per level and domain id."""
    ranks = {}
    for level, key in (("fabric", DOMAIN_LABEL), ("rack", RACK_LABEL)):
        members = [NodeView(n.node_id, n.labels, n.resources, n.address, n.hostname) for n in nodes if n.domain_level == level]
        ranks[level] = rank_domains(members, key)
    for node in nodes:
        domain_ranks = ranks.get(node.domain_level, {}).get(node.domain_id)
        node.host_index = domain_ranks.index_of(node.node_id) if domain_ranks else 0
    nodes.sort(key=lambda n: (n.domain_level, n.domain_id, n.host_index or 0, n.hostname, n.node_id))
    return ranks


def _group_domains(nodes: list[ClusterNode], ranks) -> dict[tuple[str, str], Domain]:
    """The domains of ``nodes`` (in node order), described from their first node."""
    domains: dict[tuple[str, str], Domain] = {}
    for node in nodes:
        key = (node.domain_level, node.domain_id)
        dom = domains.get(key)
        if dom is None:
            fabric = _primary_fabric(node.inventory)
            kind = fabric.kind if fabric is not None and node.domain_level == "fabric" else node.domain_level
            hosts = node.labels.get(FABRIC_HOSTS)
            dom = domains[key] = Domain(
                level=node.domain_level,
                id=node.domain_id,
                kind=kind,
                expected_hosts=int(hosts) if node.domain_level == "fabric" and hosts and hosts.isdigit() else None,
                topology=node.labels.get(FABRIC_TOPOLOGY),
                product=fabric.product if fabric is not None and node.domain_level == "fabric" else None,
                rank_source=_rank_source(ranks, node),
            )
        dom.node_ids.append(node.node_id)
    return domains


def _placement_groups(pg_table: Mapping[str, Mapping[str, Any]], nodes: list[ClusterNode],
                      domains: dict[tuple[str, str], Domain],
                      topology_strategies: Mapping[str, Mapping[str, str]]) -> list[PlacementGroupInfo]:
    """The groups not removed, by name, each with the domains its bundles sit in (which also
    list the group)."""
    by_node = {n.node_id: f"{n.domain_level}:{n.domain_id}" for n in nodes}
    pgs: list[PlacementGroupInfo] = []
    for pg_id, raw in sorted(pg_table.items(), key=lambda kv: (kv[1].get("name") or "", kv[0])):
        state = str(raw.get("state", ""))
        if state == "REMOVED":
            continue
        bundles = _bundles(raw)
        occupied = sorted({by_node[b["node_id"]] for b in bundles if b["node_id"] in by_node})
        pgs.append(PlacementGroupInfo(
            pg_id=pg_id,
            name=str(raw.get("name") or ""),
            state=state,
            strategy=str(raw.get("strategy", "")),
            bundles=bundles,
            domains=occupied,
            topology_strategy=dict(topology_strategies.get(pg_id) or {}) or None,
        ))
        for key in occupied:
            level, _, did = key.partition(":")
            domains[(level, did)].placement_groups.append(pg_id)
    return pgs


def _bundles(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    bundle_nodes = {int(k): v for k, v in (raw.get("bundles_to_node_id") or {}).items()}
    out = []
    for index, res in sorted(((int(k), v) for k, v in (raw.get("bundles") or {}).items())):
        node_id = bundle_nodes.get(index) or ""
        out.append({
            "index": index,
            "resources": {k: float(v) for k, v in (res or {}).items()},
            "node_id": None if node_id in UNPLACED else node_id,
        })
    return out


def _rank_source(ranks, node: ClusterNode) -> str | None:
    domain_ranks = ranks.get(node.domain_level, {}).get(node.domain_id)
    return domain_ranks.source if domain_ranks else None


# -- gathering from a live cluster --------------------------------------------------------------
