"""The README's multi-node recipe on Ray's token authentication (on by itself in Ray 2.60 once a
token exists): a head and a worker started with ``ray start`` and the README's
``RAY_AUTH_MODE=token RAY_AUTH_TOKEN=...``, each with its own home folder holding a stale
``~/.ray/auth_token`` of another cluster, form one cluster, and ``ray-accel cluster`` reads it with
the same two variables; without them it exits 1 and says the cluster refused its token."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest

from ray_accel_ext.testing.cluster import SimulatedCluster
from tests.support.paths import HOSTS, REPO

pytestmark = pytest.mark.ray

README_LINE = "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=..."


def _home(tmp_path, name: str) -> str:
    home = tmp_path / name
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(16))  # a token an earlier ray.init() left
    return str(home)


def _cluster(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_accel_ext.tools.cli", "cluster", "--address", address,
                           "--format", "json", "--timeout", "120"],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def test_the_readme_recipe_forms_one_cluster_with_token_auth(tmp_path):
    assert README_LINE in (REPO / "README.md").read_text()
    token = secrets.token_hex(16)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    with SimulatedCluster() as cluster:
        cluster.add_node(HOSTS / "nvidia_gpu" / "l4-single-pcie", name="head", env={**auth, "HOME": _home(tmp_path, "head")})
        cluster.add_node(HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx", name="worker",
                         env={**auth, "HOME": _home(tmp_path, "worker")})
        base = {**cluster.base_env, "HOME": _home(tmp_path, "driver")}
        base.pop("RAY_AUTH_MODE", None)
        base.pop("RAY_AUTH_TOKEN", None)
        read = _cluster(cluster.address, {**base, **auth})
        refused = _cluster(cluster.address, base)
    assert read.returncode == 0, read.stderr[-3000:]
    doc = json.loads(read.stdout)
    assert sorted(n["labels"]["sim.rayaccel.io/node"] for n in doc["nodes"]) == ["head", "worker"]
    assert all(n["labels"]["rayaccel.io/discovery"] == "ok" for n in doc["nodes"])
    assert refused.returncode == 1 and "RAY_AUTH_TOKEN" in refused.stderr and "Traceback" not in refused.stderr
    # Said from the GCS's first answer (reach.check_token), not after ray.init's 20 tries a second apart.
    assert "refused this process's auth token" in refused.stderr, refused.stderr[-2000:]
