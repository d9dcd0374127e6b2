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


@pytest.mark.ray
def test_demo_keep_serves_the_dashboard_until_ctrl_c():
    """``--keep``: the demo's cluster stays up with the dashboard served on it; Ctrl-C stops both.
    The table shows the fabric domain label whole, so it can be copied into a selector."""
    import selectors
    import signal
    import urllib.request

    from tests.support.paths import HOSTS

    tray = HOSTS / "nvidia_gpu" / "gb200-nvl72-tray"
    proc = subprocess.Popen([sys.executable, "-m", "ray_accel_ext.tools.cli", "demo", "--snapshots", str(tray),
                             "--keep", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    lines: list[str] = []
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not any("ray-accel demo: dashboard: http://" in line for line in lines):
            assert sel.select(timeout=300), lines
            line = proc.stdout.readline()
            assert line, ("".join(lines), proc.stderr.read()[-3000:])
            lines.append(line)
        url = lines[-1].split("dashboard: ", 1)[1].split()[0]
        doc = json.loads(urllib.request.urlopen(url + "api/cluster", timeout=60).read())
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert [n["hostname"] for n in doc["nodes"]] and doc["dashboard"]["error"] is None
    label = doc["nodes"][0]["labels"]["rayaccel.io/fabric-domain"]
    text = "".join(lines)
    assert f"  {label}  " in text and "cluster kept up at 127.0.0.1:" in text and "RAY_AUTH_MODE=disabled" in text
    assert "stopping the cluster" in out
