"""Ray Serve on a reserved domain: a replica that spans the domain, one placement group bundle per
plan rank, with the plan applied.

    job = reserve_for_training(DomainRequest(hosts=2, selector={"ray.io/accelerator-type": "GB200"}))
    Model = serve.deployment(ModelReplica).options(**serve_options(job))
    job.hand_over()                      # Serve's replica group takes the hosts; the domain stays claimed
    serve.run(Model.bind(job.plan))
    ...
    serve.delete(...); job.release()

The replica is rank 0 (bundle 0, rank 0's host, rank 0's variables through ``runtime_env``); it
starts one actor per further rank with :func:`rank_actor_options`, each in its bundle of the
replica's placement group with that rank's variables. Serve pins bundle ``i`` to rank ``i``'s host
through ``placement_group_bundle_label_selector`` (Ray 2.60 ``serve.deployment``). A bundle that
holds part of a host gets whichever devices Ray picks: call ``apply_plan(plan)`` first in the
actor's constructor to set the per-device variables for those.
"""

from __future__ import annotations

from typing import Any

from ..labels import NODE_ID as NODE_ID_KEY
from ..transport import TransportPlan

__all__ = ["serve_options", "rank_actor_options", "actor_resources"]


def actor_resources(plan: TransportPlan, cpus: float = 0.0) -> dict[str, Any]:
    """``num_cpus``/``num_gpus``/``resources`` of an actor that holds one rank's units."""
    units = float(plan.units_per_rank) if plan.resource else 0.0
    out: dict[str, Any] = {"num_cpus": float(cpus)}
    if plan.resource == "GPU":
        out["num_gpus"] = units
    elif plan.resource:
        out["resources"] = {plan.resource: units}
    return out


def _bundle(plan: TransportPlan, cpus: float) -> dict[str, float]:
    bundle = {plan.resource: float(plan.units_per_rank)} if plan.resource else {}
    if cpus or not bundle:
        bundle["CPU"] = float(cpus) or 1.0
    return bundle


def serve_options(job: Any, *, cpus_per_rank: float = 0.0) -> dict[str, Any]:
    """``Deployment.options(...)`` for one replica spanning ``job``'s planned ranks."""
    plan: TransportPlan = job.plan
    bundles = [_bundle(plan, cpus_per_rank) for _ in plan.ranks]
    actor = actor_resources(plan, cpus_per_rank)
    actor["runtime_env"] = {"env_vars": dict(plan.ranks[0].env)}
    return {
        "num_replicas": 1,
        "placement_group_bundles": bundles,
        "placement_group_strategy": "PACK",
        "placement_group_bundle_label_selector": [{NODE_ID_KEY: node} for node in plan.node_ids()],
        "ray_actor_options": actor,
    }


def rank_actor_options(plan: TransportPlan, rank: int, *, cpus: float = 0.0) -> dict[str, Any]:
    """``.options(...)`` for rank ``rank``'s actor in the calling replica's placement group."""
    from ray.util import get_current_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = get_current_placement_group()
    if pg is None:
        raise RuntimeError("rank_actor_options() must be called inside a replica deployed with serve_options()")
    opts = actor_resources(plan, cpus)
    opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank)
    opts["runtime_env"] = {"env_vars": dict(plan.ranks[rank].env)}
    return opts
