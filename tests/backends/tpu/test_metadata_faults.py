"""A GCE metadata server that hangs, rate-limits, fails, truncates its answer or serves a broken
``tpu-env``.

The bound: TPU discovery ends within the discovery budget (``RAY_ACCEL_BUDGET_S``, default 3 s;
the whole run is also cut there by ``discovery.discover``). Discovery makes one metadata request
(the ``instance/`` directory, recursively) with its own timeout (``RAY_ACCEL_METADATA_TIMEOUT_S``,
0.5 s) clamped to what is left of the budget; 429/5xx are retried at most twice and
``Retry-After`` is waited only while it fits in the budget; a failed read is not repeated for the
location or the Cloud TPU API in the same run. The tests allow a
generous margin over the budget (it is a bound, not a timing target). In every case the node is
``rayaccel.io/discovery=degraded`` and the cause is named.

One fault goes through a real ``ray start`` with our hook; the others through the CLI.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

BUDGET_S = 3.0  # DEFAULT_BUDGET_S
MARGIN_S = 3.0  # generous: a loaded 2-core CI box, thread start-up, Python imports
V5P = HOSTS / "tpu" / "gce-v5p-16-worker1"
TPU_ENV = "instance/attributes/tpu-env"
INSTANCE = "instance/"  # the one recursive read

FAULTS = {
    "hang": ({"*": {"hang": True}}, "MetadataTimeout"),
    "429-retry-after": ({"*": {"status": 429, "retry_after": "1"}}, "MetadataRateLimited"),
    "429-retry-after-beyond-budget": ({"*": {"status": 429, "retry_after": "30"}}, "Retry-After 30s"),
    "500": ({"*": {"status": 500}}, "HTTP 500"),
    "503-then-ok": ({"*": {"status": 503, "times": 1}}, None),
    "answer-cut-mid-body": ({INSTANCE: {"truncate": 60}}, "truncated answer: 60 of"),
    "tpu-env-short-body": ({TPU_ENV: {"body": "ACCELERATOR_TYPE: 'v5p-16'\nNODE_ID: 'v5p-slice-b'\nTOPOLOGY: '2x2"}}, "truncated?"),
}


def _faulty_copy(tmp_path, faults):
    dest = tmp_path / "snap"
    shutil.copytree(V5P, dest, symlinks=True)
    spec = json.loads((dest / "metadata.json").read_text())
    spec["gce_faults"] = faults
    (dest / "metadata.json").write_text(json.dumps(spec))
    return dest


def _cli(argv, env, capsys, monkeypatch):
    for key, value in env.items():
        if key.startswith(("GCE_", "RAY_ACCEL_")):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_ACCEL_TPU_API_ENDPOINT", raising=False)
    started = time.monotonic()
    assert main(argv) == 0
    return time.monotonic() - started, capsys.readouterr().out


@pytest.mark.parametrize("case", list(FAULTS))
def test_discovery_is_bounded_and_names_the_cause(case, tmp_path, capsys, monkeypatch):
    faults, cause = FAULTS[case]
    snap = _faulty_copy(tmp_path, faults)
    with serve_snapshot(snap) as env:
        elapsed, out = _cli(["ray-args", "--root", str(snap), "--format", "json"], env, capsys, monkeypatch)
        _, table = _cli(["discover", "--root", str(snap)], env, capsys, monkeypatch)
    labels = json.loads(out)["labels"]
    assert elapsed < BUDGET_S + MARGIN_S, f"{case}: discovery took {elapsed:.1f}s"
    # The chips never depend on metadata.
    assert labels["rayaccel.io/count"] == "4" and labels["rayaccel.io/generation"] == "v5p"
    if cause is None:
        # A transient 503 is retried and the node is described completely.
        assert labels["rayaccel.io/discovery"] == "ok", table
        assert labels["ray.io/tpu-slice-name"] == "4723019483750192837"
        return
    assert labels["rayaccel.io/discovery"] == "degraded"
    assert cause in table, table  # `ray-accel discover` lists the reasons


def test_rate_limit_retry_after_is_honoured_within_the_budget(tmp_path, capsys, monkeypatch):
    """Retry-After 1 s: the client waits it (twice), then gives up; later keys are not asked."""
    snap = _faulty_copy(tmp_path, {"*": {"status": 429, "retry_after": "1"}})
    with serve_snapshot(snap) as env:
        elapsed, _ = _cli(["ray-args", "--root", str(snap), "--format", "json"], env, capsys, monkeypatch)
    assert 2.0 <= elapsed < BUDGET_S + MARGIN_S


def test_broken_tpu_env_keeps_what_other_keys_said(tmp_path, capsys, monkeypatch):
    snap = _faulty_copy(tmp_path, {TPU_ENV: {"body": "ACCELERATOR_TYPE: 'v5p-16'\nTOPOLOGY: '2x2"}})
    with serve_snapshot(snap) as env:
        _, out = _cli(["ray-args", "--root", str(snap), "--format", "json"], env, capsys, monkeypatch)
    labels = json.loads(out)["labels"]
    # accelerator-type, instance-id and agent-worker-number still answered: the slice is known,
    # only its topology (from tpu-env's cut last line) is missing.
    assert labels["ray.io/tpu-slice-name"] == "4723019483750192837"
    assert labels["ray.io/tpu-pod-type"] == "v5p-16" and labels["ray.io/tpu-worker-id"] == "1"
    assert "ray.io/tpu-topology" not in labels
    assert labels["rayaccel.io/discovery"] == "degraded"


@pytest.mark.ray
def test_ray_start_through_the_hook_with_a_hanging_metadata_server():
    """A real `ray start` on the hanging-metadata snapshot: up, degraded, cause in its log, and Ray's
    own TPU manager (which would block on the server without a timeout) did not ask it."""
    import ray

    from ray_accel_ext.testing.cluster import SimulatedCluster

    with SimulatedCluster() as cluster:
        node = cluster.add_node(HOSTS / "tpu" / "gce-v6e-4-metadata-timeout", name="hang", num_cpus=1)
        cluster.connect()
        info = cluster.ray_node("hang")
        assert info["Labels"]["rayaccel.io/discovery"] == "degraded"
        assert info["Resources"]["TPU"] == 4
        # Ray's manager was handed stand-ins (it would otherwise wait on the server forever): it
        # labels the slice name it was given, the host's own, and nothing it cannot know.
        tpu_labels = {k: v for k, v in info["Labels"].items() if k.startswith("ray.io/tpu-")}
        assert tpu_labels == {"ray.io/tpu-slice-name": "t1v-n-77aa0e11-w-0"}, tpu_labels
        log = node.log()
        assert "MetadataTimeout" in log and "accelerator-type" in log, log[-3000:]
        # the JSON after the log prefix, whose format is Ray's when `ray start` set up logging (2.55)
        event = next(json.loads(line[line.index("{"):]) for line in log.splitlines()
                     if '"event": "discovery"' in line)
        assert event["outcome"] == "degraded" and event["elapsed_ms"] < (BUDGET_S + MARGIN_S) * 1000
        assert ray.is_initialized()
