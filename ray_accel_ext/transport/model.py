"""Value types of a transport plan: what goes in (hosts of reserved domains) and what comes out
(one environment per rank).

Inputs are plain data the nodes published (labels, resources, node descriptions) plus the
reservation's bundle-to-node mapping, so a plan can be computed anywhere, without Ray.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import RayAccelError
from ..labels import FABRIC_DOMAIN
from ..model import Device, Nic, NodeDescription

__all__ = [
    "TransportPlanError",
    "HostFacts",
    "ReservedDomain",
    "HostView",
    "RankPlan",
    "HostPlan",
    "DomainPlan",
]


class TransportPlanError(RayAccelError, ValueError):
    """The reservation cannot be planned as asked (units that do not split into ranks, no hosts)."""

    layer = "scheduling"


@dataclass(frozen=True)
class HostFacts:
    """One reserved host, as its node published it.

    Attributes:
        node_id: Ray node id.
        address: the node's IP address as Ray knows it (``NodeManagerAddress``).
        labels: the node's labels (``rayaccel.io/...``, ``ray.io/...``).
        resources: the node's total resources.
        descriptions: what discovery found on the node; empty when only labels are known (then
            per-device NIC pairing is not planned).
        hostname: the host's name, used to order hosts that share a fabric worker index.
        socket_ifname: the network interface that holds ``address``, measured on the node.
        reserved: resources the reservation holds on this host (the sum of its bundles there);
            None means the whole host.
        probe_error: why the node's description could not be read (its probe failed or timed
            out), for the plan's warning; None when it was read or never asked for.
    """

    node_id: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    descriptions: tuple[NodeDescription, ...] = ()
    hostname: str | None = None
    socket_ifname: str | None = None
    reserved: Mapping[str, float] | None = None
    probe_error: str | None = None


@dataclass(frozen=True)
class ReservedDomain:
    """The hosts one reservation holds in one domain, in bundle order."""

    domain: str
    hosts: tuple[HostFacts, ...]
    label_key: str = FABRIC_DOMAIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", tuple(self.hosts))


class HostView(NamedTuple):
    """What the planner needs of a host, derived once from its facts (picklable, no Ray).

    ``units`` are Ray resource ids of the planned family in topology order (device indices for
    ``GPU``/``TPU``, core ids for ``neuron_cores``); ``unit_device`` maps a unit to its device.
    ``topology`` numbers the distinct values of what per-device variables depend on (family,
    devices' NIC paths and coordinates, links, NICs) within one plan: hosts of one SKU share it, so
    their work is done once.
    """

    node_id: str
    address: str
    hostname: str
    socket_ifname: str | None
    vendor: str
    backend: str
    resource: str
    interconnect: str
    fabric_kind: str
    fabric_id: str
    fabric_worker: int | None
    fabric_hosts: int
    devices: tuple[Device, ...]
    units: tuple[int, ...]
    unit_device: Mapping[int, int]
    nics: Mapping[str, Nic]
    described: bool
    topology: int = 0
    nic_kinds: frozenset = frozenset()
    cpu_link: str = ""  # "c2c" where the devices reach their CPU over NVLink-C2C (Grace)
    process_index: int = 0  # this node's TPU process on its host (GKE TPU7x container), else 0
    processes_per_host: int = 1
    probe_error: str | None = None  # why ``described`` is False, when a probe said

    def devices_of(self, units: Sequence[int]) -> tuple[Device, ...]:
        """The devices that hold ``units``, in first-seen order (empty when not described)."""
        if not self.devices:
            return ()
        seen: list[int] = []
        for unit in units:
            index = self.unit_device.get(unit)
            if index is not None and index not in seen:
                seen.append(index)
        return tuple(self.devices[i] for i in seen if 0 <= i < len(self.devices))


class RankPlan(NamedTuple):
    """One rank: where it runs, which accelerator units it holds, and its environment."""

    rank: int
    node_id: str
    host: int
    domain: int
    local_rank: int
    units: tuple[int, ...]
    env: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "node_id": self.node_id, "host": self.host, "domain": self.domain,
                "local_rank": self.local_rank, "units": list(self.units), "env": dict(sorted(self.env.items()))}


class HostPlan(NamedTuple):
    """One host in plan order: its index, domain, position in the domain, and ranks."""

    index: int
    node_id: str
    address: str
    hostname: str
    domain: int
    fabric_worker: int | None
    first_rank: int
    ranks: int
    libraries: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "node_id": self.node_id, "address": self.address, "hostname": self.hostname,
                "domain": self.domain, "fabric_worker": self.fabric_worker, "first_rank": self.first_rank,
                "ranks": self.ranks, "libraries": list(self.libraries)}


@dataclass(frozen=True, slots=True)
class DomainPlan:
    """One reserved domain in plan order (its index is the TPU slice id in a multi-slice plan)."""

    index: int
    id: str
    label_key: str
    kind: str
    hosts: int
    fabric_hosts: int

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "label_key": self.label_key, "kind": self.kind,
                "hosts": self.hosts, "fabric_hosts": self.fabric_hosts}
