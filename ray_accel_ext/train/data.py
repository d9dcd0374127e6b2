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
    ``reservation``'s placement group.

    Where Ray Data takes ``resources`` as a named parameter, the rank's units are asked as the
    group's own resources (``GPU_group_<id>``: what a placement-group strategy with any bundle
    asks for), because ``scheduling_strategy`` passed through ``**ray_remote_args`` is deprecated
    for removal in Ray 2.64; an older Ray gets the strategy.
    """
    opts = actor_resources(plan, cpus)
    pg = reservation.placement_group
    if named_remote_args():
        return in_group(opts, pg.id.hex())
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=-1, placement_group_capture_child_tasks=True)
    return opts


def named_remote_args() -> bool:
    """Whether this Ray's ``Dataset.map_batches`` takes ``resources`` as a named parameter."""
    import inspect

    from ray.data import Dataset

    return "resources" in inspect.signature(Dataset.map_batches).parameters


def in_group(opts: dict[str, Any], pg_hex: str) -> dict[str, Any]:
    """``num_cpus``/``num_gpus``/``resources`` as the resources of placement group ``pg_hex``, any bundle
    (Ray names a group's resources ``<name>_group_<id>``, and gives a task holding ``GPU_group_<id>``
    the GPUs of its bundle: ``ray.get_gpu_ids()`` reads those names)."""
    wanted = {"CPU": opts.get("num_cpus") or 0.0, "GPU": opts.get("num_gpus") or 0.0, **opts.get("resources", {})}
    return {"num_cpus": 0.0, "resources": {f"{name}_group_{pg_hex}": amount for name, amount in wanted.items() if amount}}


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
