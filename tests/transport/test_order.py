"""Topology order inside a host: a path through the device fabric that keeps neighbours adjacent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel_ext.model import Device, Link
from ray_accel_ext.transport.order import device_order, neighbours, unit_ranges

from .conftest import template


def devices(n, coords=None):
    return [Device(index=i, id=f"d{i}", coords=coords[i] if coords else None) for i in range(n)]


def test_all_to_all_fabrics_keep_index_order():
    (desc,) = template("nvidia_gpu/h100-sxm-8gpu-dgx").descriptions
    assert device_order(desc.devices, desc.links) == list(range(8))
    (desc,) = template("nvidia_gpu/gb200-nvl72-tray").descriptions
    assert device_order(desc.devices, desc.links) == [0, 1, 2, 3]


def test_more_lanes_win_over_a_lower_index():
    # 0 =1 lane= 1, 0 =4 lanes= 2, 2 =4= 3, 1 =1= 3: the bonded pairs stay together
    links = [Link(a=0, b=1, kind="nvlink4", lanes=1), Link(a=0, b=2, kind="nvlink4", lanes=4),
             Link(a=2, b=3, kind="nvlink4", lanes=4), Link(a=1, b=3, kind="nvlink4", lanes=1)]
    assert device_order(devices(4), links) == [0, 2, 3, 1]


def test_unlinked_devices_follow_index_order_and_islands_are_joined_lowest_first():
    links = [Link(a=2, b=3, kind="nvlink4", lanes=2)]
    assert device_order(devices(5), links) == [0, 1, 2, 3, 4]
    assert device_order(devices(3), []) == [0, 1, 2]


def test_chip_coordinates_stand_in_for_links():
    grid = devices(8, [(x, y) for y in range(2) for x in range(4)])  # 4x2 chips
    order = device_order(grid, [])
    steps = [(grid[a].coords, grid[b].coords) for a, b in zip(order, order[1:])]
    assert all(sum(abs(p - q) for p, q in zip(u, v)) == 1 for u, v in steps), order
    assert neighbours(grid, [])[0] == {1: 1, 4: 1}


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(1, 18)), max_size=40))))
def test_every_device_appears_once_and_every_step_uses_a_link_while_one_is_free(case):
    n, raw = case
    links = [Link(a=min(a, b), b=max(a, b), kind="nvlink4", lanes=lanes) for a, b, lanes in raw if a != b]
    order = device_order(devices(n), links)
    assert sorted(order) == list(range(n))
    graph = neighbours(devices(n), links)
    for i, (a, b) in enumerate(zip(order, order[1:])):
        free = set(graph[a]) - set(order[: i + 1])
        assert (b in graph[a]) if free else (b == min(set(range(n)) - set(order[: i + 1])))


def test_unit_ranges():
    assert unit_ranges([0, 1, 2, 3]) == "0-3"
    assert unit_ranges([0, 2, 3, 4, 9]) == "0,2-4,9"
    assert unit_ranges([]) == ""
