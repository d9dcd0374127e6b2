"""The Neuron table as typed, read-only records: the SKU database's Neuron entries
(:mod:`ray_accel_ext.skus`, ``data/neuron.json``: PCI ids, product, memory, NeuronCores per device,
NeuronLink generation, instance types and their device counts) joined with the facts that are not
SKU data (``platform.json``: driver sysfs names, NeuronCore version, logical NeuronCore configs,
device topology, EFA and UltraServer shape per instance type, the Trn2 torus table)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ... import skus
from ...skus import ray_names

__all__ = ["NEURON_VENDOR_ID", "Generation", "InstanceType", "NeuronTable", "load_table"]

NEURON_VENDOR_ID = "0x1d0f"


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
    neuronlinks: int | None = None  # NeuronLink peers per device within its instance


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


def _generation(name: str, entries: list[skus.Entry], raw: dict[str, Any]) -> Generation:
    first = entries[0]
    return Generation(
        name=name,
        product=first.product,
        pci_device_ids=tuple(e.device_id for e in entries),
        sysfs_device_name=raw.get("sysfs_device_name"),
        neuroncore=raw["neuroncore"],
        physical_cores_per_device=int(first.cores_per_device or 0),
        logical_nc_configs=tuple(raw["logical_nc_configs"]),
        default_logical_nc_config=raw.get("default_logical_nc_config"),
        memory_bytes=first.memory_bytes,
        interconnect=first.interconnect,
        topology=raw.get("topology"),
        neuronlinks=first.neuronlinks,
    )


def _instance(name: str, generation: str, devices: int, raw: dict[str, Any]) -> InstanceType:
    ultra = raw.get("ultraserver") or {}
    return InstanceType(
        name=name,
        generation=generation,
        devices=devices,
        efa_count=raw.get("efa_count"),
        efa_gbps=raw.get("efa_gbps"),
        ultraserver_hosts=ultra.get("hosts"),
        ultraserver_topology=ultra.get("topology"),
    )


def load_table() -> NeuronTable:
    """The table from the (once per process loaded) SKU database and the packaged platform file.

    A generation is in the table when the database has entries for it and the platform file
    describes it; an extra SKU file can change the database's figures (memory, cores) but a new
    generation also needs its platform facts, so it is described from PCI ids alone.
    """
    raw = json.loads(resources.files(__package__).joinpath("platform.json").read_text())
    by_generation: dict[str, list[skus.Entry]] = {}
    for entry in skus.entries("neuron"):
        by_generation.setdefault(entry.generation, []).append(entry)
    platform = raw["generations"]
    generations = {g: _generation(g, es, platform[g]) for g, es in by_generation.items() if g in platform}
    instances: dict[str, InstanceType] = {}
    for g, es in by_generation.items():
        for entry in es:
            for machine, devices in entry.machine_types:
                if g in generations and machine not in instances:
                    instances[machine] = _instance(machine, g, devices, raw["instance_types"].get(machine, {}))
    neighbors = {
        k: tuple(tuple(row) for row in v) for k, v in raw.get("torus_neighbors", {}).items() if not k.startswith("_")
    }
    return NeuronTable(
        vendor_id=NEURON_VENDOR_ID,
        ray_accelerator_type=ray_names.neuron_accelerator_type(),
        generations=generations,
        instance_types=instances,
        torus_neighbors=neighbors,
    )
