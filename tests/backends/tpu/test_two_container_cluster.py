"""A TPU7x slice of two pods with two TPU containers each, as four real ``ray start`` nodes.

Each container is a Ray node started through our hook with the variables GKE's TPU device plugin
and the KubeRay TPU webhook give it (``build_snapshots.tpu7x_container_env``): ``tpu7x-16``, 2 hosts
x 2 containers, ``TPU_WORKER_ID`` = host x 2 + container, ``TPU_PROCESS_ADDRESSES``. Ray's own
``slice_placement_group`` (2 chips per worker) and our ``placement.reserve`` of the whole slice
must land on exactly the slice's four nodes.
"""

from __future__ import annotations

import pytest

from ray_accel_ext.testing.cluster import NODE_NAME_LABEL, SimulatedCluster

from .test_backend import BUILD

pytestmark = pytest.mark.ray

NAMES = [f"h{h}c{c}" for h in range(2) for c in range(2)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("tpu7x-2c")
    nodes = [(BUILD.slice_container(base / n, host=int(n[1]), container=int(n[3])), {"name": n}) for n in NAMES]
    with SimulatedCluster() as c:
        c.add_node(None, name="head", num_cpus=1)
        c.add_nodes(nodes)
        c.connect()
        yield c


def _names_of(node_ids) -> list[str]:
    import ray

    names = {n["NodeID"]: n["Labels"].get(NODE_NAME_LABEL) for n in ray.nodes() if n["Alive"]}
    return sorted(names[i] for i in node_ids)


def test_each_container_is_a_worker_of_one_healthy_slice(cluster):
    for worker, name in enumerate(NAMES):
        node = cluster.ray_node(name)
        labels, res = node["Labels"], node["Resources"]
        assert labels["ray.io/tpu-worker-id"] == str(worker) and labels["ray.io/tpu-pod-type"] == "v7x-16"
        assert labels["ray.io/tpu-slice-name"] == "tpu7x-group-0" and labels["ray.io/tpu-topology"] == "2x2x2"
        assert labels["rayaccel.io/fabric-hosts"] == "4" and labels["rayaccel.io/discovery"] == "ok"
        assert res["TPU"] == 2 and res["tpu7x-group-0"] == 1
        assert ("TPU-v7x-16-head" in res) == (worker == 0)


def test_rays_slice_placement_group_lands_on_the_four_containers(cluster):
    from ray.util import placement_group_table
    from ray.util.tpu import slice_placement_group

    spg = slice_placement_group(topology="2x2x2", accelerator_version="v7x", chips_per_vm=2,
                                head_reservation_timeout_s=60)
    try:
        assert spg.placement_group.wait(60)
        table = placement_group_table(spg.placement_group)
        assert _names_of(table["bundles_to_node_id"].values()) == NAMES
    finally:
        spg.shutdown()


def test_reserve_of_the_whole_slice_lands_on_its_hosts(cluster):
    from ray_accel_ext.placement import DomainRequest, reserve

    request = DomainRequest(selector={"ray.io/tpu-pod-type": "v7x-16"}, complete=True, deadline_s=60)
    with reserve(request) as r:
        assert r.domain == "tpu7x-group-0" and r.bundles == ({"TPU": 2.0},) * 4
        assert _names_of(r.bundle_nodes().values()) == NAMES
        # Rank order is the slice's worker order: the webhook's process order.
        assert [_names_of([b.node_id])[0] for b in r.ranks] == NAMES


def test_reserve_of_a_subslice_takes_one_hosts_two_containers(cluster):
    """tpu7x-16 (2x2x2) as 1x2x1-chip processes on a 2x1x2 grid: a 2x2x1 subslice is one pod's
    two containers, labelled with the pod's index; index 1 is host 1's."""
    from ray_accel_ext.placement import DomainRequest, reserve

    request = DomainRequest(subslice="2x2x1", subslice_index=1, selector={"ray.io/tpu-pod-type": "v7x-16"},
                            deadline_s=60)
    for name in NAMES:
        assert cluster.ray_node(name)["Labels"]["ray.io/tpu-subslice-2x2x1"] == name[1]  # the pod's index
    with reserve(request) as r:
        assert r.domain == "tpu7x-group-0" and r.bundles == ({"TPU": 2.0},) * 2
        assert [s["ray.io/tpu-subslice-2x2x1"] for s in r.choice.selectors] == ["1", "1"]
        assert _names_of(r.bundle_nodes().values()) == ["h1c0", "h1c1"]
