"""AMD health after start: amdgpu RAS counters in sysfs become ``ras_uncorrectable`` events only
when the uncorrectable count grows; correctable errors never do."""

from __future__ import annotations

import shutil

from ray_accel_ext.backends.amd_gpu.ras import ras_events, uncorrectable_counts
from ray_accel_ext.cluster.device_health import classify
from ray_accel_ext.cluster.device_watch import node_devices
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS


def test_a_growing_uncorrectable_count_is_a_fault_event(tmp_path):
    snap = tmp_path / "mi300x"
    shutil.copytree(HOSTS / "amd_gpu" / "mi300x-8gpu-hive", snap, symlinks=True)
    host = open_host(snap)
    devices, _ = node_devices(discover(host))
    amd = [d for d in devices if d["backend"] == "amd_gpu"]
    ras = snap / "rootfs" / "sys" / "bus" / "pci" / "devices" / amd[2]["pci_address"] / "ras"
    ras.mkdir()
    (ras / "umc_err_count").write_text("ue: 0\nce: 4\nde: 0\n")
    (ras / "gfx_err_count").write_text("ue: 0\nce: 0\n")
    baseline = uncorrectable_counts(host, [d["pci_address"] for d in amd])
    assert ras_events(open_host(snap), amd, baseline) == []
    (ras / "umc_err_count").write_text("ue: 0\nce: 9\nde: 0\n")  # correctable only
    assert ras_events(open_host(snap), amd, baseline) == []
    (ras / "umc_err_count").write_text("ue: 2\nce: 9\nde: 0\n")
    (event,) = ras_events(open_host(snap), amd, baseline)
    assert (event["device"], event["count"], classify(event)) == (amd[2]["id"], 2, "fault")
    assert ras_events(open_host(snap), amd, baseline) == []  # reported once
