"""NVIDIA SKUs through the SKU database: the issue's required SKUs, Ray's type with and without
NVML, the memory rule, and unknown device ids (counted, named, reported)."""

from __future__ import annotations

import json
import shutil

import pytest

from ray_accel_ext import skus
from ray_accel_ext.backends.nvidia_gpu.backend import NvidiaGPUBackend
from ray_accel_ext.host import open_host
from ray_accel_ext.node.registry import load_backends
from ray_accel_ext.ray_hook import node_spec
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS as ALL_HOSTS
from tests.support.pci_hosts import nvidia_host

HOSTS = ALL_HOSTS / "nvidia_gpu"

# The required SKUs (device id -> canonical id, generation, Ray type, nominal GiB, NVLink);
# ids and names from shared/reference/hardware.md section 1.2.
REQUIRED = {
    "0x20b0": ("a100-sxm4-40gb", "ampere", "A100", 40, "nvlink3"),
    "0x20b2": ("a100-sxm4-80gb", "ampere", "A100", 80, "nvlink3"),
    "0x20f1": ("a100-pcie-40gb", "ampere", "A100", 40, "nvlink3"),
    "0x20b5": ("a100-pcie-80gb", "ampere", "A100", 80, "nvlink3"),
    "0x2330": ("h100-sxm5-80gb", "hopper", "H100", 80, "nvlink4"),
    "0x2331": ("h100-pcie-80gb", "hopper", "H100", 80, "nvlink4"),
    "0x2321": ("h100-nvl-94gb", "hopper", "H100", 94, "nvlink4"),
    "0x2335": ("h200-sxm-141gb", "hopper", "H200", 141, "nvlink4"),
    "0x233b": ("h200-nvl-141gb", "hopper", "H200", 141, "nvlink4"),
    "0x2901": ("b200-180gb", "blackwell", "B200", 180, "nvlink5"),
    "0x2909": ("b200-168gb", "blackwell", "B200", 168, "nvlink5"),
    "0x2941": ("gb200-186gb", "blackwell", "GB200", 186, "nvlink5"),
    "0x2bb5": ("rtx-pro-6000-blackwell-server-96gb", "blackwell", "RTX-PRO-6000", 96, "none"),
    "0x27b8": ("l4-24gb", "ada", "L4", 24, "none"),
    "0x26b9": ("l40s-48gb", "ada", "L40S", 48, "none"),
}


def _labels(root) -> dict[str, str]:
    return dict(node_spec(root, environ={}).labels)


@pytest.mark.parametrize("device_id", sorted(REQUIRED))
def test_required_sku_from_the_database(device_id):
    name, generation, ray_type, gib, nvlink = REQUIRED[device_id]
    entry = skus.lookup("0x10de", device_id)
    assert (entry.vendor, entry.sku, entry.generation, entry.ray_accelerator_type) == ("nvidia", name, generation, ray_type)
    assert entry.memory_gib == gib and entry.interconnect == nvlink


@pytest.mark.parametrize("device_id, nvml_name, nvml_mib", [
    ("0x26b5", "NVIDIA L40", 46068),     # GDDR6 with ECC: NVML shows 45 GiB of 48
    ("0x26b9", "NVIDIA L40S", 46068),
])
def test_l40_and_l40s_both_show_48_gib(tmp_path, device_id, nvml_name, nvml_mib):
    """One unit and rule for table and NVML values: the marketed 48 GiB, not NVML's 45."""
    root = nvidia_host(tmp_path / device_id, device_id, count=1, nvml_name=nvml_name, memory_mib=nvml_mib)
    labels = _labels(root)
    assert labels["rayaccel.io/memory-gib"] == "48"
    assert labels["ray.io/accelerator-type"] == nvml_name.split()[-1]


def test_without_nvml_ray_publishes_no_type_and_neither_do_we(tmp_path):
    """Ray 2.60's NVIDIA manager reads the type from NVML; without NVML the node has none (the SKU,
    memory and count still come from sysfs and the database)."""
    root = nvidia_host(tmp_path / "h100", "0x2330", subsystem=("0x10de", "0x16c1"), count=8)
    spec = node_spec(root, environ={})
    assert spec.resources == {"GPU": 8.0}
    assert "ray.io/accelerator-type" not in spec.labels
    assert (spec.labels["rayaccel.io/sku"], spec.labels["rayaccel.io/memory-gib"]) == ("h100-sxm5-80gb", "80")
    assert spec.labels["rayaccel.io/discovery"] == "ok"


def test_ray_type_comes_from_nvml_device_0(tmp_path):
    """Ray names the node after NVML device 0 (an RTX PRO 6000 reads ``RTX-PRO-6000`` in Ray 2.60)."""
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    root = nvidia_host(tmp_path / "rtx", "0x2bb5", count=2, nvml_name=name, memory_mib=97887)
    spec = node_spec(root, environ={})
    expected = NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(name)
    assert spec.labels["ray.io/accelerator-type"] == expected == "RTX-PRO-6000"
    assert spec.resources["accelerator_type:RTX-PRO-6000"] == 1


def test_unknown_device_snapshot_counts_the_gpu_names_it_and_says_so(capsys):
    assert main(["ray-args", "--root", str(HOSTS / "unknown-device-id"), "--format", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["resources"] == {"GPU": 1, "accelerator_type:GeForce-RTX-5090": 1}
    assert spec["labels"]["rayaccel.io/sku"] == "geforce-rtx-5090"
    assert spec["labels"]["rayaccel.io/generation"] == "unknown"
    assert spec["labels"]["rayaccel.io/discovery"] == "degraded"
    desc = NvidiaGPUBackend().describe(open_host(HOSTS / "unknown-device-id", environ={}))
    assert not desc.sku.known
    assert any("10de:2b85" in p and "not in the SKU database" in p for p in [q.message for q in desc.problems]), desc.problems


def test_unknown_device_without_nvml_is_vendor_unknown_id(tmp_path):
    snap = tmp_path / "unknown"
    shutil.copytree(HOSTS / "unknown-device-id", snap, symlinks=True)
    (snap / "libraries" / "nvml.json").unlink()
    labels = _labels(snap)
    assert labels["rayaccel.io/sku"] == "nvidia-unknown-0x2b85"
    assert "ray.io/accelerator-type" not in labels and "rayaccel.io/memory-gib" not in labels
    assert node_spec(snap, environ={}).resources == {"GPU": 1.0}


def test_host_pci_ids_names_an_unknown_device(tmp_path):
    """Without NVML, the host's own pci.ids (hwdata) names the GPU; generation stays unknown."""
    snap = tmp_path / "unknown"
    shutil.copytree(HOSTS / "unknown-device-id", snap, symlinks=True)
    (snap / "libraries" / "nvml.json").unlink()
    hwdata = snap / "rootfs/usr/share/hwdata"
    hwdata.mkdir(parents=True)
    (hwdata / "pci.ids").write_text("10de  NVIDIA Corporation\n\t2b85  GB202 [GeForce RTX 5090]\n")
    labels = _labels(snap)
    assert (labels["rayaccel.io/sku"], labels["rayaccel.io/generation"]) == ("geforce-rtx-5090", "unknown")
    assert "ray.io/accelerator-type" not in labels


def test_backend_is_registered_through_the_entry_point():
    backends = {b.name: b for b in load_backends({})}
    backend = backends["nvidia_gpu"]
    assert isinstance(backend, NvidiaGPUBackend)
    assert backend.resource_name == "GPU" and backend.visible_devices_env_var == "CUDA_VISIBLE_DEVICES"
    assert backend.label_prefix == "nvidia.rayaccel.io"


@pytest.mark.parametrize("device_id, subsystem, nvml_name, nvml_mib, sku, gib, ray_type", [
    # pci.ids 2bb3 / 2c3a / 232c; NVML names from the driver's README (595.45.04), H20-3e's
    # 143771 MiB as public nvidia-smi captures print it.
    ("0x2bb3", ("0x10de", "0x204d"), "NVIDIA RTX PRO 5000 Blackwell", None, "rtx-pro-5000-blackwell-48gb", "48", "RTX-PRO-5000"),
    ("0x2bb3", ("0x17aa", "0x227a"), "NVIDIA RTX PRO 5000 72GB Blackwell", None, "rtx-pro-5000-blackwell-72gb", "72",
     "RTX-PRO-5000"),
    ("0x2c3a", ("0x10de", "0x0000"), "NVIDIA RTX PRO 4500 Blackwell Server Edition", None,
     "rtx-pro-4500-blackwell-server-32gb", "32", "RTX-PRO-4500"),
    ("0x232c", ("0x10de", "0x2063"), "NVIDIA H20-3e", 143771, "h20-3e", "141", "H20"),
])
def test_newer_blackwell_workstation_and_h20_hbm3e(tmp_path, device_id, subsystem, nvml_name, nvml_mib, sku, gib, ray_type):
    """Known SKUs (generation, memory), not unknown ids: the node is not degraded for them."""
    root = nvidia_host(tmp_path / sku, device_id, subsystem=subsystem, count=1, nvml_name=nvml_name, memory_mib=nvml_mib)
    labels = _labels(root)
    assert (labels["rayaccel.io/sku"], labels["rayaccel.io/memory-gib"]) == (sku, gib)
    assert labels["rayaccel.io/generation"] == ("hopper" if device_id == "0x232c" else "blackwell")
    assert labels["ray.io/accelerator-type"] == ray_type and labels["rayaccel.io/discovery"] == "ok"
