"""Worker side for TPU: the chips a Ray task holds and where its host sits in the slice.

Inside a task or actor scheduled with ``resources={"TPU": n}`` (for example in a bundle of
``ray.util.tpu.slice_placement_group``)::

    from ray_accel_ext.backends.tpu.worker import my_tpu_chips
    me = my_tpu_chips()
    me.slice_name, me.worker_id, me.topology   # "slice-a", 2, "4x4"
    me.chip_indices, me.coords                 # (0, 1, 2, 3), ((0, 2), (1, 2), (0, 3), (1, 3))
    me.host_coords                             # ((0, 0), (1, 0), (0, 1), (1, 1))
    me.links                                   # the ICI links of those chips (to other hosts too)

The chips are the ids Ray assigned (``ray.get_runtime_context().get_accelerator_ids()["TPU"]``,
which are ``TPU_VISIBLE_CHIPS`` indices) matched to the node's description, so each comes with its
PCI address, NUMA node and local CPUs. The description is what the node's start hook published
(:func:`ray_accel_ext.worker.node_inventory`); where it has no slice, the slice fields come from the
node's own labels. No metadata server is asked. Ray is imported only inside :func:`my_tpu_chips`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import RuntimeTopologyError
from ...labels import PROJECT_PREFIX, RAY_PREFIX
from ...model import Device, Fabric, Link
from ...worker import WorkerTopology, my_devices, this_node_inventory

__all__ = ["TpuWorkerInfo", "my_tpu_chips", "tpu_info_from"]


@dataclass(frozen=True)
class TpuWorkerInfo:
    """The TPU chips a worker holds and its host's slice coordinates.

    Attributes:
        accelerator_ids: the ``TPU`` ids Ray assigned (strings, as Ray gives them).
        chips: the node's devices for those ids (index, PCI address, NUMA node, CPUs, coords).
        slice_name: the slice (``ray.io/tpu-slice-name``), None when the slice is unknown.
        worker_id: this host's index in the slice (``ray.io/tpu-worker-id``).
        hosts: hosts in the slice.
        topology: the slice's chip grid (``4x4``).
        accelerator_type: the slice's type string (``v6e-16``).
        hostnames: the slice's hosts in worker order, when known.
    """

    accelerator_ids: tuple[str, ...]
    chips: tuple[Device, ...]
    slice_name: str | None
    worker_id: int | None
    hosts: int | None
    topology: str | None
    accelerator_type: str | None
    hostnames: tuple[str, ...] = ()
    links: tuple[Link, ...] = ()

    @property
    def chip_indices(self) -> tuple[int, ...]:
        """Indices (``TPU_VISIBLE_CHIPS`` numbering) of the held chips."""
        return tuple(d.index for d in self.chips)

    @property
    def coords(self) -> tuple[tuple[int, ...] | None, ...]:
        """Each held chip's coordinates in the slice topology (None where not derivable)."""
        return tuple(d.coords for d in self.chips)

    @property
    def host_coords(self) -> tuple[tuple[int, ...] | None, ...]:
        """Each held chip's coordinates within its host."""
        return tuple(d.host_coords for d in self.chips)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, for returning from a task."""
        return {
            "accelerator_ids": list(self.accelerator_ids),
            "chips": [d.to_dict() for d in self.chips],
            "chip_indices": list(self.chip_indices),
            "coords": [list(c) if c is not None else None for c in self.coords],
            "host_coords": [list(c) if c is not None else None for c in self.host_coords],
            "links": [link.to_dict() for link in self.links],
            "slice_name": self.slice_name,
            "worker_id": self.worker_id,
            "hosts": self.hosts,
            "topology": self.topology,
            "accelerator_type": self.accelerator_type,
            "hostnames": list(self.hostnames),
        }


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isascii() and text.isdecimal() else None


def tpu_info_from(topology: WorkerTopology, links: tuple[Link, ...] = (),
                  node_labels: Mapping[str, str] | None = None) -> TpuWorkerInfo:
    """Turn a generic :class:`~ray_accel_ext.worker.WorkerTopology` of ``TPU`` devices into TPU
    terms; without a slice in it, the slice fields come from ``node_labels`` (the node's labels)."""
    if topology.resource_name != "TPU":
        raise RuntimeTopologyError(f"expected TPU devices, got {topology.resource_name}")
    fabric: Fabric | None = topology.fabric if topology.fabric and topology.fabric.kind == "tpu-slice" else None
    held = {d.index for d in topology.devices}
    mine = tuple(link for link in links if link.a in held)
    if fabric is None and node_labels:
        get = node_labels.get
        return TpuWorkerInfo(
            accelerator_ids=topology.accelerator_ids, chips=topology.devices,
            slice_name=get(f"{RAY_PREFIX}/tpu-slice-name"), worker_id=_int(get(f"{RAY_PREFIX}/tpu-worker-id")),
            hosts=_int(get(f"{PROJECT_PREFIX}/fabric-hosts")), topology=get(f"{RAY_PREFIX}/tpu-topology"),
            accelerator_type=get(f"{RAY_PREFIX}/tpu-pod-type"), links=mine,
        )
    return TpuWorkerInfo(
        accelerator_ids=topology.accelerator_ids,
        chips=topology.devices,
        slice_name=fabric.id if fabric else None,
        worker_id=fabric.worker if fabric else None,
        hosts=fabric.hosts if fabric else None,
        topology=fabric.topology if fabric else None,
        accelerator_type=fabric.product if fabric else None,
        hostnames=fabric.hostnames if fabric else (),
        links=mine,
    )


def my_tpu_chips() -> TpuWorkerInfo:
    """The TPU chips the calling Ray task/actor holds and its host's slice coordinates.

    Raises :class:`~ray_accel_ext.errors.RuntimeTopologyError` outside a Ray worker, or when the
    task holds no TPU chips.
    """
    import ray

    topology = my_devices("TPU")
    desc = next((d for d in this_node_inventory().descriptions if d.resource_name == "TPU"), None)
    labels = ray.get_runtime_context().get_node_labels() if topology.fabric is None else None
    return tpu_info_from(topology, desc.links if desc else (), labels)
