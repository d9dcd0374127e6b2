"""The suite's live isolation check on the separately packaged Acme backend fails naming the step
where the backend's variable never reaches a worker (a node with ``RAY_ACCEL_DEVICE_ISOLATION=off``).

That the same check passes on a node with device isolation is ci/conformance.sh's ``acme_npu`` run
(``ray-accel conformance acme_npu --live-ray``: the same suite test, on the same snapshots, in the
same kind of fresh pytest process), which the README's test command runs once; this module keeps
only what that run cannot show."""

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


def test_a_variable_that_never_reaches_the_worker_fails_naming_the_step():
    done = _suite(RAY_ACCEL_DEVICE_ISOLATION="off")
    assert done.returncode == 1, done.stdout[-4000:]
    assert "FAILED" in done.stdout and TEST in done.stdout, done.stdout[-4000:]
    assert "step ids (two concurrent one-unit tasks): get_accelerator_ids() in the task has no 'acme_npu' key" in done.stdout, (
        done.stdout[-4000:])
