"""Reserving a domain: claim it, create a placement group Ray keeps inside it, wait, fall back."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import telemetry
from ..cluster.nodes import NodeView, alive_nodes
from ..compat import has_feature, is_tested_ray, require_feature, require_tested_ray
from ..errors import NoDomainAvailable, SchedulingError, WouldSplitDomain
from ..labels import NODE_ID
from .choose import DomainChoice, choose_domain
from .claims import claims_registry
from .request import DomainRequest

__all__ = ["Reservation", "reserve", "reserve_domain", "read_inventory", "use_topology_strategy"]

NODE_ID_KEY = NODE_ID


def read_inventory() -> list[NodeView]:
    """The alive nodes of the connected Ray cluster (public ``ray.nodes()``)."""
    return alive_nodes()


@dataclass
class Reservation:
    """A ready placement group inside one domain, and the claim that keeps others out of it.

    Release it (``release()`` or ``with``) to give the domain back.
    """

    placement_group: Any
    choice: DomainChoice
    step: int
    step_name: str
    wait_s: float
    attempts: list[dict[str, Any]]
    owner: str
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
            telemetry.reservation_released(self.choice.level)
            telemetry.emit("placement_release", domain=self.domain, level=self.level, owner=self.owner)

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "level": self.level,
            "label_key": self.choice.key,
            "nodes": list(self.choice.node_ids),
            "bundles": [dict(b) for b in self.bundles],
            "step": self.step,
            "step_name": self.step_name,
            "wait_s": round(self.wait_s, 4),
            "attempts": self.attempts,
        }

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def use_topology_strategy(flag: bool | None, version: str | None = None) -> bool:
    """Whether to pass Ray's experimental ``topology_strategy`` (Ray 2.57 and newer): ``None`` = when
    the Ray (``version``, default the installed one) has it and is in the tested range; ``True``
    raises RayVersionError on a Ray without it or outside the tested range."""
    if flag is None:
        return has_feature("topology_strategy", version) and is_tested_ray(version)
    if flag:
        require_feature("topology_strategy", version)
        require_tested_ray("placement topology_strategy (experimental in Ray)", version)
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
    poll_s: float = 0.2,
    name: str = "",
    topology_strategy: bool | None = None,
    claim_ttl_s: float = 120.0,
) -> Reservation:
    """Reserve one domain for the first step of ``steps`` that can be met within its deadline.

    Returns a ready :class:`Reservation`. Raises :class:`WouldSplitDomain` when no step could ever
    be met by one domain, else :class:`NoDomainAvailable`; either error's ``attempts`` lists every
    step and domain tried and why each failed. ``topology_strategy``: also pass Ray's experimental
    ``topology_strategy`` (default: on the tested Ray range only; ``True`` outside it raises
    :class:`~ray_accel_ext.errors.RayVersionError`).
    """
    import ray

    if not steps:
        raise ValueError("reserve() needs at least one DomainRequest")
    topology = use_topology_strategy(topology_strategy)
    owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    claims = claims_registry()
    attempts: list[dict[str, Any]] = []
    start = time.monotonic()
    telemetry.inventory_metrics(read_inventory())
    for index, step in enumerate(steps):
        step_start = time.monotonic()
        deadline = step_start + step.deadline_s
        tried: set[str] = set()
        while True:
            inventory = read_inventory()
            held = ray.get(claims.snapshot.remote())
            busy_nodes = {n for entry in held.values() for n in entry["nodes"]}
            try:
                choice = choose_domain(inventory, step, busy_domains=held, busy_nodes=busy_nodes, exclude=tried)
            except SchedulingError as exc:
                now = time.monotonic()
                if exc.data.get("retryable") and now < deadline:
                    time.sleep(min(poll_s, deadline - now))
                    continue
                attempts.append(_attempt(index, step, None, exc.data.get("reason", "error"), exc.message, now - step_start))
                break
            if not ray.get(claims.claim.remote(choice.claim_key, list(choice.node_ids), owner, claim_ttl_s)):
                continue  # lost a race for this domain; look again
            pg = _create_pg(choice, name or f"rayaccel-{owner}", topology)
            remaining = min(step.domain_wait_s, max(0.0, deadline - time.monotonic()))
            ready = pg.wait(remaining) if remaining > 0 else False
            if ready:
                ray.get(claims.attach.remote(choice.claim_key, owner, pg.id.hex()))
                wait_s = time.monotonic() - start
                attempts.append(_attempt(index, step, choice.domain, "ready", "", time.monotonic() - step_start))
                reservation = Reservation(pg, choice, index, step.label(), wait_s, attempts, owner)
                telemetry.placement_event(reservation.to_dict() | {"outcome": "ready", "fallback": index > 0,
                                          "generation": choice.generation, "topology": choice.topology,
                                          "hosts": len(choice.bundles)})
                return reservation
            from ray.util import remove_placement_group

            remove_placement_group(pg)
            ray.get(claims.release.remote(choice.claim_key, owner))
            tried.add(choice.claim_key)
            attempts.append(_attempt(index, step, choice.domain, "timeout",
                                     f"placement group not ready within {remaining:.3g}s", time.monotonic() - step_start))
            if time.monotonic() >= deadline:
                break

    wait_s = time.monotonic() - start
    all_split = all(a["outcome"] in ("no-match", "too-large", "incomplete") for a in attempts)
    cls = WouldSplitDomain if all_split else NoDomainAvailable
    summary = "; ".join(f"step {a['step']} {a['step_name']}: {a['outcome']}" + (f" ({a['reason']})" if a["reason"] else "")
                        for a in attempts)
    error = cls(f"no domain for any of {len(steps)} step(s): {summary}",
                request=[s.to_dict() for s in steps], attempts=attempts, wait_s=round(wait_s, 4))
    telemetry.placement_event({"outcome": "failed", "error": type(error).__name__, "level": steps[-1].level,
                               "step": len(steps) - 1, "step_name": steps[-1].label(), "domain": None,
                               "wait_s": round(wait_s, 4), "attempts": attempts, "fallback": len(steps) > 1,
                               "hosts": steps[-1].hosts, "generation": None, "topology": None})
    raise error


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
