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


def _boot(snap, boot_id: str) -> None:
    path = snap / "rootfs" / "proc" / "sys" / "kernel" / "random"
    path.mkdir(parents=True, exist_ok=True)
    (path / "boot_id").write_text(boot_id + "\n")


def test_a_restart_on_the_same_boot_asks_ec2_nothing(ray_args, tmp_path, monkeypatch):
    """The answer is kept per instance and boot: a second node start on the same boot makes no
    call (its labels the same); a new boot asks again."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAY_ACCEL_CACHE_DIR", str(cache))
    snap = tmp_path / "p5"
    with FakeEc2Api(TOPOLOGY) as api:
        _boot(snap, "4b0d1f7e-0c55-4d7a-9a55-3f5f1c2f0a11")
        first = ray_args(api)["labels"]
        second = ray_args(api)["labels"]
        assert len(api.requests) == 1
        assert second == first and first["rayaccel.io/rack"] == "nn-5e6f"
        assert oct(cache.stat().st_mode & 0o777) == "0o700"
        _boot(snap, "0f7c1e2d-9a1b-4c3d-8e5f-6a7b8c9d0e1f")  # stopped and started: maybe other hardware
        assert ray_args(api)["labels"]["rayaccel.io/rack"] == "nn-5e6f"
        assert len(api.requests) == 2


def test_a_cache_others_may_write_is_not_trusted(ray_args, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAY_ACCEL_CACHE_DIR", str(cache))
    _boot(tmp_path / "p5", "4b0d1f7e-0c55-4d7a-9a55-3f5f1c2f0a11")
    with FakeEc2Api(TOPOLOGY) as api:
        ray_args(api)
        cache.chmod(0o777)
        for kept in cache.iterdir():  # another user's forged answer
            kept.write_text(kept.read_text().replace("nn-5e6f", "forged"))
        labels = ray_args(api)["labels"]
    assert labels["rayaccel.io/rack"] == "nn-5e6f" and len(api.requests) == 2
