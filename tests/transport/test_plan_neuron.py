"""Neuron runtime and EFA variables from the Trn1, Trn2 and Trn2 UltraServer snapshots.

Formats checked against their sources: ``NEURON_RT_VISIBLE_CORES`` a core index or range
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/api/nrt-env-var-reference.html),
``NEURON_RT_ROOT_COMM_ID`` ``host:port`` with torch-xla's default port 62182,
``NEURON_PJRT_PROCESSES_NUM_DEVICES`` a comma list of per-process device counts and
``NEURON_PJRT_PROCESS_INDEX`` the process index (pytorch/xla ``torch_xla/_internal/neuron.py``),
``FI_PROVIDER=efa`` and ``FI_EFA_USE_DEVICE_RDMA=1``, never ``FI_EFA_FORK_SAFE`` / ``RDMAV_FORK_SAFE``
(aws-ofi-nccl ``doc/efa-env-var.md``).
"""

from __future__ import annotations

import re

from ray_accel_ext.transport import plan_transport

from .conftest import domain, template

TRN2 = "neuron/trn2-48xlarge"
TRN1 = "neuron/trn1-32xlarge"
RANGES = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def cores(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def test_one_process_per_trn2_host():
    plan = plan_transport([domain(TRN2, 2)])
    assert plan.libraries == ("efa", "neuron", "gloo")
    assert plan.world_size == 2
    for r in plan.ranks:
        env = r.env
        assert env["NEURON_RT_VISIBLE_CORES"] == "0-63" and RANGES.match(env["NEURON_RT_VISIBLE_CORES"])
        assert env["NEURON_RT_ROOT_COMM_ID"] == "198.51.100.10:62182"
        assert env["NEURON_PJRT_PROCESS_INDEX"] == str(r.rank)
        assert env["NEURON_PJRT_PROCESSES_NUM_DEVICES"] == "64,64"
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
        assert not {"FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE", "NCCL_IB_HCA"} & set(env)


def test_ranks_of_eight_cores_follow_the_neuronlink_torus():
    plan = plan_transport([domain(TRN2, 1)], units_per_rank=8)
    assert plan.world_size == 8
    assert plan.ranks[0].env["NEURON_PJRT_PROCESSES_NUM_DEVICES"] == ",".join(["8"] * 8)
    groups = [cores(r.env["NEURON_RT_VISIBLE_CORES"]) for r in plan.ranks]
    assert sorted(c for g in groups for c in g) == list(range(64))
    assert [sorted(r.units) for r in plan.ranks] == [sorted(g) for g in groups]
    # device k holds cores 4k..4k+3; the ranks' units, in rank order, walk the torus link by link
    (desc,) = template(TRN2).descriptions
    linked = {frozenset((link.a, link.b)) for link in desc.links}
    path = [c // 4 for r in plan.ranks for c in r.units][::4]
    assert path[0] == 0 and sorted(path) == list(range(16))
    assert all(frozenset(pair) in linked for pair in zip(path, path[1:])), path  # every step is a NeuronLink


def test_trn1_cores_and_root():
    plan = plan_transport([domain(TRN1, 3)], ports={"neuron": 41000})
    assert [r.env["NEURON_RT_VISIBLE_CORES"] for r in plan.ranks] == ["0-31"] * 3
    assert {r.env["NEURON_RT_ROOT_COMM_ID"] for r in plan.ranks} == {"198.51.100.10:41000"}


def test_part_of_a_host_plans_the_first_cores_in_topology_order():
    plan = plan_transport([domain(TRN2, 2, neuron_cores=16)])
    assert [r.env["NEURON_RT_VISIBLE_CORES"] for r in plan.ranks] == ["0-15", "0-15"]
    # Ray picks which 16 cores a task gets; the worker side recomputes for the ones it got
    entry, env = plan.env_for("d0-n1", list(range(32, 48)))
    assert entry.rank == 1 and env["NEURON_RT_VISIBLE_CORES"] == "32-47" and env["NEURON_PJRT_PROCESS_INDEX"] == "1"
