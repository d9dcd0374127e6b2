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
# What the NVIDIA backend's own table (backends/nvidia_gpu/skus.json, replaced by this database)
# published per device id: sku, generation, Ray type, NVLink, and the subsystem ids it had seen.
# Slugs users select on must not change under them.
PUBLISHED_NVIDIA = {
    "0x20b0": ("a100-sxm4-40gb", "ampere", "A100", "nvlink3", [None]),
    "0x20b1": ("a100-pcie-40gb", "ampere", "A100", "nvlink3", [None]),
    "0x20b2": ("a100-sxm4-80gb", "ampere", "A100", "nvlink3", ["0x10de:0x1463", "0x10de:0x147f", "0x10de:0x1622", "0x10de:0x1623"]),
    "0x20b5": ("a100-pcie-80gb", "ampere", "A100", "nvlink3", ["0x10de:0x1533", "0x10de:0x1642"]),
    "0x20f1": ("a100-pcie-40gb", "ampere", "A100", "nvlink3", ["0x10de:0x145f"]),
    "0x2321": ("h100-nvl-94gb", "hopper", "H100", "nvlink4", ["0x10de:0x1839"]),
    "0x2330": ("h100-sxm5-80gb", "hopper", "H100", "nvlink4", ["0x10de:0x16c0", "0x10de:0x16c1"]),
    "0x2331": ("h100-pcie-80gb", "hopper", "H100", "nvlink4", ["0x10de:0x1626"]),
    "0x2335": ("h200-sxm-141gb", "hopper", "H200", "nvlink4", ["0x10de:0x18be", "0x10de:0x18bf"]),
    "0x233b": ("h200-nvl-141gb", "hopper", "H200", "nvlink4", ["0x10de:0x1996"]),
    "0x2342": ("gh200", "hopper", "GH200", "nvlink4", ["0x10de:0x16eb", "0x10de:0x1805", "0x10de:0x1809"]),
    "0x26b9": ("l40s-48gb", "ada", "L40S", "none", ["0x10de:0x1851", "0x10de:0x18cf"]),
    "0x27b8": ("l4-24gb", "ada", "L4", "none", ["0x10de:0x16ca", "0x10de:0x16ee"]),
    "0x2901": ("b200-180gb", "blackwell", "B200", "nvlink5", ["0x10de:0x1999", "0x10de:0x199b", "0x10de:0x20da"]),
    "0x2909": ("b200-168gb", "blackwell", "B200", "nvlink5", ["0x10de:0x22eb"]),
    "0x2941": ("gb200-186gb", "blackwell", "GB200", "nvlink5", ["0x10de:0x2046", "0x10de:0x20ca", "0x10de:0x20d5", "0x10de:0x21c9", "0x10de:0x21ca"]),
    "0x2bb5": ("rtx-pro-6000-blackwell-server-96gb", "blackwell", "RTX-PRO-6000", "none", ["0x10de:0x204e", "0x10de:0x220b"]),
    "0x3182": ("b300-sxm6-288gb", "blackwell-ultra", "B300", "nvlink5", ["0x10de:0x20e6"]),
    "0x31c2": ("gb300-288gb", "blackwell-ultra", "GB300", "nvlink5", ["0x10de:0x21f1"]),
    "0x31c3": ("gb300-288gb", "blackwell-ultra", "GB300", "nvlink5", ["0x10de:0x22f8"]),
}
GOLDENS = sorted(ROOT.glob("tests/data/hosts/*/*/expected.json"))


def test_every_family_is_present_and_every_value_is_a_label_value():
    assert {e.family for e in skus.entries()} == set(skus.FAMILIES)
    for e in skus.entries():
        assert is_valid_value(e.sku) and is_valid_value(e.generation), e.key
        assert e.ray_accelerator_type is None or is_valid_value(e.ray_accelerator_type), e.key
        assert e.sources and all(e.sources), e.key
        assert e.memory_bytes == (None if e.memory_gib is None else e.memory_gib << 30)


@pytest.mark.parametrize("device_id", sorted(PUBLISHED_NVIDIA))
def test_nvidia_agrees_with_what_nodes_published(device_id):
    """Slugs, generations, Ray types and NVLink the NVIDIA backend published do not change."""
    sku, generation, ray_type, nvlink, subsystems = PUBLISHED_NVIDIA[device_id]
    for sub in subsystems:
        new = skus.lookup("0x10de", device_id, sub)
        assert (new.sku, new.generation, new.ray_accelerator_type, new.interconnect) == (sku, generation, ray_type, nvlink), (
            device_id, sub)


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
        got = (labels["rayaccel.io/generation"], int(labels["rayaccel.io/memory-gib"]), labels.get("ray.io/accelerator-type"))
        # No type where Ray itself would read none on that host (no NVML, no AMD SMI, Gaudi at `ray start`).
        assert got in by_sku[sku] or (got[2] is None and got[:2] in {v[:2] for v in by_sku[sku]}), (path, got, by_sku[sku])
        checked += 1
    assert checked >= 10


def test_tpu_agrees_with_the_backend_table_and_fixes_v2_v3_memory():
    """Same ids, slugs and Ray types as the TPU backend, whose chips take their memory from the
    database; v2/v3 memory is per chip (two TensorCores of 8 and 16 GiB, tpu-info), not one
    TensorCore's as the backend's own table once held."""
    for gen in tpu_topology.GENERATIONS:
        sub = ("0x1ae0", gen.pci_subsystem) if gen.pci_subsystem else None
        e = skus.lookup("0x1ae0", gen.pci_device, sub)
        assert (e.sku, e.generation, e.ray_accelerator_type, e.cores_per_device) == (
            gen.sku, gen.generation, gen.ray_accelerator_type, gen.cores_per_chip)
        assert gen.memory_bytes == e.memory_gib << 30, gen.name
    per_chip = {g.name: g.memory_bytes >> 30 for g in tpu_topology.GENERATIONS}
    assert (per_chip["v2"], per_chip["v3"]) == (16, 32)


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
