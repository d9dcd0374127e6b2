"""The transport plan of a reservation: for every rank, the environment its collective library needs.

Pure: a function of the reserved hosts' published facts (:class:`HostFacts`: labels, resources,
descriptions, the interface of the node address) and the reservation's bundle-to-node mapping; no
Ray, no I/O. Ranks are laid out in topology order (:mod:`.order`): domain by domain as given (a
domain's index is its TPU slice id), host by host by the domain's host index, and inside a host
along the device fabric. Rank 0's host is the coordinator.

Each library module (:mod:`.nccl` for NCCL/RCCL, :mod:`.ucx`, :mod:`.efa`, :mod:`.neuron`,
:mod:`.tpu`, :mod:`.gloo`) has the same five functions: ``applies(view, ctx)`` (may read only the
view's family, vendor, NIC kinds, fabric kind and whether the interface is known), ``library``,
``host_env`` (same for every rank of a host), ``unit_env`` (depends only on the host's topology
and the rank's units, so hosts of one SKU share the work) and ``rank_env`` (the rank number, for
modules with ``IDENTITY``). The variables, their rules and their vendor sources are listed in
``docs/transport.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import RuntimeTopologyError
from ..model import Device
from . import efa, gloo, nccl, neuron, tpu, ucx
from .context import DEFAULT_PORTS, PlanContext
from .model import DomainPlan, HostPlan, HostView, RankPlan, ReservedDomain, TransportPlanError
from .order import host_sort_key
from .view import PARTITION_PREFIX, view_of

__all__ = ["TransportPlan", "plan_transport", "LIBRARIES", "VARIABLES"]

LIBRARIES = (nccl, ucx, efa, neuron, tpu, gloo)
VARIABLES: Mapping[str, str] = {name: url for module in LIBRARIES for name, url in module.VARIABLES.items()}


class TransportPlan:
    """Ranks, hosts and domains of a planned reservation, with each rank's environment.

    ``ranks[i].env`` is what rank ``i`` sets before its collective library starts. Look a worker
    up by where it runs with :meth:`rank_for` / :meth:`env_for` (node id and the accelerator ids Ray
    gave it); ``env_for`` recomputes the per-device variables when Ray gave the worker other
    devices of the host than the plan laid out (a bundle that holds part of a host).
    """

    def __init__(self, ranks: list[RankPlan], hosts: list[HostPlan], domains: list[DomainPlan],
                 views: dict[str, HostView], ctx: PlanContext, libraries: list[str], warnings: list[str],
                 units_per_rank: int | None) -> None:
        self.ranks: tuple[RankPlan, ...] = tuple(ranks)
        self.hosts: tuple[HostPlan, ...] = tuple(hosts)
        self.domains: tuple[DomainPlan, ...] = tuple(domains)
        self.libraries: tuple[str, ...] = tuple(libraries)
        self.warnings: tuple[str, ...] = tuple(warnings)
        self._units_per_rank = units_per_rank
        self._views: dict[str, HostView] = views
        self._ctx = ctx
        self._by_node: dict[str, list[RankPlan]] = {}
        for r in self.ranks:
            self._by_node.setdefault(r.node_id, []).append(r)

    def __repr__(self) -> str:
        return (f"TransportPlan(world_size={self.world_size}, hosts={len(self.hosts)}, "
                f"domains={[d.id for d in self.domains]}, libraries={self.libraries})")

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def resource(self) -> str:
        """The Ray resource the ranks hold (``GPU``, ``TPU``, ``neuron_cores``, a MIG profile's
        ``mig-1g.10gb``; ``""`` for CPU hosts)."""
        return next((v.resource for v in self._views.values() if v.resource), "")

    @property
    def units_per_rank(self) -> int:
        """Units of :attr:`resource` every rank holds; raises when ranks differ."""
        counts = {len(r.units) for r in self.ranks}
        if len(counts) != 1:
            raise TransportPlanError(f"ranks hold different unit counts {sorted(counts)}", counts=sorted(counts))
        return counts.pop()

    @property
    def coordinator(self) -> HostPlan:
        """Rank 0's host."""
        return self.hosts[self.ranks[0].host]

    def node_ids(self) -> list[str]:
        """The node of every rank, in rank order."""
        return [r.node_id for r in self.ranks]

    def ranks_on(self, node_id: str) -> list[RankPlan]:
        return list(self._by_node.get(node_id, ()))

    def rank_for(self, node_id: str, units: Sequence[int] = ()) -> RankPlan:
        """The rank planned on ``node_id`` for exactly ``units``; else the host's rank that holds the
        lowest of them; raises RuntimeTopologyError for a node outside the plan."""
        ranks = self._by_node.get(node_id)
        if not ranks:
            raise RuntimeTopologyError(f"node {node_id[:12]} is not a host of this transport plan "
                                       f"({len(self.hosts)} hosts)", node_id=node_id)
        wanted = sorted(int(u) for u in units)
        for r in ranks:
            if sorted(r.units) == wanted:
                return r
        if wanted:
            for r in ranks:
                if wanted[0] in r.units:
                    return r
        return ranks[0]

    def devices_of(self, rank: RankPlan) -> tuple[Device, ...]:
        """The devices ``rank``'s units are on, with their NUMA node, CPUs and nearest NICs (a MIG
        instance's are its GPU's); empty where the host was planned from labels alone."""
        return self._views[rank.node_id].devices_of(rank.units)

    def env_for(self, node_id: str, units: Sequence[int] = ()) -> tuple[RankPlan, dict[str, str]]:
        """The rank for a worker on ``node_id`` holding ``units``, and the environment it needs."""
        entry = self.rank_for(node_id, units)
        units = tuple(int(u) for u in units)
        if not units or sorted(units) == sorted(entry.units):
            return entry, dict(entry.env)
        view = self._views[node_id]
        active = _active(view, self._ctx)
        env = _host_env(view, self._ctx, entry.domain, active)
        env.update(_unit_env(view, self._ctx, units, active))
        env.update(_identity_env(view, self._ctx, entry.rank, entry.local_rank, active))
        return entry, env

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "world_size": self.world_size,
            "resource": self.resource,
            "coordinator": {"host": self.coordinator.index, "node_id": self.coordinator.node_id,
                            "address": self.coordinator.address, "hostname": self.coordinator.hostname},
            "libraries": list(self.libraries),
            "warnings": list(self.warnings),
            "domains": [d.to_dict() for d in self.domains],
            "hosts": [h.to_dict() for h in self.hosts],
            "ranks": [r.to_dict() for r in self.ranks],
        }


def _active(view: HostView, ctx: PlanContext) -> tuple:
    return tuple(m for m in LIBRARIES if m.applies(view, ctx))


def _host_env(view: HostView, ctx: PlanContext, domain: int, active: tuple) -> dict[str, str]:
    env: dict[str, str] = {}
    for module in active:
        env.update(module.host_env(view, ctx, domain))
    return env


def _unit_env(view: HostView, ctx: PlanContext, units: tuple[int, ...], active: tuple) -> dict[str, str]:
    devices = view.devices_of(units)
    env: dict[str, str] = {}
    for module in active:
        env.update(module.unit_env(view, ctx, units, devices))
    return env


def _identity_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int, active: tuple) -> dict[str, str]:
    env: dict[str, str] = {}
    for module in active:
        if module.IDENTITY:
            env.update(module.rank_env(view, ctx, rank, local_rank))
    return env


def _split(view: HostView, units_per_rank: int | None) -> list[tuple[int, ...]]:
    units = view.units
    if not units:
        return [()]
    # A GPU per rank; a MIG instance per rank too (CUDA enumerates one per process).
    per = units_per_rank or (1 if view.resource == "GPU" or view.resource.startswith(PARTITION_PREFIX) else len(units))
    if per <= 0 or len(units) % per:
        raise TransportPlanError(
            f"host {view.hostname}: {len(units)} {view.resource} do not split into ranks of {per}",
            node_id=view.node_id, units=len(units), units_per_rank=per)
    return [units[i:i + per] for i in range(0, len(units), per)]


def plan_transport(
    domains: Sequence[ReservedDomain],
    *,
    units_per_rank: int | None = None,
    ports: Mapping[str, int] | None = None,
) -> TransportPlan:
    """Plan every rank of the reserved ``domains`` (one, or several for multi-slice / multi-domain).

    ``units_per_rank``: accelerator units (Ray resource ids) per rank; default one GPU per rank, and
    every TPU chip / NeuronCore of a host per rank (one process per host, as JAX and the Neuron PJRT
    plugin run). ``ports``: ``megascale`` (TPU multi-slice) and ``neuron`` (collectives root) ports.
    """
    if not domains or not any(d.hosts for d in domains):
        raise TransportPlanError("nothing to plan: no reserved hosts")
    warnings: list[str] = []
    ordered, domain_plans = _order_hosts(domains, warnings)
    layout = [(domain, view, _split(view, units_per_rank)) for domain, view in ordered]
    ctx = _context(layout, domain_plans, {**DEFAULT_PORTS, **(ports or {})})
    ranks, hosts, libraries = _plan_ranks(layout, ctx, warnings)
    views_by_node = {view.node_id: view for _, view, _ in layout}
    return TransportPlan(ranks, hosts, domain_plans, views_by_node, ctx, libraries, warnings, units_per_rank)


def _order_hosts(domains: Sequence[ReservedDomain], warnings: list[str]) -> tuple[list[tuple[int, HostView]], list[DomainPlan]]:
    """Every reserved host as ``(domain index, view)`` in topology order, and each domain's plan."""
    seen: set[str] = set()
    order_cache: dict = {}
    ordered: list[tuple[int, HostView]] = []
    domain_plans: list[DomainPlan] = []
    for index, dom in enumerate(domains):
        views = []
        for facts in dom.hosts:
            if facts.node_id in seen:
                raise TransportPlanError(f"node {facts.node_id[:12]} is in two reserved domains", node_id=facts.node_id)
            seen.add(facts.node_id)
            views.append(view_of(facts, order_cache))
        views.sort(key=lambda v: host_sort_key(v.fabric_worker, v.hostname, v.node_id))
        ordered += [(index, v) for v in views]
        kinds = {v.fabric_kind for v in views}
        kind = kinds.pop() if len(kinds) == 1 else "mixed"
        fabric_hosts = max((v.fabric_hosts for v in views), default=0)
        domain_plans.append(DomainPlan(index, dom.domain, dom.label_key, kind, len(views), fabric_hosts))
        if kind == "tpu-slice" and len(domains) > 1 and len(views) < fabric_hosts:
            warnings.append(f"domain {dom.domain}: {len(views)} of the slice's {fabric_hosts} hosts are reserved; "
                            "multi-slice needs every host of each slice")
    return ordered, domain_plans


def _context(layout, domain_plans: list[DomainPlan], ports: Mapping[str, int]) -> PlanContext:
    """The plan-wide facts of ``layout`` (``(domain, view, unit groups)`` per host, in order)."""
    tpu_domains = [d for d in domain_plans if d.kind == "tpu-slice"]
    reserved_in_fabric: dict[str, int] = {}
    for _, view, _ in layout:
        reserved_in_fabric[view.fabric_id] = reserved_in_fabric.get(view.fabric_id, 0) + 1
    gpu_views = [view for _, view, _ in layout if view.resource == "GPU"]
    multi_node_nvlink = bool(gpu_views) and all(
        v.fabric_kind == "nvlink-domain" and reserved_in_fabric[v.fabric_id] > 1 for v in gpu_views)
    return PlanContext(
        world_size=sum(len(groups) for _, _, groups in layout),
        coordinator=layout[0][1].address,
        num_domains=len(domain_plans),
        tpu_multislice=len(domain_plans) > 1 and len(tpu_domains) == len(domain_plans),
        tpu_shared_hosts=any(len(groups) > 1 or view.processes_per_host > 1
                             for _, view, groups in layout if view.fabric_kind == "tpu-slice"),
        multi_node_nvlink=multi_node_nvlink,
        reserved_in_fabric=reserved_in_fabric,
        ports=ports,
        units_per_rank_csv=",".join(str(len(g)) for _, _, groups in layout for g in groups),
    )


def _plan_ranks(layout, ctx: PlanContext, warnings: list[str]) -> tuple[list[RankPlan], list[HostPlan], list[str]]:
    """Every rank's environment, host by host; the hosts' plans and the libraries used."""
    ranks: list[RankPlan] = []
    hosts: list[HostPlan] = []
    libraries: list[str] = []
    fragments: dict[tuple, dict[str, str]] = {}
    merged: dict[tuple, dict[str, str]] = {}
    actives: dict[tuple, tuple] = {}
    for host_index, (domain, view, groups) in enumerate(layout):
        akey = (view.topology, view.fabric_kind, bool(view.socket_ifname))
        hit = actives.get(akey)
        if hit is None:
            active = _active(view, ctx)
            hit = actives[akey] = (active, tuple(m.library(view) for m in active))
        active, used = hit
        libraries += [name for name in used if name and name not in libraries]
        base = _host_env(view, ctx, domain, active)
        base_key = (view.topology, used, tuple(base.items()))
        identity = tuple(m for m in active if m.IDENTITY)
        hosts.append(HostPlan(host_index, view.node_id, view.address, view.hostname, domain, view.fabric_worker,
                              len(ranks), len(groups), used))
        if not view.described and view.resource:
            why = f" ({view.probe_error})" if view.probe_error else ""
            warnings.append(f"host {view.hostname}: no node description{why}, per-device NIC pairing not planned")
        for local, units in enumerate(groups):
            # Hosts of one SKU with equal host-wide variables share one env dict per unit group.
            key = (base_key, units)
            env = merged.get(key)
            if env is None:
                fragment = fragments.get((view.topology, used, units))
                if fragment is None:
                    fragment = fragments[(view.topology, used, units)] = _unit_env(view, ctx, units, active)
                env = merged[key] = {**base, **fragment}
            rank = len(ranks)
            if identity:
                env = dict(env)
                for module in identity:
                    env.update(module.rank_env(view, ctx, rank, local))
            ranks.append(RankPlan(rank, view.node_id, host_index, domain, local, units, env))
    return ranks, hosts, libraries
