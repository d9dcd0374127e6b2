"""Worker side: which devices did this task get, and what is near them.

Inside a Ray task or actor that holds accelerators::

    from ray_accel_ext.worker import my_devices, pin_to_local_cpus
    topo = my_devices()            # devices Ray assigned, their NUMA CPUs, nearest NICs, NCCL env
    os.environ.update(topo.nccl_env)
    pin_to_local_cpus(topo)        # restrict this process to the devices' local CPUs (psutil)

The devices are matched through the ids Ray assigned (``ray.get_runtime_context()
.get_accelerator_ids()``), which are the node's device indices for ``GPU``/``TPU`` and core ids for
``neuron_cores``. The node's description is the one its start hook published
(``RAY_ACCEL_NODE_INVENTORY``, inherited from the raylet, :mod:`.node.handoff`); only without it (a
node started without the hook) is the node described again, once per process, from its own files
and never from a cloud metadata server (``RAY_ACCEL_METADATA=off``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import RuntimeTopologyError
from .model import Device, Fabric, Nic, NodeDescription, NodeInventory
from .node.handoff import node_inventory

__all__ = ["WorkerTopology", "my_devices", "topology_for", "pin_to_local_cpus", "nccl_env", "node_inventory",
           "this_node_inventory", "device_indices"]


@dataclass(frozen=True)
class WorkerTopology:
    """What a worker was given and what sits next to it."""

    backend: str
    resource_name: str
    accelerator_ids: tuple[str, ...]
    devices: tuple[Device, ...]
    cpus: tuple[int, ...]
    numa_nodes: tuple[int, ...]
    nics: tuple[Nic, ...]
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    fabric: Fabric | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "resource_name": self.resource_name,
            "accelerator_ids": list(self.accelerator_ids),
            "devices": [d.to_dict() for d in self.devices],
            "cpus": list(self.cpus),
            "numa_nodes": list(self.numa_nodes),
            "nics": [n.to_dict() for n in self.nics],
            "nccl_env": dict(self.nccl_env),
            "fabric": self.fabric.to_dict() if self.fabric else None,
        }




@functools.lru_cache(maxsize=1)
def this_node_inventory() -> NodeInventory:
    """:func:`node_inventory` read once per process (the hardware does not change under a
    running worker)."""
    return node_inventory()


def nccl_env(nics: Sequence[Nic]) -> dict[str, str]:
    """NCCL/libfabric variables that steer collectives onto ``nics``.

    ``NCCL_IB_HCA`` uses the ``=`` exact-match form so ``mlx5_1`` does not also select ``mlx5_10``
    (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca).
    """
    env: dict[str, str] = {}
    ib = [n.name for n in nics if n.kind in ("infiniband", "roce")]
    if ib:
        env["NCCL_IB_HCA"] = "=" + ",".join(ib)
    if any(n.kind == "efa" for n in nics):
        env["FI_PROVIDER"] = "efa"
    return env


def _unit_owner(desc: NodeDescription):
    """Map a Ray resource id to a device index.

    Ids are device indices when the resource counts devices (``GPU``, ``TPU``); when it counts
    sub-device units (``neuron_cores``) each device owns ``device.cores`` consecutive ids.
    """
    n = len(desc.devices)
    if desc.resource_quantity == n or n == 0:
        return lambda unit: unit
    if all(d.cores for d in desc.devices):
        starts: list[tuple[int, int, int]] = []
        first = 0
        for d in desc.devices:
            starts.append((first, first + int(d.cores or 0), d.index))
            first += int(d.cores or 0)
        return lambda unit: next((idx for lo, hi, idx in starts if lo <= unit < hi), None)
    per_device = desc.resource_quantity / n
    return lambda unit: int(unit // per_device)


def _index_of(desc: NodeDescription, raw: str, owner: Any) -> int | None:
    """The device index of one of Ray's ids: a unit number, or a device's own id where the node's
    workers started with a visible-devices value of device ids (a MIG node's whole GPUs by UUID,
    :mod:`ray_accel_ext.node.ray_devices`), which Ray maps its ids through
    (``ray/_private/worker.py`` ``get_accelerator_ids_for_accelerator_resource``)."""
    try:
        return owner(int(raw))
    except ValueError:
        pass
    index = next((d.index for d in desc.devices if d.id == raw), None)
    if index is None:
        raise RuntimeTopologyError(f"Ray assigned {desc.resource_name} id {raw!r}, which is not an index or a device of this node")
    return index


def device_indices(resource_name: str, accelerator_ids: Sequence[str]) -> tuple[int, ...]:
    """Ray's ``accelerator_ids`` of ``resource_name`` as this node's device indices (a device id
    such as a GPU UUID mapped through the node's inventory)."""
    try:
        return tuple(int(x) for x in accelerator_ids)
    except ValueError:
        pass
    for desc in this_node_inventory().descriptions:
        if desc.resource_name == resource_name:
            owner = _unit_owner(desc)
            return tuple(_index_of(desc, str(raw), owner) for raw in accelerator_ids)
    raise RuntimeTopologyError(f"Ray assigned {resource_name} ids {list(accelerator_ids)}, which are not indices")


def topology_for(desc: NodeDescription, accelerator_ids: Sequence[str]) -> WorkerTopology:
    """The devices of ``desc`` named by Ray's ``accelerator_ids`` and what is near them."""
    n = len(desc.devices)
    owner = _unit_owner(desc)
    indices: list[int] = []
    for raw in accelerator_ids:
        index = _index_of(desc, raw, owner)
        if index is None or not 0 <= index < n:
            raise RuntimeTopologyError(
                f"Ray assigned {desc.resource_name} id {raw}, but this node describes devices 0..{n - 1}"
            )
        if index not in indices:
            indices.append(index)
    devices = tuple(desc.devices[i] for i in sorted(indices))
    cpus = tuple(sorted({c for d in devices for c in d.cpus}))
    numa = tuple(sorted({d.numa_node for d in devices if d.numa_node is not None}))
    by_name = {nic.name: nic for nic in desc.nics}
    near: list[Nic] = []
    for d in devices:
        for path in d.nics:
            nic = by_name.get(path.nic)
            if nic is not None and nic not in near:
                near.append(nic)
    return WorkerTopology(
        backend=desc.backend,
        resource_name=desc.resource_name,
        accelerator_ids=tuple(str(x) for x in accelerator_ids),
        devices=devices,
        cpus=cpus,
        numa_nodes=numa,
        nics=tuple(near),
        nccl_env=nccl_env(near),
        fabric=desc.fabric,
    )


def my_devices(resource_name: str | None = None) -> WorkerTopology:
    """The accelerators Ray gave the calling task or actor, with their NUMA CPUs and nearest NICs.

    ``resource_name`` picks the family (``GPU``, ``TPU``, ``neuron_cores``); by default the first
    family the task holds ids of. Raises RuntimeTopologyError outside a Ray worker or when the task
    holds no accelerators.
    """
    try:
        import ray

        if not ray.is_initialized():
            raise RuntimeTopologyError("my_devices() must be called inside a Ray task or actor")
        assigned: Mapping[str, list[str]] = ray.get_runtime_context().get_accelerator_ids()
    except ImportError:
        raise RuntimeTopologyError("Ray is not installed") from None
    inventory = this_node_inventory()
    for desc in inventory.descriptions:
        if resource_name not in (None, desc.resource_name):
            continue
        ids = assigned.get(desc.resource_name) or []
        if ids:
            return topology_for(desc, ids)
    held = {k: v for k, v in assigned.items() if v}
    raise RuntimeTopologyError(
        f"this task holds no {resource_name or 'accelerator'} devices described on this node "
        f"(assigned ids: {held or 'none'}; families: {[d.resource_name for d in inventory.descriptions]})"
    )


def pin_to_local_cpus(topology: WorkerTopology | None = None) -> list[int]:
    """Restrict this process to the CPUs local to its devices; returns the CPUs applied.

    Only CPUs this process may already use are kept (a container's cpuset stays respected).
    """
    import psutil

    topology = topology if topology is not None else my_devices()
    allowed = set(os.sched_getaffinity(0))
    wanted = sorted(set(topology.cpus) & allowed)
    if not wanted:
        raise RuntimeTopologyError(
            f"none of the devices' local CPUs {list(topology.cpus)[:8]}... are available to this process "
            f"(allowed: {sorted(allowed)[:8]}...)"
        )
    psutil.Process().cpu_affinity(wanted)
    return wanted
