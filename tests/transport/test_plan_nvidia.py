"""NCCL, RCCL and UCX variables from the H100 DGX and GB200 NVL72 tray snapshots.

Each value is checked against its vendor rule:
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html (``NCCL_IB_HCA``: a list of
HCA names, ``=`` prefix for exact names; ``NCCL_SOCKET_IFNAME``: ``=<name>`` for one exact
interface; ``NCCL_NET_GDR_LEVEL``: a path type name), the level names NCCL's parser accepts
(NVIDIA/nccl ``src/graph/paths.cc ncclGetLevel`` over ``topoPathTypeStr`` in ``src/graph/topo.cc``,
up to ``SYS``), ``NCCL_MNNVL_ENABLE``/``NCCL_NVLS_ENABLE`` 0/1/2 (``src/init.cc``,
``src/transport/nvls.cc``), and ``UCX_NET_DEVICES=<device>:<port>``
(https://docs.open-mpi.org/en/v5.0.0/tuning-apps/networking/ib-and-roce.html); RCCL reads the same
``NCCL_*`` names (https://rocm.docs.amd.com/projects/rccl/en/latest/api-reference/env-variables.html).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ray_accel_ext.model import NicPath, NodeDescription
from ray_accel_ext.transport import HostFacts, ReservedDomain, plan_transport

from .conftest import domain

H100 = "nvidia_gpu/h100-sxm-8gpu-dgx"
AMD_HOSTS = Path(__file__).resolve().parents[1] / "data" / "hosts" / "amd_gpu"
GB200 = "nvidia_gpu/gb200-nvl72-tray"
# topoPathTypeStr up to PATH_SYS: the names ncclGetLevel accepts for NCCL_NET_GDR_LEVEL.
NCCL_LEVELS = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"}
HCA_LIST = re.compile(r"^=?[A-Za-z0-9_]+(:\d+)?(,[A-Za-z0-9_]+(:\d+)?)*$")
UCX_LIST = re.compile(r"^[A-Za-z0-9_]+:\d+(,[A-Za-z0-9_]+:\d+)*$")


def test_each_gpu_rank_gets_its_own_rail_nic_and_gpudirect_level():
    plan = plan_transport([domain(H100, 2)])
    assert plan.world_size == 16 and plan.libraries == ("nccl", "ucx", "gloo")
    for r in plan.ranks:
        (gpu,) = r.units
        assert r.units == (r.local_rank,)  # NVSwitch all-to-all: index order
        env = r.env
        assert env["NCCL_IB_HCA"] == f"=mlx5_{gpu}" and HCA_LIST.match(env["NCCL_IB_HCA"])
        assert env["UCX_NET_DEVICES"] == f"mlx5_{gpu}:1" and UCX_LIST.match(env["UCX_NET_DEVICES"])
        assert env["NCCL_NET_GDR_LEVEL"] == "PIX" and env["NCCL_NET_GDR_LEVEL"] in NCCL_LEVELS
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0" and env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert "NCCL_MNNVL_ENABLE" not in env and "NCCL_NVLS_ENABLE" not in env  # single-host NVSwitch: NCCL decides
    assert [plan.hosts[r.host].hostname for r in plan.ranks[7:9]] == ["d0-host0", "d0-host1"]
    assert plan.coordinator.address == "198.51.100.10"


def test_a_rank_of_two_gpus_lists_both_nics():
    plan = plan_transport([domain(H100, 1)], units_per_rank=2)
    assert [r.env["NCCL_IB_HCA"] for r in plan.ranks] == ["=mlx5_0,mlx5_1", "=mlx5_2,mlx5_3", "=mlx5_4,mlx5_5",
                                                         "=mlx5_6,mlx5_7"]
    assert plan.ranks[0].env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"


def _with_paths(facts: HostFacts, path: str) -> HostFacts:
    (desc,) = facts.descriptions
    devices = tuple(dataclasses.replace(d, nics=tuple(NicPath(nic=p.nic, path=path) for p in d.nics))
                    for d in desc.devices)
    return dataclasses.replace(facts, descriptions=(dataclasses.replace(desc, devices=devices),))


@pytest.mark.parametrize("measured, expected", [("PXB", "PXB"), ("PHB", "PHB"), ("NODE", "PHB"), ("SYS", None)])
def test_gpudirect_level_follows_the_measured_path_class(measured, expected):
    host = _with_paths(domain(H100, 1).hosts[0], measured)
    env = plan_transport([ReservedDomain("d0", (host,))]).ranks[0].env
    assert env.get("NCCL_NET_GDR_LEVEL") == expected
    assert expected is None or expected in NCCL_LEVELS
    assert env["NCCL_IB_HCA"] == "=mlx5_0"  # the NIC is still the nearest one


def test_multi_node_nvlink_switches_only_for_two_or_more_trays_of_one_domain():
    two = plan_transport([domain(GB200, 2)])
    assert two.world_size == 8
    for r in two.ranks:
        assert r.env["NCCL_MNNVL_ENABLE"] == "1" and r.env["NCCL_NVLS_ENABLE"] == "1"
        assert "NCCL_IB_HCA" not in r.env  # the tray snapshot records no RDMA NIC
    one = plan_transport([domain(GB200, 1)])
    assert all("NCCL_MNNVL_ENABLE" not in r.env for r in one.ranks)
    # one tray in each of two NVLink domains: no domain has two reserved trays
    split = plan_transport([domain(GB200, 1, name="a1"), domain(GB200, 1, name="b2")])
    assert all("NCCL_MNNVL_ENABLE" not in r.env for r in split.ranks)
    # two trays of one domain and one of another: the ranks must agree, so none gets the switch
    mixed = plan_transport([domain(GB200, 2, name="a1"), domain(GB200, 1, name="b2")])
    assert all("NCCL_MNNVL_ENABLE" not in r.env and "NCCL_NVLS_ENABLE" not in r.env for r in mixed.ranks)
    both = plan_transport([domain(GB200, 2, name="a1"), domain(GB200, 2, name="b2")])
    assert all(r.env["NCCL_MNNVL_ENABLE"] == "1" for r in both.ranks)


def test_trays_that_share_a_worker_index_follow_their_hostnames():
    dom = domain(GB200, 3)
    # NVML gives no tray index: every tray of a domain is fabric worker 0
    def worker0(h):
        descriptions = tuple(dataclasses.replace(d, fabric=dataclasses.replace(d.fabric, worker=0))
                             for d in h.descriptions)
        return dataclasses.replace(h, labels={**h.labels, "rayaccel.io/fabric-worker": "0"}, descriptions=descriptions)

    same = tuple(worker0(h) for h in dom.hosts)
    plan = plan_transport([ReservedDomain("d0", tuple(reversed(same)))])
    assert [h.hostname for h in plan.hosts] == ["d0-host0", "d0-host1", "d0-host2"]


def test_amd_gpus_get_the_same_variables_under_rccl():
    # The MI300X hive's description as the downstream AMD backend discovers it (its golden file):
    # eight GPUs on XGMI, each with a ConnectX NIC behind the same switch (PXB).
    golden = json.loads((AMD_HOSTS / "mi300x-8gpu-hive" / "expected.json").read_text())
    desc = NodeDescription.from_dict(golden["descriptions"][0])
    host = HostFacts(node_id="mi300x", address="198.51.100.7", resources={"GPU": 8.0}, descriptions=(desc,),
                     hostname="mi300x-0", socket_ifname="eth0")
    plan = plan_transport([ReservedDomain(desc.fabric.id, (host,))])
    assert plan.libraries == ("rccl", "ucx", "gloo") and plan.world_size == 8
    for r in plan.ranks:
        nics = [p.nic for p in desc.devices[r.units[0]].nics]
        assert r.env["NCCL_IB_HCA"] == "=" + ",".join(nics) and HCA_LIST.match(r.env["NCCL_IB_HCA"])
        assert r.env["NCCL_NET_GDR_LEVEL"] == "PXB" and r.env["NCCL_SOCKET_IFNAME"] == "=eth0"
        assert "NCCL_MNNVL_ENABLE" not in r.env
