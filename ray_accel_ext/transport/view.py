"""From what a node published (labels, resources, descriptions) to the planner's view of a host.

The accelerator family planned on a host is the one the reservation holds there (``reserved``; a
reservation that holds no accelerator there plans one CPU rank), else the description with the most
devices. A reservation of MIG instances (``mig-1g.10gb``) plans them as units of their GPU
(:func:`as_units`): the GPU's NUMA node, CPUs and nearest NICs. Without a description (a node whose discovery could not be
probed) the view is built from labels and resources alone: units in index order, no devices, so no
per-device NIC pairing; the plan says so in its warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from operator import attrgetter

from ..labels import (
    FABRIC_DOMAIN,
    FABRIC_HOSTS,
    FABRIC_WORKER,
    FAMILIES,
    GPU_DOMAIN,
    INTERCONNECT,
    TPU_ATTR_PREFIX,
    VENDOR,
    partition_resource,
)
from ..labels import TPU_SLICE_NAME as TPU_SLICE
from ..model import Device, NodeDescription
from .model import HostFacts, HostView, TransportPlanError
from .order import device_order, labels_int

__all__ = ["view_of", "topology_key", "reserved_resources", "ACCELERATOR_RESOURCES"]

# Ray's resource names for the device families (placement.py schedules by the same names).
ACCELERATOR_RESOURCES = ("GPU", "TPU", "neuron_cores")
PARTITION_PREFIX = "mig-"  # a partition resource (labels.partition_resource): planned as units of its GPU



def as_units(desc: NodeDescription, resource: str) -> NodeDescription | None:
    """``desc`` seen as the family of one partition resource (``mig-1g.10gb``): one device per
    instance, in the order Ray's unit ids count them, each at its GPU's PCI address, NUMA node,
    CPUs and NICs; no links (MIG instances have no NVLink peer-to-peer). None when ``desc`` has
    no instance of it."""
    parts = [p for p in desc.partitions if partition_resource(p.profile) == resource]
    if not parts:
        return None
    devices = tuple(Device(index=i, id=p.id, pci_address=p.pci_address, numa_node=p.numa_node, cpus=p.cpus,
                           memory_bytes=p.memory_bytes, nics=p.nics) for i, p in enumerate(parts))
    return replace(desc, resource_name=resource, resource_quantity=len(parts), devices=devices, links=(),
                   partitions=())


def _held_partitions(facts: HostFacts) -> tuple[NodeDescription, str] | None:
    for resource, quantity in sorted((facts.reserved or {}).items()):
        if resource.startswith(PARTITION_PREFIX) and quantity > 0:
            for desc in facts.descriptions:
                units = as_units(desc, resource)
                if units is not None:
                    return units, resource
    return None


def _pick(facts: HostFacts) -> tuple[NodeDescription | None, str]:
    held = {r: q for r, q in (facts.reserved or {}).items() if r in ACCELERATOR_RESOURCES and q > 0}
    partition = None if held else _held_partitions(facts)
    if partition is not None:
        return partition
    if facts.reserved is not None and not held:
        return None, ""  # the reservation holds no accelerator here: one CPU rank
    for desc in facts.descriptions:
        if desc.resource_name in held:
            return desc, desc.resource_name
    if held:
        return None, max(held, key=lambda r: (held[r], r))
    if facts.descriptions:
        desc = max(facts.descriptions, key=lambda d: (len(d.devices), d.backend))
        return desc, desc.resource_name
    present = [r for r in ACCELERATOR_RESOURCES if facts.resources.get(r, 0) > 0]
    return None, present[0] if present else ""


_LINK_KEY = attrgetter("a", "b", "lanes")
_NIC_KEY = attrgetter("name", "kind")


def topology_key(desc: NodeDescription) -> tuple:
    """What per-device variables and the unit order depend on, as hashable values (NIC paths,
    coordinates, cores, links, NIC kinds; not CPUs or ids)."""
    return (desc.backend, desc.sku.vendor, desc.resource_name, desc.resource_quantity, cpu_link_of(desc),
            tuple([(d.index, d.cores, d.coords, tuple([(p.nic, p.path) for p in d.nics])) for d in desc.devices]),
            tuple(map(_LINK_KEY, desc.links)), tuple(map(_NIC_KEY, desc.nics)))


def cpu_link_of(desc: NodeDescription) -> str:
    """``c2c`` when the backend says its devices reach the CPU over NVLink-C2C, else ``""``."""
    return next((v for k, v in desc.attributes.items() if k.endswith("/cpu-link")), "")


def _processes_of(desc: NodeDescription) -> tuple[int, int]:
    """(process index, processes per host) of a TPU node whose host runs several TPU processes
    (GKE TPU7x containers, ``tpu.rayaccel.io/process-index``), else (0, 1)."""
    attrs = desc.attributes
    try:
        return int(attrs.get(f"{TPU_ATTR_PREFIX}/process-index", 0)), int(attrs.get(f"{TPU_ATTR_PREFIX}/processes-per-host", 1))
    except ValueError:
        return 0, 1


def _units_in_order(desc: NodeDescription) -> tuple[tuple[int, ...], dict[int, int]]:
    """Every unit id of ``desc`` in topology order, and unit -> device index."""
    order = device_order(desc.devices, desc.links)
    n = len(desc.devices)
    if desc.resource_quantity == n or not n or not all(d.cores for d in desc.devices):
        return tuple(order), {i: i for i in order}
    first: dict[int, int] = {}
    start = 0
    for d in desc.devices:  # core ids count up device by device (worker._unit_owner)
        first[d.index] = start
        start += int(d.cores or 0)
    units: list[int] = []
    owner: dict[int, int] = {}
    for index in order:
        for core in range(first[index], first[index] + int(desc.devices[index].cores or 0)):
            units.append(core)
            owner[core] = index
    return tuple(units), owner


def view_of(facts: HostFacts, cache: dict | None = None) -> HostView:
    """The planner's view of one reserved host (see the module doc); ``cache`` shares the unit
    order between hosts of one topology."""
    desc, resource = _pick(facts)
    labels = facts.labels
    if desc is not None:
        cache = {} if cache is None else cache
        key = topology_key(desc)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = (len(cache), *_units_in_order(desc), frozenset(n.kind for n in desc.nics))
        topology, all_units, owner, nic_kinds = hit
        fabric = desc.fabric
        vendor, backend, interconnect = desc.sku.vendor, desc.backend, desc.interconnect
        kind = fabric.kind if fabric else "host"
        fabric_id = fabric.id if fabric else labels.get(FABRIC_DOMAIN, facts.node_id)
        worker = fabric.worker if fabric else labels_int(labels, FABRIC_WORKER, None)
        fabric_hosts = fabric.hosts if fabric else labels_int(labels, FABRIC_HOSTS, 1)
        devices, nics = desc.devices, {nic.name: nic for nic in desc.nics}
        cpu_link = cpu_link_of(desc)
        process_index, per_host = _processes_of(desc)
    else:
        cpu_link, process_index, per_host = "", 0, 1
        total = int(facts.resources.get(resource, 0)) if resource else 0
        all_units, owner = tuple(range(total)), {}
        vendor = labels.get(VENDOR, "")
        backend = labels.get(FAMILIES, "").split(".")[0]
        interconnect = labels.get(INTERCONNECT, "pcie")
        kind = "tpu-slice" if labels.get(TPU_SLICE) else ("nvlink-domain" if labels.get(GPU_DOMAIN) else "host")
        fabric_id = labels.get(FABRIC_DOMAIN, facts.node_id)
        worker = labels_int(labels, FABRIC_WORKER, None)
        fabric_hosts = labels_int(labels, FABRIC_HOSTS, 1)
        devices, nics, nic_kinds = (), {}, frozenset()
        cache = {} if cache is None else cache
        key = (backend, vendor, resource, float(total), (), (), ())
        topology = cache.setdefault(key, (len(cache),))[0]
    held = (facts.reserved or {}).get(resource) if resource else None
    count = len(all_units) if held is None else int(round(held))
    if count > len(all_units):
        raise TransportPlanError(
            f"host {facts.hostname or facts.node_id}: the reservation holds {held:g} {resource} but the node has "
            f"{len(all_units)}", node_id=facts.node_id, resource=resource)
    return HostView(
        node_id=facts.node_id,
        address=facts.address,
        hostname=facts.hostname or facts.node_id,
        socket_ifname=facts.socket_ifname,
        vendor=vendor,
        backend=backend,
        resource=resource,
        interconnect=interconnect,
        fabric_kind=kind,
        fabric_id=fabric_id,
        fabric_worker=worker,
        fabric_hosts=fabric_hosts,
        devices=tuple(devices),
        units=all_units[:count],
        unit_device=owner,
        nics=nics,
        described=desc is not None,
        topology=topology,
        nic_kinds=nic_kinds,
        cpu_link=cpu_link,
        process_index=process_index,
        processes_per_host=per_host,
        probe_error=facts.probe_error,
    )


def reserved_resources(bundles_on_node: list[Mapping[str, float]]) -> dict[str, float]:
    """The sum of the bundles a reservation placed on one node."""
    total: dict[str, float] = {}
    for bundle in bundles_on_node:
        for r, q in bundle.items():
            total[r] = total.get(r, 0.0) + float(q)
    return total
