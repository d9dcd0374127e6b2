"""Real Ray, real `ray start`: nodes come up through RAY_START_HOOK from host snapshots.

The package's shared cluster (``tests/unit/conftest.py``): the 8x H100 DGX snapshot as head, and a
damaged copy of it as a worker (corrupt, missing and unreadable sysfs files plus a broken symlink).
Shows issue 2's promises: GPU count and type, the schema labels, label-selector placement with
CUDA_VISIBLE_DEVICES set by Ray, the worker call's NUMA CPUs and nearest NICs, and a degraded node
that still starts.
"""

from __future__ import annotations

import os
import shutil

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.ray_hook import merge_into_init_kwargs, merge_into_params, node_spec  # noqa: E402
from ray_accel_ext.testing.cluster import NODE_NAME_LABEL  # noqa: E402
from tests.support.unit_nodes import DAMAGED_FILES, H100  # noqa: E402

pytestmark = pytest.mark.ray


def test_h100_node_has_gpus_type_and_schema_labels(cluster):
    node = cluster.ray_node("h100")
    assert node["Resources"]["GPU"] == 8
    assert node["Resources"]["accelerator_type:H100"] == 1
    labels = node["Labels"]
    expected = {
        "ray.io/accelerator-type": "H100",
        "rayaccel.io/schema": "1",
        "rayaccel.io/sku": "h100-sxm5-80gb",
        "rayaccel.io/vendor": "nvidia",
        "rayaccel.io/generation": "hopper",
        "rayaccel.io/count": "8",
        "rayaccel.io/memory-gib": "80",
        "rayaccel.io/interconnect": "nvlink4",
        "rayaccel.io/numa-nodes": "2",
        "rayaccel.io/rdma-nics": "8",
        "rayaccel.io/gpudirect": "true",
        "rayaccel.io/discovery": "ok",
    }
    assert {k: labels.get(k) for k in expected} == expected


def test_task_placed_by_label_sees_its_gpus_cpus_and_nics(cluster):
    # Other nodes of the shared cluster are the same SKU (the damaged one too): the node's name
    # label keeps the selector to the head.
    @ray.remote(num_gpus=2, label_selector={"rayaccel.io/sku": "h100-sxm5-80gb", "rayaccel.io/discovery": "ok",
                                            NODE_NAME_LABEL: "h100"})
    def probe():
        import os

        from ray_accel_ext.worker import my_devices

        topo = my_devices()
        return {
            "node": ray.get_runtime_context().get_node_id(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "topo": topo.to_dict(),
        }

    results = ray.get([probe.remote() for _ in range(2)], timeout=120)
    seen = set()
    for r in results:
        assert r["node"] == cluster.node("h100").node_id
        cuda = [int(x) for x in r["cuda"].split(",")]
        assert len(cuda) == 2
        topo = r["topo"]
        assert [d["index"] for d in topo["devices"]] == sorted(cuda)
        nics = [n["name"] for n in topo["nics"]]
        assert nics == [f"mlx5_{i}" for i in sorted(cuda)]  # GPUk's PIX NIC is mlx5_k on this box
        assert topo["nccl_env"]["NCCL_IB_HCA"] == "=" + ",".join(nics)
        socket_cpus = {0: (0, 55), 1: (56, 111)}
        for d in topo["devices"]:
            lo, hi = socket_cpus[d["numa_node"]]
            assert lo in topo["cpus"] and hi in topo["cpus"]
        seen.update(cuda)
    assert len(seen) == 4  # two concurrent tasks got disjoint GPUs


def test_damaged_node_starts_degraded_and_names_the_files(cluster):
    node = cluster.ray_node("damaged")
    assert node["Alive"]
    assert node["Labels"]["rayaccel.io/discovery"] == "degraded"
    # The damaged devices are still counted where they can be: corrupt/missing optional files
    # lose only their own field, the dangling device link drops that one function.
    assert node["Resources"]["GPU"] == 7
    log = cluster.node("damaged").log()
    assert "discovery degraded" in log
    assert DAMAGED_FILES["corrupt"] in log
    assert DAMAGED_FILES["broken_link"] in log and "broken symbolic link" in log


def test_visible_devices_variable_caps_the_gpu_count(cluster):
    """CUDA_VISIBLE_DEVICES=0,1 before `ray start` on an 8-GPU host: Ray would refuse num_gpus=8."""
    cluster.add_node(H100, name="h100-visible-2", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    node = cluster.ray_node("h100-visible-2")
    assert node["Alive"] and node["Resources"]["GPU"] == 2
    assert node["Labels"]["rayaccel.io/count"] == "8"  # the host has 8; this node offers 2
    assert "GPU capped from 8 to 2" in cluster.node("h100-visible-2").log()
    cluster.remove_node(cluster.node("h100-visible-2"))  # the shared cluster's next modules never see it
    assert "h100-visible-2" not in {n["Labels"].get(NODE_NAME_LABEL) for n in ray.nodes() if n["Alive"]}


@pytest.mark.parametrize("value, gpus", [("", None), ("NoDevFiles", None), ("3", 1.0), ("0,1,2,3,4,5,6,7,8", 8.0)])
def test_cap_to_visible_follows_rays_parsing(value, gpus):
    spec = node_spec(H100, environ={"CUDA_VISIBLE_DEVICES": value})
    assert spec.resources.get("GPU") == gpus


def test_ray_params_merge_keeps_user_values():
    from ray._private.parameter import RayParams

    spec = node_spec(H100)
    params = RayParams(num_gpus=4, resources={"accelerator_type:H100": 2, "mine": 1}, labels={"rayaccel.io/sku": "custom"})
    merge_into_params(params, spec)
    assert params.num_gpus == 4
    assert params.resources == {"accelerator_type:H100": 2, "mine": 1}
    assert params.labels["rayaccel.io/sku"] == "custom"
    assert params.labels["rayaccel.io/count"] == "8"
    kwargs = merge_into_init_kwargs({"resources": {"mine": 1}}, spec)
    assert kwargs["num_gpus"] == 8 and kwargs["resources"] == {"accelerator_type:H100": 1, "mine": 1}


def test_node_spec_never_raises_on_a_bad_root(tmp_path):
    spec = node_spec(tmp_path / "does-not-exist")
    assert spec.labels["rayaccel.io/discovery"] == "degraded"


def test_init_wrapper_starts_a_local_cluster_with_the_nodes_labels():
    """``ray_accel_ext.init()`` in place of ``ray.init()``: a fresh driver process on the snapshot."""
    import json
    import subprocess
    import sys
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="rainit", dir="/tmp")  # short: Ray's socket paths max 107 bytes
    code = (
        "import json, ray, ray_accel_ext\n"
        "ray_accel_ext.init(address='local', num_cpus=1, include_dashboard=False, resources={'mine': 1},"
        " _temp_dir=%r)\n"
        "node = ray.nodes()[0]\n"
        "print(json.dumps({'resources': node['Resources'], 'labels': node['Labels']}))\n"
        "ray.shutdown()\n"
    ) % temp_dir
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_ACCEL"))}
    env.update({"RAY_ACCEL_ROOT": str(H100), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    node = json.loads(out.stdout.strip().splitlines()[-1])
    assert node["resources"]["GPU"] == 8 and node["resources"]["mine"] == 1
    assert node["resources"]["accelerator_type:H100"] == 1
    assert node["labels"]["rayaccel.io/sku"] == "h100-sxm5-80gb"
    assert node["labels"]["ray.io/accelerator-type"] == "H100"
