"""The suite's live isolation check on the separately packaged Acme backend: it passes on a node with
device isolation, and fails naming the step where the backend's variable never reaches a worker
(the same node with ``RAY_ACCEL_DEVICE_ISOLATION=off``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("ray")
pytest.importorskip("ray_accel_ext_acme", reason="pip install -e tests/downstream/ray_accel_ext_acme")

from ray_accel_ext.testing.cluster import with_this_package  # noqa: E402
from tests.support.paths import TESTS  # noqa: E402

pytestmark = pytest.mark.ray

HOSTS = TESTS / "downstream" / "ray_accel_ext_acme" / "tests" / "hosts"
TEST = "test_ray_isolates_devices_per_task"


def _suite(**env: str) -> subprocess.CompletedProcess:
    environ = with_this_package({k: v for k, v in os.environ.items() if not k.startswith(("RAY_ACCEL", "RAY_ADDRESS"))})
    environ.update(env)
    argv = [sys.executable, "-m", "pytest", "--pyargs", "ray_accel_ext.conformance", "-p", "no:cacheprovider", "-q",
            "--accel-backend", "acme_npu", "--accel-snapshots", str(HOSTS), "--accel-live-ray", "-k", TEST, "-rfEs"]
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=600, cwd=str(HOSTS))


def test_acme_passes_the_live_isolation_check():
    done = _suite()
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def test_a_variable_that_never_reaches_the_worker_fails_naming_the_step():
    done = _suite(RAY_ACCEL_DEVICE_ISOLATION="off")
    assert done.returncode == 1, done.stdout[-4000:]
    assert "FAILED" in done.stdout and TEST in done.stdout, done.stdout[-4000:]
    assert "step ids (two concurrent one-unit tasks): get_accelerator_ids() in the task has no 'acme_npu' key" in done.stdout, (
        done.stdout[-4000:])
