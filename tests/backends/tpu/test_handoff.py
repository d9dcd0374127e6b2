"""What the start hook hands on (ray_accel_ext.node.handoff), through the hook itself:

* Ray 2.60's own TPU manager, run next on the same snapshot with what the hook wrote into the
  environment, asks the metadata server nothing and labels the node exactly as we do;
* with a server that never answers, the hook ends within its budget and Ray's manager, given the
  stand-ins, finishes too (it would otherwise wait forever);
* worker processes read the node's description the hook published and ask nothing; without it
  they describe the node from its files alone, still asking nothing.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

pytest.importorskip("ray")  # the hook runs with Ray's own RayParams

from ray._private.parameter import RayParams

from ray_accel_ext.model import NodeInventory
from ray_accel_ext.node.handoff import NODE_INVENTORY_ENV, RAY_NONE
from ray_accel_ext.ray_hook import start_hook
from ray_accel_ext.testing.fake_metadata import MetadataServers
from ray_accel_ext.testing.snapshots import metadata_spec
from ray_accel_ext.worker import node_inventory
from tests.support.paths import HOSTS
from tests.support.ray_tpu import ray_tpu_node_spec
from tests.support.tpu_parity_cases import cases

TPU = HOSTS / "tpu"
RAY_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID", "TPU_TOPOLOGY")
# Partial and malformed identity off GKE (on GKE nothing is handed on: test_on_gke_nothing_is_written).
PARTIAL = [c for c in cases() if ("-partial-" in c.id or "bad-type" in c.id or c.id.startswith("vfio-"))
           and c.env.get("TPU_SKIP_MDS_QUERY") != "true"]


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("TPU_", "RAY_ACCEL_", "GCE_")):
            monkeypatch.delenv(key)
    yield monkeypatch


def _hook(snapshot, servers, monkeypatch):
    # The start process's environment is the node's (as in a pod, or SimulatedCluster): env.json.
    for key, value in json.loads((snapshot / "env.json").read_text()).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAY_ACCEL_ROOT", str(snapshot))
    for key, value in servers.env().items():
        monkeypatch.setenv(key, value)
    for key in (*RAY_VARS, NODE_INVENTORY_ENV):
        if key not in os.environ:
            # Registered with monkeypatch (set, then removed), so whatever the hook writes is undone.
            monkeypatch.setenv(key, "x")
            monkeypatch.delenv(key)
    before = dict(os.environ)
    params = RayParams()
    start_hook(params, False)
    return params, {k: os.environ[k] for k in RAY_VARS if os.environ.get(k) != before.get(k)}


def _ray_after_hook(snapshot, handed):
    with MetadataServers(metadata_spec(snapshot)) as servers:
        out = ray_tpu_node_spec(snapshot, f"http://{servers.gce.address}" if servers.gce else None, extra_env=handed)
        return out, (servers.gce.count() if servers.gce else 0)


@pytest.mark.parametrize("snapshot", [TPU / n for n in ("gce-v5p-16-worker1", "gce-v4-8-dev-accel",
                                                          "gce-v5litepod-8-single-host", "gke-v6e-4x4-worker3")],
                         ids=lambda p: p.name)
def test_rays_manager_after_the_hook_asks_nothing_and_agrees(snapshot, clean_env):
    with MetadataServers(metadata_spec(snapshot)) as servers:
        params, handed = _hook(snapshot, servers, clean_env)
        ours_requests = servers.gce.count() if servers.gce else 0
    assert ours_requests == (0 if snapshot.name.startswith("gke-") else 1)
    assert not handed or not snapshot.name.startswith("gke-")  # GKE: its variables are all there
    ray, ray_requests = _ray_after_hook(snapshot, handed)
    assert ray_requests == 0, "Ray's TPU manager asked the metadata server although the hook handed it the slice"
    ours_labels = _manager_labels(params.labels)
    assert {k: v for k, v in ray["labels"].items() if k.startswith("ray.io/tpu-")} == ours_labels
    slice_resources = {k: v for k, v in params.resources.items() if k != "TPU" and not k.startswith("accelerator_type:")}
    assert {k: v for k, v in ray["resources"].items() if k in slice_resources or k.endswith("-head")} == slice_resources


def test_on_gke_nothing_is_written(clean_env):
    """GKE's TPU plugin owns Ray's four variables (frameworks read them as facts with
    TPU_SKIP_MDS_QUERY): a single-host TPU7x pod, which GKE gives no TPU_NAME/TPU_WORKER_ID, keeps
    lacking them; we label its slice (docs/tpu.md), Ray's manager asks its metadata server itself."""
    snapshot = TPU / "gke-tpu7x-4chip-single-host"
    with MetadataServers(metadata_spec(snapshot)) as servers:
        params, handed = _hook(snapshot, servers, clean_env)
        assert servers.gce.count() == 0
    assert handed == {} and params.labels["ray.io/tpu-slice-name"] == "gke-tpu7x-pool-0"


def _manager_labels(labels) -> dict[str, str]:
    """Our ``ray.io/tpu-*`` labels that Ray's TPU manager sets too: not the subslice labels, which
    Ray 2.60 keeps off the node (docs/tpu.md, differences)."""
    return {k: v for k, v in labels.items() if k.startswith("ray.io/tpu-") and not k.startswith("ray.io/tpu-subslice-")}


@pytest.mark.parametrize("case", PARTIAL, ids=lambda c: c.id)
def test_partial_and_malformed_identity_leave_rays_manager_nothing_to_ask(case, tmp_path, clean_env):
    snapshot = case.build(tmp_path)
    with MetadataServers(metadata_spec(snapshot)) as servers:
        params, handed = _hook(snapshot, servers, clean_env)
    env = json.loads((snapshot / "env.json").read_text())
    ray, ray_requests = _ray_after_hook(snapshot, handed)
    if case.chips == 0 or (not case.gen):
        assert not handed  # no TPU chips: nothing is handed on
        return
    assert ray_requests == 0
    for key in RAY_VARS:
        assert env.get(key) or key in handed
    # Stand-ins are read by Ray as "unknown": Ray's labels are ours (the slice-name stand-in aside).
    ours = _manager_labels(params.labels)
    theirs = {k: v for k, v in ray["labels"].items() if k.startswith("ray.io/tpu-")}
    if handed.get("TPU_NAME") and "ray.io/tpu-slice-name" not in ours:
        assert theirs.pop("ray.io/tpu-slice-name") == case.hostname
    assert theirs == ours


def test_a_server_that_never_answers_blocks_neither_the_hook_nor_rays_manager(clean_env):
    snapshot = TPU / "gce-v6e-4-metadata-timeout"
    servers = MetadataServers(metadata_spec(snapshot)).start()
    try:
        params, handed = _hook(snapshot, servers, clean_env)
        assert params.labels["rayaccel.io/discovery"] == "degraded"
        assert {k: handed[k] for k in RAY_NONE} == RAY_NONE and handed["TPU_NAME"] == "t1v-n-77aa0e11-w-0"
        result: dict = {}
        base = f"http://{servers.gce.address}"
        thread = threading.Thread(target=lambda: result.update(ray_tpu_node_spec(snapshot, base, extra_env=handed)),
                                  daemon=True)
        thread.start()
        thread.join(60)  # the fake holds any request for 600 s: a request would still be pending
        assert not thread.is_alive(), "Ray's TPU manager asked the never-answering server"
        assert servers.gce.count() == 1  # ours, which timed out
        assert "ray.io/tpu-pod-type" not in result["labels"] and "ray.io/tpu-worker-id" not in result["labels"]
    finally:
        servers.stop()


def test_workers_read_the_published_description_and_ask_nothing(clean_env):
    snapshot = TPU / "gce-v5p-16-worker1"
    with MetadataServers(metadata_spec(snapshot)) as servers:
        _hook(snapshot, servers, clean_env)
        published = NodeInventory.from_dict(json.loads(os.environ[NODE_INVENTORY_ENV]))
        before = servers.gce.count()
        again = node_inventory()
        assert again == published and servers.gce.count() == before
        tpu = again.descriptions[0]
        assert tpu.fabric.worker == 1 and tpu.devices[0].coords == (0, 0, 1) and tpu.links
        # Without the published description (a node started without the hook): local files only.
        clean_env.delenv(NODE_INVENTORY_ENV)
        local = node_inventory()
        assert servers.gce.count() == before
        assert len(local.descriptions[0].devices) == 4 and local.descriptions[0].fabric is None
        assert any("RAY_ACCEL_METADATA=off" in p for p in [q.message for q in local.descriptions[0].problems])
