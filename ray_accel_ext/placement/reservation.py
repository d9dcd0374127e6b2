"""Reserving a domain: claim it, create a placement group Ray keeps inside it, wait, fall back."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import telemetry
from ..cluster.nodes import NodeView, alive_nodes, recent_alive_nodes
from ..compat import has_feature, require_feature
from ..errors import NoDomainAvailable, SchedulingError, WouldSplitDomain
from ..labels import NODE_ID
from ..telemetry import REASON_ERROR, REASON_NEVER_FITS, REASON_NO_DOMAIN_FREE, REASON_TIMEOUT
from .choose import DomainChoice, DomainFits, choose_domains, domain_fits
from .claims import claim_pg_name, claims_registry
from .line import ClaimLine
from .ranks import DomainRanks, rank_domain
from .request import DomainRequest
from .subslice import expand_subslices

__all__ = ["Reservation", "BundleRank", "reserve", "reserve_domain", "read_inventory", "use_topology_strategy"]

_NEVER_FITS = ("no-match", "too-large", "incomplete")

NODE_ID_KEY = NODE_ID

# A first try chooses from the nodes this process read at most this long ago (callers at the same
# moment share one ``ray.nodes()``); every later look reads them again.
INVENTORY_MAX_AGE_S = 1.0
# How many free domains, best first, one claim call may take the first free one of.
CANDIDATES = 32


def read_inventory() -> list[NodeView]:
    """The alive nodes of the connected Ray cluster (public ``ray.nodes()``)."""
    return alive_nodes()


@dataclass(frozen=True)
class BundleRank:
    """One bundle of a reservation in rank order: ``rank`` 0..n-1 over the reservation's bundles,
    ordered by the domain's host ranks (:mod:`.ranks`), then bundle index."""

    rank: int
    bundle_index: int
    node_id: str
    hostname: str
    host_index: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "bundle_index": self.bundle_index, "node_id": self.node_id,
                "hostname": self.hostname, "host_index": self.host_index}


@dataclass
class Reservation:
    """A ready placement group inside one domain, and the claim that keeps others out of it.

    ``ranks`` lists its bundles in rank order and ``rank0`` is the bundle (and host) of rank 0;
    ``domain_ranks`` is the whole domain's host order and actual size. Release it (``release()``
    or ``with``) to give the domain back.
    """

    placement_group: Any
    choice: DomainChoice
    step: int
    step_name: str
    wait_s: float
    attempts: list[dict[str, Any]]
    owner: str
    domain_ranks: DomainRanks | None = None
    ranks: tuple[BundleRank, ...] = ()
    _released: bool = False

    @property
    def domain(self) -> str:
        return self.choice.domain

    @property
    def level(self) -> str:
        return self.choice.level

    @property
    def bundles(self) -> tuple[Mapping[str, float], ...]:
        return self.choice.bundles

    @property
    def fallback(self) -> bool:
        """True when a later step of the chain than the first one was used."""
        return self.step > 0

    @property
    def rank0(self) -> BundleRank | None:
        """The bundle of rank 0 (and the host it is on)."""
        return self.ranks[0] if self.ranks else None

    def scheduling_strategy(self, bundle_index: int = -1):
        """``PlacementGroupSchedulingStrategy`` for a task/actor in bundle ``bundle_index``."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            self.placement_group, placement_group_bundle_index=bundle_index,
            placement_group_capture_child_tasks=True,
        )

    def actor_options(self, bundle_index: int) -> dict[str, Any]:
        """``.options(...)`` for a task/actor that takes all of bundle ``bundle_index``."""
        bundle = dict(self.bundles[bundle_index])
        return {
            "num_cpus": bundle.pop("CPU", 0),
            "num_gpus": bundle.pop("GPU", 0),
            "resources": bundle,
            "scheduling_strategy": self.scheduling_strategy(bundle_index),
        }

    def rank_options(self, rank: int) -> dict[str, Any]:
        """``.options(...)`` for the task/actor of rank ``rank`` (the bundle ``ranks[rank]``)."""
        return self.actor_options(self.ranks[rank].bundle_index)

    def bundle_nodes(self) -> dict[int, str]:
        """Bundle index -> node id, as Ray placed them."""
        from ray.util import placement_group_table

        table = placement_group_table(self.placement_group)
        return {int(k): v for k, v in (table.get("bundles_to_node_id") or {}).items()}

    def release(self) -> None:
        """Remove the placement group and drop the claim (idempotent)."""
        if self._released:
            return
        import ray
        from ray.util import remove_placement_group

        self._released = True
        try:
            remove_placement_group(self.placement_group)
        finally:
            ray.get(claims_registry().release.remote(self.choice.claim_key, self.owner))
            telemetry.emit("placement_release", domain=self.domain, level=self.level, owner=self.owner)

    def to_dict(self) -> dict[str, Any]:
        rank0 = self.rank0
        return {
            "domain": self.domain,
            "level": self.level,
            "label_key": self.choice.key,
            "nodes": list(self.choice.node_ids),
            "bundles": [dict(b) for b in self.bundles],
            "ranks": [r.to_dict() for r in self.ranks],
            "rank0": rank0.to_dict() if rank0 else None,
            "domain_hosts": self.domain_ranks.size if self.domain_ranks else None,
            "rank_source": self.domain_ranks.source if self.domain_ranks else None,
            "step": self.step,
            "step_name": self.step_name,
            "wait_s": round(self.wait_s, 4),
            "attempts": self.attempts,
        }

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _bundle_ranks(pg, choice: DomainChoice, domain: DomainRanks) -> tuple[BundleRank, ...]:
    if len(choice.node_ids) == 1:  # the domain's one node holds every bundle: nothing to read
        placed = dict.fromkeys(range(len(choice.bundles)), choice.node_ids[0])
    else:
        from ray.util import placement_group_table

        placed = {int(k): v for k, v in (placement_group_table(pg).get("bundles_to_node_id") or {}).items()}
    names = {h.node_id: h.hostname for h in domain.hosts}
    order = sorted(placed, key=lambda b: (domain.index_of(placed[b]) is None, domain.index_of(placed[b]) or 0, b))
    return tuple(BundleRank(rank, b, placed[b], names.get(placed[b], ""), domain.index_of(placed[b]))
                 for rank, b in enumerate(order))


def use_topology_strategy(flag: bool | None, version: str | None = None) -> bool:
    """Whether to pass Ray's experimental ``topology_strategy`` (Ray 2.57 and newer): ``None`` = when
    the Ray (``version``, default the installed one, probed) has it; ``True`` raises RayVersionError
    on a Ray without it."""
    if flag is None:
        return has_feature("topology_strategy", version)
    if flag:
        require_feature("topology_strategy", version)
    return bool(flag)


def _create_pg(choice: DomainChoice, name: str, topology: bool):
    from ray.util.placement_group import placement_group

    require_feature("bundle_label_selector")
    kwargs: dict[str, Any] = {"bundle_label_selector": [dict(s) for s in choice.selectors], "name": name}
    if topology:
        kwargs["topology_strategy"] = {NODE_ID_KEY: choice.strategy, choice.key: "STRICT_PACK"}
    else:
        kwargs["strategy"] = choice.strategy
    return placement_group([dict(b) for b in choice.bundles], **kwargs)


def reserve(
    *steps: DomainRequest,
    poll_s: float = 1.0,
    name: str = "",
    topology_strategy: bool | None = None,
    claim_ttl_s: float = 120.0,
    registry_timeout_s: float = 120.0,
) -> Reservation:
    """Reserve one domain for the first step of ``steps`` that can be met within its deadline.

    Returns a ready :class:`Reservation` whose ``ranks`` list its bundles in the domain's host
    order (``rank0`` first). Raises :class:`WouldSplitDomain` when no step could ever be met by one
    domain, else :class:`NoDomainAvailable`; either error's ``attempts`` lists every step and
    domain tried and why each failed, and ``reason_class`` says which of ``never-fits``,
    ``no-domain-free`` or ``timeout`` it was. Callers that find every fitting domain held wait in
    line and are served in the order they started waiting (:mod:`.claims`). ``topology_strategy``:
    also pass Ray's experimental ``topology_strategy`` (default: on the tested Ray range only;
    ``True`` outside it raises :class:`~ray_accel_ext.errors.RayVersionError`).
    ``registry_timeout_s`` bounds each call to the claim registry (it restarts after a failure).
    ``poll_s``: the longest a waiting caller goes without looking at the cluster again (new nodes);
    a domain given back to the registry wakes it at once.
    """
    if not steps:
        raise ValueError("reserve() needs at least one DomainRequest")
    if any(s.subslice for s in steps):
        steps = tuple(expand_subslices(steps, read_inventory()))  # a TPU subslice: one step per block
    topology = use_topology_strategy(topology_strategy)
    owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    line = ClaimLine(claims_registry(), owner, registry_timeout_s, waiter_ttl_s=max(15.0, 25 * poll_s))
    attempts: list[dict[str, Any]] = []
    start = time.monotonic()
    failed = True
    try:
        for index, step in enumerate(steps):
            reservation = _reserve_step(index, step, line, attempts, start, poll_s, name, topology, claim_ttl_s)
            if reservation is not None:
                failed = False
                return reservation
        failed = False
    except SchedulingError:
        raise
    except Exception as exc:
        telemetry.placement_event(_failed_event(steps, attempts, start, type(exc).__name__, REASON_ERROR))
        raise
    finally:
        # Raised: nothing of this caller is left held, not a claim whose answer timed out here.
        if failed:
            line.withdraw()
        else:
            line.leave()

    wait_s = time.monotonic() - start
    all_split = all(a["outcome"] in _NEVER_FITS for a in attempts)
    cls = WouldSplitDomain if all_split else NoDomainAvailable
    reason_class = REASON_NEVER_FITS if all_split else (
        REASON_TIMEOUT if attempts and attempts[-1]["outcome"] in ("timeout", "tried") else REASON_NO_DOMAIN_FREE)
    summary = "; ".join(f"step {a['step']} {a['step_name']}: {a['outcome']}" + (f" ({a['reason']})" if a["reason"] else "")
                        for a in attempts)
    error = cls(f"no domain for any of {len(steps)} step(s): {summary}",
                request=[s.to_dict() for s in steps], attempts=attempts, wait_s=round(wait_s, 4),
                reason_class=reason_class)
    telemetry.placement_event(_failed_event(steps, attempts, start, type(error).__name__, reason_class))
    raise error


def _reserve_step(index, step, line, attempts, start, poll_s, name, topology, claim_ttl_s) -> Reservation | None:
    """Try one step until its deadline; the reservation, or None (its attempts appended)."""
    step_start = time.monotonic()
    deadline = step_start + step.deadline_s
    tried: set[str] = set()
    inventory, cached = recent_alive_nodes(INVENTORY_MAX_AGE_S), True
    while True:
        held = line.known
        busy_nodes = {n for entry in held.values() for n in entry["nodes"]}
        try:
            choices = choose_domains(inventory, step, busy_domains=held, busy_nodes=busy_nodes, exclude=tried,
                                     limit=CANDIDATES, fits=_fits(inventory, step))
        except SchedulingError as exc:
            now = time.monotonic()
            if cached or not line.fresh:  # chosen from what this process knew: look again first
                if cached:
                    inventory, cached = recent_alive_nodes(0.0), False
                if not line.fresh:
                    line.look()
                continue
            if exc.data.get("retryable") and now < deadline:
                line.wait([f"{step.key}={v}" for v in exc.data.get("busy", ())])
                line.pause(min(poll_s, deadline - now))
                inventory = recent_alive_nodes(0.0)
                continue
            attempts.append(_attempt(index, step, None, exc.data.get("reason", "error"), exc.message, now - step_start))
            return None
        verdict, choice = line.claim_first(choices, claim_ttl_s)  # raised: reserve() withdraws
        if verdict == "queued":
            now = time.monotonic()
            if now >= deadline:
                attempts.append(_attempt(index, step, None, "busy", "the fitting free domain is promised to a request "
                                         "that waited longer", now - step_start))
                return None
            line.wait([*(c.claim_key for c in choices), *line.known])
            line.pause(min(poll_s, deadline - now))
            inventory, cached = recent_alive_nodes(0.0), False
            continue
        if choice is None:
            continue  # lost the race for every candidate; choose again from what the registry said
        outcome, reservation = _place(index, step, choice, inventory, line, attempts, start, step_start, deadline,
                                      name, topology)
        if reservation is not None:
            return reservation
        if outcome == "timeout":
            tried.add(choice.claim_key)
        inventory, cached = recent_alive_nodes(0.0), False
        if time.monotonic() >= deadline:
            return None


_last_fits: tuple[Any, DomainFits | None] = (None, None)


def _fits(inventory: list[NodeView], step: DomainRequest) -> DomainFits:
    """:func:`domain_fits` of this inventory (the same list object) and step, kept from the last call."""
    global _last_fits
    last_inventory, fits = _last_fits
    if last_inventory is not inventory or fits is None or fits.request != step:
        fits = domain_fits(inventory, step)
        _last_fits = (inventory, fits)
    return fits


def _place(index, step, choice, inventory, line, attempts, start, step_start, deadline, name, topology):
    """Make the claimed domain's group and wait for it: ``("ready", reservation)``, else the domain
    given back and ``("lost", None)`` (the registry gave it away) or ``("timeout", None)``."""
    from ray.util import remove_placement_group

    pg = _create_pg(choice, claim_pg_name(name, line.owner, choice.claim_key), topology)  # raised: reserve() withdraws
    try:
        attached = line.attach(choice, pg.id.hex())  # answered while Ray places the group
        remaining = min(step.domain_wait_s, max(0.0, deadline - time.monotonic()))
        ready = pg.wait(remaining) if remaining > 0 else False
        if not line.get(attached):
            remove_placement_group(pg)  # the registry restarted and gave the domain to another caller
            return "lost", None
        if ready:
            domain = rank_domain([n for n in inventory if n.labels.get(choice.key) == choice.domain], choice.key,
                                 choice.domain)
            attempts.append(_attempt(index, step, choice.domain, "ready", "", time.monotonic() - step_start))
            reservation = Reservation(pg, choice, index, step.label(), time.monotonic() - start, attempts,
                                      line.owner, domain, _bundle_ranks(pg, choice, domain))
            telemetry.placement_event(reservation.to_dict() | {"outcome": "ready", "reason_class": "",
                                      "fallback": index > 0, "generation": choice.generation,
                                      "topology": choice.topology, "hosts": len(choice.bundles)})
            return "ready", reservation
    except BaseException:
        remove_placement_group(pg)  # nothing half-made is left behind (the claim: reserve() withdraws)
        raise
    remove_placement_group(pg)
    line.call("release", choice.claim_key, line.owner)
    attempts.append(_attempt(index, step, choice.domain, "timeout",
                             f"placement group not ready within {remaining:.3g}s", time.monotonic() - step_start))
    return "timeout", None


def _failed_event(steps, attempts, start, error: str, reason_class: str) -> dict[str, Any]:
    return {"outcome": "failed", "error": error, "reason_class": reason_class, "level": steps[-1].level,
            "step": len(steps) - 1, "step_name": steps[-1].label(), "domain": None,
            "wait_s": round(time.monotonic() - start, 4), "attempts": attempts, "fallback": len(steps) > 1,
            "hosts": steps[-1].hosts, "generation": None, "topology": None}


def _attempt(index: int, step: DomainRequest, domain: str | None, outcome: str, reason: str, waited: float) -> dict[str, Any]:
    return {"step": index, "step_name": step.label(), "level": step.level, "domain": domain,
            "outcome": outcome, "reason": reason, "waited_s": round(waited, 4)}


def reserve_domain(
    level: str = "fabric",
    *,
    hosts: int | None = None,
    bundles: Sequence[Mapping[str, float]] | None = None,
    bundle: Mapping[str, float] | None = None,
    selector: Mapping[str, str] | None = None,
    deadline_s: float = 30.0,
    complete: bool = False,
    domain_wait_s: float = 10.0,
    **kwargs: Any,
) -> Reservation:
    """One-step :func:`reserve`: ``hosts`` (or ``bundles``, or the whole domain) at ``level``."""
    step = DomainRequest(level=level, hosts=hosts, bundles=tuple(bundles) if bundles else None, bundle=bundle,
                         selector=dict(selector or {}), deadline_s=deadline_s, complete=complete,
                         domain_wait_s=domain_wait_s)
    return reserve(step, **kwargs)
