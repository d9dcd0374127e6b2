"""Real Ray, two ``ray start`` nodes: the KubeRay shape, a CPU-only head (nothing handed on, Ray's
default unit list) and a worker node whose hook hands the Acme family on. The head's GCS schedules,
the worker's raylet gives the unit ids, its workers set the variable."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray_accel_ext_acme", reason="pip install -e tests/downstream/ray_accel_ext_acme")

from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.unit.test_device_isolation_ray import ACME, VAR, Barrier, _env_ids, held  # noqa: E402

pytestmark = pytest.mark.ray


def test_a_worker_node_isolates_under_a_head_without_the_family():
    hosts = ACME.parent
    with SimulatedCluster() as cluster:
        cluster.add_node(hosts / "empty", name="head", num_cpus=1)
        cluster.add_node(hosts / "acme-4npu", name="acme", num_cpus=1)
        cluster.connect()
        barrier = Barrier.remote(2)
        pair = ray.get([held.options(resources={"acme_npu": 1}).remote("acme_npu", VAR, barrier) for _ in range(2)])
        assert all(len(s["ids"]) == 1 and _env_ids(s) == s["ids"] for s in pair), pair
        assert set(pair[0]["ids"]).isdisjoint(pair[1]["ids"]), pair
        two = ray.get(held.options(resources={"acme_npu": 2}).remote("acme_npu", VAR))
        assert len(two["ids"]) == 2 and _env_ids(two) == two["ids"], two
