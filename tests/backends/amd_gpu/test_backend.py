"""What the AMD backend does beyond the shared suite: Ray's visible-devices variables, partition
modes, broken and unusual hosts, provider location, and the worker's RCCL/NCCL hints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext.backends.amd_gpu import AMDGPUBackend
from ray_accel_ext.host import open_host
from ray_accel_ext.ray_hook import node_spec
from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.worker import topology_for
from tests.support.paths import HOSTS

AMD = HOSTS / "amd_gpu"
KFD = "rootfs/sys/class/kfd/kfd/topology/nodes"


@pytest.fixture
def mi300x(tmp_path: Path) -> Path:
    """A writable copy of the 8x MI300X snapshot (symlinks kept)."""
    dst = tmp_path / "mi300x"
    shutil.copytree(AMD / "mi300x-8gpu-hive", dst, symlinks=True)
    return dst


def _describe(root: Path, env: dict[str, str] | None = None):
    return AMDGPUBackend().describe(open_host(root, environ=env or {}))


def _gpu_dirs(snap: Path) -> list[Path]:
    return sorted(p.resolve() for p in (snap / "rootfs/sys/bus/pci/devices").iterdir()
                  if (p / "vendor").read_text().strip() == "0x1002")


def test_visible_devices_are_rays_hip_indices():
    """Ray 2.60's AMD manager writes HIP_VISIBLE_DEVICES with node-wide indices (amd_gpu.py)."""
    backend = AMDGPUBackend()
    desc = _describe(AMD / "mi300x-8gpu-hive")
    env = backend.visible_devices_env([desc.devices[2], desc.devices[5]])
    assert env == {"HIP_VISIBLE_DEVICES": "2,5"}
    assert backend.parse_visible_devices(env) == [2, 5]


@pytest.mark.parametrize(("env", "visible"), [
    ({}, None),
    ({"HIP_VISIBLE_DEVICES": "3,1"}, [3, 1]),
    ({"ROCR_VISIBLE_DEVICES": "4,6,7"}, [4, 6, 7]),
    ({"ROCR_VISIBLE_DEVICES": "4,6,7", "HIP_VISIBLE_DEVICES": "2"}, [7]),  # HIP counts within ROCr's list
    ({"ROCR_VISIBLE_DEVICES": ""}, []),
])
def test_parse_visible_devices(env, visible):
    assert AMDGPUBackend().parse_visible_devices(env) == visible


@pytest.mark.parametrize("variable", ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"])
def test_visible_devices_cap_the_node(variable):
    spec = node_spec(AMD / "mi300x-8gpu-hive", environ={variable: "0,1,2"})
    assert spec.resources["GPU"] == 3 and spec.labels["rayaccel.io/count"] == "8"


def test_rocr_without_hip_is_reported(mi300x: Path):
    """Ray refuses ROCR_VISIBLE_DEVICES without HIP_VISIBLE_DEVICES: say so before it does."""
    (mi300x / "env.json").write_text(json.dumps({"ROCR_VISIBLE_DEVICES": "0,1"}))
    desc = _describe(mi300x)
    assert any("Please use HIP_VISIBLE_DEVICES" in p for p in [q.message for q in desc.problems]), desc.problems


def test_corrupt_kfd_node_becomes_a_problem(mi300x: Path):
    (mi300x / KFD / "4/properties").write_text("simd_count lots\n")
    desc = _describe(mi300x)
    assert len(desc.devices) == 7
    assert any("nodes/4/properties: malformed line 'simd_count lots'" in p for p in [q.message for q in desc.problems]), desc.problems


def test_two_hives_fall_back_to_the_host_domain_and_say_why(mi300x: Path):
    path = mi300x / KFD / "9/properties"
    path.write_text(path.read_text().replace("hive_id 11712426211487235452", "hive_id 42"))
    desc = _describe(mi300x)
    assert (desc.fabric.kind, desc.fabric.id) == ("host", "mi300x-node-01")
    assert any("2 XGMI hive ids" in p for p in [q.message for q in desc.problems]), desc.problems


def test_unknown_device_id_is_counted_named_and_reported(mi300x: Path):
    for node in range(2, 10):
        path = mi300x / KFD / f"{node}/properties"
        path.write_text(path.read_text().replace("device_id 29857", "device_id 30000"))
    for fn in _gpu_dirs(mi300x):
        (fn / "device").write_text("0x7530\n")
    desc = _describe(mi300x)
    assert len(desc.devices) == 8 and not desc.sku.known and desc.sku.generation == "unknown"
    assert desc.sku.name == "instinct-mi300x"  # AMD SMI's market name
    assert desc.sku.ray_accelerator_type is None  # not in Ray's amd_product_dict
    assert any("1002:7530" in p and "not in the SKU database" in p for p in [q.message for q in desc.problems])
    (mi300x / "libraries/amdsmi.json").unlink()
    assert _describe(mi300x).sku.name == "amd-unknown-0x7530"


def test_without_amd_smi_ray_type_is_left_to_ray(mi300x: Path):
    (mi300x / "libraries/amdsmi.json").unlink()
    spec = node_spec(mi300x, environ={})
    assert "ray.io/accelerator-type" not in spec.labels and spec.resources == {"GPU": 8.0}
    assert spec.labels["rayaccel.io/sku"] == "mi300x-oam-192gb" and spec.labels["amd.rayaccel.io/amdsmi"] == "absent"


def test_amd_smi_failure_is_a_problem(mi300x: Path):
    (mi300x / "libraries/amdsmi.json").write_text(json.dumps({"format": 1, "error": "amdsmi_init: Error code: 34", "devices": []}))
    desc = _describe(mi300x)
    assert desc.sku.ray_accelerator_type is None and len(desc.devices) == 8
    assert "AMD SMI: amdsmi_init: Error code: 34" in [p.message for p in desc.problems]


def test_compute_partition_mode_is_published_with_the_partitions_memory(mi300x: Path):
    """In CPX a device is one partition: its memory is what AMD SMI reports for it, not the GPU's."""
    for fn in _gpu_dirs(mi300x):
        (fn / "current_compute_partition").write_text("CPX\n")
        (fn / "current_memory_partition").write_text("NPS4\n")
    reading = json.loads((mi300x / "libraries/amdsmi.json").read_text())
    for dev in reading["devices"]:
        dev["memory_total"] = 24 << 30
    (mi300x / "libraries/amdsmi.json").write_text(json.dumps(reading))
    labels = node_spec(mi300x, environ={}).labels
    assert labels["amd.rayaccel.io/compute-partition"] == "CPX"
    assert labels["amd.rayaccel.io/memory-partition"] == "NPS4"
    assert labels["rayaccel.io/memory-gib"] == "24"


def test_provider_location_on_a_cloud_vm(mi300x: Path, monkeypatch):
    """The location comes from hw.cloud when DMI names a cloud (this copy says GCE; the loopback
    metadata server answers as in tests/data/hosts/nvidia_gpu/gce-a3-highgpu-1g)."""
    dmi = mi300x / "rootfs/sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_name").write_text("Google Compute Engine\n")
    (dmi / "sys_vendor").write_text("Google\n")
    (mi300x / "metadata.json").write_text(json.dumps({"gce": {
        "instance/zone": "projects/1/zones/us-central1-a", "instance/machine-type": "projects/1/machineTypes/a3-custom-8g",
        "instance/attributes/physical_host_topology": json.dumps({"cluster": "c1", "block": "b1", "subBlock": "s1"}),
    }}))
    with serve_snapshot(mi300x) as env:
        desc = _describe(mi300x, env)
    assert (desc.location.provider, desc.location.zone, desc.location.rack) == ("gcp", "us-central1-a", "s1")


def test_worker_gets_its_gpus_nics_for_rccl():
    """RCCL reads NCCL's variables (rocm.docs.amd.com/projects/rccl, env-variables): the GPUs'
    nearest NICs become NCCL_IB_HCA, as on NVIDIA nodes."""
    desc = _describe(AMD / "mi300x-8gpu-hive")
    topo = topology_for(desc, ["0", "1"])
    assert topo.nccl_env == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}
    assert topo.numa_nodes == (0,) and 0 in topo.cpus


def test_no_kfd_means_not_detected(tmp_path: Path):
    (tmp_path / "rootfs").mkdir()
    assert AMDGPUBackend().detect(open_host(tmp_path, environ={})) is False
