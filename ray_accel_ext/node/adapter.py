"""NodeInventory -> Ray resources and node labels (schema version 1).

This is the only module that knows Ray's names. Discovery knows nothing of Ray; this module knows
nothing of sysfs.

Labels (DESIGN section 4): ``ray.io/accelerator-type`` and, for TPU, ``ray.io/tpu-slice-name``,
``ray.io/tpu-worker-id``, ``ray.io/tpu-topology``, ``ray.io/tpu-pod-type`` exactly as Ray's own TPU
manager emits them, and ``ray.io/tpu-subslice-<shape>`` as Ray's newest subslice code numbers them
(:mod:`.tpu_subslices`); ``ray.io/gpu-domain`` for a multi-node NVLink domain; everything else under
``rayaccel.io/``. Every value is sanitised to Ray's selector syntax; a value that cannot be made
valid is dropped rather than published.

Resources keep Ray's names (``GPU``, ``TPU``, ``neuron_cores``, ``accelerator_type:<T>``) so Ray's
own managers keep setting ``CUDA_VISIBLE_DEVICES`` & co. For TPU the ``<slice-name>`` and (on
worker 0) ``TPU-<pod-type>-head`` resources that ``ray.util.tpu`` needs are added.

Several families on one node: each family's resources are all published (Ray itself keeps one,
chosen in hash order). The schema labels describe the *primary* family (the one with the most
devices; ties broken by backend name); ``rayaccel.io/families`` lists all of them, every family
present gets the ``ray.io/`` keys Ray defines for it (``ray.io/tpu-*`` for TPU chips next to GPUs,
``ray.io/gpu-domain``), and every other family gets ``rayaccel.io/<backend>-sku``, ``-count`` and
``-memory-gib`` (``labels.family_key``). The schema: ``docs/labels.md``.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .. import labels as L
from ..labels import (
    PROJECT_PREFIX,
    RAY_PREFIX,
    TPU_ATTR_ACCELERATOR_TYPE,
    TPU_ATTR_CHIP_BLOCK,
    TPU_ATTR_HOST_BOUNDS,
    TPU_ATTR_SLICE_NAME,
    TPU_ATTR_TOPOLOGY,
    TPU_ATTR_WORKER_ID,
    is_valid_key,
    is_valid_value,
    key_prefix,
    ray_tpu_pod_type,
    sanitize_value,
)
from ..model import SCHEMA_VERSION, NodeDescription, NodeInventory, Problem
from ..problems import LINK_DOWN
from ..skus import memory_gib_from_bytes
from .tpu_subslices import subslice_labels, worker_of_coords

__all__ = ["RayNodeSpec", "to_ray_node", "degraded_spec", "ray_tpu_identity", "GPUDIRECT_PATHS"]

# A device "has GPUDirect" when its nearest NIC sits behind the same PCIe switch.
GPUDIRECT_PATHS = ("PIX", "PXB")
# Ray's own resource names (ray_constants.DEFAULT_RESOURCES, the accelerator resources, the node:
# resources). `ray start` refuses CPU/memory/object_store_memory as custom resources and does not
# start, so a name from outside text (a TPU slice named by metadata) never becomes one of them.
_RAY_RESOURCE_NAMES = frozenset({"CPU", "GPU", "memory", "object_store_memory", "TPU", "neuron_cores"})
_RAY_RESOURCE_PREFIXES = ("node:", "accelerator_type:")
@dataclass(frozen=True)
class RayNodeSpec:
    """What a node hands Ray: resources (``GPU`` included) and labels."""

    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", MappingProxyType(dict(sorted(self.resources.items()))))
        object.__setattr__(self, "labels", MappingProxyType(dict(sorted(self.labels.items()))))

    @property
    def num_gpus(self) -> float | None:
        return self.resources.get("GPU")

    def custom_resources(self) -> dict[str, float]:
        """Resources other than ``GPU`` (Ray takes GPUs through ``num_gpus``)."""
        return {k: v for k, v in self.resources.items() if k != "GPU"}

    def to_dict(self) -> dict[str, Any]:
        return {"resources": {k: _num(v) for k, v in self.resources.items()}, "labels": dict(self.labels)}

    # -- other delivery formats (``ray-accel ray-args --format``) -------------------------------

    def ray_start_flags(self) -> list[str]:
        """``ray start`` arguments: ``--num-gpus``, ``--resources`` JSON, ``--labels k=v,...``."""
        flags: list[str] = []
        if self.num_gpus is not None:
            flags += ["--num-gpus", str(_num(self.num_gpus))]
        custom = self.custom_resources()
        if custom:
            flags += ["--resources", json.dumps({k: _num(v) for k, v in custom.items()}, separators=(",", ":"))]
        if self.labels:
            flags += ["--labels", ",".join(f"{k}={v}" for k, v in self.labels.items())]
        return flags

    def labels_yaml(self) -> str:
        """A ``ray start --labels-file`` YAML document (values quoted)."""
        return "".join(f"{k}: {json.dumps(v)}\n" for k, v in self.labels.items())

    def env_exports(self) -> str:
        """``RAY_OVERRIDE_RESOURCES`` / ``RAY_OVERRIDE_LABELS`` shell exports."""
        res = json.dumps({k: _num(v) for k, v in self.resources.items()}, separators=(",", ":"))
        lab = json.dumps(dict(self.labels), separators=(",", ":"))
        return f"export RAY_OVERRIDE_RESOURCES={shlex.quote(res)}\nexport RAY_OVERRIDE_LABELS={shlex.quote(lab)}\n"


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def degraded_spec() -> RayNodeSpec:
    """The spec of a node whose discovery failed entirely: schema and ``discovery=degraded`` (the
    caller logs why)."""
    return RayNodeSpec(labels={L.SCHEMA: str(SCHEMA_VERSION), L.DISCOVERY: "degraded"})


def to_ray_node(inventory: NodeInventory) -> RayNodeSpec:
    """Resources and labels for a node with ``inventory``."""
    resources: dict[str, float] = {}
    labels: dict[str, str] = {
        L.SCHEMA: str(SCHEMA_VERSION),
        L.DISCOVERY: "degraded" if inventory.degraded else "ok",
    }
    descs = inventory.descriptions
    if not descs:
        labels[L.COUNT] = "0"
        return RayNodeSpec(resources=resources, labels=labels)

    for desc in descs:
        _add_resources(desc, resources)
    primary = inventory.primary
    _add(labels, L.FAMILIES, ".".join(sorted(d.backend for d in descs)))
    _add_family_labels(primary, labels)
    for desc in descs:
        # Ray's own keys for each family present (ray.io/tpu-* for TPU chips next to GPUs, ...).
        for key, value in _ray_family_labels(desc).items():
            _add(labels, key, value)
        if desc is not primary:
            _add(labels, L.family_key(desc.backend, L.FAMILY_SKU), desc.sku.name)
            _add(labels, L.family_key(desc.backend, L.FAMILY_COUNT), str(len(desc.devices)))
            memory = _memory_gib(desc)
            if memory:
                _add(labels, L.family_key(desc.backend, L.FAMILY_MEMORY_GIB), str(memory))
            _add_attributes(desc, labels)
    return RayNodeSpec(resources=resources, labels=labels)


def _add(labels: dict[str, str], key: str, value: object) -> None:
    """Add ``key=value`` if both can be made valid for Ray's selectors."""
    if value is None or not is_valid_key(key):
        return
    text = value if isinstance(value, str) and is_valid_value(value) else sanitize_value(value)
    if text:
        labels[key] = text


def _reserved_resource(name: str) -> bool:
    return name in _RAY_RESOURCE_NAMES or name.startswith(_RAY_RESOURCE_PREFIXES)


def _add_resources(desc: NodeDescription, resources: dict[str, float]) -> None:
    quantity = float(desc.resource_quantity)
    if desc.resource_name in ("CPU", "memory", "object_store_memory"):
        return  # Ray's own; `ray start` would refuse them as custom resources
    if quantity > 0 and math.isfinite(quantity):
        resources[desc.resource_name] = resources.get(desc.resource_name, 0.0) + quantity
    acc_type = desc.sku.ray_accelerator_type
    # A resource name is checked like a label value (discovery reports one that is not).
    if acc_type and quantity > 0 and is_valid_value(acc_type):
        resources[f"accelerator_type:{acc_type}"] = 1.0
    if desc.resource_name == "TPU":
        resources.update(_tpu_resources(desc))
    for part in desc.partitions:
        name = L.partition_resource(part.profile)
        if is_valid_value(name) and not _reserved_resource(name):
            resources[name] = resources.get(name, 0.0) + 1.0


def _memory_gib(desc: NodeDescription) -> int | None:
    """Memory per device in whole GiB: the SKU's figure, else the first device's reported memory,
    both by the SKU database's one rule (``skus.memory_gib_from_bytes``: GiB, rounded up)."""
    memory = desc.sku.memory_bytes or next((d.memory_bytes for d in desc.devices if d.memory_bytes), None)
    return memory_gib_from_bytes(memory)


def _add_family_labels(desc: NodeDescription, labels: dict[str, str]) -> None:
    sku = desc.sku
    if sku.ray_accelerator_type:
        _add(labels, L.ACCELERATOR_TYPE, sku.ray_accelerator_type)
    _add(labels, L.VENDOR, sku.vendor)
    _add(labels, L.SKU, sku.name)
    _add(labels, L.GENERATION, sku.generation)
    _add(labels, L.COUNT, str(len(desc.devices)))
    memory = _memory_gib(desc)
    if memory:
        _add(labels, L.MEMORY_GIB, str(memory))
    _add(labels, L.INTERCONNECT, desc.interconnect)

    fabric = desc.fabric
    if fabric is not None:
        _add(labels, L.FABRIC_DOMAIN, fabric.id)
        _add(labels, L.FABRIC_HOSTS, str(fabric.hosts))
        _add(labels, L.FABRIC_WORKER, fabric.worker)  # omitted when the hardware does not say
        _add(labels, L.FABRIC_TOPOLOGY, fabric.topology)

    loc = desc.location
    _add(labels, L.CLUSTER, loc.cluster)
    _add(labels, L.BLOCK, loc.block)
    _add(labels, L.RACK, loc.rack)

    numa = {d.numa_node for d in desc.devices if d.numa_node is not None}
    if numa:
        _add(labels, L.NUMA_NODES, str(len(numa)))
    _add(labels, L.RDMA_NICS, str(len(desc.nics)))
    # Omitted when no device knows its nearest NIC (affinity unknown, e.g. Neuron without neuron-ls).
    if desc.nics and any(d.nics for d in desc.devices):
        direct = bool(desc.devices) and all(
            any(n.path in GPUDIRECT_PATHS for n in d.nics) for d in desc.devices
        )
        _add(labels, L.GPUDIRECT, "true" if direct else "false")

    _add_partition_labels(desc, labels)
    _add_attributes(desc, labels)


def _add_partition_labels(desc: NodeDescription, labels: dict[str, str]) -> None:
    """The MIG layout (GPUs in MIG mode, instances, profiles) and how many devices have a link
    down; each only when there is something to say, so nodes without either keep their labels."""
    if desc.partitions:
        _add(labels, L.MIG_GPUS, str(len({p.device for p in desc.partitions})))
        _add(labels, L.MIG_INSTANCES, str(len(desc.partitions)))
        _add(labels, L.MIG_PROFILES, "_".join(sorted({p.profile.replace("+", ".") for p in desc.partitions})))
    down = {p.device for p in desc.problems if isinstance(p, Problem) and p.code == LINK_DOWN and p.device is not None}
    if down:
        _add(labels, L.DEGRADED_LINKS, str(len(down)))


def _add_attributes(desc: NodeDescription, labels: dict[str, str]) -> None:
    for key, value in desc.attributes.items():
        # Backend attributes never write Ray's or the schema's keys (the registry refuses those
        # prefixes; this holds for descriptions that did not come through it too).
        if key_prefix(key) not in (RAY_PREFIX, PROJECT_PREFIX):
            _add(labels, key, value)


def _ray_family_labels(desc: NodeDescription) -> dict[str, str]:
    """The ``ray.io/`` keys Ray defines for this family: the TPU slice keys, the GPU NVLink domain."""
    out: dict[str, str] = {}
    fabric = desc.fabric
    if fabric is not None and fabric.kind == "nvlink-domain" and desc.resource_name == "GPU":
        out[L.GPU_DOMAIN] = fabric.id
    if desc.resource_name == "TPU":
        out.update(_tpu_labels(desc))
    return out


# -- TPU: Ray 2.60's TPUAcceleratorManager names (reference/ray-2.60.md section 5) ---------------


def ray_tpu_identity(desc: NodeDescription) -> dict[str, str]:
    """What Ray 2.60's TPU manager knows of this node's slice, field by field: ``name``,
    ``worker``, ``topology`` and ``pod_type`` (each only when known). From the slice when the
    node has one, else from the backend's partial-identity attributes (a worker id or a slice name
    alone, as Ray labels them too)."""
    fabric = desc.fabric
    out: dict[str, str] = {}
    if fabric is not None and fabric.kind == "tpu-slice":
        out = {"name": fabric.id, "worker": str(fabric.worker)}
        if fabric.topology:
            out["topology"] = fabric.topology.strip().lower()
        pod_type = ray_tpu_pod_type(fabric.product)
    else:
        attrs = desc.attributes
        for field_name, key in (("name", TPU_ATTR_SLICE_NAME), ("worker", TPU_ATTR_WORKER_ID), ("topology", TPU_ATTR_TOPOLOGY)):
            if attrs.get(key):
                out[field_name] = attrs[key]
        pod_type = ray_tpu_pod_type(attrs.get(TPU_ATTR_ACCELERATOR_TYPE))
    if pod_type:
        out["pod_type"] = pod_type
    return out


def _tpu_labels(desc: NodeDescription) -> dict[str, str]:
    """``ray.io/tpu-*`` labels, as ``TPUAcceleratorManager.get_current_node_accelerator_labels``,
    and the ``ray.io/tpu-subslice-<shape>`` labels of Ray's newest subslice code."""
    ident = ray_tpu_identity(desc)
    keys = {"name": L.TPU_SLICE_NAME, "worker": L.TPU_WORKER_ID, "topology": L.TPU_TOPOLOGY, "pod_type": L.TPU_POD_TYPE}
    return {**{keys[k]: v for k, v in ident.items()}, **_tpu_subslice_labels(desc)}


def _tpu_subslice_labels(desc: NodeDescription) -> dict[str, str]:
    """This host's subslice indices (:mod:`.tpu_subslices`), from its chips' slice coordinates as
    Ray's newest code takes them, over the slice's published geometry; none without both."""
    fabric, attrs = desc.fabric, desc.attributes
    coords = [d.coords for d in desc.devices if d.coords is not None]
    block, hosts = attrs.get(TPU_ATTR_CHIP_BLOCK), attrs.get(TPU_ATTR_HOST_BOUNDS)
    if fabric is None or fabric.kind != "tpu-slice" or not fabric.topology or not coords or not block or not hosts:
        return {}
    try:
        worker = worker_of_coords(coords, block, hosts)
    except ValueError:
        return {}
    return subslice_labels(fabric.topology, block, hosts, worker)


def _tpu_resources(desc: NodeDescription) -> dict[str, float]:
    """``<slice-name>`` on every host and ``TPU-<pod-type>-head`` on worker 0, as
    ``TPUAcceleratorManager.get_current_node_additional_resources`` (which needs all three of
    slice name, worker id and pod type)."""
    ident = ray_tpu_identity(desc)
    if not all(ident.get(k) for k in ("name", "worker", "pod_type")):
        return {}
    out = {} if _reserved_resource(ident["name"]) or not is_valid_value(ident["name"]) else {ident["name"]: 1.0}
    if ident["worker"] == "0":
        out[f"TPU-{ident['pod_type']}-head"] = 1.0
    return out
