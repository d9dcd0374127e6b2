"""Placement by MIG profile on the MIG snapshots (resources and labels as the start hook gives them):
a bundle of instances lands where that profile is, a whole-GPU request never counts a MIG GPU."""

from __future__ import annotations

import pytest

from ray_accel_ext import node_spec
from ray_accel_ext.errors import WouldSplitDomain
from ray_accel_ext.placement import DomainRequest, choose_domain
from tests.support.paths import HOSTS

SNAPSHOTS = ("h100-partly-mig", "a100-80gb-mig-homogeneous", "h100-80gb-mig-mixed")


@pytest.fixture(scope="module")
def nodes():
    out = []
    for name in SNAPSHOTS:
        spec = node_spec(HOSTS / "nvidia_gpu" / name)
        labels = {**spec.labels, "rayaccel.io/fabric-domain": name}  # one domain per host
        out.append({"NodeID": name, "Alive": True, "Labels": labels, "Resources": {"CPU": 8.0, **spec.resources}})
    return out


def test_a_bundle_of_one_profile_lands_where_that_profile_is(nodes):
    big = choose_domain(nodes, DomainRequest(bundles=[{"mig-3g.40gb": 1}]))
    assert big.node_ids == ("h100-80gb-mig-mixed",)
    seven = choose_domain(nodes, DomainRequest(bundles=[{"mig-1g.10gb": 1}] * 7))
    assert seven.domain in ("h100-partly-mig", "a100-80gb-mig-homogeneous")
    assert seven.bundles == ({"mig-1g.10gb": 1},) * 7
    with pytest.raises(WouldSplitDomain):
        choose_domain(nodes, DomainRequest(bundles=[{"mig-1g.10gb": 1}] * 8))  # 7 per GPU, one GPU per domain


def test_a_whole_gpu_request_never_counts_a_mig_gpu(nodes):
    one = choose_domain(nodes, DomainRequest(hosts=1, bundle={"GPU": 1}))
    assert one.node_ids == ("h100-partly-mig",)  # its second GPU; the other two hosts have no whole GPU
    with pytest.raises(WouldSplitDomain):
        choose_domain(nodes, DomainRequest(bundles=[{"GPU": 2}]))  # the partly-MIG host has one whole GPU
