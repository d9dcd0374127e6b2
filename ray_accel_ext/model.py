"""Frozen, versioned value types that describe the accelerators of one node.

Backends build these; nothing here knows Ray. ``to_dict()``/``from_dict()`` round-trip through
plain JSON types, and ``from_dict`` raises :class:`DescriptionError` naming the field path
(``devices[3].numa_node: expected int, got str``).

Shape of a node (``NodeDescription``, one per accelerator family found)::

    sku            what the devices are (vendor, canonical SKU id, generation, Ray type, memory)
    devices        one entry per schedulable device, ``index`` = Ray's visible-device id
    partitions     partitions offered instead of their whole device (NVIDIA MIG instances)
    links          device-to-device fabric links (NVLink, ICI, NeuronLink, XGMI)
    nics           RDMA-capable NICs; each device lists its nearest ones with the NCCL path class
    fabric         the accelerator-fabric domain this host belongs to (slice, NVLink domain, ...)
    location       provider network hierarchy (zone, cluster, block, rack) when known
    attributes     vendor labels, every key under the backend's own ``label_prefix``
    problems       what could not be read (coded :class:`Problem` values, see
                   :mod:`ray_accel_ext.problems`); a non-empty tuple makes the node ``degraded``
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import problems as _codes
from .errors import DescriptionError
from .values import _frozen_mapping, _Value, _without_defaults

__all__ = [
    "SCHEMA_VERSION", "PATH_CLASSES", "Sku", "NicPath", "Device", "Partition", "Link", "Nic", "Fabric", "Location",
    "NodeDescription", "Problem", "NodeInventory", "reason_line", "golden_form",
]

SCHEMA_VERSION = 1

# NCCL/nvidia-smi PCIe path classes, nearest first (NVIDIA/nccl src/include/graph.h).
PATH_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True, slots=True, kw_only=True)
class Sku(_Value):
    """What a device is.

    Attributes:
        vendor: lower-case vendor id (``nvidia``, ``google``, ``aws``, ``amd``).
        name: canonical SKU id (``h100-sxm5-80gb``, ``tpu-v6e``, ``trainium2``); for a device the
            SKU table does not know, ``<vendor>-unknown-<pci device id>``.
        generation: architecture or generation (``hopper``, ``v6e``, ``trainium2``, ``unknown``).
        ray_accelerator_type: Ray's canonical accelerator type (``H100``, ``TPU-V6E``), or None.
        product: the vendor's product string when known (``NVIDIA H100 80GB HBM3``).
        memory_bytes: memory per device, when known.
        pci_device_id: ``0x2330`` style id the SKU was matched from, when PCI based.
        known: False when the device id is not in the SKU table.
    """

    vendor: str
    name: str
    generation: str
    ray_accelerator_type: str | None = None
    product: str | None = None
    memory_bytes: int | None = None
    pci_device_id: str | None = None
    known: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class NicPath(_Value):
    """One NIC as seen from a device: its name and the PCIe path class between them."""

    nic: str
    path: str

    def __post_init__(self) -> None:
        if self.path not in PATH_CLASSES:
            raise DescriptionError(f"expected one of {PATH_CLASSES}, got {self.path!r}", "path")


@dataclass(frozen=True, slots=True, kw_only=True)
class Device(_Value):
    """One schedulable accelerator device.

    Attributes:
        index: logical index 0..n-1; the id Ray hands out for this device (the order of
            ``CUDA_VISIBLE_DEVICES``, ``TPU_VISIBLE_CHIPS``, ``/dev/neuronN``).
        id: stable identity: GPU UUID, or PCI address when nothing better exists.
        pci_address: sysfs form ``0000:18:00.0`` (lower case, 4-digit domain).
        numa_node: NUMA node, None when unknown (``-1`` in sysfs).
        cpus: CPUs local to the device (expanded ``local_cpulist``).
        pcie_switch: PCI address of the topmost switch port above the device, None when the
            device hangs off a root port directly.
        memory_bytes: device memory when known per device.
        cores: compute cores per device (NeuronCores, TensorCores) when meaningful.
        coords: position in the fabric shape (TPU chip coordinates in the slice), when known.
        nics: nearest RDMA NICs, best path class first.
        host_coords: position within this host's own block of the fabric (TPU chip coordinates
            in the host), when known; left out of ``to_dict()`` when unknown.
        memory_numa_node: the NUMA node that *is* the device's memory, where the OS maps it as
            one (a Grace-attached GPU: NVML's ``GPU NUMA ID``, a CPU-less node); left out of
            ``to_dict()`` when there is none.
    """

    index: int
    id: str
    pci_address: str | None = None
    numa_node: int | None = None
    cpus: tuple[int, ...] = ()
    pcie_switch: str | None = None
    memory_bytes: int | None = None
    cores: int | None = None
    coords: tuple[int, ...] | None = None
    nics: tuple[NicPath, ...] = ()
    host_coords: tuple[int, ...] | None = None
    memory_numa_node: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_defaults(self, ("host_coords", "memory_numa_node"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition(_Value):
    """A partition (NVIDIA MIG instance) offered instead of its device, which is then not in
    ``devices``; it keeps the device's PCI address, NUMA node, CPUs and NICs, so placement treats it
    as a unit of that device. ``id``: the visible-devices value (``MIG-<uuid>``); ``device``: the
    device's id; ``profile``: the driver's name; ``instance``: ``<gpu inst>.<compute inst>``."""

    id: str
    device: str
    profile: str
    memory_bytes: int | None = None
    slices: int = 1
    instance: str | None = None
    pci_address: str | None = None
    numa_node: int | None = None
    cpus: tuple[int, ...] = ()
    nics: tuple[NicPath, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Link(_Value):
    """A fabric link between two devices of this node (device indices ``a`` < ``b``), or, with
    ``peer_worker`` set, from device ``a`` of this node to device ``b`` of the host that is
    worker ``peer_worker`` of this node's fabric domain (a TPU chip's ICI neighbour on another
    host of the slice).

    ``kind`` is the interconnect (``nvlink4``, ``ici``, ``neuronlink-v3``, ``xgmi``); ``lanes`` the
    number of bonded links (``NV18`` has 18); ``wrap`` marks a torus wrap-around link (from the
    last chip of an axis back to the first). ``peer_worker`` and ``wrap`` are left out of
    ``to_dict()`` when unset.
    """

    a: int
    b: int
    kind: str
    lanes: int = 1
    bandwidth_gbps: float | None = None
    peer_worker: int | None = None
    wrap: bool = False

    def to_dict(self) -> dict[str, Any]:
        return _without_defaults(self, ("peer_worker", "wrap"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Nic(_Value):
    """An RDMA-capable network interface (InfiniBand, RoCE, EFA).

    ``kind`` is ``infiniband``, ``roce``, ``efa`` or ``ethernet``; ``netdev`` the Linux interface
    name when it has one (EFA often has none).
    """

    name: str
    kind: str
    pci_address: str | None = None
    numa_node: int | None = None
    netdev: str | None = None
    rate_gbps: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric(_Value):
    """The accelerator-fabric domain this host belongs to.

    Attributes:
        kind: ``tpu-slice``, ``nvlink-domain``, ``ultraserver``, ``xgmi-hive`` or ``host`` (a host
            that is its own domain).
        id: the domain's identity (slice name, ``<clusterUuid>.<cliqueId>``, server id, host id).
        hosts: number of hosts in the domain (on an NVLink domain the most it can have: NVML does
            not tell the partition size).
        worker: this host's index within the domain (0 .. hosts-1); None when the hardware does not
            say (an NVLink tray whose driver has no platform information); cluster-side ranks
            (``ray_accel_ext.placement.ranks``) order such hosts.
        topology: the domain's shape (``4x4``, ``2x2x2``), when it has one.
        product: the provider's name for the domain product (TPU pod type ``v6e-16``,
            ``trn2u.48xlarge``), when known.
        hostnames: the domain's hosts in worker order, when known.
    """

    kind: str
    id: str
    hosts: int = 1
    worker: int | None = 0
    topology: str | None = None
    product: str | None = None
    hostnames: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Location(_Value):
    """Provider network hierarchy, coarse to fine; every field optional."""

    provider: str | None = None
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    cluster: str | None = None
    block: str | None = None
    rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDescription(_Value):
    """Everything one backend found on this node.

    Attributes:
        backend: the entry-point name of the backend that produced it.
        resource_name: the Ray resource the devices are scheduled by (``GPU``, ``TPU``,
            ``neuron_cores``); Ray keeps isolating devices under these names.
        resource_quantity: how much of ``resource_name`` the node offers (devices, or cores).
        interconnect: device fabric (``nvlink4``, ``nvlink5``, ``ici``, ``neuronlink-v3``,
            ``xgmi``, ``pcie``).
        problems: why the description is incomplete (node is ``degraded``), coded
            :class:`Problem` values. A plain string (what a backend written for an earlier
            release gives) is accepted and becomes a Problem with the generic code
            ``degraded`` (:data:`ray_accel_ext.problems.DEGRADED`); a Problem without a
            ``backend`` gets this description's.
    """

    backend: str
    sku: Sku
    resource_name: str
    resource_quantity: float
    devices: tuple[Device, ...]
    interconnect: str = "pcie"
    partitions: tuple[Partition, ...] = ()
    links: tuple[Link, ...] = ()
    nics: tuple[Nic, ...] = ()
    fabric: Fabric | None = None
    location: Location = field(default_factory=Location)
    attributes: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[Problem | str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen_mapping(self.attributes))
        object.__setattr__(self, "problems", tuple(_coerce(p, self.backend) for p in self.problems))
        object.__setattr__(self, "resource_quantity", float(self.resource_quantity))
        if self.schema_version != SCHEMA_VERSION:
            raise DescriptionError(
                f"unsupported schema version {self.schema_version} (this package reads {SCHEMA_VERSION})",
                "schema_version",
            )

    @property
    def degraded(self) -> bool:
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        return _without_defaults(self, ("partitions",))  # added after schema 1: left out when empty

    def golden_dict(self) -> dict[str, Any]:
        """``to_dict()`` in the form golden ``expected.json`` files keep: problems as their messages."""
        return golden_form(self.to_dict())

    def consistency_errors(self) -> list[str]:
        """Cross-field invariants; each message names the field path. Empty when consistent."""
        errors: list[str] = []
        n = len(self.devices)
        for i, dev in enumerate(self.devices):
            if dev.index != i:
                errors.append(f"devices[{i}].index: expected {i} (indices must be 0..{n - 1} in order), got {dev.index}")
        seen: set[str] = set()
        ids = [d.id for d in self.devices] + [p.id for p in self.partitions]
        dupes = sorted({x for x in ids if x in seen or seen.add(x)})  # linear: 20,000 devices
        if dupes:
            errors.append(f"devices[*].id: duplicate ids {dupes}")
        for i, link in enumerate(self.links):
            local = ("a", "b") if link.peer_worker is None else ("a",)
            for end in local:
                v = getattr(link, end)
                if not 0 <= v < n:
                    errors.append(f"links[{i}].{end}: references device {v} but the node has devices 0..{n - 1}")
            if link.peer_worker is None and link.a == link.b:
                errors.append(f"links[{i}]: a link from device {link.a} to itself")
            if link.peer_worker is not None:
                if link.b < 0:
                    errors.append(f"links[{i}].b: negative device index {link.b} on worker {link.peer_worker}")
                if self.fabric is None or not 0 <= link.peer_worker < self.fabric.hosts:
                    hosts = self.fabric.hosts if self.fabric is not None else 0
                    errors.append(f"links[{i}].peer_worker: {link.peer_worker} is not a worker of this node's fabric (0..{hosts - 1})")
                elif link.peer_worker == self.fabric.worker:
                    errors.append(f"links[{i}].peer_worker: {link.peer_worker} is this node itself")
        nic_names = {nic.name for nic in self.nics}
        if len(nic_names) != len(self.nics):
            errors.append("nics[*].name: duplicate NIC names")
        for i, dev in enumerate(self.devices):
            for j, near in enumerate(dev.nics):
                if near.nic not in nic_names:
                    errors.append(f"devices[{i}].nics[{j}].nic: {near.nic!r} is not in nics")
        if self.fabric is not None:
            if self.fabric.hosts < 1:
                errors.append(f"fabric.hosts: expected >= 1, got {self.fabric.hosts}")
            elif self.fabric.worker is not None and not 0 <= self.fabric.worker < self.fabric.hosts:
                errors.append(f"fabric.worker: {self.fabric.worker} is outside 0..{self.fabric.hosts - 1}")
        if self.resource_quantity < 0:
            errors.append(f"resource_quantity: negative ({self.resource_quantity})")
        return errors


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem(_Value):
    """One reason a node is degraded: a code of :mod:`ray_accel_ext.problems` and its message.

    Attributes:
        code: what kind of problem (``file-missing``, ``metadata-timeout``, a vendor's declared
            code); readers decide from it, never from the message.
        message: the problem in words, for people and logs.
        backend: the backend it concerns (``registry``, ``host``, ``skus`` for problems of no
            backend); in a description, the description's backend.
        stage: for a backend-level failure, where it happened: ``load``, ``detect``,
            ``describe`` or ``budget``; None for a problem inside a description.
        error: for a backend-level failure, the error class name; None otherwise.
        device: the device index or id it concerns, when it concerns one.
        hint: a fix of the problem's own, shown before its code's fix.
    """

    code: str = _codes.DEGRADED
    message: str
    backend: str = ""
    stage: str | None = None  # "load" | "detect" | "describe" | "budget"
    error: str | None = None  # error class name
    device: int | str | None = None
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_defaults(self, ("backend", "stage", "error", "device", "hint"))

    @classmethod
    def of(cls, exc: BaseException, message: str | None = None, **fields: Any) -> "Problem":
        """The problem of an exception the host, a tool or a provider raised, coded from its
        structure (:func:`ray_accel_ext.problems.code_of`); ``message`` defaults to its text."""
        text = message if message is not None else getattr(exc, "message", None) or str(exc)
        return cls(code=_codes.code_of(exc), message=text, **fields)


def golden_form(description: Mapping[str, Any]) -> dict[str, Any]:
    """A description's JSON form as golden ``expected.json`` files keep it: each problem as its
    message (their codes are checked by tests of their own)."""
    out = dict(description)
    out["problems"] = [p["message"] if isinstance(p, Mapping) else p for p in description.get("problems", [])]
    return out


def _coerce(item: Any, backend: str) -> Problem:
    if isinstance(item, str):
        return Problem(code=_codes.DEGRADED, message=item, backend=backend)
    if isinstance(item, Problem):
        return item if item.backend else dataclasses.replace(item, backend=backend)
    raise DescriptionError(f"expected Problem or str, got {type(item).__name__}", "problems")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInventory(_Value):
    """All accelerator families found on one node; none is dropped."""

    descriptions: tuple[NodeDescription, ...] = ()
    problems: tuple[Problem, ...] = ()
    elapsed_s: float = 0.0

    @property
    def primary(self) -> NodeDescription | None:
        """The family the schema labels describe: the one with the most devices, ties broken by
        backend name; None on a node without accelerators. The one rule for "primary"."""
        if not self.descriptions:
            return None
        return min(self.descriptions, key=lambda d: (-len(d.devices), d.backend))

    @property
    def degraded(self) -> bool:
        return bool(self.problems) or any(d.degraded for d in self.descriptions)

    def all_problems(self) -> list[Problem]:
        """Every reason this node is degraded, as coded values: the backend-level problems, then
        each description's."""
        return [*self.problems, *(p for d in self.descriptions for p in d.problems)]

    def reasons(self) -> list[str]:
        """Every reason this node is degraded, one line each (for logs; readers use the codes
        of :meth:`all_problems`)."""
        return [reason_line(p) for p in self.all_problems()]


def reason_line(problem: Problem) -> str:
    """The one-line text of a problem: ``<backend> <stage>: <error>: <message>`` for a
    backend-level failure, ``<backend>: <message>`` for a problem in a description."""
    if problem.stage is not None:
        return f"{problem.backend} {problem.stage}: {problem.error}: {problem.message}"
    return f"{problem.backend}: {problem.message}"
