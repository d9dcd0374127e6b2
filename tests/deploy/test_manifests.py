"""KubeRay examples under deploy/kuberay: images, extras, requests and the EKS permission agree.

Each RayCluster manifest is parsed strictly (``tests/support/kuberay_crd.py``). For every Ray container:
``RAY_START_HOOK`` names our hook; the image is the one deploy/kuberay/Dockerfile builds from this
repository, tagged ``<Ray version>-<extras>`` with the extra of the accelerator family, and the
manifest says how to build and push it; the Ray version is a supported one. Resource requests
match the hardware the node selector asks for. Pods that switch the EC2 instance topology on run
as the service account whose IAM policy allows the call the lookup makes.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ray_accel_ext.backends.tpu.layout import HostFacts, slice_layout
from ray_accel_ext.backends.tpu.topology import parse_accelerator_type, parse_topology
from ray_accel_ext.compat import is_supported_ray
from ray_accel_ext.hw import aws_topology
from ray_accel_ext.testing.cluster import HOOK
from tests.support.kuberay_crd import load_documents
from tests.support.paths import REPO

DEPLOY = REPO / "deploy" / "kuberay"
EXTRA_OF = {"google.com/tpu": "gcp", "nvidia.com/gpu": "nvidia", "aws.amazon.com/neuron": "aws"}
# GKE TPU node label -> Ray/TPU generation prefix of the accelerator type (hardware.md 4.3)
GKE_TPU_GENERATION = {"tpu-v6e-slice": "v6e", "tpu-v5-lite-podslice": "v5litepod", "tpu-v5p-slice": "v5p",
                      "tpu-v4-podslice": "v4", "tpu7x": "tpu7x"}
DOCS = {p.name: load_documents(p) for p in sorted(DEPLOY.glob("*.yaml"))}
CLUSTERS = {name: d for name, docs in DOCS.items() for d in docs if d["kind"] == "RayCluster"}
IMAGE_RE = re.compile(r"^registry\.example\.com/ray-accel-ext:(\d+\.\d+\.\d+)-([a-z]+(?:-[a-z]+)*)$")


def _pods(doc: dict):
    yield "head", doc["spec"]["headGroupSpec"], doc["spec"]["headGroupSpec"]["template"]["spec"]
    for group in doc["spec"].get("workerGroupSpecs", []):
        yield group["groupName"], group, group["template"]["spec"]


def _accelerator(container: dict) -> tuple[str, int] | None:
    limits = container.get("resources", {}).get("limits", {})
    found = [(k, int(v)) for k, v in limits.items() if k in EXTRA_OF]
    assert len(found) <= 1, f"{container['name']}: more than one accelerator family"
    return found[0] if found else None


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_every_family_has_an_example():
    families = {(_accelerator(c) or (None,))[0] for doc in CLUSTERS.values() for _, _, pod in _pods(doc)
                for c in pod["containers"]}
    assert families - {None} == set(EXTRA_OF)


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_image_is_built_from_this_repository(name):
    doc = CLUSTERS[name]
    text = (DEPLOY / name).read_text()
    assert is_supported_ray(doc["spec"]["rayVersion"]), doc["spec"]["rayVersion"]
    (family,) = {(_accelerator(c) or (None,))[0] for _, _, pod in _pods(doc) for c in pod["containers"]} - {None}
    for group, _, pod in _pods(doc):
        for c in pod["containers"]:
            assert _env(c).get("RAY_START_HOOK") == HOOK, f"{name}/{group}: the hook must be enabled"
            m = IMAGE_RE.match(c["image"])
            assert m, f"{name}/{group}: {c['image']} is not the image deploy/kuberay/Dockerfile builds"
            version, extras = m.group(1), m.group(2).split("-")
            assert version == doc["spec"]["rayVersion"]
            assert EXTRA_OF[family] in extras, f"{c['image']} lacks the [{EXTRA_OF[family]}] extra"
            tag = c["image"].split(":")[1]
            # the header says how this very image is built and pushed
            assert f"--build-arg EXTRAS={','.join(extras)}" in text and f"-t REGISTRY/ray-accel-ext:{tag}" in text
            assert f"docker push REGISTRY/ray-accel-ext:{tag}" in text
            assert "pip install" not in " ".join(c.get("command", []) + c.get("args", []))


def test_dockerfile_installs_the_build_context():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "ray-accel-ext==" not in dockerfile and "pip install" not in dockerfile
    run = re.search(r"^RUN --mount=type=bind,source=\.,target=(\S+) \\\n\s+bash (\S+) (\S+) \"\$\{EXTRAS\}\" python$",
                    dockerfile, re.M)
    assert run, "the Dockerfile runs install-from-source.sh on the mounted build context"
    context = run.group(1)
    assert run.group(2) == f"{context}/deploy/kuberay/install-from-source.sh" and run.group(3) == context
    assert f"ENV RAY_START_HOOK={HOOK}" in dockerfile


def test_tpu_slice_requests_match_topology():
    doc = CLUSTERS["tpu-v6e-slice.yaml"]
    groups = [(g, pod) for name, g, pod in _pods(doc) if name != "head"]
    assert groups
    for group, pod in groups:
        selector = pod["nodeSelector"]
        generation = GKE_TPU_GENERATION[selector["cloud.google.com/gke-tpu-accelerator"]]
        topology = selector["cloud.google.com/gke-tpu-topology"]
        chips = math.prod(int(x) for x in topology.split("x"))
        (container,) = pod["containers"]
        limits, requests = container["resources"]["limits"], container["resources"]["requests"]
        per_host = int(limits["google.com/tpu"])
        problems: list[str] = []
        layout = slice_layout(parse_accelerator_type(f"{generation}-{chips}"), parse_topology(topology),  # v6e: chips
                              HostFacts(chips_seen=per_host), problems)
        assert per_host == layout.chips_per_host == 4 and not problems
        assert int(requests["google.com/tpu"]) == per_host
        # what the TPU webhook validates: numOfHosts == chips / chips per host
        assert group["numOfHosts"] == layout.hosts == chips // per_host


@pytest.mark.parametrize("name, selector, gpus", [
    ("hgx-gpu.yaml", ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"), 8),
    ("eks-p5-h100.yaml", ("node.kubernetes.io/instance-type", "p5.48xlarge"), 8),
])
def test_gpu_nodes_request_every_gpu(name, selector, gpus):
    workers = [pod for group, _, pod in _pods(CLUSTERS[name]) if group != "head"]
    for pod in workers:
        (container,) = pod["containers"]
        assert pod["nodeSelector"][selector[0]] == selector[1]
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == gpus
        assert container["resources"]["requests"] == container["resources"]["limits"]


def test_trainium_requests_every_device_of_the_instance():
    from ray_accel_ext import skus

    workers = [pod for name, _, pod in _pods(CLUSTERS["trainium.yaml"]) if name != "head"]
    for pod in workers:
        instance = pod["nodeSelector"]["node.kubernetes.io/instance-type"]
        (container,) = pod["containers"]
        assert int(container["resources"]["limits"]["aws.amazon.com/neuron"]) == skus.machine_type(instance)[1]


def test_eks_topology_pods_have_the_permission():
    (account,) = DOCS["eks-service-account.yaml"]
    assert account["kind"] == "ServiceAccount"
    assert re.fullmatch(r"arn:aws:iam::\d{12}:role/[\w+=,.@-]+", account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"])
    policy = json.loads((DEPLOY / "eks-topology-iam-policy.json").read_text())
    allowed = {a for s in policy["Statement"] if s["Effect"] == "Allow"
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    # the one API call aws_topology makes (boto3 ec2 client: describe_instance_topology)
    assert "describe_instance_topology(" in Path(aws_topology.__file__).read_text()
    assert allowed == {"ec2:DescribeInstanceTopology"}
    users = 0
    for name, doc in CLUSTERS.items():
        for group, _, pod in _pods(doc):
            for c in pod["containers"]:
                if aws_topology.enabled(_env(c)):
                    users += 1
                    assert pod.get("serviceAccountName") == account["metadata"]["name"], f"{name}/{group}"
                    assert int(c["resources"]["limits"]["vpc.amazonaws.com/efa"]) > 0, f"{name}/{group}: EFA"
    assert users == 2  # the p5 and the trn2 workers
