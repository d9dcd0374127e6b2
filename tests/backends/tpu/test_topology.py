"""Accelerator-type and topology parsing (ray_accel_ext.backends.tpu.topology), exhaustively.

Expected values come from hardware.md 4.3/4.4 (GKE tpu-device-plugin test vectors, Ray's
``get_total_chips_from_accelerator_type``), and every type is cross-checked against Ray 2.60's own
chip arithmetic where Ray has one.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel_ext.backends.tpu.topology import (
    GENERATIONS,
    generation_for,
    generation_from_pci,
    parse_accelerator_type,
    parse_topology,
    slice_shape,
)
from ray_accel_ext.errors import TopologyStringError

# (type, chips, hosts, chips/host, generation)
TYPES = [
    ("v2-8", 4, 1, 4, "v2"),
    ("v2-32", 16, 4, 4, "v2"),
    ("v3-8", 4, 1, 4, "v3"),
    ("v3-32", 16, 4, 4, "v3"),
    ("v3-2048", 1024, 256, 4, "v3"),
    ("v4-8", 4, 1, 4, "v4"),
    ("v4-16", 8, 2, 4, "v4"),
    ("v4-128", 64, 16, 4, "v4"),
    ("v5p-8", 4, 1, 4, "v5p"),
    ("v5p-16", 8, 2, 4, "v5p"),
    ("v5p-128", 64, 16, 4, "v5p"),
    ("v5litepod-1", 1, 1, 1, "v5e"),
    ("v5litepod-4", 4, 1, 4, "v5e"),
    ("v5litepod-8", 8, 1, 8, "v5e"),
    ("v5litepod-16", 16, 4, 4, "v5e"),
    ("v5litepod-256", 256, 64, 4, "v5e"),
    ("v6e-1", 1, 1, 1, "v6e"),
    ("v6e-4", 4, 1, 4, "v6e"),
    ("v6e-8", 8, 1, 8, "v6e"),
    ("v6e-16", 16, 4, 4, "v6e"),
    ("v6e-256", 256, 64, 4, "v6e"),
    ("tpu7x-2", 1, 1, 1, "tpu7x"),
    ("tpu7x-8", 4, 1, 4, "tpu7x"),
    ("tpu7x-16", 8, 2, 4, "tpu7x"),
    ("tpu7x-128", 64, 16, 4, "tpu7x"),
    ("v7x-8", 4, 1, 4, "tpu7x"),
]


@pytest.mark.parametrize("text,chips,hosts,per_host,gen", TYPES)
def test_accelerator_type_chips_and_hosts(text, chips, hosts, per_host, gen):
    acc = parse_accelerator_type(text)
    assert (acc.chips, acc.hosts, acc.chips_per_host, acc.generation.generation) == (chips, hosts, per_host, gen)
    assert acc.hosts == acc.chips // acc.chips_per_host


@pytest.mark.parametrize("text,chips,hosts,per_host,gen", TYPES)
def test_chip_count_agrees_with_ray(text, chips, hosts, per_host, gen):
    from ray._private.accelerators import tpu as ray_tpu

    ray_name = parse_accelerator_type(text).ray_pod_type
    assert ray_tpu.get_total_chips_from_accelerator_type(ray_name) == chips
    # Ray answers the host's capacity (4) for a sub-host tpu7x-2 slice of one chip; we answer the
    # chips the slice has on its host. Both agree once capped at the slice size.
    assert min(ray_tpu.get_num_tpu_visible_chips_per_host(ray_name), chips) == per_host


@pytest.mark.parametrize(
    "text,pod_type",
    [("tpu7x-8", "v7x-8"), ("v6e-16", "v6e-16"), ("V4-8", "v4-8"), ("v5litepod-16", "v5litepod-16")],
)
def test_ray_pod_type_normalisation_matches_ray(text, pod_type):
    from ray._private.accelerators.tpu import normalize_tpu_accelerator_type

    assert parse_accelerator_type(text).ray_pod_type == pod_type == normalize_tpu_accelerator_type(text)


@pytest.mark.parametrize(
    "bad",
    ["", "v6e", "v6e-", "-16", "v6e-1x", "v6e16", "v9z-8", "gpu-8", "v4-7", "v6e-2", "v6e-6", "v6e-20x",
     "v6e-18", "tpu7x-3", "v6e--16", "v6e-0"],
)
def test_malformed_accelerator_type_names_the_string(bad):
    with pytest.raises(TopologyStringError) as info:
        parse_accelerator_type(bad)
    assert repr(bad) in str(info.value)
    assert info.value.text == bad


def test_non_string_is_an_error():
    with pytest.raises(TopologyStringError):
        parse_accelerator_type(None)  # type: ignore[arg-type]
    with pytest.raises(TopologyStringError):
        parse_topology(16)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,dims,chips",
    [("4x4", (4, 4), 16), ("2x2x2", (2, 2, 2), 8), ("1x1", (1, 1), 1), ("2x4", (2, 4), 8),
     ("16x16", (16, 16), 256), ("12x24x24", (12, 24, 24), 6912), (" 2X2x1 ", (2, 2, 1), 4)],
)
def test_topology(text, dims, chips):
    topo = parse_topology(text)
    assert topo.dims == dims and topo.chips == chips


@pytest.mark.parametrize("bad", ["", "4", "4x", "x4", "4x4x", "4x4x4x4", "4*4", "4x0", "0x4", "axb", "4x-4", "4 x 4"])
def test_malformed_topology_names_the_string(bad):
    with pytest.raises(TopologyStringError) as info:
        parse_topology(bad)
    assert repr(bad) in str(info.value)


# (type, topology, host bounds, chips-per-host bounds): GKE tpu-device-plugin util_test.go vectors.
GKE_VECTORS = [
    ("v3-32", "4x4", (2, 2, 1), (2, 2, 1)),
    ("v4-8", "2x2x1", (1, 1, 1), (2, 2, 1)),
    ("v4-16", "2x2x2", (1, 1, 2), (2, 2, 1)),
    ("v4-128", "4x4x4", (2, 2, 4), (2, 2, 1)),
    ("v5litepod-1", "1x1", (1, 1, 1), (1, 1, 1)),
    ("v5litepod-8", "2x4", (1, 1, 1), (2, 4, 1)),
    ("v5litepod-16", "4x4", (2, 2, 1), (2, 2, 1)),
    ("v5litepod-256", "16x16", (8, 8, 1), (2, 2, 1)),
    ("v5p-64", "2x4x4", (1, 2, 4), (2, 2, 1)),
    ("v5p-128", "4x4x4", (2, 2, 4), (2, 2, 1)),
    ("v6e-8", "2x4", (1, 1, 1), (2, 4, 1)),
    ("v6e-16", "4x4", (2, 2, 1), (2, 2, 1)),
    ("v6e-128", "8x16", (4, 8, 1), (2, 2, 1)),
    ("v6e-256", "16x16", (8, 8, 1), (2, 2, 1)),
    ("tpu7x-2", "1x1x1", (1, 1, 1), (1, 1, 1)),
    ("tpu7x-8", "2x2x1", (1, 1, 1), (2, 2, 1)),
    ("tpu7x-16", "2x2x2", (1, 1, 2), (2, 2, 1)),
    ("tpu7x-128", "4x4x4", (2, 2, 4), (2, 2, 1)),
]


@pytest.mark.parametrize("acc,topo,host_bounds,chip_bounds", GKE_VECTORS)
def test_slice_shape_matches_gke_bounds(acc, topo, host_bounds, chip_bounds):
    shape = slice_shape(acc, topo)
    assert shape.host_bounds == host_bounds
    assert shape.chips_per_host_bounds == chip_bounds
    assert shape.hosts == parse_accelerator_type(acc).hosts


@pytest.mark.parametrize(
    "acc,topo",
    [("v6e-16", "2x2x4"), ("v4-16", "4x4"), ("v6e-16", "4x8"), ("v4-16", "2x2x1"), ("v6e-16", "4x4x"), ("v6e-16", "1x16")],
)
def test_slice_shape_mismatch_is_an_error(acc, topo):
    with pytest.raises(TopologyStringError):
        slice_shape(acc, topo)


def test_chip_coordinates_v6e_4x4():
    shape = slice_shape("v6e-16", "4x4")
    assert [shape.chip_coords(0, c) for c in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [shape.chip_coords(3, c) for c in range(4)] == [(2, 2), (3, 2), (2, 3), (3, 3)]
    every = {shape.chip_coords(w, c) for w in range(4) for c in range(4)}
    assert every == {(x, y) for x in range(4) for y in range(4)}


def test_chip_coordinates_v5p_2x2x2():
    shape = slice_shape("v5p-16", "2x2x2")
    assert [shape.chip_coords(1, c) for c in range(4)] == [(0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)]
    with pytest.raises(ValueError):
        shape.chip_coords(2, 0)


def test_chip_coordinates_agree_with_rays_worker_position():
    """Ray computes a worker's position from libtpu chip coordinates; ours must invert to the id.

    Only square 2D slices: Ray's subslice tables read ``AxB`` as y-by-x and ``AxBxC`` as
    z-by-y-by-x with the 2-chip block on the first two, while the GKE bounds (which we follow) put
    the block on the first two dimensions in string order and call the first one x. On a square
    2D grid both conventions give the same worker numbering.
    """
    from ray._private.accelerators.tpu import _get_physical_worker_id_from_coords

    for acc, topo in [("v6e-256", "16x16"), ("v6e-16", "4x4"), ("v5litepod-64", "8x8")]:
        shape = slice_shape(acc, topo)
        for w in range(shape.hosts):
            coords = [list(shape.chip_coords(w, c)) for c in range(4)]
            assert _get_physical_worker_id_from_coords(coords, topo) == w


@given(st.sampled_from([g for g in GENERATIONS]), st.integers(min_value=1, max_value=4096))
def test_parse_never_crashes_on_any_count(gen, n):
    text = f"{gen.name}-{n}"
    try:
        acc = parse_accelerator_type(text)
    except TopologyStringError as exc:
        assert repr(text) in str(exc)
    else:
        assert acc.chips * gen.cores_per_chip == n
        assert acc.hosts * acc.chips_per_host == acc.chips


def test_pci_generations():
    assert generation_from_pci("0x0027", "0x004e").generation == "v2"
    assert generation_from_pci("0x0027", "0x004f").generation == "v3"
    assert generation_from_pci("0x0027", None) is None  # v2/v3 cannot be told apart without it
    assert generation_from_pci("0x005e", None).generation == "v4"
    assert generation_from_pci("0x0062", None).generation == "v5p"
    assert generation_from_pci("0x0063", None).generation == "v5e"
    assert generation_from_pci("0x006f", "0x0000").generation == "v6e"
    assert generation_from_pci("0x0076", None).functions_per_chip == 2
    assert generation_from_pci("0x0042", None) is None  # gVNIC
    assert generation_from_pci("0x001f", None) is None  # NVMe


def test_generation_names_and_ray_types():
    assert generation_for("TPU-V6E").ray_accelerator_type == "TPU-V6E"
    assert generation_for("v7x").ray_accelerator_type == "TPU-V7X"
    assert generation_for("v5litepod").ray_accelerator_type == "TPU-V5LITEPOD"
    from ray.util import accelerators as ray_acc

    for gen in GENERATIONS:
        assert gen.ray_accelerator_type in {
            ray_acc.GOOGLE_TPU_V2, ray_acc.GOOGLE_TPU_V3, ray_acc.GOOGLE_TPU_V4, ray_acc.GOOGLE_TPU_V5P,
            ray_acc.GOOGLE_TPU_V5LITEPOD, ray_acc.GOOGLE_TPU_V6E, ray_acc.GOOGLE_TPU_V7X,
        }
    with pytest.raises(TopologyStringError):
        generation_for("v9")
