"""The Neuron SKU table (``backends/neuron/skus.json``) as typed, read-only records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = ["Generation", "InstanceType", "NeuronTable", "load_table"]

_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Generation:
    """One Neuron device generation (``trainium2``); None where the table has no confirmed value."""

    name: str
    product: str
    pci_device_ids: tuple[str, ...]
    sysfs_device_name: str | None
    neuroncore: str
    physical_cores_per_device: int
    logical_nc_configs: tuple[int, ...]
    default_logical_nc_config: int | None
    memory_bytes: int | None
    interconnect: str | None
    topology: str | None  # "ring" | "2d-torus"


@dataclass(frozen=True, slots=True)
class InstanceType:
    """An EC2 instance type carrying Neuron devices."""

    name: str
    generation: str
    devices: int
    efa_count: int | None
    efa_gbps: int | None
    ultraserver_hosts: int | None = None
    ultraserver_topology: str | None = None


@dataclass(frozen=True, slots=True)
class NeuronTable:
    """The whole table: generations, instance types, and known neighbour tables."""

    vendor_id: str
    ray_accelerator_type: str
    generations: dict[str, Generation]
    instance_types: dict[str, InstanceType]
    torus_neighbors: dict[str, tuple[tuple[int, ...], ...]]

    def by_pci_id(self, device_id: str | None) -> Generation | None:
        """The generation with PCI device id ``device_id`` (``0x7364``)."""
        for gen in self.generations.values():
            if device_id in gen.pci_device_ids:
                return gen
        return None

    def by_sysfs_name(self, device_name: str | None) -> Generation | None:
        """The generation whose driver ``info/architecture/device_name`` is ``device_name``."""
        if not device_name:
            return None
        for gen in self.generations.values():
            if gen.sysfs_device_name and gen.sysfs_device_name.lower() == device_name.strip().lower():
                return gen
        return None

    def instance(self, instance_type: str | None) -> InstanceType | None:
        return self.instance_types.get((instance_type or "").strip().lower())

    def neuron_device_ids(self) -> set[str]:
        return {i for gen in self.generations.values() for i in gen.pci_device_ids}


def _generation(name: str, raw: dict[str, Any]) -> Generation:
    memory = raw.get("memory_gib")
    return Generation(
        name=name,
        product=raw["product"],
        pci_device_ids=tuple(x.lower() for x in raw["pci_device_ids"]),
        sysfs_device_name=raw.get("sysfs_device_name"),
        neuroncore=raw["neuroncore"],
        physical_cores_per_device=int(raw["physical_cores_per_device"]),
        logical_nc_configs=tuple(raw["logical_nc_configs"]),
        default_logical_nc_config=raw.get("default_logical_nc_config"),
        memory_bytes=int(memory) * _GIB if memory is not None else None,
        interconnect=raw.get("interconnect"),
        topology=raw.get("topology"),
    )


def _instance(name: str, raw: dict[str, Any]) -> InstanceType:
    ultra = raw.get("ultraserver") or {}
    return InstanceType(
        name=name,
        generation=raw["generation"],
        devices=int(raw["devices"]),
        efa_count=raw.get("efa_count"),
        efa_gbps=raw.get("efa_gbps"),
        ultraserver_hosts=ultra.get("hosts"),
        ultraserver_topology=ultra.get("topology"),
    )


def load_table() -> NeuronTable:
    """Read the packaged table (no caching: one small file per discovery run)."""
    raw = json.loads(resources.files(__package__).joinpath("skus.json").read_text())
    neighbors = {
        k: tuple(tuple(row) for row in v) for k, v in raw.get("torus_neighbors", {}).items() if not k.startswith("_")
    }
    return NeuronTable(
        vendor_id=raw["vendor_id"],
        ray_accelerator_type=raw["ray_accelerator_type"],
        generations={k: _generation(k, v) for k, v in raw["generations"].items()},
        instance_types={k: _instance(k, v) for k, v in raw["instance_types"].items()},
        torus_neighbors=neighbors,
    )
