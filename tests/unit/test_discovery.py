"""Discovery orchestration and the adapter, with small in-test backends on a tmp host."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from ray_accel_ext.backend import AcceleratorBackend
from ray_accel_ext.host import FsHost
from ray_accel_ext.labels import is_valid_key, is_valid_value, sanitize_value
from ray_accel_ext.model import Device, Fabric, Location, Nic, NicPath, NodeDescription, NodeInventory, Sku
from ray_accel_ext.node.adapter import RayNodeSpec, degraded_spec, to_ray_node
from ray_accel_ext.node.discovery import discover


class Fixed(AcceleratorBackend):
    """Describes whatever description it was built with."""

    name = "fixed"
    resource_name = "GPU"
    label_prefix = "fixed.example"

    def __init__(self, desc=None, *, delay_s=0.0, fail=None):
        self.desc, self.delay_s, self.fail = desc, delay_s, fail

    def detect(self, host):
        if self.delay_s:
            time.sleep(self.delay_s)
        return True

    def describe(self, host):
        if self.fail:
            raise self.fail
        return self.desc


def gpu_desc(backend="fixed", n=2, **kw):
    base = dict(
        backend=backend,
        sku=Sku(vendor="nvidia", name="h100-sxm5-80gb", generation="hopper", ray_accelerator_type="H100", memory_bytes=80 << 30),
        resource_name="GPU",
        resource_quantity=n,
        devices=tuple(Device(index=i, id=f"GPU-{i}", numa_node=i % 2, nics=(NicPath(nic=f"mlx5_{i}", path="PIX"),)) for i in range(n)),
        nics=tuple(Nic(name=f"mlx5_{i}", kind="infiniband") for i in range(n)),
        interconnect="nvlink4",
        fabric=Fabric(kind="host", id="node-a"),
    )
    base.update(kw)
    return NodeDescription(**base)


@pytest.fixture
def host(tmp_path):
    return FsHost(tmp_path, env={}, budget_s=0.5)


def test_hanging_backend_is_abandoned_within_the_budget(host):
    other = type("Other", (Fixed,), {"name": "other", "label_prefix": "other.example"})(gpu_desc("other"))
    started = time.monotonic()
    inventory = discover(host, backends=[Fixed(gpu_desc(), delay_s=5), other])
    assert time.monotonic() - started < 1.5
    assert [d.backend for d in inventory.descriptions] == ["other"]
    (problem,) = inventory.problems
    assert (problem.backend, problem.stage) == ("fixed", "budget") and "0.5s discovery budget" in problem.message


def test_failing_backend_does_not_hide_others(host):
    other = type("Other", (Fixed,), {"name": "other", "label_prefix": "other.example"})(gpu_desc("other"))
    inventory = discover(host, backends=[Fixed(fail=RuntimeError("boom")), other])
    assert [d.backend for d in inventory.descriptions] == ["other"]
    assert [(p.stage, p.error, p.message) for p in inventory.problems] == [("describe", "RuntimeError", "boom")]
    assert to_ray_node(inventory).labels["rayaccel.io/discovery"] == "degraded"


@pytest.mark.parametrize(
    "desc, message",
    [
        (gpu_desc(backend="impostor"), "backend: backend is 'impostor', expected 'fixed'"),
        (gpu_desc(attributes={"ray.io/sneaky": "x"}), "outside the backend's prefix"),
        (gpu_desc(devices=(Device(index=1, id="x"),)), "devices[0].index"),
    ],
)
def test_invalid_descriptions_are_rejected_with_the_reason(host, desc, message):
    inventory = discover(host, backends=[Fixed(desc)])
    assert inventory.descriptions == ()
    assert message in inventory.problems[0].message


def test_gpu_node_labels_and_resources():
    desc = gpu_desc(n=8, fabric=Fabric(kind="nvlink-domain", id="5000-0000.4000000004", hosts=18, worker=3),
                    location=Location(provider="gcp", rack="sb-1", block="b-1", cluster="c-1"))
    spec = to_ray_node(NodeInventory(descriptions=(desc,)))
    assert dict(spec.resources) == {"GPU": 8.0, "accelerator_type:H100": 1.0}
    assert dict(spec.labels) == {
        "ray.io/accelerator-type": "H100",
        "ray.io/gpu-domain": "5000-0000.4000000004",
        "rayaccel.io/schema": "1",
        "rayaccel.io/discovery": "ok",
        "rayaccel.io/families": "fixed",
        "rayaccel.io/vendor": "nvidia",
        "rayaccel.io/sku": "h100-sxm5-80gb",
        "rayaccel.io/generation": "hopper",
        "rayaccel.io/count": "8",
        "rayaccel.io/memory-gib": "80",
        "rayaccel.io/interconnect": "nvlink4",
        "rayaccel.io/fabric-domain": "5000-0000.4000000004",
        "rayaccel.io/fabric-hosts": "18",
        "rayaccel.io/fabric-worker": "3",
        "rayaccel.io/cluster": "c-1",
        "rayaccel.io/block": "b-1",
        "rayaccel.io/rack": "sb-1",
        "rayaccel.io/numa-nodes": "2",
        "rayaccel.io/rdma-nics": "8",
        "rayaccel.io/gpudirect": "true",
    }


def test_gpudirect_false_when_a_device_only_has_far_nics():
    devices = (Device(index=0, id="a", nics=(NicPath(nic="m0", path="PIX"),)), Device(index=1, id="b", nics=(NicPath(nic="m0", path="SYS"),)))
    desc = gpu_desc(devices=devices, nics=(Nic(name="m0", kind="roce"),), resource_quantity=2)
    assert to_ray_node(NodeInventory(descriptions=(desc,))).labels["rayaccel.io/gpudirect"] == "false"


def test_two_families_are_both_published():
    tpu = NodeDescription(
        backend="zz_tpu", sku=Sku(vendor="google", name="tpu-v6e", generation="v6e", ray_accelerator_type="TPU-V6E"),
        resource_name="TPU", resource_quantity=4, devices=tuple(Device(index=i, id=str(i)) for i in range(4)),
    )
    spec = to_ray_node(NodeInventory(descriptions=(tpu, gpu_desc(n=8))))
    assert spec.resources["GPU"] == 8 and spec.resources["TPU"] == 4
    assert spec.resources["accelerator_type:H100"] == 1 and spec.resources["accelerator_type:TPU-V6E"] == 1
    assert spec.labels["rayaccel.io/families"] == "fixed.zz_tpu"
    assert spec.labels["rayaccel.io/sku"] == "h100-sxm5-80gb"  # primary: the family with most devices
    assert spec.labels["rayaccel.io/zz-tpu-sku"] == "tpu-v6e" and spec.labels["rayaccel.io/zz-tpu-count"] == "4"


def test_no_accelerators_and_total_failure():
    assert dict(to_ray_node(NodeInventory()).labels) == {
        "rayaccel.io/schema": "1", "rayaccel.io/discovery": "ok", "rayaccel.io/count": "0"}
    assert dict(degraded_spec().labels) == {"rayaccel.io/schema": "1", "rayaccel.io/discovery": "degraded"}


HOSTILE = [
    "rack/../../etc", "a b c", "x" * 200, "-lead-and-trail-", "ünïcödé", "$(rm -rf /)", "ray.io/tpu-slice-name=evil",
    "", "   ", "\n", "a,b=c", "..", "_", "ok-value",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_outside_values_become_valid_labels_or_vanish(value):
    desc = gpu_desc(
        fabric=Fabric(kind="nvlink-domain", id=value or "x", topology=value or None),
        location=Location(rack=value or None, cluster=value or None),
        attributes={"fixed.example/fw": value},
    )
    spec = to_ray_node(NodeInventory(descriptions=(desc,)))
    for key, val in spec.labels.items():
        assert is_valid_key(key), key
        assert is_valid_value(val) and val, (key, val)
    assert not any(k.startswith("ray.io/tpu") for k in spec.labels)


def test_sanitize_value_rules():
    assert sanitize_value("projects/123/zones/us-central2-b") == "projects-123-zones-us-central2-b"
    assert sanitize_value("x" * 70) == "x" * 63
    assert sanitize_value("__") == ""
    assert sanitize_value("-a-") == "a"


def test_delivery_formats_parse_back_with_rays_own_parsers():
    from ray._private.label_utils import parse_node_labels_string

    spec = to_ray_node(NodeInventory(descriptions=(gpu_desc(n=8),)))
    flags = spec.ray_start_flags()
    assert flags[:2] == ["--num-gpus", "8"]
    assert json.loads(flags[flags.index("--resources") + 1]) == {"accelerator_type:H100": 1}
    assert parse_node_labels_string(flags[flags.index("--labels") + 1]) == dict(spec.labels)
    assert yaml.safe_load(spec.labels_yaml()) == dict(spec.labels)
    exports = dict(line.split("=", 1) for line in spec.env_exports().replace("export ", "").splitlines())
    assert json.loads(exports["RAY_OVERRIDE_LABELS"].strip("'")) == dict(spec.labels)
    assert json.loads(exports["RAY_OVERRIDE_RESOURCES"].strip("'")) == {"GPU": 8, "accelerator_type:H100": 1}


def test_spec_is_immutable():
    spec = RayNodeSpec(resources={"GPU": 1}, labels={"a": "b"})
    with pytest.raises(TypeError):
        spec.labels["x"] = "y"  # type: ignore[index]


def test_backends_run_concurrently(host):
    barrier = threading.Barrier(2, timeout=2)

    class Waits(Fixed):
        def detect(self, host):
            barrier.wait()
            return True

    a = Waits(gpu_desc())
    b = type("WaitsB", (Waits,), {"name": "other", "label_prefix": "other.example"})(gpu_desc("other"))
    inventory = discover(host, backends=[a, b])
    assert {d.backend for d in inventory.descriptions} == {"fixed", "other"} and not inventory.problems
