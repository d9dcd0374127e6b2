"""Provider placement for NVIDIA hosts: asked only when DMI names the cloud, bounded when the
metadata server misbehaves, and never at the cost of the GPUs."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from ray_accel_ext.testing.fake_metadata import FAULT_CLASSES
from ray_accel_ext.testing.snapshots import run_snapshot
from tests.support.paths import HOSTS as ALL_HOSTS

HOSTS = ALL_HOSTS / "nvidia_gpu"
A3 = HOSTS / "gce-a3-highgpu-1g"


def test_gce_vm_gets_zone_and_placement_labels():
    inventory, spec = run_snapshot(A3)
    (desc,) = inventory.descriptions
    assert desc.location.provider == "gcp" and desc.location.zone == "us-central1-a"
    assert desc.location.instance_type == "a3-highgpu-1g"
    assert spec.labels["rayaccel.io/cluster"] == "us-central1-cluster-a3h"
    assert spec.labels["rayaccel.io/rack"] == "9a2d3c11"
    assert spec.labels["rayaccel.io/discovery"] == "ok"


@pytest.mark.parametrize("fault", ["hang", "500", "503 HTML page", "429 with long Retry-After"])
def test_metadata_faults_degrade_but_keep_the_gpu(tmp_path, fault):
    snap = tmp_path / "a3"
    shutil.copytree(A3, snap, symlinks=True)
    spec_file = snap / "metadata.json"
    md = json.loads(spec_file.read_text())
    md["gce_faults"] = {"*": FAULT_CLASSES[fault]}
    spec_file.write_text(json.dumps(md))
    started = time.monotonic()
    inventory, spec = run_snapshot(snap, budget_s=2.0)
    assert time.monotonic() - started < 4.0
    assert spec.resources["GPU"] == 1 and spec.labels["rayaccel.io/sku"] == "h100-sxm5-80gb"
    assert spec.labels["rayaccel.io/discovery"] == "degraded"
    assert "rayaccel.io/cluster" not in spec.labels
    assert any("GCE metadata" in r for r in inventory.reasons()), inventory.reasons()


@pytest.mark.parametrize("name", ["h100-sxm-8gpu-dgx", "l4-single-pcie"])
def test_no_cloud_dmi_means_no_metadata_request(tmp_path, name):
    """A host that is not a cloud VM answers without any metadata server: every request would hang."""
    snap = tmp_path / name
    shutil.copytree(HOSTS / name, snap, symlinks=True)
    (snap / "metadata.json").write_text(json.dumps({"gce_faults": {"*": {"hang": True}}, "ec2_faults": {"*": {"hang": True}}}))
    inventory, _ = run_snapshot(snap, budget_s=2.0)
    assert not inventory.degraded, inventory.reasons()
    assert inventory.descriptions[0].location.provider is None
