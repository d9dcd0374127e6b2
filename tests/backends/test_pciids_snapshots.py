"""Every accelerator id of the pinned pci.ids, through its backend: for each id the SKU database
covers (``tests/skus/test_pciids_walk.py`` checks the database itself), 1- and 8-device host
snapshots are built (NVIDIA with and without an NVML reading, AMD with and without an AMD SMI
reading) and discovered; the node's SKU, generation, memory, count and Ray accelerator type must be
the database's, the type exactly what Ray 2.60's own manager derives on that host.

TPU chips are not walked: pci.ids lists no TPU device id, and the TPU backend keeps its own
generation table (``backends/tpu/topology.py``; ``tests/skus/test_database.py`` checks it against
the database). Ids deliberately left out of the database are listed with their reason in its
files (``left_out``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_accel_ext import skus
from ray_accel_ext.backends.amd_gpu import AMDGPUBackend
from ray_accel_ext.backends.gaudi import GaudiBackend
from ray_accel_ext.backends.neuron import NeuronBackend
from ray_accel_ext.backends.nvidia_gpu import NvidiaGPUBackend
from ray_accel_ext.host import open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.skus import pciids
from tests.support.pci_hosts import amd_host, gaudi_host, neuron_host, nvidia_host

PINNED = Path(__file__).parents[1] / "data" / "pci.ids"
_PARSED = pciids.load(PINNED)
_LEFT_OUT = {(lo.vendor_id, lo.device_id) for lo in skus.left_out()}
_IN_SCOPE = {(v, d.device_id) for v, pats in skus.scope().items() for d in _PARSED.vendor_devices(v)
             if any(p.search(d.name) for p in pats)}
ENTRIES = [e for e in skus.entries() if (e.vendor_id, e.device_id) in _IN_SCOPE - _LEFT_OUT]
_GIB = 1 << 30


def _subsystem(entry: skus.Entry) -> tuple[str, str] | None:
    if entry.subsystem is None:
        return None
    vendor, _, device = entry.subsystem.partition(":")
    return (entry.vendor_id if vendor == "*" else vendor, device)


def _cases(family: str, readings: tuple[bool, ...]):
    for e in ENTRIES:
        if e.family != family:
            continue
        for count in (1, 8):
            for reading in readings:
                yield pytest.param(e, count, reading, id=f"{e.device_id}-{e.subsystem or 'any'}-{count}-{'lib' if reading else 'sysfs'}")


def _spec(root: Path, backend):
    inventory = discover(open_host(root, environ={}), backends=[backend])
    (desc,) = inventory.descriptions
    return desc, to_ray_node(inventory)


def _check_sku(labels: dict[str, str], entry: skus.Entry, count: int) -> None:
    assert (labels["rayaccel.io/sku"], labels["rayaccel.io/generation"], labels["rayaccel.io/count"]) == (
        entry.sku, entry.generation, str(count))


def test_the_walk_covers_every_family_with_pci_ids():
    assert {e.family for e in ENTRIES} == {"nvidia", "amd", "neuron", "gaudi"}
    assert len(ENTRIES) >= 90


@pytest.mark.parametrize("entry, count, nvml", list(_cases("nvidia", (True, False))))
def test_nvidia(tmp_path, entry, count, nvml):
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    name = entry.nvml_name or entry.product
    reported = (entry.memory_gib or 24) * 1024 - 500  # MiB: NVML shows less than the marketed size
    root = nvidia_host(tmp_path / "n", entry.device_id, count=count, subsystem=_subsystem(entry),
                       nvml_name=name if nvml else None, memory_mib=reported)
    desc, spec = _spec(root, NvidiaGPUBackend())
    labels = dict(spec.labels)
    _check_sku(labels, entry, count)
    assert spec.resources["GPU"] == count and desc.problems == ()
    if nvml:
        ray_type = NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(name)
        assert labels["ray.io/accelerator-type"] == ray_type == entry.ray_accelerator_type
        assert spec.resources[f"accelerator_type:{ray_type}"] == 1
        assert labels["rayaccel.io/memory-gib"] == str(entry.memory_gib or 24)
    else:  # Ray's NVIDIA manager reads the type from NVML: none without it
        assert "ray.io/accelerator-type" not in labels and not any(k.startswith("accelerator_type:") for k in spec.resources)
        assert labels.get("rayaccel.io/memory-gib") == (str(entry.memory_gib) if entry.memory_gib else None)


@pytest.mark.parametrize("entry, count, smi", list(_cases("amd", (True, False))))
def test_amd(tmp_path, entry, count, smi):
    from ray._private.accelerators.amd_gpu import AMDGPUAcceleratorManager

    reported = ((entry.memory_gib or 64) << 30) - (16 << 20)
    root = amd_host(tmp_path / "a", entry.device_id, count=count, subsystem=_subsystem(entry), amdsmi=smi,
                    memory_bytes=reported)
    desc, spec = _spec(root, AMDGPUBackend())
    labels = dict(spec.labels)
    _check_sku(labels, entry, count)
    assert spec.resources["GPU"] == count and desc.problems == ()
    assert labels.get("rayaccel.io/memory-gib") == str(entry.memory_gib or 64) if smi or entry.memory_gib else True
    ray_type = AMDGPUAcceleratorManager._gpu_name_to_accelerator_type(hex(int(entry.device_id, 16)))
    assert ray_type == entry.ray_accelerator_type
    if smi and ray_type:
        assert labels["ray.io/accelerator-type"] == ray_type and spec.resources[f"accelerator_type:{ray_type}"] == 1
    else:  # Ray's table lacks the id, or Ray reads no id without ROCm's SMI library
        assert "ray.io/accelerator-type" not in labels


@pytest.mark.parametrize("entry, count, _", list(_cases("gaudi", (False,))))
def test_gaudi(tmp_path, entry, count, _):
    root = gaudi_host(tmp_path / "g", entry.device_id, count=count, device_type=entry.generation.upper())
    desc, spec = _spec(root, GaudiBackend())
    labels = dict(spec.labels)
    _check_sku(labels, entry, count)
    assert spec.resources == {"HPU": count} and desc.problems == ()
    assert labels["rayaccel.io/memory-gib"] == str(entry.memory_gib)
    assert "ray.io/accelerator-type" not in labels  # Ray names HPUs only once the Habana bridge is initialised


@pytest.mark.parametrize("entry, count, _", list(_cases("neuron", (False,))))
def test_neuron(tmp_path, entry, count, _):
    from ray._private.accelerators.neuron import NeuronAcceleratorManager

    root = neuron_host(tmp_path / "n", entry.device_id, count=count)
    desc, spec = _spec(root, NeuronBackend())
    labels = dict(spec.labels)
    _check_sku(labels, entry, count)
    assert labels["ray.io/accelerator-type"] == NeuronAcceleratorManager.get_current_node_accelerator_type()
    assert labels.get("rayaccel.io/memory-gib") == (str(entry.memory_gib) if entry.memory_gib else None)
    logical = int(labels["neuron.rayaccel.io/logical-nc-config"])
    assert spec.resources["neuron_cores"] == count * entry.cores_per_device // logical
    # Neuron hosts are EC2 instances: with no metadata server here, the instance type is a problem,
    # the devices are not.
    assert not [p for p in desc.problems if "SKU database" in p.message or "generation" in p.message], desc.problems
