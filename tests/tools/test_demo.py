"""The main job: `ray-accel demo` on the bundled snapshots, and the bundle's freshness."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO


def _builder():
    spec = importlib.util.spec_from_file_location("build_demo_hosts", REPO / "ci" / "build_demo_hosts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundled_snapshots_match_the_tested_ones():
    builder = _builder()
    assert builder.TARBALL.read_bytes() == builder.build(), (
        "ray_accel_ext/demo_hosts.tar.gz is stale: run `python ci/build_demo_hosts.py`"
    )


@pytest.mark.ray
def test_demo_runs_end_to_end_and_places_by_label():
    out = subprocess.run(
        [sys.executable, "-m", "ray_accel_ext.tools.cli", "demo", "--format", "json"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    nodes = {n["name"]: n for n in report["nodes"]}
    assert set(nodes) == {name for name, _ in _builder().DEMO_NODES}
    assert nodes["h100-dgx"]["resources"]["GPU"] == 8
    assert nodes["gb200-tray"]["labels"]["ray.io/gpu-domain"] == nodes["gb200-tray"]["labels"]["rayaccel.io/fabric-domain"]
    assert all(n["labels"]["rayaccel.io/discovery"] == "ok" for n in nodes.values())
    tasks = {p["node"]: p for p in report["placements"] if "details" in p}
    cuda = [int(x) for x in tasks["h100-dgx"]["details"]["CUDA_VISIBLE_DEVICES (set by Ray)"].split(",")]
    assert len(set(cuda)) == 2 and all(0 <= i < 8 for i in cuda)
    assert len(tasks["tpu7x-gke"]["details"]["TPU_VISIBLE_CHIPS (set by Ray)"].split(",")) == 4
    assert len(tasks["trn2"]["details"]["NEURON_RT_VISIBLE_CORES (set by Ray)"].split(",")) == 4
    assert tasks["trn2"]["details"]["NCCL env"] == "FI_PROVIDER=efa"
    assert nodes["tpu7x-gke"]["labels"]["ray.io/tpu-pod-type"] == "v7x-8"
    assert "[1/4]" in out.stderr  # progress goes to stderr in json mode
