"""What a new user gets wrong, said plainly by ``ray-accel`` (run as users run it, in a child process):
a folder that is not one host, a snapshot's ``rootfs/`` named instead of the snapshot, settings
that name nothing, a family the SKU database lacks; and a snapshot's recorded cloud metadata
served by ``discover --root`` as the demo serves it, with doctor advising (not reporting a bug)
where no metadata server is named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import HOSTS

TRN2 = HOSTS / "neuron" / "trn2-48xlarge"
TRAY = HOSTS / "nvidia_gpu" / "gb200-nvl72-tray"
L4 = HOSTS / "nvidia_gpu" / "l4-single-pcie"


def ray_accel(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_accel_ext.tools.cli", *argv], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0], **env})


@pytest.mark.parametrize("command", ["discover", "doctor", "ray-args"])
def test_a_folder_of_snapshots_is_refused_naming_one(command):
    proc = ray_accel(command, "--root", str(HOSTS / "nvidia_gpu"))
    assert proc.returncode == 2, proc.stderr
    assert "a folder of" in proc.stderr and "host snapshots, not one host" in proc.stderr
    assert f"--root {HOSTS / 'nvidia_gpu'}/" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["discover", "ray-args"])
def test_an_empty_folder_is_refused(command, tmp_path):
    proc = ray_accel(command, "--root", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "neither a host snapshot (no rootfs/) nor a root directory (no sys/, proc/ or dev/)" in proc.stderr


def test_a_snapshots_rootfs_reads_the_whole_snapshot():
    whole = json.loads(ray_accel("discover", "--root", str(TRAY), "--format", "json").stdout)
    proc = ray_accel("discover", "--root", str(TRAY / "rootfs"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert f"reading the snapshot {TRAY}" in proc.stderr
    got = json.loads(proc.stdout)
    assert got["descriptions"] == whole["descriptions"] and got["problems"] == whole["problems"] == []
    assert whole["descriptions"][0]["links"], "NVLink comes from the recorded library beside rootfs/"


def test_settings_that_name_nothing_are_warned_about():
    proc = ray_accel("discover", "--root", str(L4), RAY_ACCEL_DISABLE="bogus,tpu", RAY_ACCEL_BUDGET_S="abc")
    assert proc.returncode == 0, proc.stderr
    assert "RAY_ACCEL_DISABLE names no backend: bogus (backends: " in proc.stderr
    assert "RAY_ACCEL_BUDGET_S='abc' is not a number of seconds" in proc.stderr
    quiet = ray_accel("discover", "--root", str(L4), RAY_ACCEL_DISABLE="tpu", RAY_ACCEL_BUDGET_S="5")
    assert "warning" not in quiet.stderr


def test_an_unknown_sku_family_is_an_error():
    proc = ray_accel("skus", "--family", "bogus")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--family bogus: no such family (families: " in proc.stderr and "nvidia" in proc.stderr
    assert ray_accel("skus", "--family", "nvidia").returncode == 0


def test_discover_root_serves_a_snapshots_metadata_like_the_demo():
    proc = ray_accel("discover", "--root", str(TRN2), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    inv = json.loads(proc.stdout)
    assert not [p for p in inv["problems"] if "Metadata" in p.get("error", "")]
    assert not [p for d in inv["descriptions"] for p in d["problems"] if "Metadata" in p]
    doctor = ray_accel("doctor", "--root", str(TRN2), "--format", "json")
    assert "metadata" not in json.dumps(json.loads(doctor.stdout)["findings"]).lower()
    spec = json.loads(ray_accel("ray-args", "--root", str(TRN2)).stdout)
    assert spec["labels"]["rayaccel.io/discovery"] == "ok"  # what the demo's trn2 node gets


def test_a_root_without_a_metadata_server_is_advice_not_a_bug():
    proc = ray_accel("doctor", "--format", "json", RAY_ACCEL_ROOT=str(TRN2 / "rootfs"))
    findings = {f["cause"]: f for f in json.loads(proc.stdout)["findings"]}
    served = findings["metadata-not-served"]
    assert served["severity"] == "warning" and "report it" not in served["fix"]
    assert "(not asking )" not in json.dumps(served) and "AWS_EC2_METADATA_SERVICE_ENDPOINT" in served["message"]
    assert "degraded" not in findings
