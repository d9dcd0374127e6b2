"""Slice membership from the Cloud TPU API (``[gcp]`` extra) when metadata lacks it.

A GCE v5p-16 worker whose metadata has no ``instance-id``, no ``NODE_ID`` in ``tpu-env`` and no
``worker-network-endpoints`` (so neither Ray nor metadata alone can name the slice or list its
hosts). ``google-cloud-tpu`` talks REST with anonymous credentials to a loopback fake
(``ray_accel_ext.testing.fake_tpu_api``) named by ``RAY_ACCEL_TPU_API_ENDPOINT``. Everything runs
through the CLI.
"""

from __future__ import annotations

import json
import shutil
import sys
import time

import pytest

from ray_accel_ext.testing.fake_tpu_api import FakeTpuApi
from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

pytest.importorskip("google.cloud.tpu_v2")  # the [gcp] extra; imported here so import time is not timed

BUDGET_S = 3.0
MARGIN_S = 3.0
PARENT = "projects/example-project/locations/us-east5-a"
NODE = {
    "name": f"{PARENT}/nodes/v5p-slice-b",
    "acceleratorType": "v5p-16",
    "acceleratorConfig": {"type": "V5P", "topology": "2x2x2"},
    "state": "READY",
    "health": "HEALTHY",
    "networkEndpoints": [{"ipAddress": "10.130.0.12", "port": 8470}, {"ipAddress": "10.130.0.13", "port": 8470}],
}
OTHER = {**NODE, "name": f"{PARENT}/nodes/someone-else", "networkEndpoints": [{"ipAddress": "10.130.0.99"}]}


@pytest.fixture
def sparse_snapshot(tmp_path):
    dest = tmp_path / "snap"
    shutil.copytree(HOSTS / "tpu" / "gce-v5p-16-worker1", dest, symlinks=True)
    spec = json.loads((dest / "metadata.json").read_text())
    gce = spec["gce"]
    del gce["instance/attributes/instance-id"]
    del gce["instance/attributes/worker-network-endpoints"]
    gce["instance/attributes/tpu-env"] = "".join(
        line + "\n" for line in gce["instance/attributes/tpu-env"].splitlines() if not line.startswith("NODE_ID")
    )
    (dest / "metadata.json").write_text(json.dumps(spec))
    return dest


def _discover(snapshot, api, capsys, monkeypatch):
    with serve_snapshot(snapshot) as env:
        for key, value in env.items():
            if key.startswith(("GCE_", "RAY_ACCEL_")):
                monkeypatch.setenv(key, value)
        if api is not None:
            monkeypatch.setenv("RAY_ACCEL_TPU_API_ENDPOINT", api.endpoint)
        started = time.monotonic()
        assert main(["discover", "--root", str(snapshot), "--format", "json"]) == 0
        elapsed = time.monotonic() - started
        inventory = json.loads(capsys.readouterr().out)
        if api is not None:
            api.first_run_requests = list(api.requests)
        assert main(["ray-args", "--root", str(snapshot), "--format", "json"]) == 0
        labels = json.loads(capsys.readouterr().out)["labels"]
    (desc,) = inventory["descriptions"]
    return desc, labels, elapsed


def test_api_names_the_slice_and_lists_its_hosts(sparse_snapshot, capsys, monkeypatch):
    with FakeTpuApi([OTHER, NODE]) as api:
        desc, labels, _ = _discover(sparse_snapshot, api, capsys, monkeypatch)
        assert api.requests[0] == f"{PARENT}/nodes"  # found by this host's IP among the zone's nodes
    fabric = desc["fabric"]
    assert fabric["id"] == "v5p-slice-b" and fabric["worker"] == 1 and fabric["hosts"] == 2
    assert fabric["hostnames"] == ["10.130.0.12", "10.130.0.13"]
    assert desc["attributes"]["tpu.rayaccel.io/slice-state"] == "READY"
    assert desc["attributes"]["tpu.rayaccel.io/slice-name-source"] == "cloud-tpu-api"
    assert desc["problems"] == []
    assert labels["ray.io/tpu-slice-name"] == "v5p-slice-b" and labels["rayaccel.io/discovery"] == "ok"


def test_without_the_api_the_slice_stays_unnamed(sparse_snapshot, capsys, monkeypatch):
    desc, labels, _ = _discover(sparse_snapshot, None, capsys, monkeypatch)
    assert desc["fabric"] is None and "ray.io/tpu-slice-name" not in labels
    assert any("slice name unknown" in p for p in [q["message"] for q in desc["problems"]])


@pytest.mark.parametrize(
    "fault,requests,message",
    [
        ({"status": 429, "retry_after": "0.5"}, 3, "HTTP 429, Retry-After 0.5s after 3 attempt(s)"),
        ({"status": 429, "retry_after": "60"}, 1, "HTTP 429, Retry-After 60s after 1 attempt(s)"),
        ({"status": 500}, 3, "HTTP 500 after 3 attempt(s)"),
        ({"status": 503, "retry_after": "0.2"}, 3, "HTTP 503, Retry-After 0.2s after 3 attempt(s)"),
        ({"hang": True}, 1, "no answer within"),
    ],
    ids=["429-honoured", "429-beyond-budget", "500", "503", "hang"],
)
def test_api_errors_are_provider_errors_never_hangs(sparse_snapshot, fault, requests, message, capsys, monkeypatch):
    with FakeTpuApi([NODE], faults={"*": fault}) as api:
        desc, labels, elapsed = _discover(sparse_snapshot, api, capsys, monkeypatch)
        assert len(api.first_run_requests) == requests
    assert any(p.startswith("Cloud TPU API: ProviderError") and message in p for p in [q["message"] for q in desc["problems"]]), desc["problems"]
    assert labels["rayaccel.io/discovery"] == "degraded"
    assert elapsed < BUDGET_S + MARGIN_S
    if fault.get("retry_after") == "0.5":
        assert elapsed >= 1.0  # waited Retry-After twice


def test_retry_after_then_success(sparse_snapshot, capsys, monkeypatch):
    with FakeTpuApi([NODE], faults={"*": {"status": 429, "retry_after": "0.3", "times": 1}}) as api:
        desc, labels, elapsed = _discover(sparse_snapshot, api, capsys, monkeypatch)
    assert elapsed >= 0.3 and desc["fabric"]["id"] == "v5p-slice-b" and labels["rayaccel.io/discovery"] == "ok"


def test_missing_extra_is_silently_unavailable(sparse_snapshot, capsys, monkeypatch):
    """Without google-cloud-tpu (an import that fails) the API is simply not asked."""
    monkeypatch.setitem(sys.modules, "google.cloud.tpu_v2", None)
    with FakeTpuApi([NODE]) as api:
        desc, _, _ = _discover(sparse_snapshot, api, capsys, monkeypatch)
        assert api.requests == []
    assert not any("Cloud TPU API" in p for p in [q["message"] for q in desc["problems"]])
    assert any("slice name unknown" in p for p in [q["message"] for q in desc["problems"]])
