"""Multi-node NVLink: the GB200 tray's clique becomes ``ray.io/gpu-domain`` and
``rayaccel.io/fabric-domain``; no clique, a zero cluster UUID or disagreeing GPUs give none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS as ALL_HOSTS

HOSTS = ALL_HOSTS / "nvidia_gpu"
CLIQUE = "b9e3c1a2-5d4f-4a6b-8c7d-1e2f3a4b5c6d.32766"


def ray_args(capsys, root) -> dict:
    assert main(["ray-args", "--root", str(root), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def gb200(tmp_path) -> Path:
    dst = tmp_path / "gb200"
    shutil.copytree(HOSTS / "gb200-nvl72-tray", dst, symlinks=True)
    return dst


def edit_fabric(snapshot: Path, edit) -> None:
    path = snapshot / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    for i, dev in enumerate(reading["devices"]):
        edit(i, dev["fabric"])
    path.write_text(json.dumps(reading))


def test_gb200_tray_publishes_its_clique(capsys):
    labels = ray_args(capsys, HOSTS / "gb200-nvl72-tray")["labels"]
    assert labels["ray.io/gpu-domain"] == CLIQUE
    assert labels["rayaccel.io/fabric-domain"] == CLIQUE
    assert labels["rayaccel.io/interconnect"] == "nvlink5"
    assert labels["ray.io/accelerator-type"] == "GB200"
    assert labels["rayaccel.io/discovery"] == "ok"


def test_h100_zero_cluster_uuid_is_no_domain(capsys):
    labels = ray_args(capsys, HOSTS / "h100-sxm-8gpu-dgx")["labels"]
    assert "ray.io/gpu-domain" not in labels
    assert labels["rayaccel.io/fabric-domain"] == "dgx-h100-017"  # the host is its own domain
    assert labels["rayaccel.io/fabric-hosts"] == "1"


def test_gpus_disagreeing_on_the_clique_publish_no_domain(capsys, caplog, gb200):
    edit_fabric(gb200, lambda i, f: f.update(clique_id=f["clique_id"] + (i == 3)))
    labels = ray_args(capsys, gb200)["labels"]
    assert "ray.io/gpu-domain" not in labels
    assert labels["rayaccel.io/fabric-domain"] == "nvl72-r07-tray05"
    assert labels["rayaccel.io/discovery"] == "degraded"
    assert "disagree on their NVLink clique" in caplog.text


@pytest.mark.parametrize(
    "change",
    [{"state": 2}, {"status": 999}],  # fabric registration IN_PROGRESS; completed with an error
    ids=["in-progress", "failed-status"],
)
def test_fabric_not_attached_is_no_domain_and_not_degraded(capsys, gb200, change):
    edit_fabric(gb200, lambda i, f: f.update(change))
    labels = ray_args(capsys, gb200)["labels"]
    assert "ray.io/gpu-domain" not in labels
    assert labels["rayaccel.io/fabric-domain"] == "nvl72-r07-tray05"
    assert labels["rayaccel.io/discovery"] == "ok"
