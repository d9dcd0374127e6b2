"""NVIDIA SKU table: every required SKU, Ray's accelerator-type names, unknown device ids."""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.backends.nvidia_gpu.backend import NvidiaGPUBackend, sku_for, sku_table
from ray_accel_ext.registry import load_backends
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS as ALL_HOSTS

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


@pytest.mark.parametrize("device_id", sorted(REQUIRED))
def test_required_sku(device_id):
    name, generation, ray_type, gib, nvlink = REQUIRED[device_id]
    sku = sku_for(device_id)
    assert (sku.vendor, sku.name, sku.generation, sku.ray_accelerator_type) == ("nvidia", name, generation, ray_type)
    assert sku.memory_bytes == gib << 30
    assert sku.known and sku.pci_device_id == device_id
    assert sku_table()[device_id]["nvlink"] == nvlink


def test_table_keys_are_lower_case_pci_ids_and_fields_complete():
    for device_id, entry in sku_table().items():
        assert device_id == device_id.lower() and device_id.startswith("0x") and len(device_id) == 6, device_id
        assert {"sku", "generation", "ray_accelerator_type", "product", "memory_gib", "nvlink"} <= set(entry), device_id
        assert entry["nvlink"] in ("none", "nvlink3", "nvlink4", "nvlink5"), device_id


def test_ray_type_is_what_ray_derives_from_the_nvml_name():
    """Our published accelerator type equals Ray 2.60's own NVIDIA manager's for the same GPU,
    including the RTX PRO 6000 (Ray 2.60 gives ``RTX-PRO-6000``, not ``RTX``)."""
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    for device_id, entry in sku_table().items():
        ray_type = NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(entry["product"])
        assert entry["ray_accelerator_type"] == ray_type, (device_id, entry["product"], ray_type)
    assert sku_for("0x2bb5").ray_accelerator_type == "RTX-PRO-6000"


def test_unknown_device_id_is_an_unknown_sku_never_dropped():
    sku = sku_for("0x2B85", "NVIDIA GeForce RTX 5090")
    assert sku.name == "nvidia-unknown-0x2b85" and not sku.known and sku.generation == "unknown"
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    assert sku.ray_accelerator_type == NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type("NVIDIA GeForce RTX 5090")
    no_name = sku_for("0x9999")
    assert no_name.name == "nvidia-unknown-0x9999" and no_name.ray_accelerator_type is None


def test_unknown_device_snapshot_counts_the_gpu_not_its_audio_function(capsys):
    assert main(["ray-args", "--root", str(HOSTS / "unknown-device-id"), "--format", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["resources"]["GPU"] == 1
    assert spec["labels"]["rayaccel.io/sku"] == "nvidia-unknown-0x2b85"
    assert spec["labels"]["rayaccel.io/discovery"] == "ok"


def test_backend_is_registered_through_the_entry_point():
    backends = {b.name: b for b in load_backends({})}
    backend = backends["nvidia_gpu"]
    assert isinstance(backend, NvidiaGPUBackend)
    assert backend.resource_name == "GPU" and backend.visible_devices_env_var == "CUDA_VISIBLE_DEVICES"
    assert backend.label_prefix == "nvidia.rayaccel.io"
