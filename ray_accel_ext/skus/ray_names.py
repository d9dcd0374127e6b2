"""Ray 2.60's own accelerator-type names, derived exactly as its accelerator managers derive them.

Ray does not import here (this runs at node start, before and without Ray); the rules are copied
from ray-project/ray 2.60.0 (commit b7f4259e944bf6959f721b106adc366ddfa0c356) and
``tests/skus/test_ray_parity.py`` checks them against the installed Ray:

* NVIDIA: ``python/ray/_private/accelerators/nvidia_gpu.py``, ``NVIDIA_GPU_NAME_PATTERN`` on the
  NVML name of device 0, with the hyphen-joined fallback for mixed-case (GeForce) names.
* AMD: ``amd_gpu.py``, ``amd_product_dict`` keyed by ``hex(device_id)`` as pyamdsmi reports it
  (so the table's upper-case ``0x679A``/``0x679B`` keys never match: Ray gives None there).
* TPU: ``tpu.py``, ``TPU-`` + the upper-cased generation prefix of the accelerator type after
  ``normalize_tpu_accelerator_type`` (``tpu7x-8`` -> ``TPU-V7X``, ``v5litepod-8`` -> ``TPU-V5LITEPOD``).
* AWS Neuron: ``neuron.py``, always ``ray.util.accelerators.AWS_NEURON_CORE`` (``aws-neuron-core``).
* Intel Gaudi: ``hpu.py``, ``Intel-`` + ``habana_frameworks.torch.hpu.get_device_name()``.
"""

from __future__ import annotations

import re

__all__ = [
    "AMD_PRODUCTS",
    "AWS_NEURON_CORE",
    "NVIDIA_GPU_NAME_PATTERN",
    "amd_accelerator_type",
    "hpu_accelerator_type",
    "neuron_accelerator_type",
    "nvidia_accelerator_type",
    "tpu_accelerator_type",
]

# ray/_private/accelerators/nvidia_gpu.py (2.60.0)
NVIDIA_GPU_NAME_PATTERN = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")

# ray/_private/accelerators/amd_gpu.py (2.60.0), amd_product_dict, verbatim.
AMD_PRODUCTS: dict[str, str] = {
    "0x66a1": "AMD-Instinct-MI50",
    "0x738c": "AMD-Instinct-MI100",
    "0x7408": "AMD-Instinct-MI250X",
    "0x740c": "AMD-Instinct-MI250X-MI250",
    "0x740f": "AMD-Instinct-MI210",
    "0x74a0": "AMD-Instinct-MI300A",
    "0x74a1": "AMD-Instinct-MI300X-OAM",
    "0x74a2": "AMD-Instinct-MI308X-OAM",
    "0x74a9": "AMD-Instinct-MI300X-HF",
    "0x74a5": "AMD-Instinct-MI325X-OAM",
    "0x75a0": "AMD-Instinct-MI350X-OAM",
    "0x75a3": "AMD-Instinct-MI355X-OAM",
    "0x6798": "AMD-Radeon-R9-200-HD-7900",
    "0x6799": "AMD-Radeon-HD-7900",
    "0x679A": "AMD-Radeon-HD-7900",
    "0x679B": "AMD-Radeon-HD-7900",
}

# ray/util/accelerators/accelerators.py (2.60.0)
AWS_NEURON_CORE = "aws-neuron-core"


def nvidia_accelerator_type(nvml_name: str | None) -> str | None:
    """``NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type`` (``"NVIDIA H100 80GB HBM3"`` -> ``H100``)."""
    if nvml_name is None:
        return None
    match = NVIDIA_GPU_NAME_PATTERN.match(nvml_name)
    result = match.group(1).replace(" ", "-") if match else None
    if result and len(result) > 1:
        return result
    cleaned = re.sub(r"^NVIDIA\s+", "", nvml_name).strip()
    return cleaned.replace(" ", "-") if cleaned else None


def amd_accelerator_type(device_id: int | str | None) -> str | None:
    """``AMDGPUAcceleratorManager`` for a PCI device id (``0x74a1`` -> ``AMD-Instinct-MI300X-OAM``).

    Ray looks up ``hex(pyamdsmi.smi_get_device_id(i))``, a lower-case string, so the id is
    normalised the same way before the lookup.
    """
    if device_id is None:
        return None
    try:
        number = device_id if isinstance(device_id, int) else int(str(device_id), 16)
    except ValueError:
        return None
    return AMD_PRODUCTS.get(hex(number))


def tpu_accelerator_type(accelerator_type: str | None) -> str | None:
    """``TPUAcceleratorManager.get_current_node_accelerator_type`` for a pod type or generation."""
    if not accelerator_type:
        return None
    normalized = re.sub(r"^tpu-?v?", "v", accelerator_type.strip().lower())
    return f"TPU-{normalized.split('-')[0].upper()}"


def neuron_accelerator_type() -> str:
    """``NeuronAcceleratorManager.get_current_node_accelerator_type``: one name for every part."""
    return AWS_NEURON_CORE


def hpu_accelerator_type(device_name: str | None) -> str | None:
    """``HPUAcceleratorManager``: ``Intel-`` + the Habana runtime's device name (``GAUDI2``)."""
    return f"Intel-{device_name}" if device_name else None
