"""Worker-side topology: Ray ids to devices, NCCL variables, CPU pinning."""

from __future__ import annotations

import os

import pytest

from ray_accel_ext.errors import RuntimeTopologyError
from ray_accel_ext.host import open_host
from ray_accel_ext.model import Nic
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.worker import my_devices, nccl_env, pin_to_local_cpus, topology_for
from tests.support.paths import HOSTS


@pytest.fixture(scope="module")
def h100():
    (desc,) = discover(open_host(HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx", environ={})).descriptions
    return desc


def test_ids_map_to_devices_their_cpus_and_nics(h100):
    topo = topology_for(h100, ["5", "4"])
    assert [d.index for d in topo.devices] == [4, 5]
    assert topo.numa_nodes == (1,)
    assert topo.cpus[0] == 56 and 111 in topo.cpus and 0 not in topo.cpus
    assert [n.name for n in topo.nics] == ["mlx5_4", "mlx5_5"]
    assert topo.nccl_env == {"NCCL_IB_HCA": "=mlx5_4,mlx5_5"}


def test_unknown_ids_are_a_clear_runtime_error(h100):
    with pytest.raises(RuntimeTopologyError, match="devices 0..7"):
        topology_for(h100, ["8"])
    with pytest.raises(RuntimeTopologyError, match="not an index"):
        topology_for(h100, ["GPU-abc"])


def test_nccl_env_by_nic_kind():
    assert nccl_env([Nic(name="mlx5_1", kind="roce"), Nic(name="mlx5_10", kind="infiniband")]) == {
        "NCCL_IB_HCA": "=mlx5_1,mlx5_10"}
    assert nccl_env([Nic(name="rdmap16s27", kind="efa")]) == {"FI_PROVIDER": "efa"}
    assert nccl_env([]) == {}


def test_pin_to_local_cpus_respects_the_allowed_set(h100):
    before = os.sched_getaffinity(0)
    try:
        socket0 = topology_for(h100, ["0"])  # CPUs 0-55,112-167: this machine's CPUs are among them
        applied = pin_to_local_cpus(socket0)
        assert applied and set(applied) <= before and set(applied) <= set(socket0.cpus)
        assert os.sched_getaffinity(0) == set(applied)
        os.sched_setaffinity(0, before)
        far = topology_for(h100, ["7"])  # CPUs 56-111,168-223
        if set(far.cpus) & before:
            pytest.skip("this machine has CPUs of the snapshot's second socket")
        with pytest.raises(RuntimeTopologyError, match="none of the devices' local CPUs"):
            pin_to_local_cpus(far)
        assert os.sched_getaffinity(0) == before  # nothing changed on failure
    finally:
        os.sched_setaffinity(0, before)


def test_my_devices_outside_ray_is_a_clear_error():
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray driver is connected in this process")
    with pytest.raises(RuntimeTopologyError, match="inside a Ray task or actor"):
        my_devices()
