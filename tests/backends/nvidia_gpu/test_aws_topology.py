"""EC2 instance topology on a GPU host (p5.48xlarge): the same opt-in and labels as on Neuron hosts.

``DescribeInstanceTopology`` covers P4d/P5/P5e/P5en/P6 as well as Trn/Inf (AWS "Amazon EC2
instance topology", supported instance types); the loopback fake EC2 API
(``ray_accel_ext.testing.fake_ec2``) answers it, reached by boto3 through
``RAY_ACCEL_EC2_API_ENDPOINT`` with fake credentials, through the public CLI.
"""

from __future__ import annotations

import json
import shutil

import pytest

from ray_accel_ext.testing.fake_ec2 import FakeEc2Api
from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

pytest.importorskip("boto3")

P5 = HOSTS / "nvidia_gpu" / "p5-48xlarge"
INSTANCE = json.loads((P5 / "metadata.json").read_text())["ec2"]["instance-id"]
TOPOLOGY = {INSTANCE: {"InstanceType": "p5.48xlarge", "NetworkNodes": ["nn-1a2b", "nn-3c4d", "nn-5e6f"],
                       "AvailabilityZone": "us-east-2a", "ZoneId": "use2-az1"}}


@pytest.fixture
def ray_args(tmp_path, capsys, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", "10")  # boto3's import on a loaded machine
    snap = tmp_path / "p5"
    shutil.copytree(P5, snap, symlinks=True)

    def run(api, *, opt_in=True):
        monkeypatch.setenv("RAY_ACCEL_AWS_TOPOLOGY", "1" if opt_in else "0")
        with serve_snapshot(snap) as env:
            for key, value in {**env, **api.env()}.items():
                if key.startswith(("AWS_", "RAY_ACCEL_EC2")):
                    monkeypatch.setenv(key, value)
            assert main(["ray-args", "--root", str(snap), "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)

    return run


def test_p5_gets_cluster_block_rack(ray_args):
    with FakeEc2Api(TOPOLOGY) as api:
        spec = ray_args(api)
    labels = spec["labels"]
    assert (labels["rayaccel.io/cluster"], labels["rayaccel.io/block"], labels["rayaccel.io/rack"]) == (
        "nn-1a2b", "nn-3c4d", "nn-5e6f")
    assert labels["rayaccel.io/discovery"] == "ok" and spec["resources"]["GPU"] == 8
    (request,) = api.requests
    assert request["InstanceId.1"] == [INSTANCE]


def test_p5_without_the_opt_in_makes_no_call(ray_args):
    with FakeEc2Api(TOPOLOGY) as api:
        labels = ray_args(api, opt_in=False)["labels"]
    assert api.requests == [] and "rayaccel.io/rack" not in labels
