"""Slice arithmetic from facts (backends/tpu/layout.py) and the ICI layout (backends/tpu/ici.py).

Vectors: GKE tpu-device-plugin ``pkg/tpu/util/util_test.go`` (HOST_BOUNDS, CHIPS_PER_HOST_BOUNDS,
WRAP for a topology and chip count, hardware.md 4.3), a real v4-256 TPU VM ``tpu-env``
(``TOPOLOGY 4x4x8``, ``HOST_BOUNDS 2,2,8``, ``CHIPS_PER_HOST_BOUNDS 2,2,1``, ``WRAP true,true,true``,
hardware.md 4.2), and ``jax.devices()`` listings (chip order; see the module doc of tpu_ici).
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel_ext.backends.tpu.ici import IciLayout, host_links, parse_wrap, wrap_rule
from ray_accel_ext.backends.tpu.layout import (
    HostFacts,
    host_facts,
    machine_type_chips,
    slice_layout,
)
from ray_accel_ext.backends.tpu.topology import (
    GENERATIONS,
    parse_accelerator_type,
    parse_topology,
)
from ray_accel_ext.errors import TopologyStringError

# (type, topology, chips on each host, HOST_BOUNDS, CHIPS_PER_HOST_BOUNDS, WRAP): GKE util_test.go.
GKE_VECTORS = [
    ("v3-32", "4x4", 4, (2, 2, 1), (2, 2, 1), "false,false,false"),
    ("v4-8", "2x2x1", 4, (1, 1, 1), (2, 2, 1), "false,false,false"),
    ("v4-16", "2x2x2", 4, (1, 1, 2), (2, 2, 1), "false,false,false"),
    ("v4-128", "4x4x4", 4, (2, 2, 4), (2, 2, 1), "true,true,true"),
    ("v5litepod-1", "1x1", 1, (1, 1, 1), (1, 1, 1), "false,false,false"),
    ("v5litepod-8", "2x4", 8, (1, 1, 1), (2, 4, 1), "false,false,false"),
    ("v5litepod-16", "4x4", 4, (2, 2, 1), (2, 2, 1), "false,false,false"),
    ("v5litepod-256", "16x16", 4, (8, 8, 1), (2, 2, 1), "true,true,false"),
    ("v5p-64", "2x4x4", 4, (1, 2, 4), (2, 2, 1), "false,false,false"),
    ("v5p-128", "4x4x4", 4, (2, 2, 4), (2, 2, 1), "true,true,true"),
    ("v6e-8", "2x4", 8, (1, 1, 1), (2, 4, 1), "false,false,false"),
    ("v6e-16", "4x4", 4, (2, 2, 1), (2, 2, 1), "false,false,false"),
    ("v6e-128", "8x16", 4, (4, 8, 1), (2, 2, 1), "false,true,false"),
    ("v6e-256", "16x16", 4, (8, 8, 1), (2, 2, 1), "true,true,false"),
    ("tpu7x-2", "1x1x1", 1, (1, 1, 1), (1, 1, 1), "false,false,false"),
    ("tpu7x-8", "2x2x1", 4, (1, 1, 1), (2, 2, 1), "false,false,false"),
    ("tpu7x-16", "2x2x2", 4, (1, 1, 2), (2, 2, 1), "false,false,false"),
    ("tpu7x-128", "4x4x4", 4, (2, 2, 4), (2, 2, 1), "true,true,true"),
    ("tpu7x-13824", "12x24x24", 4, (6, 12, 24), (2, 2, 1), "true,true,true"),
]


def _layout(acc, topo, seen, **facts):
    problems: list[str] = []
    out = slice_layout(parse_accelerator_type(acc), parse_topology(topo) if topo else None,
                       HostFacts(chips_seen=seen, **facts), problems)
    return out, problems


@pytest.mark.parametrize("acc,topo,per_host,host_bounds,block,wrap", GKE_VECTORS)
def test_layout_from_the_hosts_chips_matches_gke(acc, topo, per_host, host_bounds, block, wrap):
    layout, problems = _layout(acc, topo, per_host)
    assert not problems
    assert layout.ici.host_bounds == host_bounds and layout.ici.chip_block == block
    assert layout.ici.wrap == parse_wrap(wrap)
    assert layout.hosts == math.prod(host_bounds) and layout.hosts * per_host == parse_accelerator_type(acc).chips


def test_real_v4_256_tpu_env():
    env = {"TOPOLOGY": "4x4x8", "HOST_BOUNDS": "2,2,8", "CHIPS_PER_HOST_BOUNDS": "2,2,1", "WRAP": "true,true,true"}
    problems: list[str] = []
    facts = host_facts(4, {}, env, "projects/1/machineTypes/ct4p-hightpu-4t", problems)
    layout = slice_layout(parse_accelerator_type("v4-256"), parse_topology("4x4x8"), facts, problems)
    assert not problems
    assert (layout.hosts, layout.chips_per_host, layout.ici.host_bounds) == (32, 4, (2, 2, 8))
    assert layout.chips_per_host_source == "tpu-env CHIPS_PER_HOST_BOUNDS=2,2,1"


@pytest.mark.parametrize(
    "acc,topo,seen,hosts,per_host",
    [
        ("v6e-8", "2x4", 4, 2, 4),     # two ct6e-standard-4t hosts, not one
        ("v6e-8", "2x4", 8, 1, 8),
        ("v6e-16", "4x4", 8, 2, 8),    # 8-chip hosts in a multi-host slice: 2 hosts, not 4
        ("v5litepod-16", "4x4", 8, 2, 8),
        ("v5litepod-32", "4x8", 8, 4, 8),
        ("v4-16", "2x2x2", 4, 2, 4),
        ("tpu7x-2", "1x1x1", 1, 1, 1),
    ],
)
def test_hosts_are_the_slices_chips_over_this_hosts_chips(acc, topo, seen, hosts, per_host):
    layout, problems = _layout(acc, topo, seen)
    assert not problems
    assert (layout.hosts, layout.chips_per_host) == (hosts, per_host)
    assert layout.hosts * seen == parse_accelerator_type(acc).chips


def test_declared_block_and_machine_type_count_before_the_chips_found():
    layout, problems = _layout("v6e-8", "2x4", 3, machine_type="projects/1/machineTypes/ct6e-standard-4t")
    assert (layout.hosts, layout.chips_per_host) == (2, 4)
    assert problems == [("slice arithmetic: v6e-8 has 8 chips, but 2 host(s) x 3 chips on this host = 6 "
                         "(4 chips per host from machine type ct6e-standard-4t)")]
    _, problems = _layout("v6e-16", "4x4", 4, chip_block=(2, 2, 1), chip_block_source="TPU_CHIPS_PER_HOST_BOUNDS",
                          machine_type="ct6e-standard-8t")
    assert problems[0] == "chips per host: TPU_CHIPS_PER_HOST_BOUNDS=2,2,1 says 4, machine type ct6e-standard-8t says 8; using 4"


@pytest.mark.parametrize(
    "acc,topo,seen,numbers",
    [("v6e-8", "2x4", 3, ("8 chips", "3 host(s) x 3", "= 9")),
     ("v5litepod-4", "2x2", 8, ("4 chips", "1 host(s) x 8", "= 8")),
     ("v6e-16", "4x4", 5, ("16 chips", "4 host(s) x 5", "= 20"))],
)
def test_inputs_that_disagree_degrade_naming_both_numbers(acc, topo, seen, numbers):
    _, problems = _layout(acc, topo, seen)
    assert problems and all(n in problems[0] for n in numbers), problems


@given(st.sampled_from(GENERATIONS), st.integers(1, 600), st.sampled_from([1, 2, 3, 4, 5, 8]))
def test_hosts_times_chips_is_the_slice_or_the_node_says_why(gen, suffix, seen):
    try:
        acc = parse_accelerator_type(f"{gen.name}-{suffix}")
    except TopologyStringError:
        return
    problems: list[str] = []
    layout = slice_layout(acc, None, HostFacts(chips_seen=seen), problems)
    if layout.hosts * seen != acc.chips:
        assert any(str(acc.chips) in p and str(layout.hosts * seen) in p for p in problems), problems
    else:
        assert not problems


def test_machine_type_chips():
    assert machine_type_chips("projects/123/machineTypes/ct6e-standard-4t") == 4
    assert machine_type_chips("ct5lp-hightpu-8t") == 8
    assert machine_type_chips("tpu7x-standard-4t") == 4
    assert machine_type_chips("n2-standard-16") is None and machine_type_chips(None) is None


def test_malformed_bounds_are_named_and_ignored():
    problems: list[str] = []
    facts = host_facts(4, {"TPU_CHIPS_PER_HOST_BOUNDS": "2,2", "TPU_TOPOLOGY_WRAP": "yes"}, {}, None, problems)
    assert facts.chip_block is None and facts.wrap is None
    assert [p.split("=")[0] for p in problems] == ["TPU_CHIPS_PER_HOST_BOUNDS", "TPU_TOPOLOGY_WRAP"]


def test_host_bounds_that_contradict_the_topology_leave_coordinates_out():
    layout, problems = _layout("v6e-16", "4x4", 4, host_bounds=(4, 1, 1), host_bounds_source="TPU_HOST_BOUNDS")
    assert layout.ici is None and "TPU_HOST_BOUNDS=4,1,1" in problems[0] and "2,2,1" in problems[0]


# -- chip order and coordinates -------------------------------------------------------------------


def test_chip_order_follows_the_runtime_2d():
    ici = _layout("v5litepod-16", "4x4", 4)[0].ici
    # jax.devices() on 4-chip v5e hosts of a 4x4 slice (JAX multi-process tutorial).
    assert [ici.slice_coords(0, c) for c in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [ici.slice_coords(1, c) for c in range(4)] == [(2, 0), (3, 0), (2, 1), (3, 1)]
    assert [ici.slice_coords(2, c) for c in range(4)] == [(0, 2), (1, 2), (0, 3), (1, 3)]
    eight = _layout("v5litepod-8", "2x4", 8)[0].ici  # jax.devices() on a v5litepod-8 VM
    assert [eight.host_coords(c) for c in range(8)] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]


def test_chip_order_follows_the_runtime_3d():
    ici = _layout("v4-256", "4x4x8", 4)[0].ici
    assert [ici.host_coords(c) for c in range(4)] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert ici.slice_coords(1, 0) == (2, 0, 0) and ici.slice_coords(2, 0) == (0, 2, 0)
    assert ici.slice_coords(4, 3) == (1, 1, 1) and ici.slice_coords(31, 3) == (3, 3, 7)


@pytest.mark.parametrize("acc,topo,per_host", [(a, t, p) for a, t, p, *_ in GKE_VECTORS if math.prod(parse_topology(t).dims) <= 4096])
def test_every_chip_has_one_place_and_locate_inverts_it(acc, topo, per_host):
    ici = _layout(acc, topo, per_host)[0].ici
    places = {}
    for w, c in itertools.product(range(ici.hosts), range(ici.chips_per_host)):
        xyz = ici.slice_coords(w, c)
        assert xyz not in places
        places[xyz] = (w, c)
        assert ici.locate(tuple(xyz) + (0,) * (3 - len(xyz))) == (w, c)
    assert len(places) == parse_accelerator_type(acc).chips


def test_square_2d_coordinates_agree_with_rays_worker_position():
    """On square 2D slices Ray 2.60's ``_get_physical_worker_id_from_coords`` gives back our worker
    ids. On 3D and non-square 2D slices Ray's own table reads ``AxB`` as y-by-x and gives a 4x4x4
    worker a 1x2x2 chip block, which contradicts the runtime's ``CHIPS_PER_HOST_BOUNDS=2,2,1``
    (docs/tpu.md, differences)."""
    from ray._private.accelerators.tpu import _get_physical_worker_id_from_coords

    for acc, topo in [("v6e-256", "16x16"), ("v6e-16", "4x4"), ("v5litepod-64", "8x8")]:
        ici = _layout(acc, topo, 4)[0].ici
        for w in range(ici.hosts):
            assert _get_physical_worker_id_from_coords([list(ici.slice_coords(w, c)) for c in range(4)], topo) == w


# -- links --------------------------------------------------------------------------------------


def _degree(ici, w, c):
    return len(ici.neighbours(w, c))


def test_links_of_a_4x4_mesh_host():
    ici = _layout("v6e-16", "4x4", 4)[0].ici
    links = host_links(ici, 0, 4)
    local = [(l.a, l.b) for l in links if l.peer_worker is None]
    remote = [(l.a, l.peer_worker, l.b) for l in links if l.peer_worker is not None]
    assert local == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert remote == [(1, 1, 0), (2, 2, 0), (3, 1, 2), (3, 2, 1)]
    assert not any(l.wrap for l in links)


def test_wrap_links_exactly_where_the_torus_has_them():
    full = _layout("v5p-128", "4x4x4", 4)[0].ici   # full cube: torus on every axis
    part = _layout("v5p-64", "2x4x4", 4)[0].ici    # not a cube: mesh
    lite = _layout("v6e-128", "8x16", 4)[0].ici    # y is 16 long: only y wraps
    assert all(_degree(full, w, c) == 6 for w in range(full.hosts) for c in range(4))
    assert min(_degree(part, w, c) for w in range(part.hosts) for c in range(4)) == 3
    corner = lite.neighbours(0, 0)
    assert sorted((n.axis, n.wrap) for n in corner) == [(0, False), (1, False), (1, True)]
    wrapped = next(n for n in corner if n.wrap)
    assert lite.slice_coords(wrapped.worker, wrapped.chip) == (0, 15)


def test_every_link_is_seen_from_both_ends():
    ici = _layout("tpu7x-128", "4x4x4", 4)[0].ici
    ends = set()
    for w in range(ici.hosts):
        for link in host_links(ici, w, 4):
            peer = w if link.peer_worker is None else link.peer_worker
            ends.add(((w, link.a), (peer, link.b), link.wrap))
    for (a, b, wrap) in list(ends):
        if a[0] != b[0]:
            assert (b, a, wrap) in ends


def test_twisted_torus_leaves_wrap_links_out():
    ici = _layout("v4-256", "4x4x8", 4)[0].ici
    assert any(l.wrap for l in host_links(ici, 0, 4))
    assert not any(l.wrap for l in host_links(ici, 0, 4, twisted=True))


@pytest.mark.parametrize("gen,topo,expected", [
    ("v4", (4, 4, 8), (True, True, True)), ("v4", (2, 4, 4), (False, False, False)),
    ("v5litepod", (16, 16, 1), (True, True, False)), ("v6e", (8, 16, 1), (False, True, False)),
    ("v3", (32, 32, 1), (True, True, False)), ("v3", (4, 4, 1), (False, False, False)),
    ("tpu7x", (12, 24, 24), (True, True, True)),
])
def test_wrap_rule(gen, topo, expected):
    assert wrap_rule(gen, topo) == expected


def test_host_only_layout_has_the_links_inside_the_host():
    ici = IciLayout.host_only((2, 4, 1), 2)
    assert len(host_links(ici, 0, 8)) == 10 and all(l.peer_worker is None for l in host_links(ici, 0, 8))
