"""Ray Train v2 on reserved domains of a simulated cluster, with a real all-reduce (gloo, CPU).

The cluster: a head without accelerators, one GB200 NVLink domain of two trays (copies of the
GB200 NVL72 tray snapshot, 4 GPUs each) and two TPU v5p-16 slices of two hosts each (copies of the
GCE v5p-16 worker snapshot with their own slice name and worker id), every node started through
the start hook (the cluster tests/transport/conftest.py shares with test_bindings_integration.py).
For each job, ``reserve_for_training`` reserves through the claim registry and plans the transport;
``TorchTrainer`` then runs one worker per plan rank. Every worker reports its world rank, node,
accelerator ids, the plan's variables as it sees them, and the result of ``all_reduce(rank + 1)``,
which must be 1 + 2 + ... + world size on every worker.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # Ray Train v2 (the default in Ray 2.60, stated here)
ray = pytest.importorskip("ray")

from ray.util.tpu import get_tpu_coordinator_env_vars  # noqa: E402

from ray_accel_ext.placement import DomainRequest, claims_snapshot  # noqa: E402
from ray_accel_ext.train import reserve_for_training  # noqa: E402
from ray_accel_ext.transport.collect import interface_of  # noqa: E402
from tests.support.requires import installed  # noqa: E402

pytestmark = [pytest.mark.ray, installed("ray.train", "torch")]

FABRIC = "rayaccel.io/fabric-domain"


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    """The package's cluster (tests/transport/conftest.py), this module's driver connected."""
    ray_cluster.connect()
    yield ray_cluster
    ray_cluster.disconnect()


@ray.remote(num_cpus=0)
class Reports:
    def __init__(self):
        self.items = []

    def add(self, item):
        self.items.append(item)

    def get(self):
        return sorted(self.items, key=lambda r: r["world_rank"])


def train_fn(config):
    import os

    import ray
    import ray.train
    import torch
    import torch.distributed as dist

    ctx = ray.train.get_context()
    value = torch.tensor([float(ctx.get_world_rank() + 1)])
    dist.all_reduce(value)
    runtime = ray.get_runtime_context()
    ray.get(config["reports"].add.remote({
        "world_rank": ctx.get_world_rank(),
        "world_size": ctx.get_world_size(),
        "node_id": runtime.get_node_id(),
        "ids": [int(i) for i in runtime.get_accelerator_ids().get(config["resource"], [])],
        "env": dict(os.environ),
        "sum": value.item(),
        "backend": dist.get_backend(),
    }))


def run(job, tmp_path, name):
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    reports = Reports.remote()
    trainer = TorchTrainer(
        train_fn,
        train_loop_config={"reports": reports, "resource": job.plan.resource},
        scaling_config=job.scaling_config(cpus_per_worker=0.5),
        torch_config=job.torch_config(backend="gloo"),
        run_config=RunConfig(name=name, storage_path=str(tmp_path)),
    )
    job.fit(trainer)
    return ray.get(reports.get.remote())


def node_labels(node_id):
    return next(n["Labels"] for n in ray.nodes() if n["NodeID"] == node_id)


def node_address(node_id):
    return next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)


def check_ranks_and_env(plan, reports):
    n = plan.world_size
    assert [r["world_rank"] for r in reports] == list(range(n))
    assert all(r["world_size"] == n and r["backend"] == "gloo" for r in reports)
    assert all(r["sum"] == n * (n + 1) / 2 for r in reports), [r["sum"] for r in reports]
    for r in reports:
        entry = plan.rank_for(r["node_id"], r["ids"])
        assert entry.rank == r["world_rank"], (entry, r["ids"])
        assert sorted(entry.units) == sorted(r["ids"]) or (plan.resource == "TPU" and not r["ids"])
        assert entry.env and {k: r["env"].get(k) for k in entry.env} == dict(entry.env)


def test_one_nvlink_domain_ranks_in_domain_order_with_the_plan_applied(cluster, tmp_path):
    step = DomainRequest(hosts=2, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=60)
    with reserve_for_training(step, units_per_rank=2) as job:
        plan = job.plan
        (domain,) = job.domains
        assert plan.world_size == 4 and [len(r.units) for r in plan.ranks] == [2] * 4
        assert f"{FABRIC}={domain}" in claims_snapshot()
        reports = run(job, tmp_path, "gb200")
    assert f"{FABRIC}={domain}" not in claims_snapshot()  # released when training ended
    check_ranks_and_env(plan, reports)
    # every worker on a host of the one domain, hosts in the domain's order (two ranks each)
    assert {node_labels(r["node_id"])[FABRIC] for r in reports} == {domain}
    assert [r["node_id"] for r in reports] == plan.node_ids()
    assert [plan.hosts[plan.ranks[r["world_rank"]].host].hostname for r in reports] == [
        "nvl72-c51-tray00", "nvl72-c51-tray00", "nvl72-c51-tray01", "nvl72-c51-tray01"]
    for r in reports:  # NCCL (what a GPU job would use) and gloo (what this one used) on the node's interface
        ifname = interface_of(node_address(r["node_id"]))
        assert ifname and r["env"]["GLOO_SOCKET_IFNAME"] == ifname and r["env"]["NCCL_SOCKET_IFNAME"] == "=" + ifname
        assert r["env"]["NCCL_MNNVL_ENABLE"] == "1" and r["env"]["NCCL_NVLS_ENABLE"] == "1"


def test_two_tpu_slices_get_the_multislice_settings(cluster, tmp_path):
    step = DomainRequest(selector={"ray.io/accelerator-type": "TPU-V5P"}, complete=True, deadline_s=60)
    with reserve_for_training(step, domains=2) as job:
        plan = job.plan
        assert job.domains == ["slice-a", "slice-b"]
        assert plan.world_size == 4 and all(len(r.units) == 4 for r in plan.ranks)
        # The chips stay held by the reservation (Ray Train takes no TPU with label selectors).
        assert job.resources_per_worker(cpus=0.5) == {"CPU": 0.5}
        reports = run(job, tmp_path, "multislice")
    assert not {f"{FABRIC}={d}" for d in ("slice-a", "slice-b")} & set(claims_snapshot())
    check_ranks_and_env(plan, reports)
    coordinator = plan.coordinator.address
    for r in reports:
        labels = node_labels(r["node_id"])
        slice_id = job.domains.index(labels[FABRIC])
        assert r["world_rank"] == 2 * slice_id + int(labels["rayaccel.io/fabric-worker"])
        expected = get_tpu_coordinator_env_vars(coordinator, num_slices=2, slice_id=slice_id)
        assert {k: r["env"][k] for k in expected} == expected
