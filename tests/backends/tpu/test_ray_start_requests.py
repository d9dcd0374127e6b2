"""Every metadata request a whole ``ray start`` makes on a GCE TPU VM, counted on a loopback
server, with Ray 2.60's own TPU manager really seeing TPU chips.

The ``ray start`` runs in private user/mount/network/PID namespaces
(:mod:`tests.support.ray_start_ns`): ``/dev/accel0..3`` exist there, and
``metadata.google.internal`` (the URL Ray's manager has hard-coded) resolves to the fake on
127.0.0.1:80. Our hook reads the ``gce-v4-8-dev-accel`` snapshot and the same server.

* Without the hook, Ray's manager sees the 4 chips and asks for its keys 9 times.
* With the hook, the whole start makes one request of ours (the ``instance/`` directory, read
  recursively) and none from Ray's TPU manager, which reads what the hook handed it.
* With a server that never answers, ``ray start`` with the hook still finishes (Ray alone would
  wait forever: its requests have no timeout).

Besides these, Ray's usage library probes ``/computeMetadata/v1`` once (with a 1 s timeout) to
name the cloud; it is Ray's, not the TPU manager's, and counted apart.
"""

from __future__ import annotations

import pytest

from tests.support import ray_start_ns
from tests.support.paths import HOSTS

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not ray_start_ns.available(), reason="needs unprivileged user, mount, net and PID namespaces"),
]

SNAPSHOT = HOSTS / "tpu" / "gce-v4-8-dev-accel"
RAY_TPU_KEYS = {f"instance/attributes/{k}" for k in ("accelerator-type", "instance-id", "agent-worker-number", "tpu-env")}
RAY_CLOUD_PROBE = "/computeMetadata/v1"  # ray/_common/usage/usage_lib.py get_cloud_from_metadata_requests


def _tpu_requests(result):
    return {k: v for k, v in result["requests"].items() if k != RAY_CLOUD_PROBE}


def test_rays_manager_sees_the_chips_and_asks_nine_times_without_the_hook():
    result = ray_start_ns.run(SNAPSHOT, hook=False, wait_s=240)
    assert result["returncode"] == 0, result["log"]
    assert result["node"]["Resources"]["TPU"] == 4  # Ray's own count of /dev/accel*
    assert result["node"]["Labels"]["ray.io/tpu-pod-type"] == "v4-8"
    assert set(_tpu_requests(result)) == RAY_TPU_KEYS and sum(_tpu_requests(result).values()) == 9


def test_with_the_hook_the_whole_start_makes_one_request():
    result = ray_start_ns.run(SNAPSHOT, hook=True, wait_s=240)
    assert result["returncode"] == 0, result["log"]
    assert _tpu_requests(result) == {"instance/": 1}
    labels = result["node"]["Labels"]
    assert result["node"]["Resources"]["TPU"] == 4 and result["node"]["Resources"]["TPU-v4-8-head"] == 1
    assert (labels["ray.io/tpu-pod-type"], labels["ray.io/tpu-slice-name"], labels["rayaccel.io/discovery"]) == (
        "v4-8", "v4-single-d", "ok")


def test_with_the_hook_a_server_that_never_answers_does_not_block_the_start():
    result = ray_start_ns.run(SNAPSHOT, hook=True, hang=True, wait_s=240)
    assert result["returncode"] == 0, result["log"]
    assert _tpu_requests(result) == {"instance/": 1}
    labels = result["node"]["Labels"]
    assert labels["rayaccel.io/discovery"] == "degraded" and result["node"]["Resources"]["TPU"] == 4
    assert "ray.io/tpu-pod-type" not in labels and "MetadataTimeout" in result["log"]
