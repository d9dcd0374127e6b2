"""Worker side of MIG: which MIG instance this task holds, and its GPU's NUMA node, CPUs and NICs.

A node offers each MIG instance as one unit of ``mig-<profile>`` (:func:`ray_accel_ext.labels
.partition_resource`). The node start makes every such resource a *unit-instance* resource (per-unit
ids, disjoint between holders) and registers a manager for it in Ray's workers
(:mod:`ray_accel_ext.node.ray_devices`), so Ray itself sets ``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` of
exactly the task's instance before the task runs, and ``get_accelerator_ids()`` shows its id::

    @ray.remote(resources={"mig-1g.10gb": 1})
    def infer():
        part = my_partitions()[0]        # the instance, with its GPU's NUMA node, CPUs and NICs
        ...

:func:`use_my_partition` is the fallback where that is off (``RAY_ACCEL_DEVICE_ISOLATION=off``, or
a Ray whose private interface changed, problem ``device-isolation-unavailable``): with
``custom_unit_instance_resources`` set on the head (:func:`unit_instance_resources`), it sets the
same variable from the same ids, in the same order (the instances of a profile as discovery lists
them). CUDA enumerates one MIG instance per process (NVIDIA MIG user guide, "CUDA Device
Enumeration"), so a task holds one instance. The ids are read from the worker's own resource table
(``core_worker.resource_ids()``, the table ``get_accelerator_ids`` reads).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from ...errors import RuntimeTopologyError
from ...labels import partition_resource
from ...model import NodeInventory, Partition

__all__ = ["RAY_UNIT_INSTANCE_DEFAULTS", "unit_instance_resources", "partition_of", "my_partitions", "use_my_partition",
           "partition_nccl_env"]

# Ray 2.60's default custom_unit_instance_resources (raylet strings; reference/ray-2.60.md section 3).
RAY_UNIT_INSTANCE_DEFAULTS = ("neuron_cores", "TPU", "NPU", "HPU", "RBLN", "FURIOSA", "TTNPU", "MBLT")


def unit_instance_resources(resources: Iterable[str]) -> str:
    """The ``custom_unit_instance_resources`` value that keeps Ray's defaults and adds every
    ``mig-*`` resource of ``resources`` (set it on the head: ``ray start --head
    --system-config='{"custom_unit_instance_resources": "..."}'``)."""
    extra = sorted({r for r in resources if r.startswith("mig-")})
    return ",".join([*RAY_UNIT_INSTANCE_DEFAULTS, *extra])


def partition_of(inventory: NodeInventory, resource: str, unit: int) -> Partition:
    """The instance that is unit ``unit`` of ``resource`` on a node with ``inventory``."""
    parts = [p for d in inventory.descriptions for p in d.partitions if partition_resource(p.profile) == resource]
    if not 0 <= unit < len(parts):
        raise RuntimeTopologyError(f"Ray assigned {resource} unit {unit}, but this node has {len(parts)} of them")
    return parts[unit]


def my_partitions(inventory: NodeInventory | None = None,
                  resource_ids: Mapping[str, list] | None = None) -> list[Partition]:
    """The MIG instances this task or actor holds (empty when it holds none)."""
    if resource_ids is None:
        import ray

        resource_ids = ray._private.worker.global_worker.core_worker.resource_ids()
    if inventory is None:
        from ...node.handoff import node_inventory

        inventory = node_inventory()
    names = sorted({partition_resource(p.profile) for d in inventory.descriptions for p in d.partitions})
    out = []
    for name in names:
        # Ray's own rule (worker.py get_accelerator_ids_for_accelerator_resource): the resource, or
        # its placement-group form without a bundle index (mig-1g.10gb_group_<pg id>).
        group = re.compile(rf"^{re.escape(name)}_group_[0-9A-Za-z]+$")
        units = {int(slot[0] if isinstance(slot, (list, tuple)) else slot)
                 for key, slots in resource_ids.items() if key == name or group.match(key) for slot in slots}
        out += [partition_of(inventory, name, unit) for unit in sorted(units)]
    return out


def use_my_partition(environ: dict[str, str] | None = None, **kwargs) -> Partition:
    """Make this task's one MIG instance the only CUDA device of the process; returns it."""
    parts = my_partitions(**kwargs)
    if len(parts) != 1:
        raise RuntimeTopologyError(f"this task holds {len(parts)} MIG instances; CUDA enumerates one per process")
    (environ if environ is not None else os.environ)["CUDA_VISIBLE_DEVICES"] = parts[0].id
    return parts[0]


def partition_nccl_env(part: Partition, inventory: NodeInventory) -> dict[str, str]:
    """NCCL variables for a task on ``part``: its GPU's nearest NICs, as for a whole GPU
    (:func:`ray_accel_ext.worker.nccl_env`); MIG instances have no NVLink peer-to-peer, so their
    collectives go through these NICs (or host memory)."""
    from ...worker import nccl_env

    wanted = [p.nic for p in part.nics]
    nics = {n.name: n for d in inventory.descriptions for n in d.nics}
    return nccl_env([nics[name] for name in wanted if name in nics])
