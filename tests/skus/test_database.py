"""The built-in database agrees with the project's existing SKU tables and recorded goldens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_accel_ext import skus
from ray_accel_ext.backends.neuron import skus as _neuron_skus
from ray_accel_ext.backends.tpu import topology as tpu_topology
from ray_accel_ext.labels import is_valid_value

ROOT = Path(__file__).parents[2]
OLD_NVIDIA = json.loads((ROOT / "ray_accel_ext/backends/nvidia_gpu/skus.json").read_text())["devices"]
GOLDENS = sorted(ROOT.glob("tests/data/hosts/*/*/expected.json"))


def test_every_family_is_present_and_every_value_is_a_label_value():
    assert {e.family for e in skus.entries()} == set(skus.FAMILIES)
    for e in skus.entries():
        assert is_valid_value(e.sku) and is_valid_value(e.generation), e.key
        assert e.ray_accelerator_type is None or is_valid_value(e.ray_accelerator_type), e.key
        assert e.sources and all(e.sources), e.key
        assert e.memory_bytes == (None if e.memory_gib is None else e.memory_gib << 30)


@pytest.mark.parametrize("device_id", sorted(OLD_NVIDIA))
def test_nvidia_agrees_with_the_existing_table(device_id):
    """Slugs the backends publish today do not change; null memory may now be filled in."""
    old = OLD_NVIDIA[device_id]
    subsystems = old.get("subsystems") or [None]
    for sub in subsystems:
        new = skus.lookup("0x10de", device_id, sub)
        assert (new.sku, new.generation, new.ray_accelerator_type, new.interconnect) == (
            old["sku"], old["generation"], old["ray_accelerator_type"], old["nvlink"]), (device_id, sub)
        assert old["memory_gib"] is None or new.memory_gib == old["memory_gib"], (device_id, sub)


def test_goldens_agree_with_the_database():
    """Every recorded node whose SKU the database knows shows the database's generation, memory
    and Ray type (tests/data/hosts/*/*/expected.json)."""
    by_sku: dict[str, set] = {}
    for e in skus.entries():
        by_sku.setdefault(e.sku, set()).add((e.generation, e.memory_gib, e.ray_accelerator_type))
    checked = 0
    for path in GOLDENS:
        labels = json.loads(path.read_text()).get("ray", {}).get("labels", {})
        sku = labels.get("rayaccel.io/sku")
        if sku not in by_sku:
            continue
        got = (labels["rayaccel.io/generation"], int(labels["rayaccel.io/memory-gib"]), labels["ray.io/accelerator-type"])
        assert got in by_sku[sku], (path, got, by_sku[sku])
        checked += 1
    assert checked >= 10


def test_tpu_agrees_with_the_backend_table_and_fixes_v2_v3_memory():
    """Same ids, slugs and Ray types as the TPU backend; v2/v3 memory is per chip (two TensorCores
    of 8 and 16 GiB, tpu-info), where the backend's table held one TensorCore's."""
    for gen in tpu_topology.GENERATIONS:
        sub = ("0x1ae0", gen.pci_subsystem) if gen.pci_subsystem else None
        e = skus.lookup("0x1ae0", gen.pci_device, sub)
        assert (e.sku, e.generation, e.ray_accelerator_type, e.cores_per_device) == (
            gen.sku, gen.generation, gen.ray_accelerator_type, gen.cores_per_chip)
        per_chip = gen.hbm_gib * gen.cores_per_chip if gen.name in ("v2", "v3") else gen.hbm_gib
        assert e.memory_gib == per_chip, gen.name


def test_neuron_agrees_with_the_backend_table():
    table = _neuron_skus.load_table()
    for gen in table.generations.values():
        for device_id in gen.pci_device_ids:
            e = skus.lookup("0x1d0f", device_id)
            assert (e.sku, e.generation, e.cores_per_device, e.interconnect, e.memory_bytes) == (
                gen.name, gen.name, gen.physical_cores_per_device, gen.interconnect, gen.memory_bytes), device_id
    for name, inst in table.instance_types.items():
        entry, devices = skus.machine_type(name)
        assert (entry.generation, devices) == (inst.generation, inst.devices), name


@pytest.mark.parametrize("machine, sku, chips", [
    ("ct5lp-hightpu-8t", "tpu-v5e", 8), ("ct6e-standard-1t", "tpu-v6e", 1), ("CT5P-HIGHTPU-4T", "tpu-v5p", 4),
    ("tpu7x-standard-4t", "tpu7x", 4), ("ct4p-hightpu-4t", "tpu-v4", 4), ("trn2u.48xlarge", "trainium2", 16),
])
def test_machine_types(machine, sku, chips):
    entry, count = skus.machine_type(machine)
    assert (entry.sku, count) == (sku, chips)
    # the -<N>t suffix of a Compute Engine TPU machine type is its chip count
    assert not machine.lower().endswith("t") or int(machine.lower().rsplit("-", 1)[1][:-1]) == count


def test_unknown_machine_type_and_malformed_ids_give_none():
    assert skus.machine_type("n2-standard-8") is None
    assert skus.lookup("0x10de", "not-an-id") is None
    assert skus.lookup("0x10de", "0x2330", "garbage").sku == "h100-sxm5-80gb"  # bad subsystem: device entry
