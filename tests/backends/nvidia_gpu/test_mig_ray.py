"""MIG on real Ray nodes started from snapshots through the hook: concurrent one-instance tasks each
see exactly their own MIG UUID; a whole-GPU task never lands on a GPU in MIG mode."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.backends.nvidia_gpu.worker import unit_instance_resources  # noqa: E402
from ray_accel_ext.conformance.live_isolation import barrier_actor  # noqa: E402
from ray_accel_ext.host import open_host  # noqa: E402
from ray_accel_ext.node.discovery import discover  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.paths import HOSTS  # noqa: E402

pytestmark = pytest.mark.ray

PARTLY = HOSTS / "nvidia_gpu" / "h100-partly-mig"
ALL_MIG = HOSTS / "nvidia_gpu" / "a100-80gb-mig-homogeneous"
SYSTEM_CONFIG = json.dumps({"custom_unit_instance_resources": unit_instance_resources(["mig-1g.10gb"])})


Barrier = barrier_actor()  # holders provably overlap


@ray.remote(num_cpus=0, resources={"mig-1g.10gb": 1})
def hold_one_instance(barrier) -> dict:
    import os

    import ray as _ray

    from ray_accel_ext.backends.nvidia_gpu.worker import use_my_partition

    part = use_my_partition()
    _ray.get(barrier.wait.remote())
    return {"node": _ray.get_runtime_context().get_node_id(), "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
            "numa": part.numa_node, "gpu": part.device}


@ray.remote(num_cpus=0, num_gpus=1)
def whole_gpu() -> dict:
    import os

    import ray as _ray

    from ray_accel_ext.worker import my_devices

    return {"node": _ray.get_runtime_context().get_node_id(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "pci": [d.pci_address for d in my_devices().devices]}


def test_concurrent_instance_holders_see_disjoint_mig_uuids_and_whole_gpus_avoid_mig():
    (desc,) = discover(open_host(PARTLY)).descriptions
    with SimulatedCluster(system_config=SYSTEM_CONFIG) as cluster:
        cluster.add_node(PARTLY, name="partly", num_cpus=1)
        cluster.add_node(ALL_MIG, name="allmig", num_cpus=1)
        cluster.connect()
        partly = cluster.ray_node("partly")["NodeID"]
        on_partly = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(partly, soft=False)
        barrier = Barrier.remote(7)
        held = ray.get([hold_one_instance.options(scheduling_strategy=on_partly).remote(barrier) for _ in range(7)],
                       timeout=300)
        assert sorted(h["cuda"] for h in held) == sorted(p.id for p in desc.partitions)
        assert {(h["numa"], h["gpu"]) for h in held} == {(0, desc.partitions[0].device)}
        whole = ray.get([whole_gpu.remote() for _ in range(2)], timeout=300)
        assert {(w["node"], w["cuda"]) for w in whole} == {(partly, "0")}
        assert {tuple(w["pci"]) for w in whole} == {("0000:c1:00.0",)}
