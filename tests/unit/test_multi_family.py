"""A node with two accelerator families: each family's resources, the ray.io/ keys Ray defines for
it, and the other family's SKU, count, memory and backend labels (docs/labels.md). The families
are described from recorded snapshots and joined into one inventory."""

from __future__ import annotations

from ray_accel_ext.backends.gaudi import GaudiBackend
from ray_accel_ext.backends.nvidia_gpu import NvidiaGPUBackend
from ray_accel_ext.backends.tpu import TPUBackend
from ray_accel_ext.host import open_host
from ray_accel_ext.labels import family_key
from ray_accel_ext.model import NodeInventory
from ray_accel_ext.node.adapter import to_ray_node
from tests.support.paths import HOSTS


def _describe(backend, snapshot: str):
    return backend().describe(open_host(HOSTS / snapshot, environ={}))


def test_tpu_chips_next_to_gpus_keep_rays_tpu_keys_and_resources():
    gpus = _describe(NvidiaGPUBackend, "nvidia_gpu/h100-sxm-8gpu-dgx")
    tpus = _describe(TPUBackend, "tpu/gke-v6e-4x4-worker0")
    spec = to_ray_node(NodeInventory(descriptions=(tpus, gpus)))
    labels = spec.labels
    assert labels["rayaccel.io/sku"] == "h100-sxm5-80gb" and labels["ray.io/accelerator-type"] == "H100"  # primary
    assert {k: labels[k] for k in ("ray.io/tpu-slice-name", "ray.io/tpu-worker-id", "ray.io/tpu-topology", "ray.io/tpu-pod-type")} == {
        "ray.io/tpu-slice-name": "slice-a", "ray.io/tpu-worker-id": "0", "ray.io/tpu-topology": "4x4", "ray.io/tpu-pod-type": "v6e-16"}
    assert (labels[family_key("tpu", "sku")], labels[family_key("tpu", "count")], labels[family_key("tpu", "memory-gib")]) == (
        "tpu-v6e", "4", "32")
    assert labels["tpu.rayaccel.io/accelerator-type"] == "v6e-16"  # the secondary backend's own labels
    assert spec.resources["TPU"] == 4 and spec.resources["slice-a"] == 1 and spec.resources["TPU-v6e-16-head"] == 1
    assert spec.resources["GPU"] == 8 and spec.resources["accelerator_type:TPU-V6E"] == 1


def test_an_nvlink_domain_next_to_a_larger_family_keeps_ray_io_gpu_domain():
    gb200 = _describe(NvidiaGPUBackend, "nvidia_gpu/gb200-nvl72-tray")
    gaudi = _describe(GaudiBackend, "gaudi/hls3-gaudi3-8")
    spec = to_ray_node(NodeInventory(descriptions=(gb200, gaudi)))
    labels = spec.labels
    assert labels["rayaccel.io/sku"] == "gaudi3-128gb" and labels["rayaccel.io/families"] == "gaudi.nvidia_gpu"
    assert labels["ray.io/gpu-domain"] == gb200.fabric.id
    assert labels["rayaccel.io/fabric-domain"] == "hls3-node-01"  # the primary family's fabric
    assert (labels["rayaccel.io/nvidia-gpu-sku"], labels["rayaccel.io/nvidia-gpu-count"], labels["rayaccel.io/nvidia-gpu-memory-gib"]) == (
        "gb200-186gb", "4", "186")
    assert labels["nvidia.rayaccel.io/nvml"] == "present"
    assert dict(spec.resources) == {"GPU": 4.0, "HPU": 8.0, "accelerator_type:GB200": 1.0}
