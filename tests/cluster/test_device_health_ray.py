"""A recorded fatal Xid drains its node through Ray (new accelerator tasks go elsewhere, the
running one finishes); a recorded application Xid does not; the metric and the dashboard name
the device. Nodes are started from snapshots with ``ray start`` through the hook, which spawns
each node's watcher (nobody runs ``ray-accel health start``); the watchers replay the recorded
streams (``libraries/device_events.json``) once the test's work runs (``REPLAY_GATE_ENV``) and
exit when their node's raylet stops."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.cluster.collect import gather  # noqa: E402
from ray_accel_ext.cluster.dashboard.document import build_document  # noqa: E402
from ray_accel_ext.cluster.device_watch import REPLAY_GATE_ENV  # noqa: E402
from ray_accel_ext.cluster.health import registry_marks  # noqa: E402
from ray_accel_ext.cluster.nodes import alive_nodes  # noqa: E402
from ray_accel_ext.cluster.state import state_series  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.paths import HOSTS  # noqa: E402

pytestmark = pytest.mark.ray

NV = HOSTS / "nvidia_gpu"
WATCH = {"RAY_ACCEL_HEALTH_WATCH": "1"}  # the kit's nodes start without it otherwise


@ray.remote(num_cpus=0)
class Gate:
    def __init__(self) -> None:
        import asyncio

        self.started, self.open = asyncio.Event(), asyncio.Event()

    async def enter(self) -> None:
        self.started.set()
        await self.open.wait()

    async def wait_started(self) -> None:
        await self.started.wait()

    def release(self) -> None:
        self.open.set()


@ray.remote(num_cpus=0, num_gpus=1)
def gpu_task(gate=None) -> str:
    import ray as _ray

    if gate is not None:
        _ray.get(gate.enter.remote())
    return _ray.get_runtime_context().get_node_id()


def _wait_for_mark(node_id: str, done) -> dict:
    """Poll the registry until the watcher of ``node_id`` has reported what ``done`` wants
    (bounded by scheduling round trips, not by a clock)."""
    for _ in range(3000):
        mark = registry_marks().get(node_id, {})
        if done(mark):
            return mark
        ray.get(ray.remote(num_cpus=0)(lambda: None).remote())  # one scheduling round trip
    raise AssertionError(f"node {node_id}: no such mark: {registry_marks().get(node_id)}")


def _gone(pid: int, limit_s: float = 120.0) -> bool:
    """Whether process ``pid`` exits (or is a zombie) within ``limit_s``: an upper bound, not a race."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[:1] == ["Z"]:
                    return True
        except OSError:
            return True
        time.sleep(0.2)
    return False


def test_fatal_xid_drains_its_node_and_application_xid_does_not(tmp_path):
    # The watchers replay their streams once this file exists: a drained node with nothing running
    # leaves the cluster, so the gated task must run on it before the fault happens.
    replay = tmp_path / "replay"
    env = {**WATCH, REPLAY_GATE_ENV: str(replay)}
    with SimulatedCluster() as cluster:
        cluster.add_node(NV / "no-accelerators", name="head", num_cpus=1)
        cluster.add_node(NV / "l4-xid-fatal", name="bad", num_cpus=1, env=env)
        cluster.add_node(NV / "l4-xid-application", name="good", num_cpus=1, env=env)
        cluster.connect()
        bad, good = cluster.ray_node("bad")["NodeID"], cluster.ray_node("good")["NodeID"]
        on_bad = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(bad, soft=False)
        gate = Gate.remote()
        running = gpu_task.options(scheduling_strategy=on_bad).remote(gate)
        ray.get(gate.wait_started.remote(), timeout=300)
        assert not registry_marks().get(bad, {}).get("drained"), "no fault before the replay"
        replay.touch()

        mark = _wait_for_mark(bad, lambda m: m.get("drained"))
        good_mark = _wait_for_mark(good, lambda m: m.get("device_events"))
        assert mark["drained"]["how"] == "ray-drain"
        assert [(d["health"], d["reason"]) for d in mark["devices"]] == [(0, "Xid 79")]
        assert good_mark["device_status"] == "ok" and good_mark["watcher"] == "node"
        watchers = [mark["watcher_pid"], good_mark["watcher_pid"]]

        # New accelerator work goes to the healthy node; the running task is not killed.
        assert set(ray.get([gpu_task.remote() for _ in range(3)], timeout=300)) == {good}

        marks = registry_marks()
        series = state_series(alive_nodes(), health=marks)["rayaccel_device_health"]
        values = {(tags["node"], tags["device"]): v for tags, v in series}
        failed_uuid = mark["devices"][0]["device"]
        assert values[(bad, failed_uuid)] == 0.0 and values[(good, marks[good]["devices"][0]["device"])] == 1.0
        doc = build_document(gather())
        by_id = {n["node_id"]: n for n in doc["nodes"]}
        # Read while the gated task still runs there: a drained node leaves once idle.
        assert by_id[bad]["devices"]["nvidia_gpu"][0]["state"] == "failed"
        assert "device-fault" in {a["cause"] for a in by_id[bad]["advice"]}
        assert by_id[good]["devices"]["nvidia_gpu"][0]["state"] != "failed"
        gate.release.remote()
        assert ray.get(running, timeout=300) == bad
    # The nodes' raylets are gone: so are their watchers.
    assert [pid for pid in watchers if not _gone(pid)] == []
