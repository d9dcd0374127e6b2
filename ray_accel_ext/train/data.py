"""Ray Data on a reserved domain: a map stage whose tasks run on the reservation's hosts with the
plan applied.

    with reserve_domain("fabric", hosts=2, selector={"ray.io/accelerator-type": "GB200"}) as r:
        plan = plan_reservation(r, units_per_rank=1)
        ds = ds.map_batches(with_plan(embed, plan), **map_options(r, plan))

The tasks (or, for a callable class, the actors) are scheduled into the reservation's own
placement group (any bundle; the group is kept, no hand-over needed) holding one rank's units, and
:func:`with_plan` applies the worker's variables (found by node and the devices Ray gave it) once
per worker process before the user's function or class runs.
"""

from __future__ import annotations

import functools
from typing import Any

from ..transport import TransportPlan, apply_plan
from .serve import actor_resources

__all__ = ["map_options", "with_plan"]

_applied: dict[int, Any] = {}


def map_options(reservation: Any, plan: TransportPlan, *, cpus: float = 0.0) -> dict[str, Any]:
    """Keyword arguments for ``Dataset.map_batches`` / ``map``: resources of one rank, scheduled in
    ``reservation``'s placement group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts = actor_resources(plan, cpus)
    opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
        reservation.placement_group, placement_group_bundle_index=-1, placement_group_capture_child_tasks=True)
    return opts


def _apply_once(plan: TransportPlan):
    key = id(plan)
    if key not in _applied:
        _applied.clear()
        _applied[key] = apply_plan(plan)
    return _applied[key]


def with_plan(fn: Any, plan: TransportPlan) -> Any:
    """``fn`` (a function, or a callable class) that first applies ``plan`` in its worker."""
    if isinstance(fn, type):
        class Planned(fn):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.transport_rank = apply_plan(plan)
                super().__init__(*args, **kwargs)

        Planned.__name__ = Planned.__qualname__ = f"Planned{fn.__name__}"
        return Planned

    @functools.wraps(fn)
    def planned(*args: Any, **kwargs: Any) -> Any:
        _apply_once(plan)
        return fn(*args, **kwargs)

    return planned
