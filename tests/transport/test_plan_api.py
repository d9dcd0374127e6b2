"""The plan as an API: lookups by node and devices, recomputation for the devices Ray gave,
labels-only hosts, and clear errors for inputs that cannot be planned."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from ray_accel_ext.errors import RuntimeTopologyError
from ray_accel_ext.transport import HostFacts, ReservedDomain, TransportPlanError, plan_transport

from .conftest import domain

H100 = "nvidia_gpu/h100-sxm-8gpu-dgx"


def test_lookup_by_node_and_devices():
    plan = plan_transport([domain(H100, 2)])
    r = plan.rank_for("d0-n1", [5])
    assert (r.rank, r.local_rank, r.units) == (13, 5, (5,))
    entry, env = plan.env_for("d0-n1", ["5"])
    assert entry == r and env == dict(r.env) and env is not r.env
    assert [x.rank for x in plan.ranks_on("d0-n0")] == list(range(8))
    assert plan.node_ids()[7:9] == ["d0-n0", "d0-n1"]
    with pytest.raises(RuntimeTopologyError, match="not a host of this transport plan"):
        plan.rank_for("elsewhere", [0])


def test_devices_other_than_planned_get_their_own_wires():
    plan = plan_transport([domain(H100, 1)], units_per_rank=2)
    # Ray gave the worker of rank 1 GPUs 2 and 6 instead of 2 and 3
    entry, env = plan.env_for("d0-n0", [2, 6])
    assert entry.rank == 1
    assert env["NCCL_IB_HCA"] == "=mlx5_2,mlx5_6" and env["UCX_NET_DEVICES"] == "mlx5_2:1,mlx5_6:1"


def test_units_that_do_not_split_into_ranks_are_an_error():
    with pytest.raises(TransportPlanError, match="8 GPU do not split into ranks of 3"):
        plan_transport([domain(H100, 1)], units_per_rank=3)


def test_a_reservation_larger_than_the_host_is_an_error():
    with pytest.raises(TransportPlanError, match="holds 16 GPU but the node has 8"):
        plan_transport([domain(H100, 1, GPU=16)])


def test_nothing_to_plan_and_a_node_in_two_domains():
    with pytest.raises(TransportPlanError, match="no reserved hosts"):
        plan_transport([])
    d = domain(H100, 1)
    with pytest.raises(TransportPlanError, match="in two reserved domains"):
        plan_transport([d, ReservedDomain("d1", d.hosts)])


def test_a_partial_host_plans_as_many_ranks_as_it_holds():
    plan = plan_transport([domain(H100, 2, GPU=2)])
    assert [r.units for r in plan.ranks] == [(0,), (1,), (0,), (1,)]


def test_labels_only_hosts_get_what_labels_can_tell():
    h = domain(H100, 1).hosts[0]
    bare = dataclasses.replace(h, descriptions=())
    plan = plan_transport([ReservedDomain("d0", (bare,))])
    assert plan.world_size == 8 and plan.libraries == ("nccl", "gloo")
    assert plan.ranks[0].env == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert plan.warnings == ("host d0-host0: no node description, per-device NIC pairing not planned",)


def test_cpu_hosts_get_one_rank_each():
    hosts = tuple(HostFacts(node_id=f"c{i}", address=f"198.51.100.{i}", resources={"CPU": 4}, hostname=f"c{i}",
                            socket_ifname="eth0") for i in range(3))
    plan = plan_transport([ReservedDomain("rack-1", hosts)])
    assert plan.resource == "" and plan.world_size == 3 and plan.units_per_rank == 0
    assert [r.env for r in plan.ranks] == [{"GLOO_SOCKET_IFNAME": "eth0"}] * 3


def test_the_plan_travels_to_workers():
    plan = plan_transport([domain("neuron/trn2-48xlarge", 2)])
    again = pickle.loads(pickle.dumps(plan))
    assert again.to_dict() == plan.to_dict()
    assert again.env_for("d0-n1", [0, 1])[1]["NEURON_RT_VISIBLE_CORES"] == "0-1"


def test_units_per_rank_must_agree_for_a_uniform_worker_group():
    a = domain(H100, 1, name="a1")
    b = domain("nvidia_gpu/gb200-nvl72-tray", 1, name="b2")
    plan = plan_transport([a, b], units_per_rank=None)
    assert plan.units_per_rank == 1
    mixed = plan_transport([domain(H100, 1, name="a1"), domain("neuron/trn2-48xlarge", 1, name="b2")])
    with pytest.raises(TransportPlanError, match="different unit counts"):
        _ = mixed.units_per_rank


def test_a_reservation_without_accelerators_on_a_gpu_host_plans_one_cpu_rank():
    plan = plan_transport([domain(H100, 2, CPU=1)])
    assert plan.resource == "" and [r.units for r in plan.ranks] == [(), ()]
    assert plan.ranks[0].env == {"GLOO_SOCKET_IFNAME": "eth0"}


def test_applying_a_plan_outside_a_ray_worker_is_a_clear_error():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session is open in this process")
    from ray_accel_ext.transport import apply_plan

    plan = plan_transport([domain(H100, 1)])
    env: dict[str, str] = {}
    with pytest.raises(RuntimeTopologyError, match="inside a Ray task or actor"):
        apply_plan(plan, environ=env)
    assert env == {}


def test_a_domain_may_mix_hosts_with_and_without_a_worker_index():
    """A GB200 tray without NVML platform info has no worker index (its description says ``None``),
    and a tray whose description did not arrive in time is planned from its labels, which carry none
    either: one domain of both plans, indexed hosts first (seen on a loaded cluster, where one
    tray's description probe timed out)."""
    described, bare, indexed = domain("nvidia_gpu/gb200-nvl72-tray", 3).hosts
    unindexed = tuple(dataclasses.replace(d, fabric=dataclasses.replace(d.fabric, worker=None))
                      for d in described.descriptions)
    labels = {k: v for k, v in bare.labels.items() if k != "rayaccel.io/fabric-worker"}
    hosts = (dataclasses.replace(described, descriptions=unindexed),
             dataclasses.replace(bare, descriptions=(), labels=labels, probe_error="GetTimeoutError: 60 s"), indexed)
    plan = plan_transport([ReservedDomain("d0", hosts)])
    assert [(h.hostname, h.fabric_worker) for h in plan.hosts] == [("d0-host2", 2), ("d0-host0", None), ("d0-host1", None)]
    assert plan.world_size == 12 and [r.rank for r in plan.ranks_on("d0-n2")] == [0, 1, 2, 3]
    assert plan.warnings == ("host d0-host1: no node description (GetTimeoutError: 60 s), "
                             "per-device NIC pairing not planned",)
