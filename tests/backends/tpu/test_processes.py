"""GKE TPU7x pods with two TPU containers (the KubeRay TPU webhook's variables) and KubeRay's
multi-host indices, through the public entry points (``ray-accel ray-args``)."""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.problems import codes
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

from .test_backend import BUILD

PAIR = [HOSTS / "tpu" / f"gke-tpu7x-16-two-container-c{c}" for c in (0, 1)]


def _spec(root, capsys, monkeypatch) -> dict:
    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    assert main(["ray-args", "--root", str(root), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


KNOWN = {c.code for c in codes()}


def _problems(root, capsys, monkeypatch) -> list[str]:
    assert main(["discover", "--root", str(root), "--format", "json"]) == 0
    inv = json.loads(capsys.readouterr().out)
    problems = [p for d in inv["descriptions"] for p in d["problems"]]
    assert all(p["code"] in KNOWN for p in problems), problems  # every one coded (problems.py)
    return [p["message"] for p in problems]


def test_two_container_pod_is_two_workers_of_a_four_worker_slice(capsys, monkeypatch):
    """The webhook's TPU_WORKER_ID = host x 2 + container and its 4 TPU_PROCESS_ADDRESSES: each
    container is a worker, as Ray's manager makes it; 2 pod hostnames are no disagreement."""
    specs = [_spec(root, capsys, monkeypatch) for root in PAIR]
    for container, spec in enumerate(specs):
        labels, res = spec["labels"], spec["resources"]
        assert labels["rayaccel.io/discovery"] == "ok"
        assert labels["ray.io/tpu-worker-id"] == str(container)
        assert (labels["ray.io/tpu-slice-name"], labels["ray.io/tpu-pod-type"]) == ("tpu7x-group-0", "v7x-16")
        assert labels["rayaccel.io/fabric-hosts"] == "4"  # 8 chips / 2 per container
        assert labels["tpu.rayaccel.io/processes-per-host"] == "2"
        assert labels["tpu.rayaccel.io/process-index"] == str(container)
        assert res["TPU"] == 2 and res["tpu7x-group-0"] == 1
        assert ("TPU-v7x-16-head" in res) == (container == 0)
    for root in PAIR:
        assert not any("worker hostnames" in p for p in _problems(root, capsys, monkeypatch))


def test_host_one_containers_are_workers_two_and_three(tmp_path, capsys, monkeypatch):
    for container in (0, 1):
        root = BUILD.slice_container(tmp_path / f"h1c{container}", host=1, container=container)
        labels = _spec(root, capsys, monkeypatch)["labels"]
        assert labels["ray.io/tpu-worker-id"] == str(2 + container) and labels["rayaccel.io/discovery"] == "ok"


@pytest.mark.parametrize("kuberay, words", [
    ({"KUBERAY_REPLICA_HOST_INDEX": "1"}, "ray.io/replica-host-index=1 but TPU_WORKER_ID=1 is host 0"),
    ({"KUBERAY_WORKER_GROUP_REPLICA_INDEX": "3"}, "ray.io/worker-group-replica-index=3 but TPU_NAME='tpu7x-group-0'"),
    ({"MEGASCALE_SLICE_ID": "2"}, "ray.io/worker-group-replica-index=0 but MEGASCALE_SLICE_ID=2"),
])
def test_kuberay_indices_that_disagree_with_the_tpu_variables_are_problems(tmp_path, capsys, monkeypatch,
                                                                          kuberay, words):
    root = BUILD.slice_container(tmp_path / "c1", host=0, container=1, kuberay=kuberay)
    spec = _spec(root, capsys, monkeypatch)
    assert spec["labels"]["rayaccel.io/discovery"] == "degraded"
    assert any("KubeRay index mismatch" in p and words in p for p in _problems(root, capsys, monkeypatch))
    assert main(["discover", "--root", str(root), "--format", "json"]) == 0
    coded = [p for d in json.loads(capsys.readouterr().out)["descriptions"] for p in d["problems"]]
    assert any(p["code"] == "kuberay-index-mismatch" for p in coded)


def test_kuberay_indices_name_a_multi_host_slice_without_tpu_variables(tmp_path, capsys, monkeypatch):
    """A v6e 4x4 worker pod whose manifest passes KubeRay's labels but no TPU_WORKER_ID/TPU_NAME:
    the host index is the worker id, the replica name the slice name."""
    root = BUILD.slice_worker(HOSTS / "tpu" / "gke-v6e-4x4-worker3", tmp_path / "w2", worker=2, name="s")
    env = json.loads((root / "env.json").read_text())
    for key in ("TPU_WORKER_ID", "TPU_NAME"):
        env.pop(key)
    env.update(KUBERAY_REPLICA_HOST_INDEX="2", KUBERAY_WORKER_GROUP_REPLICA_INDEX="0",
               KUBERAY_WORKER_GROUP_REPLICA_NAME="v6e-group-af03de")
    (root / "env.json").write_text(json.dumps(env))
    labels = _spec(root, capsys, monkeypatch)["labels"]
    assert labels["ray.io/tpu-worker-id"] == "2" and labels["ray.io/tpu-slice-name"] == "v6e-group-af03de"
    assert labels["tpu.rayaccel.io/slice-name-source"] == "kuberay" and labels["rayaccel.io/discovery"] == "ok"


def test_kuberay_indices_from_a_downward_api_labels_file(tmp_path, capsys, monkeypatch):
    """The pod's labels mounted as a downward-API volume (``key="value"`` lines): same checks."""
    root = BUILD.slice_container(tmp_path / "c0", host=0, container=0)
    env = json.loads((root / "env.json").read_text())
    for key in ("KUBERAY_WORKER_GROUP_REPLICA_INDEX", "KUBERAY_REPLICA_HOST_INDEX"):
        env.pop(key)
    (root / "env.json").write_text(json.dumps(env))
    labels = root / "rootfs/etc/podinfo/labels"
    labels.parent.mkdir(parents=True)
    labels.write_text('ray.io/cluster="rc-tpu7x"\nray.io/replica-host-index="1"\nray.io/worker-group-replica-index="0"\n')
    assert any("ray.io/replica-host-index=1 but TPU_WORKER_ID=0" in p for p in _problems(root, capsys, monkeypatch))
    labels.write_text('ray.io/replica-host-index="0"\nray.io/worker-group-replica-index="0"\n')
    assert _spec(root, capsys, monkeypatch)["labels"]["rayaccel.io/discovery"] == "ok"
