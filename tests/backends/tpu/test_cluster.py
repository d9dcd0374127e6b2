"""Ray's own ``ray.util.tpu.slice_placement_group`` on a simulated cluster started through our hook.

One module-scoped cluster of 10 real ``ray start`` nodes (``SimulatedCluster``): a plain head,
two v6e 4x4 slices of 4 hosts each (``slice-a``, ``slice-b``; per-worker snapshots derived from the
GKE v6e snapshots, each with its own ``TPU_WORKER_ID``/``TPU_NAME``), and the GCE v5p-16 worker 1.
Every TPU label and resource comes from our hook; nothing is passed by hand.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ray_accel_ext.testing.cluster import NODE_NAME_LABEL, SimulatedCluster
from tests.support.paths import HOSTS

pytestmark = pytest.mark.ray

TPU = HOSTS / "tpu"
SLICES = ("slice-a", "slice-b")


def _builder():
    spec = importlib.util.spec_from_file_location("tpu_build_snapshots", TPU / "build_snapshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    build = _builder()
    base: Path = tmp_path_factory.mktemp("tpu-slices")
    nodes = []
    for name in SLICES:
        for w in range(4):
            src = TPU / ("gke-v6e-4x4-worker0" if w == 0 else "gke-v6e-4x4-worker3")
            nodes.append((build.slice_worker(src, base / f"{name}-w{w}", worker=w, name=name), {"name": f"{name}-w{w}"}))
    nodes.append((TPU / "gce-v5p-16-worker1", {"name": "v5p-w1"}))
    with SimulatedCluster() as c:
        c.add_node(None, name="head", num_cpus=1)
        c.add_nodes(nodes)
        c.connect()
        yield c


def _node_names():
    import ray

    return {n["NodeID"]: n["Labels"].get(NODE_NAME_LABEL) for n in ray.nodes() if n["Alive"]}


def _bundle_nodes(pg) -> list[str]:
    from ray.util import placement_group_table

    names = _node_names()
    table = placement_group_table(pg)
    return [names[table["bundles_to_node_id"][i]] for i in range(len(table["bundles"]))]


def test_hook_gives_every_host_its_slice_labels_and_resources(cluster):
    for name in SLICES:
        for w in range(4):
            node = cluster.ray_node(f"{name}-w{w}")
            labels, res = node["Labels"], node["Resources"]
            assert labels["ray.io/tpu-slice-name"] == name
            assert labels["ray.io/tpu-worker-id"] == str(w)
            assert labels["ray.io/tpu-pod-type"] == "v6e-16" and labels["ray.io/tpu-topology"] == "4x4"
            assert labels["rayaccel.io/fabric-domain"] == name and labels["rayaccel.io/discovery"] == "ok"
            assert res["TPU"] == 4 and res[name] == 1
            assert ("TPU-v6e-16-head" in res) == (w == 0)
    v5p = cluster.ray_node("v5p-w1")
    assert v5p["Labels"]["ray.io/tpu-pod-type"] == "v5p-16" and v5p["Resources"]["TPU"] == 4
    assert "TPU-v5p-16-head" not in v5p["Resources"]  # worker 1 is not the slice head


def test_slice_placement_groups_take_whole_slices_and_a_third_waits(cluster):
    import ray
    from ray.util import tpu
    from ray.util.tpu import slice_placement_group

    if not hasattr(tpu.SlicePlacementGroup, "release_head_pgs"):
        pytest.skip("this Ray's slice_placement_group has no head_reservation_timeout_s/release_head_pgs (Ray 2.56+)")

    first = slice_placement_group(topology="4x4", accelerator_version="v6e", head_reservation_timeout_s=60)
    assert first.placement_group.wait(60)
    second = slice_placement_group(topology="4x4", accelerator_version="v6e", head_reservation_timeout_s=60)
    assert second.placement_group.wait(60)
    try:
        got = []
        for sp in (first, second):
            where = _bundle_nodes(sp.placement_group)
            slices = {n.rsplit("-w", 1)[0] for n in where}
            assert len(slices) == 1, f"bundles spread over slices: {where}"
            (name,) = slices
            assert sorted(where) == [f"{name}-w{i}" for i in range(4)], where
            got.append(name)
        assert sorted(got) == list(SLICES)
        before = {id(sp): _bundle_nodes(sp.placement_group) for sp in (first, second)}

        # Heads still reserved: the third request cannot even reserve a slice head.
        with pytest.raises(TimeoutError):
            slice_placement_group(topology="4x4", accelerator_version="v6e", head_reservation_timeout_s=2)

        # Heads released (what users do once the worker PG is ready): the third gets a head, but
        # its worker placement group stays pending; neither slice loses a bundle.
        first.release_head_pgs()
        second.release_head_pgs()
        third = slice_placement_group(topology="4x4", accelerator_version="v6e", head_reservation_timeout_s=30)
        try:
            assert not third.placement_group.wait(3)
            assert {id(sp): _bundle_nodes(sp.placement_group) for sp in (first, second)} == before
            tpu_left = ray.available_resources().get("TPU", 0)
            assert tpu_left == 4, tpu_left  # only the v5p host's chips are free
        finally:
            third.shutdown()
    finally:
        first.shutdown()
        second.shutdown()


def test_worker_sees_its_chips_and_slice_coordinates(cluster):
    import inspect

    import ray
    from ray.util import tpu
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from ray.util.tpu import slice_placement_group

    # head_reservation_timeout_s came with Ray 2.56 (compat.RAY_FEATURES); 2.55 waits its own way
    wait = {"head_reservation_timeout_s": 60} if "head_reservation_timeout_s" in inspect.signature(
        tpu.SlicePlacementGroup.__init__).parameters else {}
    # Ray 2.55's get_chips_per_host counts 8 chips per host for any v6e slice of 8 chips or more, so
    # its 4x4 asks for two 8-chip hosts that no v6e-16 has (a v6e-16 is four ct6e-standard-4t hosts of
    # 4 chips); 2.56+ says 4. On such a Ray the bundle size is given, as its docstring shows.
    from ray._private.accelerators.tpu import get_chips_per_host
    per_host = {} if get_chips_per_host("4x4", "v6e") == 4 else {"resources_per_bundle": {"TPU": 4}}
    sp = slice_placement_group(topology="4x4", accelerator_version="v6e", **wait, **per_host)
    try:
        assert sp.placement_group.wait(60)

        @ray.remote(num_cpus=0, resources={"TPU": 4})
        def where():
            from ray_accel_ext.backends.tpu.worker import my_tpu_chips

            return my_tpu_chips().to_dict()

        out = ray.get([
            where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(sp.placement_group, placement_group_bundle_index=i)).remote()
            for i in range(sp.num_bundles)
        ])
        assert len({o["slice_name"] for o in out}) == 1
        assert sorted(o["worker_id"] for o in out) == [0, 1, 2, 3]
        for o in out:
            assert o["chip_indices"] == [0, 1, 2, 3] and o["topology"] == "4x4" and o["hosts"] == 4
        every = {tuple(c) for o in out for c in o["coords"]}
        assert every == {(x, y) for x in range(4) for y in range(4)}  # the 4 hosts tile the 4x4 grid
        for o in out:
            assert o["host_coords"] == [[0, 0], [1, 0], [0, 1], [1, 1]]
            ends = {(link["a"], link.get("peer_worker"), link["b"]) for link in o["links"]}
            assert {(0, None, 1), (0, None, 2), (1, None, 3), (2, None, 3)} <= ends  # the 2x2 block
            assert all(p != o["worker_id"] for _, p, _ in ends if p is not None)
    finally:
        sp.shutdown()


def test_workers_ask_no_metadata_server(cluster):
    """The GCE v5p host: its start made one metadata request; its workers, asking for their chips
    (ours) and their slice (Ray's ``ray.util.tpu`` helpers), make none."""
    import ray

    node = next(n for n in cluster.nodes if n.name == "v5p-w1")
    gce = node.servers.gce
    assert gce.count("instance/") == 1 and gce.count() == 1  # the node start, through the hook

    @ray.remote(num_cpus=0, resources={"TPU": 4}, label_selector={NODE_NAME_LABEL: "v5p-w1"})
    def ask():
        from ray.util.tpu import get_current_pod_name

        from ray_accel_ext.backends.tpu.worker import my_tpu_chips

        me = my_tpu_chips()
        return me.slice_name, me.worker_id, me.hosts, get_current_pod_name()

    assert ray.get([ask.remote() for _ in range(3)]) == [("4723019483750192837", 1, 2, "4723019483750192837")] * 3
    assert gce.count() == 1


def test_reserve_of_a_subslice_takes_the_hosts_labelled_with_its_index(cluster):
    """Every host carries its ``ray.io/tpu-subslice-<shape>`` indices (x-minor: a 4x4's ``2x4``
    blocks are the columns, workers 0 and 2, 1 and 3); ``placement.reserve`` of block 1 selects by
    that label and lands on workers 1 and 3 of one slice."""
    from ray_accel_ext.placement import DomainRequest, reserve

    for name in SLICES:
        for w, (one_host, column) in enumerate([("0", "0"), ("1", "1"), ("2", "0"), ("3", "1")]):
            labels = cluster.ray_node(f"{name}-w{w}")["Labels"]
            assert labels["ray.io/tpu-subslice-2x2"] == one_host and labels["ray.io/tpu-subslice-2x4"] == column
    request = DomainRequest(subslice="2x4", subslice_index=1, selector={"ray.io/tpu-pod-type": "v6e-16"}, deadline_s=60)
    with reserve(request) as r:
        assert [s["ray.io/tpu-subslice-2x4"] for s in r.choice.selectors] == ["1", "1"]
        names = _node_names()
        assert sorted(names[n] for n in r.bundle_nodes().values()) == [f"{r.domain}-w1", f"{r.domain}-w3"]
