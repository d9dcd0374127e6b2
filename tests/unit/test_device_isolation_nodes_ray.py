"""Real Ray, the KubeRay shape: a head without the Acme family (nothing of it handed on there, Ray's
default unit list) and a worker node whose hook hands the family on (the shared cluster's ``h100``
head and ``acme`` node, ``tests/unit/conftest.py``). The head's GCS schedules, the worker's raylet
gives the unit ids, its workers set the variable."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray_accel_ext_acme", reason="pip install -e tests/downstream/ray_accel_ext_acme")

from ray_accel_ext.testing.cluster import NODE_NAME_LABEL  # noqa: E402
from tests.unit.test_device_isolation_ray import VAR, Barrier, _env_ids, held  # noqa: E402

pytestmark = pytest.mark.ray

ACME_NODE = {"label_selector": {NODE_NAME_LABEL: "acme"}}  # the mixed node has the family too


def test_a_worker_node_isolates_under_a_head_without_the_family(cluster):
    assert "acme_npu" not in cluster.ray_node("h100")["Resources"]
    barrier = Barrier.remote(2)
    pair = ray.get([held.options(resources={"acme_npu": 1}, **ACME_NODE).remote("acme_npu", VAR, barrier)
                    for _ in range(2)])
    assert all(len(s["ids"]) == 1 and _env_ids(s) == s["ids"] for s in pair), pair
    assert set(pair[0]["ids"]).isdisjoint(pair[1]["ids"]), pair
    two = ray.get(held.options(resources={"acme_npu": 2}, **ACME_NODE).remote("acme_npu", VAR))
    assert len(two["ids"]) == 2 and _env_ids(two) == two["ids"], two
