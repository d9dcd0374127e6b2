"""Stop a node taking new work after a device fault: Ray's own node-drain path, else a fallback.

Ray's autoscaler (v2) drains a node through the GCS ``AutoscalerStateService.DrainNode`` RPC; the
Python client is ``GcsClient.drain_node(node_id_hex, reason, reason_message,
deadline_timestamp_ms)`` (Ray 2.55 and 2.60; the RPC came with Ray ~2.7, the ``ray drain-node``
CLI with ~2.10). A draining node is not schedulable: new leases go elsewhere and running tasks
and actors keep running (``cluster_resource_scheduler.cc`` ``NodeAvailable``); once idle, its
raylet exits. We ask with reason ``PREEMPTION``, which the raylet always accepts
(``IDLE_TERMINATION`` is refused while the node is busy), and no deadline. Ray has no undrain:
the node comes back by restarting it.

Fallback (a Ray without ``drain_node``, or a refusal): a zero-CPU actor pinned to the node holds
every accelerator unit that is free there and grabs each one that frees later
(:func:`hold_accelerators`), so no new accelerator task lands; CPU-only work still does.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["drain_node", "PREEMPTION", "hold_accelerators"]

PREEMPTION = 2  # ray.rpc.autoscaler.DrainNodeReason DRAIN_NODE_REASON_PREEMPTION (2.55 and 2.60)
_log = logging.getLogger(__name__)


def drain_node(node_id: str, message: str, resources: dict[str, float] | None = None) -> dict[str, Any]:
    """Drain ``node_id`` (hex) through Ray; ``{"how": "ray-drain"|"hold"|"none", ...}``.

    ``resources`` are the node's accelerator resources, held by the fallback when Ray cannot drain.
    """
    import ray

    client = getattr(ray._private.worker.global_worker, "gcs_client", None)
    drain = getattr(client, "drain_node", None)
    if drain is not None:
        try:
            accepted, why = drain(node_id, PREEMPTION, message, 0)
            if accepted:
                return {"how": "ray-drain", "accepted": True}
            _log.warning("ray_accel_ext: Ray refused to drain %s: %s", node_id, why)
        except Exception as exc:  # noqa: BLE001 - fall back below whatever Ray raised
            _log.warning("ray_accel_ext: drain_node(%s) failed: %s", node_id, exc)
    if resources:
        hold_accelerators(node_id, resources)
        return {"how": "hold", "accepted": True}
    return {"how": "none", "accepted": False}


def hold_accelerators(node_id: str, resources: dict[str, float]) -> list[Any]:
    """The fallback: one detached actor per accelerator unit, pinned to the node, so nothing new
    is scheduled on its accelerators. Units in use are taken as they free (the actors wait)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    class _Hold:
        def ready(self) -> bool:
            return True

    holders = []
    for name, total in sorted(resources.items()):
        for i in range(int(total)):
            amount = {"num_gpus": 1} if name == "GPU" else {"resources": {name: 1}}
            holders.append(_Hold.options(
                **amount, lifetime="detached", namespace="ray_accel_ext",
                name=f"ray_accel_ext_hold_{node_id[:16]}_{name}_{i}", get_if_exists=True,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote())
    return holders
