"""Apply a transport plan inside Ray Train workers before the framework's backend starts.

:func:`planned_backend` wraps a backend class (what a ``BackendConfig.backend_cls`` returns:
Torch's, JAX's) so that its ``on_start`` first runs :func:`ray_accel_ext.transport.apply_plan` on
every worker of the group (``worker_group.execute``, the call Ray's own backends use), then the
original ``on_start``: the process group (gloo/NCCL) or ``jax.distributed`` is created with the
plan's variables already in the environment. Only the public ``backend_cls`` property and the
``Backend.on_start`` extension point (``ray/train/backend.py``) are used.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["planned_backend", "apply_in_worker", "check_ranks"]

logger = logging.getLogger(__name__)


def apply_in_worker(plan) -> dict[str, Any]:
    """Runs in a Train worker: apply the plan; report the plan rank next to Ray Train's rank."""
    import ray.train

    from ..transport import apply_plan

    applied = apply_plan(plan)
    return {"plan_rank": applied.rank, "world_rank": ray.train.get_context().get_world_rank(),
            "units": list(applied.units), "variables": sorted(applied.env)}


def check_ranks(applied: list[dict[str, Any]]) -> list[str]:
    """Where Ray Train's world ranks and the plan's topology ranks differ (empty when they agree)."""
    return [f"world rank {a['world_rank']} runs plan rank {a['plan_rank']} (units {a['units']})"
            for a in applied if a["plan_rank"] != a["world_rank"]]


@functools.cache
def planned_backend(inner: type) -> type:
    """A subclass of ``inner`` whose ``on_start`` applies ``backend_config.transport_plan`` first."""

    def on_start(self, worker_group, backend_config):
        import ray

        plan = getattr(backend_config, "transport_plan", None)
        if plan is not None:
            applied = worker_group.execute(apply_in_worker, ray.put(plan))
            for line in check_ranks(applied):
                logger.warning("transport plan: %s; Ray Train orders a node's workers by lowest GPU id", line)
        return inner.on_start(self, worker_group, backend_config)

    return type(f"Planned{inner.__name__}", (inner,), {"on_start": on_start, "__module__": __name__})
