"""Our ray.io/accelerator-type equals what the installed Ray 2.60's own accelerator managers derive."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")  # compared with the installed Ray's own accelerator managers

from ray_accel_ext import skus
from ray_accel_ext.skus import ray_names

# Every NVML name in ray-project/ray python/ray/tests/accelerators/test_nvidia_gpu.py
# (GPU_MOCK_DATA and test_gpu_name_to_accelerator_type's parameters), copied verbatim.
RAY_TEST_NVML_NAMES = [
    "Ampere A100-SXM4-40GB",
    "Ampere A100-SXM4-40GB MIG 1g.5gb",
    "Tesla V100-SXM2-16GB",
    "Tesla P100-PCIE-16GB",
    "Tesla T4",
    "Tesla P4",
    "Tesla K80",
    "NVIDIA A10G",
    "NVIDIA L4",
    "NVIDIA L40S",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA H20",
    "NVIDIA B200",
    "NVIDIA B300",
    "NVIDIA GB200",
    "NVIDIA GB300",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    None,
    "",
]


def _ray_nvidia(name):
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    return NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(name)


@pytest.mark.parametrize("name", RAY_TEST_NVML_NAMES)
def test_nvidia_names_from_rays_own_tests(name):
    assert ray_names.nvidia_accelerator_type(name) == _ray_nvidia(name)
    if name:  # through the public entry point, for an id the database does not hold
        who = skus.identify("0x10de", "0x0001", nvml_name=name)
        assert who.ray_accelerator_type == _ray_nvidia(name)


def test_nvidia_pattern_is_rays():
    from ray._private.accelerators.nvidia_gpu import NVIDIA_GPU_NAME_PATTERN

    assert ray_names.NVIDIA_GPU_NAME_PATTERN.pattern == NVIDIA_GPU_NAME_PATTERN.pattern


@pytest.mark.parametrize("entry", skus.entries("nvidia"), ids=lambda e: f"{e.device_id}-{e.sku}")
def test_every_nvidia_entry_and_its_nvml_name(entry):
    name = entry.nvml_name or entry.product
    assert entry.ray_accelerator_type == _ray_nvidia(name)
    # A "*:<device>" subsystem entry stands for that subsystem device under any board vendor.
    subsystem = entry.subsystem.replace("*", entry.vendor_id) if entry.subsystem else None
    who = skus.identify(entry.vendor_id, entry.device_id, subsystem, nvml_name=name)
    assert (who.sku, who.ray_accelerator_type, who.source) == (entry.sku, _ray_nvidia(name), "database")


def _ray_amd_table():
    from ray._private.accelerators.amd_gpu import amd_product_dict

    return amd_product_dict


def test_amd_table_is_rays():
    assert ray_names.AMD_PRODUCTS == _ray_amd_table()


@pytest.mark.parametrize("key", sorted(_ray_amd_table()))
def test_every_amd_id_in_rays_table(key, tmp_path):
    """Ray looks up hex(device id), so its upper-case keys (0x679A) never match; neither do we."""
    from ray._private.accelerators.amd_gpu import AMDGPUAcceleratorManager

    device_id = int(key, 16)
    ray_type = AMDGPUAcceleratorManager._gpu_name_to_accelerator_type(hex(device_id))
    assert ray_names.amd_accelerator_type(device_id) == ray_type
    assert ray_names.amd_accelerator_type(key) == ray_type
    who = skus.identify("0x1002", device_id, root=tmp_path)
    assert who.ray_accelerator_type == ray_type
    entry = skus.lookup("0x1002", device_id)
    assert entry is None or entry.ray_accelerator_type == ray_type


# One valid accelerator type per generation (Ray's VALID_TPU_TYPES prefixes; Cloud TPU docs).
TPU_ACCELERATOR_TYPES = {
    "tpu-v2": "v2-8", "tpu-v3": "v3-8", "tpu-v4": "v4-8", "tpu-v5p": "v5p-8",
    "tpu-v5e": "v5litepod-4", "tpu-v6e": "v6e-4", "tpu7x": "tpu7x-8",
}


@pytest.mark.parametrize("entry", skus.entries("tpu"), ids=lambda e: e.sku)
def test_tpu_types(entry, monkeypatch):
    from ray._private.accelerators.tpu import TPUAcceleratorManager

    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", TPU_ACCELERATOR_TYPES[entry.sku])  # GKE's variable
    ray_type = TPUAcceleratorManager.get_current_node_accelerator_type()
    assert entry.ray_accelerator_type == ray_type == ray_names.tpu_accelerator_type(TPU_ACCELERATOR_TYPES[entry.sku])


def test_neuron_type():
    from ray._private.accelerators.neuron import NeuronAcceleratorManager

    ray_type = NeuronAcceleratorManager.get_current_node_accelerator_type()
    assert ray_names.neuron_accelerator_type() == ray_type
    assert {e.ray_accelerator_type for e in skus.entries("neuron")} == {ray_type}


def test_gaudi_types_follow_rays_hpu_rule():
    """Ray 2.60's HPUAcceleratorManager returns "Intel-" + habana_frameworks' device name; the
    Habana runtime is not installable here, so the rule is checked on the names it returns."""
    import inspect

    from ray._private.accelerators.hpu import HPUAcceleratorManager

    assert 'f"Intel-{torch_hpu.get_device_name()}"' in inspect.getsource(HPUAcceleratorManager.get_current_node_accelerator_type)
    for e in skus.entries("gaudi"):
        assert e.ray_accelerator_type == ray_names.hpu_accelerator_type(e.generation.upper())
