"""Host ranks inside a domain (pure: no Ray): hardware indices first, a stable cluster-side order
otherwise, for every domain kind; and the placement-group names that carry claims."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel_ext.placement.claims import claim_pg_name, parse_claim_pg_name
from ray_accel_ext.placement.ranks import rank_domain, rank_domains

FABRIC = "rayaccel.io/fabric-domain"
RACK = "rayaccel.io/rack"
WORKER = "rayaccel.io/fabric-worker"
HOSTS = "rayaccel.io/fabric-hosts"


def node(nid, hostname, domain="d", worker=None, rack=None, hosts=None):
    labels = {FABRIC: domain}
    if worker is not None:
        labels[WORKER] = str(worker)
    if rack:
        labels[RACK] = rack
    if hosts:
        labels[HOSTS] = str(hosts)
    return {"NodeID": nid, "Alive": True, "Labels": labels, "Resources": {"CPU": 1},
            "NodeManagerHostname": hostname}


def order(ranks):
    return [h.hostname for h in ranks.hosts]


def test_tpu_slice_ranks_by_worker_id_not_hostname():
    nodes = [node("n1", "b-host", worker=2, hosts=4), node("n2", "a-host", worker=3, hosts=4),
             node("n3", "d-host", worker=0, hosts=4), node("n4", "c-host", worker=1, hosts=4)]
    r = rank_domain(nodes, FABRIC, "d")
    assert order(r) == ["d-host", "c-host", "b-host", "a-host"]
    assert r.source == "hardware" and r.size == 4 and r.expected_hosts == 4
    assert [h.index for h in r.hosts] == [0, 1, 2, 3] and r.index_of("n3") == 0


def test_nvlink_domain_over_two_chassis_ranks_by_rack_then_tray():
    # Each chassis numbers its compute trays from 0 (NVML trayIndex).
    nodes = [node("a1", "x1", worker=1, rack="C2"), node("a0", "x0", worker=0, rack="C2"),
             node("b1", "y1", worker=1, rack="C1"), node("b0", "y0", worker=0, rack="C1")]
    r = rank_domain(nodes, FABRIC, "d")
    assert order(r) == ["y0", "y1", "x0", "x1"] and r.source == "hardware"


def test_without_hardware_index_hosts_are_ordered_cluster_side_digits_as_numbers():
    names = [f"nvl72-tray{i}" for i in (10, 2, 1, 0, 11)]
    r = rank_domain([node(f"n{i}", name) for i, name in enumerate(names)], FABRIC, "d")
    assert order(r) == ["nvl72-tray0", "nvl72-tray1", "nvl72-tray2", "nvl72-tray10", "nvl72-tray11"]
    assert r.source == "cluster"


def test_hosts_with_an_index_come_before_hosts_without():
    r = rank_domain([node("n1", "a"), node("n2", "z", worker=0)], FABRIC, "d")
    assert order(r) == ["z", "a"] and r.source == "cluster"


def test_rack_level_groups_by_fabric_domain_first():
    nodes = [node("n1", "h1", domain="s2", worker=0, rack="r"), node("n2", "h2", domain="s1", worker=1, rack="r"),
             node("n3", "h3", domain="s1", worker=0, rack="r")]
    ranks = rank_domains(nodes, RACK)
    assert list(ranks) == ["r"] and order(ranks["r"]) == ["h3", "h2", "h1"]
    assert ranks["r"].expected_hosts is None  # fabric-hosts says nothing about a rack


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=12), st.randoms(use_true_random=False), st.booleans())
def test_order_does_not_depend_on_the_order_ray_lists_nodes_in(n, rnd: random.Random, indexed):
    nodes = [node(f"id{i:02d}", f"host{i}", worker=(i * 7) % n if indexed else None) for i in range(n)]
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    assert order(rank_domain(nodes, FABRIC, "d")) == order(rank_domain(shuffled, FABRIC, "d"))


def test_claim_names_round_trip_and_other_names_are_not_claims():
    name = claim_pg_name("job-7", "123-abcdef", f"{FABRIC}=slice-a")
    assert parse_claim_pg_name(name) == ("123-abcdef", f"{FABRIC}=slice-a")
    assert parse_claim_pg_name(claim_pg_name("", "1-a", "k=v")) == ("1-a", "k=v")
    for other in ("", "my-group", "x#rayaccel-claim:", "x#rayaccel-claim:owner", "x#rayaccel-claim:owner:novalue"):
        assert parse_claim_pg_name(other) is None
