"""Walk the pinned pci.ids (tests/data/pci.ids, 2026.08.22): every accelerator id of the covered
vendors that the database's scope names is an entry or a reasoned ``left_out`` item, and each
entry agrees with what pci.ids, NVIDIA's naming and the installed Ray 2.60 say about it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ray_accel_ext import skus
from ray_accel_ext.skus import pciids, report

PINNED = Path(__file__).parents[1] / "data" / "pci.ids"
PARSED = pciids.load(PINNED)

# Architecture of the pci.ids chip code or name. NVIDIA chip prefixes: GV Volta, TU Turing,
# GA Ampere, GH Hopper, AD Ada Lovelace, GB1xx/GB2xx Blackwell, GB11x Blackwell Ultra (B300/GB300);
# AMD code names: Vega 20 GCN 5 (gfx906), Arcturus CDNA 1, Aldebaran CDNA 2, Aqua Vanjaram CDNA 3
# (MI300 series) and CDNA 4 (MI350 series). Neuron and Gaudi names carry the generation.
GENERATION_RULES = [
    ("0x10de", r"^GV100", "volta"),
    ("0x10de", r"^TU10", "turing"),
    ("0x10de", r"^GA10", "ampere"),
    ("0x10de", r"^GH100", "hopper"),
    ("0x10de", r"^AD10", "ada"),
    ("0x10de", r"^GB11", "blackwell-ultra"),
    ("0x10de", r"^GB[12]0", "blackwell"),
    ("0x1002", r"^Vega 20", "gcn5"),
    ("0x1002", r"^Arcturus", "cdna1"),
    ("0x1002", r"^Aldebaran", "cdna2"),
    ("0x1002", r"Instinct MI35", "cdna4"),
    ("0x1002", r"Instinct MI3[0-2]", "cdna3"),
    ("0x1d0f", r"\(Inferentia\)", "inferentia1"),
    ("0x1d0f", r"\(Inferentia2\)", "inferentia2"),
    ("0x1d0f", r"\(Trainium\)", "trainium1"),
    ("0x1d0f", r"\(Trainium2\)", "trainium2"),
    ("0x1d0f", r"\(Trainium3\)", "trainium3"),
    ("0x1da3", r"^Gaudi2", "gaudi2"),
    ("0x1da3", r"^Gaudi3", "gaudi3"),
]

# Names that carry a memory figure that is not the accelerator's (with the reason).
MEMORY_NAME_EXCEPTIONS = {
    ("0x10de", "0x2342"): "GH200 120GB/480GB name the Grace CPU's LPDDR5X; the GPU has 96 GB HBM3",
}
_MEMORY_IN_NAME = re.compile(r"(?<![\w.])(\d{2,3})\s?GB?(?![\w])")


def _in_scope() -> list[tuple[str, pciids.PciDevice]]:
    out = []
    for vendor_id, patterns in sorted(skus.scope().items()):
        for dev in PARSED.vendor_devices(vendor_id):
            if any(p.search(dev.name) for p in patterns):
                out.append((vendor_id, dev))
    return out


IN_SCOPE = _in_scope()
LEFT_OUT = {(lo.vendor_id, lo.device_id): lo for lo in skus.left_out()}
COVERED = [(v, d) for v, d in IN_SCOPE if (v, d.device_id) not in LEFT_OUT]


def _entries_for(vendor_id: str, device_id: str) -> list[skus.Entry]:
    return [e for e in skus.entries() if (e.vendor_id, e.device_id) == (vendor_id, device_id)]


def test_built_in_data_loads_without_problems():
    assert skus.load_problems() == ()


def test_every_in_scope_id_is_an_entry_or_left_out():
    assert report.check(str(PINNED)) == []
    assert len(COVERED) >= 90, "the issue counts about 90 datacenter and workstation ids"
    for vendor_id, dev in COVERED:
        assert _entries_for(vendor_id, dev.device_id), (vendor_id, dev.device_id, dev.name)


def test_left_out_ids_are_real_in_scope_ids_with_a_reason_and_no_entry():
    scoped = {(v, d.device_id): d for v, d in IN_SCOPE}
    for key, lo in LEFT_OUT.items():
        assert key in scoped, f"{key} is left out but is not an in-scope id of the pinned pci.ids"
        assert lo.pci_ids_name == scoped[key].name, key
        assert len(lo.reason) > 15, key
        assert not _entries_for(*key), f"{key} is both left out and an entry"


@pytest.mark.parametrize("vendor_id, dev", COVERED, ids=[f"{v[2:]}:{d.device_id[2:]}" for v, d in COVERED])
def test_entry_agrees_with_pci_ids_and_ray(vendor_id, dev):
    from ray._private.accelerators.amd_gpu import AMDGPUAcceleratorManager
    from ray._private.accelerators.neuron import NeuronAcceleratorManager
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    rules = [g for v, pat, g in GENERATION_RULES if v == vendor_id and re.search(pat, dev.name)]
    for entry in _entries_for(vendor_id, dev.device_id):
        where = (vendor_id, dev.device_id, entry.subsystem, dev.name)
        # generation from the chip code or name
        assert rules and entry.generation == rules[0], where
        # memory: a figure in the pci.ids name or the NVML name is the entry's
        for name in (dev.name, entry.nvml_name or ""):
            m = _MEMORY_IN_NAME.search(name)
            if m and (vendor_id, dev.device_id) not in MEMORY_NAME_EXCEPTIONS:
                assert entry.memory_gib == int(m.group(1)), (where, name)
        # Ray's type, from the installed Ray 2.60's own managers
        if vendor_id == "0x10de":
            ray_type = NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(entry.nvml_name or entry.product)
        elif vendor_id == "0x1002":
            ray_type = AMDGPUAcceleratorManager._gpu_name_to_accelerator_type(hex(int(dev.device_id, 16)))
        elif vendor_id == "0x1d0f":
            ray_type = NeuronAcceleratorManager.get_current_node_accelerator_type()
        else:
            ray_type = entry.ray_accelerator_type  # Gaudi: needs the Habana runtime (test_ray_parity.py)
        assert entry.ray_accelerator_type == ray_type, where
        # the SKU slug names a model the pci.ids line names ("H100L" is the H100 NVL)
        models = re.findall(r"\b(MI\d+[A-Z]?|[A-Z]{0,2}\d{1,4}[A-Z]?)\b", dev.name.split("[")[-1])
        if vendor_id != "0x1d0f" and models:
            assert any(m.lower().removesuffix("l") in entry.sku for m in models), (where, entry.sku)


def test_subsystem_keyed_boards_are_told_apart():
    """One device id, several boards: pci.ids' subsystem names and the database agree."""
    a16, a2 = skus.lookup("0x10de", "0x25b6", "0x10de:0x14a9"), skus.lookup("0x10de", "0x25b6", "0x10de:0x157e")
    assert (a16.sku, a16.ray_accelerator_type, a2.sku, a2.ray_accelerator_type) == ("a16-16gb", "A16", "a2-16gb", "A2")
    assert skus.lookup("0x10de", "0x25b6") is None  # no guess without the subsystem: the NVML name decides
    v2, v3 = skus.lookup("0x1ae0", "0x0027", ("0x1ae0", "0x004e")), skus.lookup("0x1ae0", "0x0027", "0x1234:0x004f")
    assert (v2.sku, v3.sku) == ("tpu-v2", "tpu-v3")
