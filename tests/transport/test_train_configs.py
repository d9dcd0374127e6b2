"""What ``TrainJob`` hands Ray Train and Serve, built as real Ray Train v2 objects (no cluster):
workers pinned to the plan's hosts in rank order, the plan attached to the framework config, the
backend that applies it before the original one starts, and Serve's per-rank bundles."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
pytest.importorskip("ray.train")

from ray.train.backend import Backend  # noqa: E402

from ray_accel_ext.labels import NODE_ID as NODE_ID_KEY  # noqa: E402
from ray_accel_ext.train import TrainJob, serve_options  # noqa: E402
from ray_accel_ext.train.backends import check_ranks, planned_backend  # noqa: E402
from ray_accel_ext.transport import plan_transport  # noqa: E402

from .conftest import domain  # noqa: E402


def job(*domains, **kw):
    return TrainJob([], plan_transport(list(domains), **kw))


def test_gpu_workers_hold_their_units_and_follow_the_plan_hosts():
    j = job(domain("nvidia_gpu/h100-sxm-8gpu-dgx", 2), units_per_rank=2)
    sc = j.scaling_config(cpus_per_worker=2)
    assert sc.num_workers == 8 and sc.use_gpu and sc.resources_per_worker == {"GPU": 2.0, "CPU": 2.0}
    assert sc.label_selector == [{NODE_ID_KEY: n} for n in ["d0-n0"] * 4 + ["d0-n1"] * 4]
    assert sc._label_selector_per_worker(8) == sc.label_selector  # what Ray Train gives bundle i


def test_neuron_workers_hold_cores_and_tpu_workers_hold_cpus_only():
    trn = job(domain("neuron/trn2-48xlarge", 2))
    assert trn.scaling_config().resources_per_worker == {"neuron_cores": 64.0, "CPU": 1.0}
    tpu = job(domain("tpu/gce-v5p-16-worker1", 2, name="s0"), domain("tpu/gce-v5p-16-worker1", 2, name="s1"))
    sc = tpu.scaling_config(cpus_per_worker=0.5)
    assert not tpu.workers_hold_devices and sc.resources_per_worker == {"CPU": 0.5} and not sc.use_tpu
    with pytest.raises(ValueError, match="cpus_per_worker > 0"):
        tpu.scaling_config(cpus_per_worker=0)
    jax = tpu.jax_config()
    assert jax.use_tpu and not jax.use_gpu and jax.transport_plan is tpu.plan


def test_framework_configs_carry_the_plan_and_wrap_the_original_backend():
    pytest.importorskip("torch")
    from ray.train.torch import TorchConfig

    j = job(domain("nvidia_gpu/gb200-nvl72-tray", 2))
    cfg = j.torch_config(backend="gloo", timeout_s=60)
    assert isinstance(cfg, TorchConfig) and cfg.backend == "gloo" and cfg.transport_plan is j.plan
    wrapped = cfg.backend_cls
    inner = TorchConfig().backend_cls
    assert issubclass(wrapped, inner) and issubclass(wrapped, Backend) and wrapped is planned_backend(inner)
    assert wrapped.on_start is not inner.on_start and wrapped.on_shutdown is inner.on_shutdown


def test_rank_mismatches_are_reported():
    assert check_ranks([{"plan_rank": 0, "world_rank": 0, "units": [0]}]) == []
    mismatch = [{"plan_rank": 3, "world_rank": 2, "units": [1]}]
    assert check_ranks(mismatch) == ["world rank 2 runs plan rank 3 (units [1])"]


def test_serve_replica_options_have_one_pinned_bundle_per_rank():
    j = job(domain("nvidia_gpu/gb200-nvl72-tray", 2), units_per_rank=4)
    opts = serve_options(j)
    assert opts["num_replicas"] == 1
    assert opts["placement_group_bundles"] == [{"GPU": 4.0}, {"GPU": 4.0}]
    assert opts["placement_group_bundle_label_selector"] == [{NODE_ID_KEY: "d0-n0"}, {NODE_ID_KEY: "d0-n1"}]
    actor = opts["ray_actor_options"]
    assert actor["num_gpus"] == 4.0 and actor["runtime_env"]["env_vars"] == dict(j.plan.ranks[0].env)


def test_serve_accepts_the_options():
    serve = pytest.importorskip("ray.serve")

    class Model:
        pass

    j = job(domain("neuron/trn2-48xlarge", 2))
    deployment = serve.deployment(Model).options(**serve_options(j, cpus_per_rank=1))
    assert deployment.num_replicas == 1
    assert deployment.ray_actor_options["resources"] == {"neuron_cores": 64.0}
