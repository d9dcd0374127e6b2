"""KubeRay examples under deploy/kuberay: the hook, the install and the resource requests agree.

Each manifest is parsed with PyYAML. For every Ray container: ``RAY_START_HOOK`` names our hook;
the package is installed either in the container command (``pip install 'ray-accel-ext[<extra>]'``
before ``$KUBERAY_GEN_RAY_START_CMD``, with the ``ray.io/overwrite-container-cmd`` annotation) or
by the image built from deploy/kuberay/Dockerfile (tag ``<ray version>-<extra>``), with the extra
of the accelerator family; the Ray version everywhere is the tested one. Resource requests match
the hardware the node selector asks for.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from ray_accel_ext.backends.tpu.topology import slice_shape
from ray_accel_ext.compat import TESTED_RAY_VERSIONS
from ray_accel_ext.ray_hook import start_hook
from ray_accel_ext.registry import available_backends
from tests.support.paths import REPO

DEPLOY = REPO / "deploy" / "kuberay"
HOOK = f"{start_hook.__module__}.{start_hook.__name__}"
EXTRA_OF = {"google.com/tpu": "gcp", "nvidia.com/gpu": "nvidia", "aws.amazon.com/neuron": "aws"}
# GKE TPU node label -> Ray/TPU generation prefix of the accelerator type (hardware.md 4.3)
GKE_TPU_GENERATION = {"tpu-v6e-slice": "v6e", "tpu-v5-lite-podslice": "v5litepod", "tpu-v5p-slice": "v5p",
                      "tpu-v4-podslice": "v4", "tpu7x": "tpu7x"}
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _pods(doc: dict):
    yield "head", doc["spec"]["headGroupSpec"], doc["spec"]["headGroupSpec"]["template"]["spec"]
    for group in doc["spec"].get("workerGroupSpecs", []):
        yield group["groupName"], group, group["template"]["spec"]


def _accelerator(container: dict) -> tuple[str, int] | None:
    limits = container.get("resources", {}).get("limits", {})
    found = [(k, int(v)) for k, v in limits.items() if k in EXTRA_OF]
    assert len(found) <= 1, f"{container['name']}: more than one accelerator family"
    return found[0] if found else None


def _tested_ray(version: str) -> bool:
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) in TESTED_RAY_VERSIONS


def test_every_family_has_an_example():
    families = set()
    for path in MANIFESTS:
        for _, _, pod in _pods(_load(path)):
            for c in pod["containers"]:
                acc = _accelerator(c)
                if acc:
                    families.add(acc[0])
    assert families == set(EXTRA_OF)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_hook_install_and_ray_version_agree(path):
    doc = _load(path)
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayCluster"
    assert _tested_ray(doc["spec"]["rayVersion"]), doc["spec"]["rayVersion"]
    overwrite = (doc["metadata"].get("annotations") or {}).get("ray.io/overwrite-container-cmd") == "true"
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    families = {(_accelerator(c) or (None,))[0] for _, _, pod in _pods(doc) for c in pod["containers"]} - {None}
    (family,) = families
    extra = EXTRA_OF[family]
    for group, _, pod in _pods(doc):
        for c in pod["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env.get("RAY_START_HOOK") == HOOK, f"{path.name}/{group}: the hook must be enabled"
            command = " ".join(c.get("command", []) + c.get("args", []))
            if "pip install" in command:
                assert overwrite, f"{path.name}: a custom command needs ray.io/overwrite-container-cmd"
                assert re.search(rf"pip install [^&]*'ray-accel-ext\[{extra}\]", command), command
                assert command.index("pip install") < command.index("$KUBERAY_GEN_RAY_START_CMD")
                assert _tested_ray(c["image"].rsplit(":", 1)[1].split("-")[0])
            else:
                m = re.fullmatch(r".+/ray-accel-ext:(\d+\.\d+\.\d+)-([a-z,]+)", c["image"])
                assert m, f"{path.name}/{group}: image {c['image']} is neither built from Dockerfile nor installs the package"
                assert _tested_ray(m.group(1)) and m.group(1) == doc["spec"]["rayVersion"]
                assert extra in m.group(2).split(","), f"{c['image']} lacks the [{extra}] extra"
                assert 'pip install --no-cache-dir "ray-accel-ext[${EXTRAS}]' in dockerfile
                assert f"EXTRAS={extra}" in path.read_text(), "the manifest says how its image is built"


def test_hook_entry_point_is_importable_and_backends_exist():
    import importlib

    module, _, name = HOOK.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))
    assert {"nvidia_gpu", "tpu"} <= {s.name for s in available_backends()}


def test_tpu_slice_requests_match_topology():
    doc = _load(DEPLOY / "tpu-v6e-slice.yaml")
    groups = [(g, pod) for name, g, pod in _pods(doc) if name != "head"]
    assert groups
    for group, pod in groups:
        selector = pod["nodeSelector"]
        generation = GKE_TPU_GENERATION[selector["cloud.google.com/gke-tpu-accelerator"]]
        topology = selector["cloud.google.com/gke-tpu-topology"]
        chips = math.prod(int(x) for x in topology.split("x"))
        shape = slice_shape(f"{generation}-{chips}", topology)  # v6e counts chips in the suffix
        (container,) = pod["containers"]
        limits, requests = container["resources"]["limits"], container["resources"]["requests"]
        assert int(limits["google.com/tpu"]) == shape.accelerator_type.chips_per_host == 4
        assert int(requests["google.com/tpu"]) == int(limits["google.com/tpu"])
        # what the TPU webhook validates: numOfHosts == chips / chips per host
        assert group["numOfHosts"] == shape.hosts == chips // int(limits["google.com/tpu"])


def test_hgx_requests_eight_gpus():
    doc = _load(DEPLOY / "hgx-gpu.yaml")
    workers = [pod for name, _, pod in _pods(doc) if name != "head"]
    for pod in workers:
        (container,) = pod["containers"]
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == 8
        assert container["resources"]["requests"]["nvidia.com/gpu"] == container["resources"]["limits"]["nvidia.com/gpu"]
        assert "nvidia-h100" in pod["nodeSelector"]["cloud.google.com/gke-accelerator"]


def test_trainium_requests_every_device_of_the_instance():
    from ray_accel_ext import skus

    doc = _load(DEPLOY / "trainium.yaml")
    workers = [pod for name, _, pod in _pods(doc) if name != "head"]
    for pod in workers:
        instance = pod["nodeSelector"]["node.kubernetes.io/instance-type"]
        (container,) = pod["containers"]
        assert int(container["resources"]["limits"]["aws.amazon.com/neuron"]) == skus.machine_type(instance)[1]
