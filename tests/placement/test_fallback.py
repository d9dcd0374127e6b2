"""Fallback chains over a mixed simulated cluster: a TPU v6e 4x4 slice, a GB200 NVLink domain and
(when the Neuron snapshots are in the tree) half of a Trn2 UltraServer, all through the start hook.

The slice's four workers are copies of the GKE v6e 4x4 worker snapshot with their own
TPU_WORKER_ID (and physical_host_topology sub-block = rack, two hosts per rack); the GB200 domain
is two tray copies; the UltraServer nodes are nodes 0 and 1 of a 4-node Trn2 UltraServer.
"""

from __future__ import annotations

import importlib.util

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.errors import NoDomainAvailable, WouldSplitDomain  # noqa: E402
from ray_accel_ext.placement import DomainRequest, reserve, reserve_domain  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain, tpu_slice  # noqa: E402

pytestmark = pytest.mark.ray

FABRIC = "rayaccel.io/fabric-domain"
TRN2U = SNAPSHOTS / "neuron" / "trn2u-48xlarge-node1"
HAVE_ULTRASERVER = TRN2U.is_dir() and importlib.util.find_spec("tests.support.neuron_hosts") is not None

V6E_SLICE = DomainRequest(selector={"ray.io/accelerator-type": "TPU-V6E", "ray.io/tpu-topology": "4x4"},
                          complete=True, name="v6e-4x4-slice")
V5P_SLICE = DomainRequest(selector={"ray.io/accelerator-type": "TPU-V5P"}, complete=True, name="v5p-slice")
GB200_DOMAIN = DomainRequest(hosts=2, selector={"ray.io/accelerator-type": "GB200"}, name="gb200-nvl")


def step(base: DomainRequest, deadline_s: float) -> DomainRequest:
    return DomainRequest(level=base.level, hosts=base.hosts, selector=base.selector, complete=base.complete,
                         name=base.name, deadline_s=deadline_s)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snaps = tmp_path_factory.mktemp("mixed")
    specs = [(s, {"name": s.name}) for s in tpu_slice(snaps, "slice-a", 4)]
    specs += [(s, {"name": s.name}) for s in gb200_domain(snaps, 21, trays=2)]
    if HAVE_ULTRASERVER:
        from tests.support.neuron_hosts import ultraserver_node

        specs.append((ultraserver_node(TRN2U, snaps / "trn2u-n0", 0), {"name": "trn2u-n0"}))
        specs.append((TRN2U, {"name": "trn2u-n1"}))
    with SimulatedCluster() as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        add_in_batches(c, specs)
        c.connect()
        yield c


def test_first_step_reserves_the_whole_slice(cluster):
    with reserve(step(V6E_SLICE, 60), step(GB200_DOMAIN, 60)) as r:
        assert (r.step, r.fallback, r.domain) == (0, False, "slice-a")
        assert r.bundles == ({"TPU": 4.0},) * 4
        assert sorted(r.bundle_nodes().values()) == sorted(r.choice.node_ids)
        assert {cluster.ray_node(f"slice-a-w{i}")["NodeID"] for i in range(4)} == set(r.choice.node_ids)
        assert r.choice.topology == "4x4" and r.choice.generation == "v6e"


def test_fallback_reaches_the_next_step_and_says_so(cluster):
    with reserve(step(V6E_SLICE, 60)) as held:
        r = reserve(step(V6E_SLICE, 1.0), step(V5P_SLICE, 1.0), step(GB200_DOMAIN, 60))
        try:
            assert r.step == 2 and r.fallback and r.step_name == "gb200-nvl"
            outcomes = [(a["step_name"], a["outcome"]) for a in r.attempts]
            assert outcomes == [("v6e-4x4-slice", "busy"), ("v5p-slice", "no-match"), ("gb200-nvl", "ready")]
            assert "held by other requests" in r.attempts[0]["reason"]
            assert "TPU-V5P" in r.attempts[1]["reason"]
            assert r.domain.endswith(".21") and r.domain != held.domain
        finally:
            r.release()


def test_exhausted_chain_lists_every_step_and_why(cluster):
    with reserve(step(V6E_SLICE, 60)), reserve(step(GB200_DOMAIN, 60)):
        with pytest.raises(NoDomainAvailable) as info:
            reserve(step(V6E_SLICE, 0.5), step(V5P_SLICE, 0.5), step(GB200_DOMAIN, 0.5))
    err = info.value
    assert [(a["step_name"], a["outcome"]) for a in err.attempts] == [
        ("v6e-4x4-slice", "busy"), ("v5p-slice", "no-match"), ("gb200-nvl", "busy")]
    assert "step 0 v6e-4x4-slice: busy" in err.message and "step 1 v5p-slice: no-match" in err.message
    d = err.to_dict()
    assert d["error"] == "NoDomainAvailable" and len(d["request"]) == 3 and d["wait_s"] >= 1.0


def test_chain_that_no_domain_could_ever_meet_would_split(cluster):
    with pytest.raises(WouldSplitDomain) as info:
        reserve(step(V5P_SLICE, 30), DomainRequest(hosts=8, selector={"ray.io/accelerator-type": "TPU-V6E"}))
    assert [a["outcome"] for a in info.value.attempts] == ["no-match", "too-large"]


def test_rack_level_on_gke_says_there_are_no_racks(cluster):
    """GKE TPU pods make no metadata request at node start (docs/tpu.md), so the hook publishes no
    ``rayaccel.io/rack`` there; a rack-level request fails at once, naming the label, instead of
    waiting (rack placement on GKE needs the rack as a node label given to ``ray start``)."""
    v6e = [n for n in ray.nodes() if n["Alive"] and n["Labels"].get("ray.io/accelerator-type") == "TPU-V6E"]
    assert len(v6e) == 4 and not any("rayaccel.io/rack" in n["Labels"] for n in v6e)
    with pytest.raises(WouldSplitDomain, match="rayaccel.io/rack"):
        reserve_domain("rack", hosts=2, selector={"ray.io/accelerator-type": "TPU-V6E"}, deadline_s=5)


@pytest.mark.skipif(not HAVE_ULTRASERVER, reason="Trn2 UltraServer snapshots not in the tree")
def test_ultraserver_half_is_incomplete_for_a_whole_domain_but_serves_two_hosts(cluster):
    trn2 = {"rayaccel.io/generation": "trainium2"}
    with pytest.raises(WouldSplitDomain, match="incomplete"):
        reserve_domain("fabric", selector=trn2, complete=True, deadline_s=30)
    with reserve_domain("fabric", hosts=2, selector=trn2, deadline_s=60) as r:
        assert r.bundles == ({"neuron_cores": 64.0},) * 2
        assert {cluster.ray_node("trn2u-n0")["NodeID"], cluster.ray_node("trn2u-n1")["NodeID"]} == set(
            r.bundle_nodes().values())
