"""MIG on real Ray nodes started from snapshots through the hook, with no help from the task and no
system config: concurrent one-instance tasks each see exactly their own MIG UUID (set by Ray's
worker setup, also while Ray's GPU manager blanks CUDA_VISIBLE_DEVICES for tasks without GPUs);
a whole-GPU task never lands on a GPU in MIG mode."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.conformance.live_isolation import barrier_actor  # noqa: E402
from ray_accel_ext.host import open_host  # noqa: E402
from ray_accel_ext.node.discovery import discover  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.paths import HOSTS  # noqa: E402

pytestmark = pytest.mark.ray

PARTLY = HOSTS / "nvidia_gpu" / "h100-partly-mig"
ALL_MIG = HOSTS / "nvidia_gpu" / "a100-80gb-mig-homogeneous"
# Ray's GPU manager writes CUDA_VISIBLE_DEVICES="" for every task without GPUs (2.55's default).
OVERRIDE_ON_ZERO = {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}


Barrier = barrier_actor()  # holders provably overlap


@ray.remote(num_cpus=0, resources={"mig-1g.10gb": 1})
def hold_one_instance(barrier) -> dict:
    import os

    import ray as _ray

    from ray_accel_ext.backends.nvidia_gpu.worker import my_partitions

    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")  # before anything of ours runs in the task
    (part,) = my_partitions()
    _ray.get(barrier.wait.remote())
    ids = _ray.get_runtime_context().get_accelerator_ids()
    return {"node": _ray.get_runtime_context().get_node_id(), "cuda": cuda, "ids": ids["mig-1g.10gb"],
            "GPU": ids["GPU"], "fallback": part.id, "numa": part.numa_node, "gpu": part.device}


@ray.remote(num_cpus=0, num_gpus=1)
def whole_gpu() -> dict:
    import os

    import ray as _ray

    from ray_accel_ext.worker import my_devices

    return {"node": _ray.get_runtime_context().get_node_id(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "pci": [d.pci_address for d in my_devices().devices]}


def _hold_all(node_id: str, count: int) -> list[dict]:
    on_node = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)
    barrier = Barrier.remote(count)
    return ray.get([hold_one_instance.options(scheduling_strategy=on_node).remote(barrier) for _ in range(count)],
                   timeout=300)


def _held_in_a_placement_group(instances: set[str]) -> None:
    """Bundles of one instance each: Ray names the slots by the group; each task gets its own."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = ray.util.placement_group([{"mig-1g.10gb": 1}] * 2, strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=120)
    barrier = Barrier.remote(2)
    held = ray.get([hold_one_instance.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote(barrier)
                    for i in range(2)], timeout=300)
    ray.util.remove_placement_group(pg)
    assert len({h["cuda"] for h in held}) == 2 and {h["cuda"] for h in held} <= instances, held
    assert all(h["fallback"] == h["cuda"] for h in held) and len({h["node"] for h in held}) == 1, held


def test_concurrent_instance_holders_see_disjoint_mig_uuids_and_whole_gpus_avoid_mig():
    (partly_desc,) = discover(open_host(PARTLY)).descriptions
    (all_desc,) = discover(open_host(ALL_MIG)).descriptions
    with SimulatedCluster() as cluster:
        cluster.add_node(PARTLY, name="partly", num_cpus=1, env=OVERRIDE_ON_ZERO)
        cluster.add_node(ALL_MIG, name="allmig", num_cpus=1)
        cluster.connect()
        for name, desc in (("partly", partly_desc), ("allmig", all_desc)):
            held = _hold_all(cluster.ray_node(name)["NodeID"], len(desc.partitions))
            assert sorted(h["cuda"] for h in held) == sorted(p.id for p in desc.partitions), name
            assert all(h["fallback"] == h["cuda"] and h["GPU"] == [] for h in held), held
            assert sorted(i for h in held for i in h["ids"]) == [str(i) for i in range(len(desc.partitions))]
            assert {(h["numa"], h["gpu"]) for h in held} == {(desc.partitions[0].numa_node, desc.partitions[0].device)}
        _held_in_a_placement_group({p.id for d in (partly_desc, all_desc) for p in d.partitions})
        partly = cluster.ray_node("partly")["NodeID"]
        whole = ray.get([whole_gpu.remote() for _ in range(2)], timeout=300)
        # Ray's GPU id 0 reaches the task as the whole GPU's UUID (the node's CUDA_VISIBLE_DEVICES):
        # a bare "0" would be nvidia-smi's GPU 0, the MIG GPU at 0000:41:00.0.
        assert {(w["node"], w["cuda"]) for w in whole} == {(partly, partly_desc.devices[0].id)}
        assert {tuple(w["pci"]) for w in whole} == {("0000:c1:00.0",)}
