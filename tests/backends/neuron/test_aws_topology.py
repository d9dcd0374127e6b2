"""Optional ``[aws]`` extra: EC2 DescribeInstanceTopology -> rayaccel.io/cluster, block, rack.

Served by the loopback fake EC2 API (``ray_accel_ext.testing.fake_ec2``) that boto3 reaches
through ``RAY_ACCEL_EC2_API_ENDPOINT`` with fake credentials; run through the public CLI on a copy
of the UltraServer snapshot that opts in with ``RAY_ACCEL_AWS_TOPOLOGY=1``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time

import pytest

from ray_accel_ext.hw.aws_topology import InstanceTopology
from ray_accel_ext.testing.fake_ec2 import FakeEc2Api
from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

pytest.importorskip("boto3")

NODE = HOSTS / "neuron" / "trn2u-48xlarge-node1"
INSTANCE = "i-0trn2u00000000001"  # the snapshot's IMDS instance-id
TOPOLOGY = {INSTANCE: {"InstanceType": "trn2u.48xlarge", "NetworkNodes": ["nn-7f1e", "nn-33a0", "nn-05c9"],
                       "CapacityBlockId": "cr-0123456789abcdef0", "AvailabilityZone": "us-east-2b",
                       "ZoneId": "use2-az2"}}


@pytest.fixture
def snap(tmp_path):
    copy = tmp_path / "node"
    shutil.copytree(NODE, copy, symlinks=True)
    (copy / "expected.json").unlink()
    (copy / "env.json").write_text(json.dumps({"RAY_ACCEL_AWS_TOPOLOGY": "1"}))
    return copy


@pytest.fixture
def no_profile(monkeypatch, tmp_path):
    """No credentials or config from this machine's home or environment leak into the tests."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


def run(capsys, monkeypatch, snap, api=None, command="ray-args", budget="10"):
    # A roomy budget: importing boto3 on a loaded test machine can take seconds.
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", budget)
    with serve_snapshot(snap) as env:
        env.update(api.env() if api is not None else {})
        for key, value in env.items():
            if key.startswith(("AWS_", "RAY_ACCEL_")):
                monkeypatch.setenv(key, value)
        assert main([command, "--root", str(snap), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_network_nodes_become_cluster_block_rack(snap, capsys, monkeypatch, no_profile):
    with FakeEc2Api(TOPOLOGY) as api:
        labels = run(capsys, monkeypatch, snap, api)["labels"]
    assert (labels["rayaccel.io/cluster"], labels["rayaccel.io/block"], labels["rayaccel.io/rack"]) == (
        "nn-7f1e", "nn-33a0", "nn-05c9")
    assert labels["rayaccel.io/discovery"] == "ok"
    assert labels["rayaccel.io/fabric-domain"] == "5f3a9c1e00b2d471"  # the UltraServer stays the fabric domain
    (request,) = api.requests
    assert request["Action"] == ["DescribeInstanceTopology"] and request["InstanceId.1"] == [INSTANCE]


def test_not_opted_in_makes_no_call(snap, capsys, monkeypatch, no_profile):
    (snap / "env.json").write_text("{}")
    with FakeEc2Api(TOPOLOGY) as api:
        labels = run(capsys, monkeypatch, snap, api)["labels"]
    assert api.requests == []
    assert "rayaccel.io/rack" not in labels and labels["rayaccel.io/discovery"] == "ok"


def test_instance_not_listed_yet_is_unknown_not_an_error(snap, capsys, monkeypatch, no_profile):
    with FakeEc2Api({}) as api:
        labels = run(capsys, monkeypatch, snap, api)["labels"]
    assert "rayaccel.io/rack" not in labels and labels["rayaccel.io/discovery"] == "ok"


@pytest.mark.parametrize("fault, reason", [
    ({"status": 403, "code": "UnauthorizedOperation"}, "ProviderServerError: DescribeInstanceTopology: UnauthorizedOperation"),
    ({"status": 503, "code": "RequestLimitExceeded"}, "ProviderRateLimited: DescribeInstanceTopology: RequestLimitExceeded"),
    ({"hang": True}, "ProviderTimeout: DescribeInstanceTopology: no answer"),
])
def test_api_errors_degrade_within_bounds(snap, capsys, monkeypatch, no_profile, fault, reason):
    with FakeEc2Api(TOPOLOGY, {"DescribeInstanceTopology": fault}) as api:
        started = time.monotonic()
        out = run(capsys, monkeypatch, snap, api, "discover")
        elapsed = time.monotonic() - started
    assert elapsed < 8.0  # one call, at most 1 s (AWS_API_TIMEOUT_S) plus start-up; generous margin
    assert out["problems"] == []
    (desc,) = out["descriptions"]
    assert desc["location"]["rack"] is None
    assert any(p.startswith(reason) for p in [q["message"] for q in desc["problems"]]), desc["problems"]
    assert desc["resource_quantity"] == 64


def test_without_credentials_the_feature_is_unavailable(snap, capsys, monkeypatch, no_profile):
    with FakeEc2Api(TOPOLOGY) as api:
        env = {k: v for k, v in api.env().items() if k == "RAY_ACCEL_EC2_API_ENDPOINT"}
        monkeypatch.setattr(api, "env", lambda: env)
        labels = run(capsys, monkeypatch, snap, api)["labels"]
    assert api.requests == []  # the credential chain ended at the (fake) IMDS: no role, no call
    assert "rayaccel.io/rack" not in labels and labels["rayaccel.io/discovery"] == "ok"


def test_without_boto3_the_opt_in_is_reported(snap, capsys, monkeypatch, no_profile):
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if the [aws] extra were not installed
    with FakeEc2Api(TOPOLOGY) as api:
        out = run(capsys, monkeypatch, snap, api, "discover")
    assert api.requests == []
    (desc,) = out["descriptions"]
    assert any("boto3 (the [aws] extra) is not installed" in p for p in [q["message"] for q in desc["problems"]])


@pytest.mark.parametrize("nodes, levels", [
    (("a", "b", "c"), ("a", "b", "c")),
    (("a", "b", "c", "d"), ("a", "c", "d")),  # p6-b200: 4 layers, block = the layer above the rack
    (("a", "b"), (None, "a", "b")),
    (("a",), (None, None, "a")),
    ((), (None, None, None)),
])
def test_network_node_levels(nodes, levels):
    assert InstanceTopology(instance_id="i-1", network_nodes=nodes).levels() == levels


def test_a_slow_lookup_is_abandoned_before_the_budget_ends(snap, capsys, monkeypatch, no_profile):
    # The answer comes long after the budget; the budget itself leaves the rest of discovery room
    # on a loaded machine (at 1.5 s the host checks alone overran it at load 12 on two cores).
    with FakeEc2Api(TOPOLOGY, {"DescribeInstanceTopology": {"delay_s": 60}}) as api:
        started = time.monotonic()
        out = run(capsys, monkeypatch, snap, api, "discover", budget="5")
        elapsed = time.monotonic() - started
    assert out["problems"] == []  # the backend finished: only the lookup was given up
    (desc,) = out["descriptions"]
    assert desc["resource_quantity"] == 64
    assert any(p.startswith(("DescribeInstanceTopology", "ProviderTimeout: DescribeInstanceTopology"))
               for p in [q["message"] for q in desc["problems"]]), desc["problems"]
    assert elapsed < 15.0  # bounded by the 5 s budget, never by the 60 s answer
