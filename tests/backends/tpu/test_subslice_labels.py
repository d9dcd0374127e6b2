"""``ray.io/tpu-subslice-<shape>`` labels equal what Ray's newest TPU code computes.

The oracle is Ray's own expectations: ``python/ray/tests/accelerators/test_tpu.py``
(``test_build_subslice_labels_2d``, ``test_build_subslice_labels_3d``,
``test_get_physical_worker_id_2d``, ``..._3d``, ``..._out_of_bounds``) as of Ray PR #64578, with the
values the X/Y axis reorder changed taken from Ray's newest ``_private/accelerators/tpu.py`` and
``util/tpu.py`` (worker grids read x, y, z; ``SubslicePlacementGroup``'s docstring: on a 4x4 v6e
slice "Subslice 0: workers (0,0) and (0,1) (left column)"). Ray assumes hosts of 2x2(x1) chips,
which these cases use. Where Ray 2.60 (installed) answers otherwise, a test below shows exactly
that difference (docs/tpu.md, "chip coordinates and subslice numbering").
"""

from __future__ import annotations

import pytest

from ray_accel_ext.node.tpu_subslices import subslice_labels, subslice_workers, worker_of_coords


def _hosts(topology: str) -> str:
    dims = [int(d) for d in topology.split("x")] + ([1] if topology.count("x") == 1 else [])
    return "x".join(str(d // b) for d, b in zip(dims, (2, 2, 1)))


def _labels(worker: int, topology: str) -> dict[str, str]:
    return subslice_labels(topology, "2x2x1", _hosts(topology), worker)


@pytest.mark.parametrize("worker, topology, expected", [
    # Ray's test_build_subslice_labels_2d: 4x4, workers at (0,0) (1,0) (0,1) (1,1). 2x2 is each
    # worker alone; 2x4 (x 2 wide, y 4 tall) is a column of workers since the axis reorder: Ray
    # 2.60's test had {0,1} and {2,3} (rows, its y-by-x reading).
    (0, "4x4", {"ray.io/tpu-subslice-2x2": "0", "ray.io/tpu-subslice-2x4": "0"}),
    (1, "4x4", {"ray.io/tpu-subslice-2x2": "1", "ray.io/tpu-subslice-2x4": "1"}),
    (2, "4x4", {"ray.io/tpu-subslice-2x2": "2", "ray.io/tpu-subslice-2x4": "0"}),
    (3, "4x4", {"ray.io/tpu-subslice-2x2": "3", "ray.io/tpu-subslice-2x4": "1"}),
    # Ray's test_build_subslice_labels_3d: 4x4x4, 16 workers on a 2x2x4 grid.
    (0, "4x4x4", {"ray.io/tpu-subslice-2x2x1": "0", "ray.io/tpu-subslice-2x2x2": "0"}),
    (8, "4x4x4", {"ray.io/tpu-subslice-2x2x1": "8", "ray.io/tpu-subslice-2x2x2": "4"}),
])
def test_subslice_labels_are_rays(worker, topology, expected):
    labels = _labels(worker, topology)
    assert {k: labels[k] for k in expected} == expected


def test_every_shape_ray_lists_below_the_slice_and_no_other():
    # 4x4x4 of 2x2x1 hosts: Ray's shapes that tile it, smaller than it; 2x4x4 is (1, 2, 4) hosts.
    assert sorted(_labels(5, "4x4x4")) == [f"ray.io/tpu-subslice-{s}" for s in ("2x2x1", "2x2x2", "2x2x4", "2x4x4")]
    assert _labels(0, "2x2") == {} and _labels(0, "2x2x1") == {}  # one host: nothing smaller
    assert _labels(0, "2x8") == {}  # a 2D topology Ray does not subslice


@pytest.mark.parametrize("coords, topology, worker", [
    # Ray's test_get_physical_worker_id_2d
    ([[0, 0], [0, 1], [1, 0], [1, 1]], "4x4", 0),
    ([[2, 0], [2, 1], [3, 0], [3, 1]], "4x4", 1),
    ([[0, 2], [0, 3], [1, 2], [1, 3]], "4x4", 2),
    ([[2, 2], [2, 3], [3, 2], [3, 3]], "4x4", 3),
    # Ray's test_get_physical_worker_id_3d: worker 0, and the worker above it in z (8)
    ([[0, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 1]], "4x4x4", 0),
    ([[0, 0, 2], [0, 1, 2], [0, 0, 3], [0, 1, 3]], "4x4x4", 8),
    # a real 2x2x1 host of a 4x4x4 slice: x 2-3, y 0-1, z 0 is worker 1 (newest Ray, x-minor)
    ([[2, 0, 0], [3, 0, 0], [2, 1, 0], [3, 1, 0]], "4x4x4", 1),
])
def test_a_hosts_place_from_its_chip_coordinates_is_rays(coords, topology, worker):
    assert worker_of_coords(coords, "2x2x1", _hosts(topology)) == worker


def test_a_single_8_chip_host_is_worker_0():
    # Ray's 2x4 single-host v6e case, on its real 2x4 chip block
    coords = [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [1, 2], [1, 3]]
    assert worker_of_coords(coords, "2x4x1", "1x1x1") == 0


@pytest.mark.parametrize("coords, topology", [([[99, 0], [99, 1]], "4x4"), ([[0, 0, 99], [1, 0, 99]], "4x4x4")])
def test_coordinates_off_the_slice_are_refused(coords, topology):
    with pytest.raises(ValueError, match="off the host grid"):
        worker_of_coords(coords, "2x2x1", _hosts(topology))


def test_labels_and_placement_blocks_agree():
    """The hosts labelled ``i`` for a shape are the block ``i`` placement computes."""
    for topology, shape in (("4x4", "2x4"), ("8x8", "4x4"), ("4x4x4", "2x2x2"), ("4x4x8", "2x4x4")):
        hosts = _hosts(topology)
        for index, workers in enumerate(subslice_workers(topology, "2x2x1", hosts, shape)):
            for w in workers:
                assert _labels(w, topology)[f"ray.io/tpu-subslice-{shape}"] == str(index)


def test_where_ray_2_60_numbers_otherwise_it_is_the_axis_order():
    """Ray 2.60 reads its worker grids y-by-x (2D) and z-by-y-by-x (3D): on a 4x4 slice its 2x4
    subslices are rows of workers, ours and newest Ray's columns; a 4x4x4 worker owns 1x2x2 chips
    there. Square shapes agree."""
    tpu = pytest.importorskip("ray._private.accelerators.tpu")
    if not hasattr(tpu, "_build_subslice_labels"):
        pytest.skip("this Ray has no subslice code")
    old = {w: tpu._build_subslice_labels(w, "4x4") for w in range(4)}
    new = {w: _labels(w, "4x4") for w in range(4)}
    assert {w: old[w]["ray.io/tpu-subslice-2x2"] for w in old} == {w: new[w]["ray.io/tpu-subslice-2x2"] for w in new}
    if old[1]["ray.io/tpu-subslice-2x4"] == new[1]["ray.io/tpu-subslice-2x4"]:
        pytest.skip("this Ray already numbers subslices x-minor over (x, y)")
    assert [old[w]["ray.io/tpu-subslice-2x4"] for w in range(4)] == ["0", "0", "1", "1"]  # rows
    assert [new[w]["ray.io/tpu-subslice-2x4"] for w in range(4)] == ["0", "1", "0", "1"]  # columns
    host_1 = [[2, 0, 0], [3, 0, 0], [2, 1, 0], [3, 1, 0]]
    assert tpu._get_physical_worker_id_from_coords(host_1, "4x4x4") == 2  # x // 1: a 1-chip-wide block
    assert worker_of_coords(host_1, "2x2x1", _hosts("4x4x4")) == 1
