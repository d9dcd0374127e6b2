"""Fallbacks for ids no table has (NVML name, then the host's pci.ids) and the memory rule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext import skus

TESTS = Path(__file__).parents[1]
PINNED = TESTS / "data" / "pci.ids"
HOSTS = TESTS / "data" / "hosts" / "nvidia_gpu"
_GIB = 1 << 30


def _ray_nvidia(name):
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    return NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(name)


@pytest.fixture
def host_root(tmp_path) -> Path:
    """A host root whose distribution ships pci.ids in /usr/share/misc (Debian's place)."""
    dst = tmp_path / "usr/share/misc/pci.ids"
    dst.parent.mkdir(parents=True)
    shutil.copy(PINNED, dst)
    return tmp_path


def test_database_answer_uses_the_live_nvml_name_for_rays_type(tmp_path):
    who = skus.identify("0x10de", "0x2330", "0x10de:0x16c1", nvml_name="NVIDIA H100 80GB HBM3", root=tmp_path)
    assert (who.sku, who.generation, who.memory_gib, who.ray_accelerator_type, who.source, who.known) == (
        "h100-sxm5-80gb", "hopper", 80, "H100", "database", True)


def test_nvml_name_fallback_for_an_unknown_id():
    """The unknown-device-id snapshot: an RTX 5090 (0x2b85), NVML name and memory as recorded."""
    nvml = json.loads((HOSTS / "unknown-device-id" / "libraries" / "nvml.json").read_text())
    gpu = nvml["devices"][0]
    who = skus.identify("0x10de", "0x2b85", nvml_name=gpu["name"], memory_bytes=gpu["memory_total"])
    assert (who.sku, who.product, who.generation, who.source, who.known) == (
        "geforce-rtx-5090", "NVIDIA GeForce RTX 5090", "unknown", "nvml", False)
    assert who.ray_accelerator_type == _ray_nvidia(gpu["name"]) == "GeForce-RTX-5090"
    assert who.memory_gib == 32


def test_host_pci_ids_fallback_through_the_root(host_root):
    """No NVML (driver not loaded): the host's pci.ids names the part; Ray, without NVML, gives
    no type, so neither do we."""
    who = skus.identify("0x10de", "0x2b85", root=host_root)
    assert (who.sku, who.product, who.generation, who.source) == (
        "geforce-rtx-5090", "GB202 [GeForce RTX 5090]", "unknown", "pci.ids")
    assert who.ray_accelerator_type is None


def test_amd_fallback_keeps_rays_id_table(host_root):
    """An AMD id the database leaves out but Ray's table has: Ray's type, pci.ids' name."""
    from ray._private.accelerators.amd_gpu import AMDGPUAcceleratorManager

    who = skus.identify("0x1002", "0x6798", root=host_root)
    assert who.source == "pci.ids" and who.sku.startswith("radeon")
    assert who.ray_accelerator_type == AMDGPUAcceleratorManager._gpu_name_to_accelerator_type("0x6798")


def test_no_name_anywhere(tmp_path):
    who = skus.identify("0x10de", "0x9999", root=tmp_path)
    assert (who.sku, who.product, who.ray_accelerator_type, who.source) == ("nvidia-unknown-0x9999", None, None, "none")
    assert skus.identify("0x1234", "0x0001", root=tmp_path).sku == "pci-1234-unknown-0x0001"


@pytest.mark.parametrize("name, slug", [
    ("NVIDIA GeForce RTX 5090", "geforce-rtx-5090"),
    ("GB202 [GeForce RTX 5090]", "geforce-rtx-5090"),
    ("Vega 20 [Radeon Pro VII/Radeon Instinct MI50]", "radeon-pro-vii-radeon-instinct-mi50"),
    ("AMD Instinct MI300X", "instinct-mi300x"),
    ("NVIDIA " + "X" * 100, "x" * 63),
    ("***", None),
    (None, None),
])
def test_sku_slug(name, slug):
    assert skus.sku_slug(name) == slug


def _recorded_memory(scenario: str) -> tuple[str, int]:
    gpu = json.loads((HOSTS / scenario / "libraries" / "nvml.json").read_text())["devices"][0]
    return gpu["name"], gpu["memory_total"]


@pytest.mark.parametrize("scenario", ["h100-sxm-8gpu-dgx", "gb200-nvl72-tray", "l4-single-pcie"])
def test_recorded_nvml_totals_round_to_the_database_value(scenario):
    """NVML's total is the capacity after the driver's reserve; rounding up gives the marketed
    GiB for HBM parts. The L4 (GDDR6 with ECC on) also loses 1/16 to ECC: ecc_reserve adds it back."""
    name, total = _recorded_memory(scenario)
    entry = next(e for e in skus.entries("nvidia") if e.nvml_name == name)
    hbm = entry.interconnect != "none"
    assert skus.memory_gib_from_bytes(total, ecc_reserve=not hbm) == entry.memory_gib, (name, total)
    if not hbm:
        assert skus.memory_gib_from_bytes(total) == entry.memory_gib - 1


@pytest.mark.parametrize("total, ecc, gib", [
    (40 * _GIB, False, 40),            # exact
    (40 * _GIB + 1, False, 41),        # any byte over a whole GiB rounds up
    (48 * _GIB * 15 // 16, False, 45),  # an L40S-size part with ECC on, read as is
    (48 * _GIB * 15 // 16, True, 48),   # ... and with the ECC carve-out added back
    (1, False, 1),
    (0, False, None), (-5, False, None), (None, False, None), (True, False, None),
])
def test_memory_rule(total, ecc, gib):
    assert skus.memory_gib_from_bytes(total, ecc_reserve=ecc) == gib
