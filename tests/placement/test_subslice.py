"""TPU subslice requests: the blocks of a slice as worker ids (x-minor), and the placement steps
a subslice request becomes, on synthetic inventories (pure, no Ray)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ray_accel_ext.cluster.nodes import NodeView
from ray_accel_ext.placement import DomainRequest, choose_domain
from ray_accel_ext.placement.subslice import expand_subslices, subslice_workers


@pytest.mark.parametrize("topology, block, hosts, shape, groups", [
    # v6e 4x4: 2x2-chip hosts on a 2x2 host grid, worker = x + 2y
    ("4x4", "2x2x1", "2x2x1", "2x4", [(0, 2), (1, 3)]),
    ("4x4", "2x2x1", "2x2x1", "4x2", [(0, 1), (2, 3)]),
    ("4x4", "2x2x1", "2x2x1", "2x2", [(0,), (1,), (2,), (3,)]),
    # tpu7x-16 of two-container pods: 1x2x1-chip processes on a 2x1x2 grid
    ("2x2x2", "1x2x1", "2x1x2", "2x2x1", [(0, 1), (2, 3)]),
    # v5p 4x4x4: 2x2x1 hosts on 2x2x4, a 2x2x2 cube is 2 hosts stacked in z
    ("4x4x4", "2x2x1", "2x2x4", "4x4x2", [(0, 1, 2, 3, 4, 5, 6, 7), (8, 9, 10, 11, 12, 13, 14, 15)]),
])
def test_subslice_blocks_are_aligned_host_blocks_in_x_minor_order(topology, block, hosts, shape, groups):
    assert subslice_workers(topology, block, hosts, shape) == groups


@pytest.mark.parametrize("shape, words", [("3x4", "does not tile"), ("1x4", "not whole hosts"), ("8x8", "does not tile")])
def test_shapes_that_do_not_fit_are_refused(shape, words):
    with pytest.raises(ValueError, match=words):
        subslice_workers("4x4", "2x2x1", "2x2x1", shape)


def _slice(name: str, hosts: int = 4) -> list[NodeView]:
    return [NodeView(node_id=f"{name}-{w}", resources={"TPU": 4.0}, labels={
        "rayaccel.io/fabric-domain": name, "rayaccel.io/fabric-worker": str(w), "rayaccel.io/fabric-hosts": str(hosts),
        "ray.io/tpu-topology": "4x4", "ray.io/accelerator-type": "TPU-V6E",
        "tpu.rayaccel.io/chips-per-host-bounds": "2x2x1", "tpu.rayaccel.io/host-bounds": "2x2x1"}) for w in range(hosts)]


def test_a_subslice_request_becomes_one_step_per_block_and_lands_on_the_blocks_hosts():
    nodes = _slice("s-a") + _slice("s-b")
    steps = expand_subslices([DomainRequest(subslice="2x4", selector={"ray.io/accelerator-type": "TPU-V6E"})], nodes)
    assert [s.selector["rayaccel.io/fabric-worker"] for s in steps] == ["in(0,2)", "in(1,3)"]
    assert all(s.hosts == 2 and s.subslice is None for s in steps)
    choice = choose_domain(nodes, steps[0])
    assert choice.domain in ("s-a", "s-b")
    assert sorted(n.rsplit("-", 1)[1] for n in choice.node_ids) == ["0", "2"]


def test_subslice_index_picks_one_block_and_a_wrong_one_is_refused():
    nodes = _slice("s-a")
    (step,) = expand_subslices([DomainRequest(subslice="4x2", subslice_index=1)], nodes)
    assert step.selector["rayaccel.io/fabric-worker"] == "in(2,3)" and step.to_dict()["hosts"] == 2
    with pytest.raises(ValueError, match="outside 0..1"):
        expand_subslices([DomainRequest(subslice="4x2", subslice_index=2)], nodes)
    with pytest.raises(ValueError, match="no hosts= or bundles="):
        DomainRequest(subslice="4x2", hosts=2)


def _labelled_slice(name: str) -> list[NodeView]:
    """A 4x4 whose hosts publish their subslice labels (x-minor: 2x4 blocks are columns)."""
    return [replace(n, labels={**n.labels, "ray.io/tpu-subslice-2x2": str(w), "ray.io/tpu-subslice-2x4": str(w % 2)})
            for w, n in enumerate(_slice(name))]


def test_a_labelled_shape_is_selected_by_its_label_and_lands_on_its_block():
    nodes = _labelled_slice("s-a") + _labelled_slice("s-b")
    steps = expand_subslices([DomainRequest(subslice="2x4", selector={"ray.io/accelerator-type": "TPU-V6E"})], nodes)
    assert [s.selector.get("ray.io/tpu-subslice-2x4") for s in steps] == ["0", "1"]
    assert all("rayaccel.io/fabric-worker" not in s.selector and s.hosts == 2 for s in steps)
    choice = choose_domain(nodes, steps[1])
    assert sorted(n.rsplit("-", 1)[1] for n in choice.node_ids) == ["1", "3"]
    # A shape Ray does not label (4x2: rows) still goes by worker ids, numbered the same way.
    (row,) = expand_subslices([DomainRequest(subslice="4x2", subslice_index=1)], nodes[:4])
    assert row.selector["rayaccel.io/fabric-worker"] == "in(2,3)"
