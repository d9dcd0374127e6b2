"""Ray Serve, Ray Data and a failing Ray Train run on a reserved GB200 NVLink domain of a simulated
cluster, plan applied.

Cluster: a head without accelerators and one NVLink domain of two GB200 trays (copies of the tray
snapshot, 4 GPUs each), every node a ``ray start`` through the start hook; the cluster is the one
tests/transport/conftest.py shares with test_train_integration.py, whose two TPU slices this
module leaves alone.

* Data: ``map_batches`` with ``map_options`` / ``with_plan`` runs its tasks inside the
  reservation's placement group, one GPU each; every task is on a reserved tray and sees the
  variables of the rank of the GPU Ray gave it.
* Serve: one replica spans the domain (``serve_options``): the replica is rank 0 on the first
  tray, it starts rank 1's actor (``rank_actor_options``) in its own group, on the second tray;
  each sees its rank's variables. The domain stays claimed while Serve holds it and is free after.
* Train: a run whose workers raise gives the domain back (``TrainJob.fit`` releases in ``finally``).
"""

from __future__ import annotations

import os
import warnings

import pytest

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
ray = pytest.importorskip("ray")

from ray_accel_ext.placement import DomainRequest, claims_snapshot, reserve_domain  # noqa: E402
from ray_accel_ext.train import data as data_module  # noqa: E402
from ray_accel_ext.train import (  # noqa: E402
    map_options,
    rank_actor_options,
    reserve_for_training,
    serve_options,
    with_plan,
)
from ray_accel_ext.transport import apply_plan, plan_reservation  # noqa: E402
from tests.support.requires import installed  # noqa: E402

pytestmark = [pytest.mark.ray, installed("ray.serve", "ray.data", "torch")]

GB200 = {"ray.io/accelerator-type": "GB200"}
FABRIC = "rayaccel.io/fabric-domain"


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    """The package's cluster (tests/transport/conftest.py), this module's driver connected."""
    ray_cluster.connect()
    yield ray_cluster
    from ray import serve

    serve.shutdown()
    ray_cluster.disconnect()


def where(batch):
    import os

    import ray

    runtime = ray.get_runtime_context()
    n = len(batch["id"])
    return {"id": batch["id"], "node": [runtime.get_node_id()] * n,
            "gpus": [",".join(runtime.get_accelerator_ids()["GPU"])] * n,
            "ifname": [os.environ.get("NCCL_SOCKET_IFNAME", "")] * n,
            "mnnvl": [os.environ.get("NCCL_MNNVL_ENABLE", "")] * n}


@pytest.mark.parametrize("named", [True, False], ids=["named-resources", "scheduling-strategy"])
def test_a_data_map_stage_runs_on_the_domain_with_the_plan(cluster, monkeypatch, named):
    """Both ways ``map_options`` asks for the group: its resources as named parameters (Ray Data
    deprecates ``**ray_remote_args`` for removal in Ray 2.64), and the strategy an older Ray needs."""
    if named and not data_module.named_remote_args():
        pytest.skip("this Ray's map_batches takes no named resources: only the strategy applies")
    monkeypatch.setattr(data_module, "named_remote_args", lambda: named)
    with reserve_domain("fabric", hosts=2, selector=GB200, deadline_s=60) as r:
        plan = plan_reservation(r)
        assert plan.world_size == 8
        opts = map_options(r, plan)
        assert ("scheduling_strategy" in opts) is not named
        ds = ray.data.range(16, override_num_blocks=8)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = ds.map_batches(with_plan(where, plan), batch_size=2, **opts).take_all()
    deprecated = [w for w in caught if "ray_remote_args" in str(w.message)]
    assert not deprecated if named else deprecated
    assert sorted(row["id"] for row in rows) == list(range(16))
    assert {row["node"] for row in rows} <= set(r.choice.node_ids)
    for row in rows:
        _, env = plan.env_for(row["node"], [int(g) for g in row["gpus"].split(",")])
        assert row["ifname"] == env["NCCL_SOCKET_IFNAME"] and row["mnnvl"] == env["NCCL_MNNVL_ENABLE"] == "1"


@ray.remote
class Shard:
    def __init__(self, plan):
        self.me = apply_plan(plan)  # the bundle holds its whole tray: the same units as planned

    def report(self):
        import os

        return {"rank": self.me.rank, "node": ray.get_runtime_context().get_node_id(),
                "env": {k: os.environ.get(k) for k in self.me.env}, "planned": dict(self.me.env)}


class Replica:
    def __init__(self, plan):
        self.me = apply_plan(plan)
        self.others = [Shard.options(**rank_actor_options(plan, i)).remote(plan) for i in range(1, plan.world_size)]

    def __call__(self, _=None):
        import os

        mine = {"rank": self.me.rank, "node": ray.get_runtime_context().get_node_id(),
                "env": {k: os.environ.get(k) for k in self.me.env}, "planned": dict(self.me.env)}
        return [mine] + ray.get([s.report.remote() for s in self.others])


def test_a_serve_replica_spans_the_domain_with_the_plan(cluster):
    from ray import serve

    with reserve_for_training(DomainRequest(hosts=2, selector=GB200, deadline_s=60), units_per_rank=4) as job:
        plan = job.plan
        key = f"{FABRIC}={job.domains[0]}"
        serve.start(proxy_location="Disabled")  # the replica is called through its handle: no HTTP proxy
        job.hand_over()
        handle = serve.run(serve.deployment(Replica).options(**serve_options(job)).bind(plan), name="span",
                           route_prefix=None)
        reports = handle.remote().result()
        assert key in claims_snapshot()  # leased while Serve holds the hosts
        serve.delete("span")
    assert key not in claims_snapshot()
    assert [r["rank"] for r in reports] == [0, 1]
    assert [r["node"] for r in reports] == plan.node_ids()
    for r in reports:
        assert r["env"] == r["planned"] == dict(plan.ranks[r["rank"]].env)


def failing_train_fn(config):
    raise ValueError("this run fails on purpose")


def test_a_failed_training_run_gives_the_domain_back(cluster, tmp_path):
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    job = reserve_for_training(DomainRequest(hosts=2, selector=GB200, deadline_s=60), units_per_rank=4)
    key = f"{FABRIC}={job.domains[0]}"
    assert key in claims_snapshot()
    trainer = TorchTrainer(failing_train_fn, scaling_config=job.scaling_config(cpus_per_worker=0.5),
                           torch_config=job.torch_config(backend="gloo"),
                           run_config=RunConfig(name="fails", storage_path=str(tmp_path)))
    with pytest.raises(Exception, match="fails on purpose"):
        job.fit(trainer)
    assert key not in claims_snapshot()
    assert all(pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values()
               if pg["name"].startswith("rayaccel-"))
