"""deploy/kuberay against KubeRay v1.7.0: its RayCluster CRD, its command generation, bash.

* Every RayCluster manifest validates against the vendored CRD (``tests/data/kuberay``) with
  unknown and duplicated fields rejected (``tests/support/kuberay_crd.py``), and the validator is shown to
  reject such fields.
* The port of the operator's pod building (``tests/support/kuberay_operator.py``) reproduces KubeRay's own
  expectations: ``TestGenerateRayStartCommand`` and ``TestBuildPod`` in
  ``ray-operator/controllers/ray/common/pod_test.go`` at v1.7.0 (inputs and expected strings
  copied from there).
* Each Ray container's command, run under bash with the environment KubeRay gives it, hands
  ``ray start`` the arguments KubeRay meant, and a hard file limit below 65536 does not stop it.
  ``ray`` here is a recorder of its arguments on ``PATH``; tests/deploy/test_kuberay_start.py runs the
  same commands with real Ray.
"""

from __future__ import annotations

import copy
import json
import resource
import shlex
import subprocess
import sys
import textwrap

import pytest

from tests.support import kuberay_crd
from tests.support import kuberay_operator as op
from tests.support.paths import REPO

DEPLOY = REPO / "deploy" / "kuberay"
CLUSTERS = {p.name: d for p in sorted(DEPLOY.glob("*.yaml")) for d in kuberay_crd.load_documents(p)
            if d.get("kind") == "RayCluster"}
TPU = "tpu-v6e-slice.yaml"


def test_every_example_is_here():
    assert set(CLUSTERS) == {"tpu-v6e-slice.yaml", "hgx-gpu.yaml", "eks-p5-h100.yaml", "trainium.yaml"}


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_manifest_is_a_valid_raycluster(name):
    assert kuberay_crd.errors(CLUSTERS[name]) == []


def _worker_container(doc):
    return doc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["spec"]["workerGroupSpecs"][0].update(numOfHost=4), "'numOfHost' was unexpected"),
    (lambda d: _worker_container(d).update(envFrom2=[]), "'envFrom2' was unexpected"),
    (lambda d: _worker_container(d)["resources"].update(limit={}), "'limit' was unexpected"),
    (lambda d: _worker_container(d)["env"].append({"name": "RAY_START_HOOK", "value": "x"}), "duplicate entry"),
    (lambda d: _worker_container(d)["resources"]["limits"].update(cpu="8 cores"), "does not match"),
    (lambda d: d["spec"]["workerGroupSpecs"][0].pop("maxReplicas"), "'maxReplicas' is a required property"),
    (lambda d: d["metadata"].update(labelz={}), "'labelz' was unexpected"),
    (lambda d: d.update(kind="RayJob"), "'RayJob' is not one of ['RayCluster']"),
])
def test_validator_rejects_what_the_api_server_rejects(mutate, message):
    doc = copy.deepcopy(CLUSTERS[TPU])
    mutate(doc)
    assert any(message in e for e in kuberay_crd.errors(doc)), kuberay_crd.errors(doc)


def test_duplicated_yaml_keys_are_refused(tmp_path):
    bad = tmp_path / "dup.yaml"
    bad.write_text("apiVersion: ray.io/v1\nkind: RayCluster\nkind: RayCluster\n")
    with pytest.raises(Exception, match="duplicate field 'kind'"):
        kuberay_crd.load_documents(bad)


# -- the port against KubeRay's own test expectations (pod_test.go @ v1.7.0) ----------------------

GENERATE_CASES = [  # TestGenerateRayStartCommand: (node type, rayStartParams, limits, expected)
    (op.WORKER, {}, {"nvidia.com/gpu": "1"}, "ray start  --num-gpus=1 "),
    (op.WORKER, {}, {"nvidia.com/mig-2g.32gb": "1"}, "ray start  --num-gpus=1 "),
    (op.WORKER, {}, {"google.com/tpu": "4"}, """ray start  --resources='{"TPU":4}' """),
    (op.HEAD, {}, {"aws.amazon.com/neuroncore": "4"}, """ray start --head  --resources='{"neuron_cores":4}' """),
    (op.HEAD, {}, {"aws.amazon.com/neuroncore": "4", "nvidia.com/gpu": "1"},
     """ray start --head  --num-gpus=1  --resources='{"neuron_cores":4}' """),
    (op.HEAD, {}, {"google.com/tpu": "8", "aws.amazon.com/neuroncore": "4", "nvidia.com/gpu": "1"},
     """ray start --head  --num-gpus=1  --resources='{"neuron_cores":4}' """),
    (op.HEAD, {"resources": '"{"custom_resource":2}"'}, {"aws.amazon.com/neuroncore": "4"},
     """ray start --head  --resources='{"custom_resource":2,"neuron_cores":4}' """),
    (op.HEAD, {"resources": """'{"custom_resource":2,"neuron_cores":3}'"""}, {"aws.amazon.com/neuroncore": "4"},
     """ray start --head  --resources='{"custom_resource":2,"neuron_cores":3}' """),
    (op.HEAD, {"resources": """'{"custom_resource":2,"TPU":4}'"""}, {"google.com/tpu": "8"},
     """ray start --head  --resources='{"custom_resource":2,"TPU":4}' """),
    (op.HEAD, {"resources": "{"}, {"aws.amazon.com/neuroncore": "4"}, "ray start --head  --resources={ "),
    ("InvalidType", {}, {}, ""),
    (op.HEAD, {"include-log-monitor": "false"}, {}, "ray start --head  --include-log-monitor=false "),
    (op.HEAD, {"include-log-monitor": "true"}, {}, "ray start --head  --include-log-monitor=true "),
]


@pytest.mark.parametrize("node_type, params, limits, expected", GENERATE_CASES)
def test_generate_ray_start_command_as_kuberay(node_type, params, limits, expected):
    assert op.generate_ray_start_command(node_type, dict(params), {"limits": limits}) == expected


def test_build_pod_as_kuberay():
    """TestBuildPod's ``raycluster-sample`` (worker group ``small-group``)."""
    container = {"name": "ray-worker", "image": "repo/image:custom",
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "3"}},
                 "env": [{"name": "TEST_ENV_NAME", "value": "TEST_ENV_VALUE"}]}
    head = {"name": "ray-head", "image": "repo/image:custom",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}
    cluster = {"metadata": {"name": "raycluster-sample", "namespace": "default"}, "spec": {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}},
        "workerGroupSpecs": [{"groupName": "small-group", "replicas": 3, "minReplicas": 0, "maxReplicas": 10000,
                              "rayStartParams": {"port": "6379"}, "template": {"spec": {"containers": [container]}}}]}}
    pod = op.build_pod(cluster, "small-group")
    expected = ("ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --block --dashboard-agent-listen-port=52365 "
                "--memory=1073741824 --num-cpus=1 --num-gpus=3 --address=raycluster-sample-head-svc.default.svc.cluster.local:6379 "
                "--port=6379 --metrics-export-port=8080")
    assert pod.argv[:3] == ["/bin/bash", "-c", "--"]
    assert sorted(pod.argv[3].split()) == sorted(expected.split())  # splitAndSort, as the Go test compares
    assert pod.env["RAY_ADDRESS"] == "raycluster-sample-head-svc.default.svc.cluster.local:6379"
    assert pod.env["FQ_RAY_IP"] == "raycluster-sample-head-svc.default.svc.cluster.local"
    assert pod.env["RAY_IP"] == "raycluster-sample-head-svc" and pod.env["TEST_ENV_NAME"] == "TEST_ENV_VALUE"
    head_pod = op.build_pod(cluster, "headgroup")
    assert head_pod.env["RAY_ADDRESS"] == "127.0.0.1:6379"
    assert head_pod.env["RAY_USAGE_STATS_EXTRA_TAGS"] == "kuberay_version=v1.7.0;kuberay_crd=RayCluster"
    assert sorted(head_pod.argv[3].split()) == sorted(
        ("ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head --block --dashboard-agent-listen-port=52365 "
         "--memory=1073741824 --num-cpus=1 --metrics-export-port=8080 --dashboard-host=0.0.0.0").split())


@pytest.mark.parametrize("text, value", [("200", 200), ("1600Gi", 1600 * 2**30), ("500m", 1), ("1.5", 2),
                                         ("16Gi", 17179869184), ("1e3", 1000), ("2k", 2000)])
def test_quantity_value_rounds_up_like_kubernetes(text, value):
    assert op.quantity_value(text) == value


# -- the containers' commands under bash --------------------------------------------------------

RECORDER = textwrap.dedent("""\
    #!{python}
    import json, os, sys
    with open(os.environ["ARGV_RECORD"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
""")


@pytest.fixture
def recorder(tmp_path):
    """A ``ray`` (and ``ray-accel``) on PATH that only write down their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("ray", "ray-accel"):
        (bin_dir / name).write_text(RECORDER.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "argv.jsonl"

    def run(argv, env, hard_nofile=None):
        record.write_text("")
        full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **env, "ARGV_RECORD": str(record)}

        def limit():
            if hard_nofile is not None:
                soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard_nofile), min(hard, hard_nofile)))

        proc = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=60, preexec_fn=limit)
        calls = [json.loads(line) for line in record.read_text().splitlines()]
        return proc, calls

    return run


def _pods(name):
    doc = CLUSTERS[name]
    return [op.build_pod(doc, group, i) for group, i in op.pods_of(doc)]


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_each_container_hands_ray_start_what_kuberay_generated(name, recorder):
    for pod in _pods(name):
        proc, calls = recorder(pod.argv, pod.env, hard_nofile=4096)
        assert proc.returncode == 0, (pod.name, proc.stderr)
        starts = [c for c in calls if c[:1] == ["start"]]
        assert starts == [shlex.split(pod.ray_start_cmd)[1:]], (pod.name, calls)
        (argv,) = starts
        resources = [a for a in argv if a.startswith("--resources=")]
        for flag in resources:
            json.loads(flag.split("=", 1)[1])  # what `ray start` parses; quotes must be gone
        limits = pod.container["resources"]["limits"]
        if "google.com/tpu" in limits:
            assert resources == ['--resources={"TPU":4}']
        if "nvidia.com/gpu" in limits:
            assert f"--num-gpus={limits['nvidia.com/gpu']}" in argv
        assert "--block" in argv and ("--head" in argv) == (pod.node_type == op.HEAD)


def test_a_bare_variable_would_hand_ray_the_quotes(recorder):
    """What the old TPU command did: ``exec $KUBERAY_GEN_RAY_START_CMD`` splits words but keeps quotes."""
    pod = _pods(TPU)[1]
    proc, calls = recorder(["/bin/bash", "-c", "--", "exec $KUBERAY_GEN_RAY_START_CMD"], pod.env)
    (argv,) = calls
    assert "--resources='{\"TPU\":4}'" in argv  # Ray 2.60: "not a valid JSON string", exit 1


def test_a_strict_ulimit_would_abort_the_pod(recorder):
    pod = _pods(TPU)[1]
    proc, calls = recorder(["/bin/bash", "-c", "--", 'ulimit -n 65536 && eval "exec $KUBERAY_GEN_RAY_START_CMD"'],
                           pod.env, hard_nofile=4096)
    assert proc.returncode != 0 and calls == []


def test_the_custom_command_raises_the_file_limit_as_far_as_it_can(recorder):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    pod = _pods(TPU)[0]
    probe = pod.argv[3].replace('eval "exec $KUBERAY_GEN_RAY_START_CMD"', 'ray "$(ulimit -n)"')
    assert probe != pod.argv[3]
    _, calls = recorder(pod.argv[:3] + [probe], pod.env)
    assert calls[-1] == [str(65536 if hard == resource.RLIM_INFINITY else min(65536, hard))]
    _, calls = recorder(pod.argv[:3] + [probe], pod.env, hard_nofile=4096)
    assert calls[-1] == ["4096"]  # the hard limit, not an aborted pod
