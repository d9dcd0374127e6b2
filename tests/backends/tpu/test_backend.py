"""TPU chip discovery edge cases, on small host trees built per test (through the CLI)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from ray_accel_ext.backends._sku import UNKNOWN_SKU_MARK
from ray_accel_ext.backends.tpu.backend import TPUBackend, parse_tpu_env
from ray_accel_ext.model import Device
from ray_accel_ext.node.registry import load_backends
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

GOOGLE = "0x1ae0"


def _build():
    spec = importlib.util.spec_from_file_location("tpu_build_snapshots", HOSTS / "tpu" / "build_snapshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _build()


def _discover(root, capsys, monkeypatch):
    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    monkeypatch.delenv("RAY_ACCEL_TPU_API_ENDPOINT", raising=False)
    assert main(["discover", "--root", str(root), "--format", "json"]) == 0
    inv = json.loads(capsys.readouterr().out)
    return [d for d in inv["descriptions"] if d["backend"] == "tpu"]


def _tree(tmp_path, env=None):
    tree = BUILD.Tree("host", base=tmp_path)
    tree.files(env=env or {}, readme="test host")
    return tree


def test_tpu7x_slot_with_one_function_counts_but_degrades(tmp_path, capsys, monkeypatch):
    tree = _tree(tmp_path, {"TPU_ACCELERATOR_TYPE": "tpu7x-8", "TPU_TOPOLOGY": "2x2x1"})
    g = 0
    for slot in ("0000:c0:02", "0000:c0:03", "0000:e0:02"):
        for fn in (0, 1):
            tree.pci(f"{slot}.{fn}", GOOGLE, "0x0076", "0x120000", iommu_group=g, vfio=True)
            g += 1
    tree.pci("0000:e0:03.0", GOOGLE, "0x0076", "0x120000", iommu_group=g, vfio=True)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert desc["resource_quantity"] == 4
    assert [d["pci_address"] for d in desc["devices"]] == ["0000:c0:02.0", "0000:c0:03.0", "0000:e0:02.0", "0000:e0:03.0"]
    assert any("0000:e0:03: 1 PCI function(s), expected 2" in p for p in [q["message"] for q in desc["problems"]])


@pytest.mark.parametrize("subsystem,gen,hbm_gib", [("0x004e", "v2", 16), ("0x004f", "v3", 32)])
def test_v2_v3_told_apart_by_subsystem(tmp_path, capsys, monkeypatch, subsystem, gen, hbm_gib):
    tree = _tree(tmp_path)
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x0027", "0x120000", subsystem=(GOOGLE, subsystem))
    tree.accel(4)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert desc["sku"]["generation"] == gen and desc["resource_quantity"] == 4
    # per chip: two TensorCores of 8 / 16 GiB (the database's sources: tpu-info TpuChip, cloud.google.com/tpu/docs/v3)
    assert desc["sku"]["memory_bytes"] == hbm_gib << 30
    assert {d["memory_bytes"] for d in desc["devices"]} == {hbm_gib << 30}


def test_an_id_the_database_lacks_is_counted_named_and_explained(tmp_path, capsys, monkeypatch):
    """A v2/v3-era function (0x0027) with a subsystem the database has no entry for: Ray's manager
    counts its /dev/accel node, so do we, as google-unknown-0x0027 with the unknown id reported."""
    tree = _tree(tmp_path)
    tree.pci("0000:00:04.0", GOOGLE, "0x0027", "0x120000", subsystem=(GOOGLE, "0x0099"))
    tree.accel(1)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert desc["resource_quantity"] == 1 and desc["devices"][0]["pci_address"] == "0000:00:04.0"
    assert desc["sku"]["name"] == "google-unknown-0x0027" and desc["sku"]["generation"] == "unknown"
    assert not desc["sku"]["known"]
    (line,) = [p for p in [q["message"] for q in desc["problems"]] if UNKNOWN_SKU_MARK in p]
    assert "1ae0:0027" in line and "0000:00:04.0" in line and "counted" in line


@pytest.mark.parametrize("snapshot,sku,generation,memory_gib,ray_type", [
    ("gce-tpu-unknown-id", "google-unknown-0x0080", "unknown", None, None),
    ("gke-tpu-unknown-id-typed", "tpu-v6e", "v6e", 32, "TPU-V6E"),
])
def test_unknown_chips_are_typed_from_the_accelerator_type_when_given(snapshot, sku, generation, memory_gib, ray_type,
                                                                     capsys, monkeypatch):
    (desc,) = _discover(HOSTS / "tpu" / snapshot, capsys, monkeypatch)
    assert desc["resource_quantity"] == 4  # what Ray's TPU manager counts: four Google VFIO groups
    assert (desc["sku"]["name"], desc["sku"]["generation"], desc["sku"]["ray_accelerator_type"]) == (sku, generation, ray_type)
    assert {d["memory_bytes"] for d in desc["devices"]} == {memory_gib << 30 if memory_gib else None}
    assert any(UNKNOWN_SKU_MARK in p and "1ae0:0080" in p for p in [q["message"] for q in desc["problems"]])


def test_vfio_groups_not_bound_are_not_chips(tmp_path, capsys, monkeypatch):
    tree = _tree(tmp_path)
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x006f", "0x120000", iommu_group=i, vfio=False)
    assert _discover(tree.dir, capsys, monkeypatch) == []


def test_partly_visible_vfio_chips_count_the_visible_ones(tmp_path, capsys, monkeypatch):
    """A container given 2 of the host's 4 chips sees all PCI functions but only 2 VFIO nodes."""
    tree = _tree(tmp_path)
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x006f", "0x120000", iommu_group=i, vfio=i in (1, 3))
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert [d["pci_address"] for d in desc["devices"]] == ["0000:00:05.0", "0000:00:07.0"]


def test_fewer_accel_nodes_than_pci_chips(tmp_path, capsys, monkeypatch):
    tree = _tree(tmp_path)
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x005e", "0x120000")
    tree.accel(2)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert desc["resource_quantity"] == 2
    assert any("4 TPU chips on PCI but 2 /dev/accel* nodes" in p for p in [q["message"] for q in desc["problems"]])


def test_mixed_generations_are_reported(tmp_path, capsys, monkeypatch):
    tree = _tree(tmp_path)
    tree.pci("0000:00:04.0", GOOGLE, "0x006f", "0x120000", iommu_group=0, vfio=True)
    tree.pci("0000:00:05.0", GOOGLE, "0x0063", "0x120000", iommu_group=1, vfio=True)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert any("mixed TPU generations" in p for p in [q["message"] for q in desc["problems"]])


def test_malformed_type_from_env_is_a_named_problem(tmp_path, capsys, monkeypatch):
    tree = _tree(tmp_path, {"TPU_ACCELERATOR_TYPE": "v6e-1x", "TPU_TOPOLOGY": "4x4", "TPU_WORKER_ID": "0", "TPU_NAME": "s"})
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x006f", "0x120000", iommu_group=i, vfio=True)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert any("'v6e-1x'" in p for p in [q["message"] for q in desc["problems"]]) and desc["fabric"] is None
    assert desc["resource_quantity"] == 4  # the chips are still there


def test_topology_that_does_not_fit_the_type(tmp_path, capsys, monkeypatch):
    tree = _tree(tmp_path, {"TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_TOPOLOGY": "2x4", "TPU_WORKER_ID": "1", "TPU_NAME": "s"})
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x006f", "0x120000", iommu_group=i, vfio=True)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert any("does not fit v6e-16" in p for p in [q["message"] for q in desc["problems"]])
    assert all(d["coords"] is None for d in desc["devices"])


def test_parse_tpu_env():
    values, bad = parse_tpu_env("ACCELERATOR_TYPE: 'v4-8'\nEMPTY: ''\n\nTOPOLOGY: '2x2")
    assert values == {"ACCELERATOR_TYPE": "v4-8", "EMPTY": ""}
    assert bad and "line 4" in bad[0]


def test_registered_and_visible_chips_env():
    (backend,) = load_backends({}, only=["tpu"])
    assert isinstance(backend, TPUBackend) and backend.resource_name == "TPU"
    devices = [Device(index=1, id="a"), Device(index=3, id="b")]
    env = backend.visible_devices_env(devices)
    assert env == {"TPU_VISIBLE_CHIPS": "1,3"}
    assert backend.parse_visible_devices(env) == [1, 3]


def test_accel_nodes_without_visible_pci_use_the_accelerator_type(tmp_path, capsys, monkeypatch):
    """A container that sees /dev/accel* but no /sys/bus/pci: chips from the nodes, generation
    from TPU_ACCELERATOR_TYPE."""
    tree = _tree(tmp_path, {"TPU_ACCELERATOR_TYPE": "v4-8", "TPU_TOPOLOGY": "2x2x1", "TPU_WORKER_ID": "0", "TPU_NAME": "v4-a"})
    tree.accel(4)
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert desc["resource_quantity"] == 4 and desc["sku"]["generation"] == "v4"
    assert [d["id"] for d in desc["devices"]] == [f"/dev/accel{i}" for i in range(4)]
    assert desc["fabric"]["id"] == "v4-a" and desc["problems"] == []


def test_resource_per_chip_scales_the_tpu_resource(tmp_path, capsys, monkeypatch):
    """RAY_TPU_RESOURCE_PER_CHIP=2 (TPU7x's two devices per chip): 4 chips are 8 TPU units, as Ray
    counts them, and a worker's unit ids map back to chips (unit // 2)."""
    from ray_accel_ext.model import NodeDescription
    from ray_accel_ext.worker import topology_for

    tree = _tree(tmp_path, {"TPU_ACCELERATOR_TYPE": "tpu7x-8", "TPU_TOPOLOGY": "2x2x1", "RAY_TPU_RESOURCE_PER_CHIP": "2"})
    g = 0
    for slot in ("0000:c0:02", "0000:c0:03", "0000:e0:02", "0000:e0:03"):
        for fn in (0, 1):
            tree.pci(f"{slot}.{fn}", GOOGLE, "0x0076", "0x120000", iommu_group=g, vfio=True)
            g += 1
    (desc,) = _discover(tree.dir, capsys, monkeypatch)
    assert desc["resource_quantity"] == 8 and len(desc["devices"]) == 4
    held = topology_for(NodeDescription.from_dict(desc), ["2", "3", "6", "7"])
    assert [d.index for d in held.devices] == [1, 3]


def test_dev_accel0_beside_a_visible_non_google_pci_tree_is_no_tpu():
    """ray-project/ray#45302: Ray counts a bare /dev/accel0 (here an AMD IPU's) as one TPU and asks
    GCE metadata. Where sysfs shows PCI functions and none is Google's, no TPU is found and the
    metadata server (served by the snapshot) is asked nothing."""
    from ray_accel_ext.host import open_host
    from ray_accel_ext.host.snapshot import metadata_spec
    from ray_accel_ext.node.discovery import discover
    from ray_accel_ext.testing.fake_metadata import MetadataServers

    snapshot = HOSTS / "tpu" / "amd-ipu-dev-accel-no-tpu"
    with MetadataServers(metadata_spec(snapshot)) as servers:
        env = {**servers.env(), "RAY_ACCEL_ROOT": str(snapshot)}
        inventory = discover(open_host(str(snapshot), environ=env))
        asked = servers.gce.count()
    assert [d.backend for d in inventory.descriptions] == []
    assert asked == 0
    expected = json.loads((snapshot / "expected.json").read_text())
    assert "TPU" not in expected["ray"]["resources"] and "rayaccel.io/families" not in expected["ray"]["labels"]
