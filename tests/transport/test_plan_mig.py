"""A reservation of MIG instances is planned as units of their GPU: the GPU's NUMA node, CPUs and
nearest NIC, next to a whole GPU of the same host on the other socket."""

from __future__ import annotations

from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.transport import plan_transport

from .conftest import HOSTS, domain

PARTLY = "nvidia_gpu/h100-partly-mig"
MIXED = "nvidia_gpu/h100-80gb-mig-mixed"


def test_instances_are_planned_at_their_gpu_and_a_whole_gpu_at_its_own():
    (desc,) = discover(open_host(HOSTS / PARTLY)).descriptions
    plan = plan_transport([domain(PARTLY, 1, **{"mig-1g.10gb": 2})])
    assert plan.resource == "mig-1g.10gb" and [r.units for r in plan.ranks] == [(0,), (1,)]
    for rank in plan.ranks:
        (device,) = plan.devices_of(rank)
        part = desc.partitions[rank.units[0]]
        assert (device.id, device.numa_node, device.cpus) == (part.id, 0, part.cpus) and 0 in device.cpus
        assert rank.env["NCCL_IB_HCA"] == "=mlx5_0"  # the MIG GPU's NIC (socket 0)

    whole = plan_transport([domain(PARTLY, 1, GPU=1)])
    (device,) = whole.devices_of(whole.ranks[0])
    assert (whole.resource, device.pci_address, device.numa_node) == ("GPU", "0000:c1:00.0", 1)
    assert whole.ranks[0].env["NCCL_IB_HCA"] == "=mlx5_1"


def test_each_profile_of_a_mixed_gpu_is_its_own_unit_family():
    (desc,) = discover(open_host(HOSTS / MIXED)).descriptions
    plan = plan_transport([domain(MIXED, 1, **{"mig-3g.40gb": 1})])
    (device,) = plan.devices_of(plan.ranks[0])
    (big,) = [p for p in desc.partitions if p.profile == "3g.40gb"]
    assert (plan.resource, device.id, device.memory_bytes) == ("mig-3g.40gb", big.id, big.memory_bytes)
