"""Worker side: find this worker's rank in a plan and set its environment.

The worker is found by its node id and the accelerator ids Ray gave it
(``ray.get_runtime_context()``); nothing else is read, no metadata server is called. Call it
before the collective library initialises (the Ray Train configs of :mod:`ray_accel_ext.train` do
it before the process group is created).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from ..errors import RuntimeTopologyError
from ..worker import device_indices
from .model import RankPlan
from .plan import TransportPlan

__all__ = ["apply_plan", "my_units"]


def my_units(resource: str) -> tuple[int, ...]:
    """The ``resource`` ids Ray assigned to the calling task or actor."""
    import ray

    if not ray.is_initialized():
        raise RuntimeTopologyError("apply_plan() must be called inside a Ray task or actor")
    ids = ray.get_runtime_context().get_accelerator_ids().get(resource, []) if resource else []
    return device_indices(resource, ids)


def apply_plan(plan: TransportPlan, *, environ: MutableMapping[str, str] | None = None) -> RankPlan:
    """Set the calling worker's variables from ``plan`` (``os.environ`` by default); returns its rank
    with the units Ray actually gave it and the environment applied."""
    import ray

    units = my_units(plan.resource)
    node_id = ray.get_runtime_context().get_node_id()
    entry, env = plan.env_for(node_id, units)
    (os.environ if environ is None else environ).update(env)
    return entry._replace(units=units or entry.units, env=env)
