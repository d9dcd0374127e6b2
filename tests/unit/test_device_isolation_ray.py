"""Real Ray: a separately packaged backend's resource isolated like Ray's own accelerators.

One ``ray start`` node through the hook, from the 8x H100 snapshot with four Acme NPUs added
(``tests/downstream/ray_accel_ext_acme``, pip-installed; the shared cluster's ``mixed`` node,
``tests/unit/conftest.py``, every task pinned to it by its name label): tasks, actors and placement-group bundles
that ask for ``acme_npu`` get distinct unit ids in ``get_accelerator_ids()`` and
``ACME_VISIBLE_DEVICES`` set by the backend's ``visible_devices_env``, disjoint while they run
together; Ray's own GPU isolation on the same node is unchanged. Then the same through
``ray_accel_ext.init()`` in a fresh driver process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray_accel_ext_acme", reason="pip install -e tests/downstream/ray_accel_ext_acme")

from ray_accel_ext.conformance.live_isolation import barrier_actor  # noqa: E402
from ray_accel_ext.testing.cluster import NODE_NAME_LABEL, with_this_package  # noqa: E402
from tests.support.unit_nodes import ACME  # noqa: E402

pytestmark = pytest.mark.ray

VAR = "ACME_VISIBLE_DEVICES"
MIXED = {"label_selector": {NODE_NAME_LABEL: "mixed"}}  # the acme node has the family too


Barrier = barrier_actor()  # holders provably overlap


def _seen(resource: str, var: str) -> dict:
    ids = ray.get_runtime_context().get_accelerator_ids().get(resource)
    return {"ids": sorted(ids) if ids is not None else None, "env": os.environ.get(var)}


@ray.remote(num_cpus=0)
def held(resource: str, var: str, barrier=None) -> dict:
    if barrier is not None:
        ray.get(barrier.wait.remote())
    return _seen(resource, var)


@ray.remote(num_cpus=0)
class Holder:
    def seen(self, resource: str, var: str) -> dict:
        return _seen(resource, var)


def _env_ids(seen: dict) -> list[str]:
    return sorted(seen["env"].split(",")) if seen["env"] else []


def test_node_offers_the_vendor_resource_and_the_gpus(cluster):
    node = cluster.ray_node("mixed")
    resources, labels = node["Resources"], node["Labels"]
    assert resources["acme_npu"] == 4 and resources["GPU"] == 8
    # The accelerator type follows the SKUs (the GPUs' H100; the Acme SKU names no Ray type), the
    # adapter taking nothing of Ray's one-family-per-node choice.
    assert labels["ray.io/accelerator-type"] == "H100"
    assert [k for k in resources if k.startswith("accelerator_type:")] == ["accelerator_type:H100"]


def test_concurrent_one_unit_tasks_get_disjoint_ids_and_the_variable(cluster):
    barrier = Barrier.remote(2)
    first, second = ray.get([held.options(resources={"acme_npu": 1}, **MIXED).remote("acme_npu", VAR, barrier) for _ in range(2)])
    for seen in (first, second):
        assert len(seen["ids"]) == 1 and _env_ids(seen) == seen["ids"], seen
    assert set(first["ids"]).isdisjoint(second["ids"]), (first, second)


def test_two_unit_task_gets_two_ids(cluster):
    seen = ray.get(held.options(resources={"acme_npu": 2}, **MIXED).remote("acme_npu", VAR))
    assert len(set(seen["ids"])) == 2 and _env_ids(seen) == seen["ids"], seen


def test_actor_keeps_its_ids_across_calls_and_holders_are_disjoint(cluster):
    actors = [Holder.options(resources={"acme_npu": 1}, **MIXED).remote() for _ in range(3)]
    firsts = ray.get([a.seen.remote("acme_npu", VAR) for a in actors])
    again = ray.get([a.seen.remote("acme_npu", VAR) for a in actors])
    assert firsts == again
    ids = [s["ids"][0] for s in firsts]
    assert len(set(ids)) == 3 and all(_env_ids(s) == s["ids"] for s in firsts), firsts
    for actor in actors:
        ray.kill(actor)


def test_placement_group_bundles_get_their_own_ids(cluster):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"acme_npu": 1}, {"acme_npu": 2}], strategy="PACK",
                         bundle_label_selector=[MIXED["label_selector"]] * 2)
    ray.get(pg.ready(), timeout=60)
    try:
        actors = [
            Holder.options(resources={"acme_npu": n}, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
            for i, n in enumerate((1, 2))
        ]
        one, two = ray.get([a.seen.remote("acme_npu", VAR) for a in actors])
        assert len(one["ids"]) == 1 and len(two["ids"]) == 2, (one, two)
        assert set(one["ids"]).isdisjoint(two["ids"]) and _env_ids(one) == one["ids"] and _env_ids(two) == two["ids"]
        for actor in actors:
            ray.kill(actor)
    finally:
        remove_placement_group(pg)


def test_ray_keeps_its_own_gpu_isolation(cluster):
    seen = ray.get(held.options(num_gpus=2, **MIXED).remote("GPU", "CUDA_VISIBLE_DEVICES"))
    assert len(set(seen["ids"])) == 2 and _env_ids(seen) == seen["ids"], seen
    plain = ray.get(held.options(num_gpus=1, **MIXED).remote("acme_npu", VAR))
    assert plain["ids"] == [], plain  # a task without the vendor resource holds none of it


_INIT_DRIVER = """
import json, os, sys, ray, ray_accel_ext
ray_accel_ext.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1])

@ray.remote(num_cpus=0)
class Barrier:
    def __init__(self):
        import asyncio
        self.arrived, self.event = 0, asyncio.Event()
    async def wait(self):
        self.arrived += 1
        if self.arrived >= 2:
            self.event.set()
        await self.event.wait()

@ray.remote(num_cpus=0)
def held(barrier):
    if barrier is not None:
        ray.get(barrier.wait.remote())
    ids = ray.get_runtime_context().get_accelerator_ids().get("acme_npu")
    return {"ids": sorted(ids) if ids is not None else None, "env": os.environ.get("ACME_VISIBLE_DEVICES")}

b = Barrier.remote()
pair = ray.get([held.options(resources={"acme_npu": 1}).remote(b) for _ in range(2)])
two = ray.get(held.options(resources={"acme_npu": 2}).remote(None))
print("RESULT " + json.dumps({"pair": pair, "two": two}))
ray.shutdown()
"""


def test_ray_accel_ext_init_isolates_the_vendor_resource():
    temp = tempfile.mkdtemp(prefix="rainit", dir="/tmp")
    env = with_this_package({k: v for k, v in os.environ.items() if not k.startswith("RAY_")})
    env.update(RAY_ACCEL_ROOT=str(ACME), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    try:
        done = subprocess.run([sys.executable, "-c", _INIT_DRIVER, temp], env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"driver exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    out = json.loads(line[len("RESULT "):])
    first, second = out["pair"]
    assert len(first["ids"]) == 1 and len(second["ids"]) == 1 and set(first["ids"]).isdisjoint(second["ids"]), out
    assert all(_env_ids(s) == s["ids"] for s in (first, second, out["two"])) and len(out["two"]["ids"]) == 2, out
