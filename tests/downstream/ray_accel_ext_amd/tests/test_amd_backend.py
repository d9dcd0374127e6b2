"""What the AMD backend does beyond the shared suite: visibility semantics and broken hosts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ray_accel_ext.host import open_host
from ray_accel_ext_amd import AMDGPUBackend

HOSTS = Path(__file__).parent / "hosts"


@pytest.fixture
def mi300x(tmp_path: Path) -> Path:
    """A writable copy of the 8x MI300X snapshot (symlinks kept)."""
    dst = tmp_path / "mi300x"
    shutil.copytree(HOSTS / "mi300x-8gpu-hive", dst, symlinks=True)
    return dst


def _describe(root: Path):
    return AMDGPUBackend().describe(open_host(root, environ={}))


def test_visibility_sets_rocr_and_relative_hip():
    backend = AMDGPUBackend()
    desc = _describe(HOSTS / "mi300x-8gpu-hive")
    env = backend.visible_devices_env([desc.devices[2], desc.devices[5]])
    assert env == {"ROCR_VISIBLE_DEVICES": "2,5", "HIP_VISIBLE_DEVICES": "0,1"}
    assert backend.parse_visible_devices(env) == [2, 5]


@pytest.mark.parametrize(
    ("env", "visible"),
    [
        ({}, None),
        ({"HIP_VISIBLE_DEVICES": "3,1"}, [3, 1]),  # what Ray sets: node-wide indices
        ({"ROCR_VISIBLE_DEVICES": "4,6,7"}, [4, 6, 7]),
        ({"ROCR_VISIBLE_DEVICES": "4,6,7", "HIP_VISIBLE_DEVICES": "2"}, [7]),  # HIP counts within ROCr's list
        ({"ROCR_VISIBLE_DEVICES": ""}, []),
    ],
)
def test_parse_visible_devices(env, visible):
    assert AMDGPUBackend().parse_visible_devices(env) == visible


def test_corrupt_kfd_node_becomes_a_problem(mi300x: Path):
    (mi300x / "rootfs/sys/class/kfd/kfd/topology/nodes/4/properties").write_text("simd_count lots\n")
    desc = _describe(mi300x)
    assert len(desc.devices) == 7
    assert any("nodes/4/properties: malformed line 'simd_count lots'" in p for p in desc.problems), desc.problems


def test_two_hives_give_no_fabric_and_say_why(mi300x: Path):
    path = mi300x / "rootfs/sys/class/kfd/kfd/topology/nodes/9/properties"
    path.write_text(path.read_text().replace("hive_id 11712426211487235452", "hive_id 42"))
    desc = _describe(mi300x)
    assert desc.fabric is None
    assert any("2 XGMI hive ids" in p for p in desc.problems), desc.problems


def test_unknown_device_id_keeps_the_devices(mi300x: Path):
    for node in range(2, 10):
        path = mi300x / f"rootfs/sys/class/kfd/kfd/topology/nodes/{node}/properties"
        path.write_text(path.read_text().replace("device_id 29857", "device_id 30000"))
    desc = _describe(mi300x)
    assert (desc.sku.name, desc.sku.known, desc.sku.ray_accelerator_type) == ("amd-unknown-0x7530", False, None)
    assert len(desc.devices) == 8


def test_no_kfd_means_not_detected(tmp_path: Path):
    (tmp_path / "rootfs").mkdir()
    assert AMDGPUBackend().detect(open_host(tmp_path, environ={})) is False


def test_imports_only_public_core_modules():
    allowed = {"ray_accel_ext.backend", "ray_accel_ext.model", "ray_accel_ext.host", "ray_accel_ext.errors",
               "ray_accel_ext.hw.pci", "ray_accel_ext.hw.nics"}
    import ast

    src = Path(__file__).parent.parent / "src" / "ray_accel_ext_amd"
    used = set()
    for file in src.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ray_accel_ext"):
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used.update(a.name for a in node.names if a.name.startswith("ray_accel_ext."))
    assert used - {"ray_accel_ext_amd"} <= allowed, sorted(used - allowed)
