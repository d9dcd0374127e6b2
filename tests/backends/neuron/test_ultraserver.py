"""Four simulated nodes of one Trn2 UltraServer share one rayaccel.io/fabric-domain, and a
placement group packed on that label lands inside it.

A standalone trn2.48xlarge head (its own one-host domain, also 64 NeuronCores) makes packing
matter: without the domain constraint five 64-core bundles fit on the cluster, with it they do not,
and four land exactly on the UltraServer. Nodes 0, 2 and 3 are derived from the shipped node-1
snapshot by ``tests.support.neuron_hosts.ultraserver_node``.
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group  # noqa: E402

from ray_accel_ext.compat import RAY_FEATURES, has_feature  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.neuron_hosts import ultraserver_node  # noqa: E402
from tests.support.paths import HOSTS  # noqa: E402

pytestmark = pytest.mark.ray

NEURON = HOSTS / "neuron"
NODE1 = NEURON / "trn2u-48xlarge-node1"
SERVER_ID = "5f3a9c1e00b2d471"
DOMAIN = "rayaccel.io/fabric-domain"
ULTRA = [f"us-{i}" for i in range(4)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("ultraserver")
    snaps = [NODE1 if i == 1 else ultraserver_node(NODE1, base / f"node{i}", i) for i in range(4)]
    with SimulatedCluster() as c:
        c.add_node(NEURON / "trn2-48xlarge", name="solo", num_cpus=1)
        c.add_nodes([(snap, {"name": ULTRA[i], "num_cpus": 0}) for i, snap in enumerate(snaps)])
        c.connect()
        yield c


def _bundle_nodes(pg):
    return set(placement_group_table(pg)["bundles_to_node_id"].values())


def test_four_nodes_share_one_fabric_domain(cluster):
    for i, name in enumerate(ULTRA):
        labels = cluster.ray_node(name)["Labels"]
        assert labels[DOMAIN] == SERVER_ID
        assert labels["rayaccel.io/fabric-hosts"] == "4"
        assert labels["rayaccel.io/fabric-worker"] == str(i)
        assert labels["rayaccel.io/fabric-topology"] == "4x4x4"
        assert labels["rayaccel.io/discovery"] == "ok"
        assert cluster.ray_node(name)["Resources"]["neuron_cores"] == 64
    solo = cluster.ray_node("solo")["Labels"]
    assert solo[DOMAIN] != SERVER_ID and solo["rayaccel.io/fabric-hosts"] == "1"


@pytest.mark.skipif(not has_feature("topology_strategy"),
                    reason=f"this Ray has no topology_strategy: {RAY_FEATURES['topology_strategy'].where}")
def test_strict_pack_on_the_fabric_domain_lands_inside_the_ultraserver(cluster):
    bundle = {"neuron_cores": 64}
    topology = {DOMAIN: "STRICT_PACK"}
    # Five whole nodes' worth: the cluster has them (five 64-core nodes) but no domain does.
    too_big = placement_group([bundle] * 5, topology_strategy=topology)
    assert not too_big.wait(timeout_seconds=5)
    remove_placement_group(too_big)
    spread = placement_group([bundle] * 5, strategy="SPREAD")
    assert spread.wait(timeout_seconds=60)
    remove_placement_group(spread)

    packed = placement_group([bundle] * 4, topology_strategy=topology)
    assert packed.wait(timeout_seconds=60)
    assert _bundle_nodes(packed) == {cluster.node(n).node_id for n in ULTRA}
    # With the UltraServer taken, a packed single-node request goes to the standalone host.
    single = placement_group([bundle], topology_strategy=topology)
    assert single.wait(timeout_seconds=60)
    assert _bundle_nodes(single) == {cluster.node("solo").node_id}
    remove_placement_group(single)
    remove_placement_group(packed)
