"""Worker side of MIG: which MIG instance this task holds, made the only GPU it sees.

A node offers each MIG instance as one unit of ``mig-<profile>`` (:func:`ray_accel_ext.labels
.partition_resource`). Ray gives a custom resource per-unit ids only when it is a *unit-instance*
resource (``custom_unit_instance_resources``, a cluster-wide system config that replaces Ray's
default list; reference: Ray 2.60 ``ray_config_def.h``). With it, concurrent holders get disjoint
ids; :func:`use_my_partition` maps the ids of this task to the node's instances of that profile
(in the order discovery lists them) and sets ``CUDA_VISIBLE_DEVICES=MIG-<uuid>``, so CUDA
enumerates exactly that instance::

    @ray.remote(resources={"mig-1g.10gb": 1})
    def infer():
        from ray_accel_ext.backends.nvidia_gpu.worker import use_my_partition
        part = use_my_partition()        # before CUDA initialises in this process
        ...

CUDA enumerates one MIG instance per process (NVIDIA MIG user guide, "CUDA Device Enumeration"),
so a task holds one instance. The ids are read from the worker's own resource table
(``core_worker.resource_ids()``, the table ``get_accelerator_ids`` reads for Ray's own managers).
"""

from __future__ import annotations

import os
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
    out = []
    for name, slots in sorted(resource_ids.items()):
        if not name.startswith("mig-"):
            continue
        for slot in slots:
            out.append(partition_of(inventory, name, int(slot[0] if isinstance(slot, (list, tuple)) else slot)))
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
