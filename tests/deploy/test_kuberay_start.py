"""Every KubeRay example starts: each Ray container's command, run as KubeRay would run it, with real Ray.

For each manifest under deploy/kuberay, one replica of every group (all ``numOfHosts`` hosts of a
TPU slice) is started on this machine: the pod's argv and environment are what KubeRay v1.7.0's
operator builds (``tests/support/kuberay_operator.py``: ``$KUBERAY_GEN_RAY_START_CMD`` with its flags and
quoting, ``RAY_ADDRESS``, ``RAY_NODE_TYPE_NAME``, ...), run under bash with a hard open-file limit
of 4096 (below the 65536 the commands ask for), head first, then the workers joining it. Each pod
stands on a host snapshot of its node type (``PODS`` below: the snapshot's README says which
machine), with its metadata served by loopback fakes, and on EKS the instance topology by the fake
EC2 API with static credentials standing for the service account's role.

What one machine needs that separate pods do not is added as ``rayStartParams``, as a user would
write them, so KubeRay's generation is untouched: loopback address, a free port each, a temp dir
each, a small object store, no dashboard, and the label ``sim.rayaccel.io/node=<pod>`` to tell
pods apart; the head Service's name is ``127.0.0.1``. The environment adds what the image has
(its Python on ``PATH``, this package importable), no worker prestart (KubeRay's ``--num-cpus``
would otherwise start hundreds of idle workers here) and a roomier discovery budget (boto3's import
with five nodes starting on two cores).

Each node must then show, in ``ray.nodes()``: its snapshot's golden resources and labels
(``expected.json``), the CPU and memory KubeRay derived from the container's limits, the node group
KubeRay named, and on EKS ``rayaccel.io/cluster``/``block``/``rack`` from the instance topology and
one EFA per requested ``vpc.amazonaws.com/efa``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_accel_ext.testing.cluster import NODE_NAME_LABEL, SimulatedCluster
from ray_accel_ext.testing.ports import free_port as _free_port
from tests.support import kuberay_crd
from tests.support import kuberay_operator as op
from tests.support.paths import HOSTS, REPO

pytestmark = pytest.mark.ray

DEPLOY = REPO / "deploy" / "kuberay"
HARD_NOFILE = 4096
START_TIMEOUT_S = 180.0

# pod (group, host index) -> the snapshot of the machine it runs on
PODS = {
    "tpu-v6e-slice.yaml": {
        ("headgroup", 0): HOSTS / "tpu" / "gce-gvnic-nvme-no-tpu",  # a GCE VM without TPU
        ("tpu-v6e-4x4", 0): HOSTS / "tpu" / "gke-v6e-4x4-worker0",
        ("tpu-v6e-4x4", 1): ("slice_worker", HOSTS / "tpu" / "gke-v6e-4x4-worker3", 1),
        ("tpu-v6e-4x4", 2): ("slice_worker", HOSTS / "tpu" / "gke-v6e-4x4-worker3", 2),
        ("tpu-v6e-4x4", 3): HOSTS / "tpu" / "gke-v6e-4x4-worker3",
    },
    "hgx-gpu.yaml": {
        ("headgroup", 0): HOSTS / "nvidia_gpu" / "no-accelerators",
        ("hgx-h100", 0): HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx",
    },
    "eks-p5-h100.yaml": {
        ("headgroup", 0): HOSTS / "neuron" / "no-neuron-m7i-2xlarge",  # an EC2 CPU instance
        ("p5-48xlarge", 0): HOSTS / "nvidia_gpu" / "p5-48xlarge",
    },
    "trainium.yaml": {
        ("headgroup", 0): HOSTS / "neuron" / "no-neuron-m7i-2xlarge",
        ("trn2-48xlarge", 0): HOSTS / "neuron" / "trn2-48xlarge",
    },
}
NETWORK_NODES = ("nn-top0", "nn-mid1", "nn-rack2")


def _tpu_builder():
    spec = importlib.util.spec_from_file_location("tpu_build_snapshots", HOSTS / "tpu" / "build_snapshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _snapshot(entry, tmp: Path) -> tuple[Path, dict]:
    """The snapshot directory and its expected Ray resources and labels."""
    if isinstance(entry, tuple):  # another worker of the same slice, derived from a GKE snapshot
        _, source, worker = entry
        path = _tpu_builder().slice_worker(source, tmp / f"{source.name}-as-w{worker}", worker=worker, name="slice-a")
        expected = json.loads((source / "expected.json").read_text())["ray"]
        expected["labels"].update({"ray.io/tpu-worker-id": str(worker), "rayaccel.io/fabric-worker": str(worker)})
        # The subslice blocks follow the derived worker's chips, not the source's: checked on the
        # recorded workers (their goldens) and against Ray's own cases in
        # tests/backends/tpu/test_subslice_labels.py.
        expected["labels"] = {k: v for k, v in expected["labels"].items() if not k.startswith("ray.io/tpu-subslice-")}
        return path, expected
    return entry, json.loads((entry / "expected.json").read_text())["ray"]


def _console_scripts(bin_dir: Path) -> Path:
    """This package's console scripts, written as pip writes them from pyproject.toml, so the pods
    run this checkout's ``ray-accel`` as an image built from it would."""
    import tomllib

    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, func = target.split(":")
        (bin_dir / name).write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _hard_nofile_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, HARD_NOFILE), min(hard, HARD_NOFILE)))
    os.setsid()  # what SimulatedCluster's start_new_session does, which preexec_fn replaces


class KubeRayPods(SimulatedCluster):
    """Pods started with the argv and environment KubeRay builds (see the module doc)."""

    def __init__(self, doc: dict, ec2_env: dict[str, str]) -> None:
        super().__init__(object_store_mb=80)
        self.bin = _console_scripts(self.root / "bin")
        self.doc = doc
        self.ec2_env = ec2_env
        self.pods: dict[str, op.Pod] = {}

    def _loopback_params(self, group: str, pod_name: str, temp_dir: Path) -> dict[str, dict[str, str]]:
        common = {
            "node-ip-address": "127.0.0.1", "temp-dir": str(temp_dir),
            "object-store-memory": str(self.object_store_bytes), "disable-usage-stats": "true",
            "dashboard-agent-listen-port": str(_free_port()), "dashboard-agent-grpc-port": str(_free_port()),
            "metrics-export-port": str(_free_port()), "runtime-env-agent-port": str(_free_port()),
            "node-manager-port": "0", "object-manager-port": "0", "min-worker-port": "0", "max-worker-port": "0",
            "labels": f"{NODE_NAME_LABEL}={pod_name}",
        }
        if group == "headgroup":
            return {group: {**common, "port": str(self.port), "include-dashboard": "false",
                            "ray-client-server-port": str(_free_port())}}
        # a worker dials the head's port (KubeRay reads it from the head group's rayStartParams)
        return {"headgroup": {"port": str(self.port)}, group: {**common, "include-log-monitor": "false"}}

    def start_pod(self, group: str, index: int, snapshot: Path) -> op.Pod:
        node = self._prepare(snapshot, f"{group}-{index}", None)
        name = op.pod_name_of(self.doc, group, index)
        pod = op.build_pod(self.doc, group, index, fqdn="127.0.0.1",
                           extra_params=self._loopback_params(group, name, node.temp_dir))
        env = {**node.env, **pod.env, **self.ec2_env,
               "PATH": f"{self.bin}:{Path(sys.executable).parent}:{node.env.get('PATH', '/usr/bin:/bin')}",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), node.env.get("PYTHONPATH")])),
               "RAY_enable_worker_prestart": "false", "RAY_prestart_worker_first_driver": "false",
               "RAY_ACCEL_BUDGET_S": "20"}
        node.env, node.name = env, name
        self.nodes.append(node)
        self.pods[name] = pod
        with open(node.log_path, "wb") as log:
            node.process = subprocess.Popen(pod.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=node.temp_dir, preexec_fn=_hard_nofile_limit)
        return pod


def _ec2_api(name: str):
    from ray_accel_ext.testing.fake_ec2 import FakeEc2Api

    instances = {}
    for entry in PODS[name].values():
        meta = entry / "metadata.json" if isinstance(entry, Path) else None
        if meta is not None and meta.is_file():
            ec2 = json.loads(meta.read_text()).get("ec2") or {}
            if "instance-id" in ec2:
                instances[ec2["instance-id"]] = {"InstanceType": ec2.get("instance-type"), "NetworkNodes": list(NETWORK_NODES)}
    return FakeEc2Api(instances)


@pytest.mark.parametrize("name", sorted(PODS))
def test_every_pod_starts_and_shows_its_accelerator(name, tmp_path):
    (doc,) = [d for d in kuberay_crd.load_documents(DEPLOY / name) if d.get("kind") == "RayCluster"]
    assert set(PODS[name]) == set(op.pods_of(doc)), "every pod of the manifest has a snapshot here"
    aws = any(e.get("name") == "RAY_ACCEL_AWS_TOPOLOGY" for g in doc["spec"]["workerGroupSpecs"]
              for e in g["template"]["spec"]["containers"][0].get("env", []))
    if aws:
        pytest.importorskip("boto3")
    api = _ec2_api(name).start() if aws else None
    ec2_env = api.env() if api is not None else {}
    ec2_env.update({"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none")}
                   if aws else {})
    cluster = KubeRayPods(doc, ec2_env)
    expected: dict[str, dict] = {}
    try:
        for (group, index), entry in sorted(PODS[name].items(), key=lambda kv: kv[0][0] != "headgroup"):
            snapshot, expected_spec = _snapshot(entry, tmp_path)
            pod = cluster.start_pod(group, index, snapshot)
            expected[pod.name] = expected_spec
            if group == "headgroup":
                cluster._wait_ready(cluster.nodes[-1], time.monotonic() + START_TIMEOUT_S)
        deadline = time.monotonic() + START_TIMEOUT_S
        for node in cluster.nodes[1:]:
            cluster._wait_ready(node, deadline)
        cluster.connect(logging_level="ERROR", log_to_driver=False)
        import ray

        by_name = {n["Labels"].get(NODE_NAME_LABEL): n for n in ray.nodes() if n["Alive"]}
        assert set(by_name) == set(cluster.pods), by_name.keys()
        for pod_name, pod in cluster.pods.items():
            _check_node(pod, by_name[pod_name], expected[pod_name], aws)
        for node in cluster.nodes:
            assert "Traceback" not in node.log(), node.log()[-3000:]
    except BaseException:
        for node in cluster.nodes:
            print(f"==== {node.name}\n{node.log()[-3000:]}")
        raise
    finally:
        cluster.shutdown()
        if api is not None:
            api.stop()


def _check_node(pod: op.Pod, node: dict, expected: dict, aws: bool) -> None:
    where = pod.name
    resources, labels = node["Resources"], node["Labels"]
    for key, value in expected["resources"].items():
        assert resources.get(key) == value, (where, key, resources)
    for key, value in expected["labels"].items():
        assert labels.get(key) == value, (where, key, labels.get(key), value)
    if not expected["resources"]:
        assert not {"GPU", "TPU", "neuron_cores"} & set(resources), (where, resources)
    limits = pod.container["resources"]["limits"]
    assert resources["CPU"] == op.quantity_value(limits["cpu"]), where  # KubeRay's --num-cpus
    assert resources["memory"] == op.quantity_value(limits["memory"]), where  # KubeRay's --memory
    assert labels.get("ray.io/node-group") == pod.group, where  # from KubeRay's RAY_NODE_TYPE_NAME
    if aws and pod.node_type == op.WORKER:
        assert (labels.get("rayaccel.io/cluster"), labels.get("rayaccel.io/block"), labels.get("rayaccel.io/rack")) \
            == NETWORK_NODES, (where, labels)
    if "vpc.amazonaws.com/efa" in limits:
        assert labels["rayaccel.io/rdma-nics"] == str(limits["vpc.amazonaws.com/efa"]), "every EFA of the node requested"
