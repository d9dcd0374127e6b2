"""TPU multi-slice settings and ICI-neighbour order, from the v6e and v5p snapshots.

The ``MEGASCALE_*`` values are compared with what Ray itself computes for a multi-slice JAX job
(``ray.util.tpu.get_tpu_coordinator_env_vars``, Ray 2.60), the settings GKE's JobSet injects
(https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice).
"""

from __future__ import annotations

import dataclasses

import pytest

from ray_accel_ext.transport import ReservedDomain, plan_transport

from .conftest import domain

ray_tpu = pytest.importorskip("ray.util.tpu")

V5P = "tpu/gce-v5p-16-worker1"
V6E = "tpu/gke-v6e-4x4-worker0"
MEGASCALE = ("MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT")


def test_two_slices_match_rays_own_multislice_variables():
    plan = plan_transport([domain(V5P, 2, name="s0"), domain(V5P, 2, name="s1")])
    assert plan.world_size == 4 and [len(r.units) for r in plan.ranks] == [4] * 4  # one rank per host
    assert "megascale" in plan.libraries
    coordinator = plan.coordinator.address
    for r in plan.ranks:
        expected = ray_tpu.get_tpu_coordinator_env_vars(coordinator, num_slices=2, slice_id=r.domain)
        assert {k: r.env[k] for k in MEGASCALE} == expected
    assert [r.domain for r in plan.ranks] == [0, 0, 1, 1]
    assert plan.coordinator.hostname == "s0-host0"


def test_one_slice_needs_no_megascale_settings():
    plan = plan_transport([domain(V6E, 4)])
    assert not any(k in r.env for r in plan.ranks for k in MEGASCALE)


def test_incomplete_slices_in_a_multislice_plan_are_reported():
    plan = plan_transport([domain(V6E, 2, name="s0"), domain(V6E, 2, name="s1")])
    assert any("2 of the slice's 4 hosts" in w for w in plan.warnings)


def test_hosts_follow_the_slice_worker_index_whatever_the_bundle_order():
    dom = domain(V6E, 4)
    plan = plan_transport([ReservedDomain("d0", tuple(reversed(dom.hosts)))])
    assert [h.fabric_worker for h in plan.hosts] == [0, 1, 2, 3]
    assert plan.ranks[0].node_id == "d0-n0"


def test_chips_of_a_host_go_around_the_ici_ring():
    plan = plan_transport([domain(V6E, 1)])
    (rank,) = plan.ranks
    # v6e 2x2 host, chips 0..3 at (0,0) (1,0) (0,1) (1,1): 0-1-3-2 keeps every step an ICI link
    assert rank.units == (0, 1, 3, 2)


def test_several_ranks_on_one_tpu_host_get_their_own_port():
    plan = plan_transport([domain(V5P, 2, name="s0"), domain(V5P, 2, name="s1")], units_per_rank=2)
    assert [r.env["MEGASCALE_PORT"] for r in plan.ranks[:2]] == ["8081", "8082"]
    # as Ray's Torch TPU path: the coordinator address then carries the base port
    assert plan.ranks[0].env["MEGASCALE_COORDINATOR_ADDRESS"] == f"{plan.coordinator.address}:8081"


def test_ports_can_be_chosen():
    plan = plan_transport([domain(V5P, 2, name="s0"), domain(V5P, 2, name="s1")], ports={"megascale": 9000})
    assert {r.env["MEGASCALE_PORT"] for r in plan.ranks} == {"9000"}


def test_a_slice_host_without_a_description_is_planned_from_its_labels():
    dom = domain(V5P, 2, name="s0")
    bare = ReservedDomain("s0", tuple(dataclasses.replace(h, descriptions=()) for h in dom.hosts))
    plan = plan_transport([bare, domain(V5P, 2, name="s1")])
    assert [r.env["MEGASCALE_SLICE_ID"] for r in plan.ranks] == ["0", "0", "1", "1"]
    assert plan.ranks[0].units == (0, 1, 2, 3)  # index order: no coordinates without a description
    assert any("no node description" in w for w in plan.warnings)


def test_two_container_tpu7x_pods_take_the_webhooks_megascale_ports():
    """Two tpu7x-16 slices of two-container pods: container c of a pod takes 8081 + c (the KubeRay
    TPU webhook's MEGASCALE_PORT; the containers share the pod's network namespace) and the
    coordinator address carries the base port."""
    plan = plan_transport([domain("tpu/gke-tpu7x-16-two-container-c1", 1, "s0"),
                           domain("tpu/gke-tpu7x-16-two-container-c1", 1, "s1")])
    for r in plan.ranks:
        assert r.env["MEGASCALE_PORT"] == "8082"
        assert r.env["MEGASCALE_COORDINATOR_ADDRESS"].endswith(":8081")
