"""Link health at start: a GPU with fewer active NVLinks than its board gives it (the SKU
database's ``nvlinks``) is a coded ``link-down`` problem naming it, the node is degraded, and a
label counts such devices; nodes whose GPUs have no NVLink at all (a VM given one GPU) are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_accel_ext import skus
from ray_accel_ext.host import open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS as ALL_HOSTS

HOSTS = ALL_HOSTS / "nvidia_gpu"
DOCTOR = Path(__file__).parent / "doctor"


def test_the_database_gives_sxm_modules_their_nvlinks():
    by_id = {e.device_id: e for e in skus.entries("nvidia") if e.subsystem is None}
    assert {d: by_id[d].nvlinks for d in ("0x20b0", "0x2330", "0x2901")} == {"0x20b0": 12, "0x2330": 18, "0x2901": 18}


def test_a_gpu_with_its_links_down_is_a_coded_problem_and_a_label():
    inventory = discover(open_host(HOSTS / "h100-sxm-nvlink-down"))
    (desc,) = inventory.descriptions
    assert [(p.code, p.device) for p in desc.problems] == [("link-down", 5)]
    labels = to_ray_node(inventory).labels
    assert (labels["rayaccel.io/discovery"], labels["rayaccel.io/degraded-links"]) == ("degraded", "1")
    assert not any(5 in (l.a, l.b) for l in desc.links) and len(desc.devices) == 8


@pytest.mark.parametrize("name", ["h100-sxm-8gpu-dgx", "gce-a3-highgpu-1g", "h100-partly-mig"])
def test_healthy_or_linkless_nodes_have_no_link_problem(name):
    inventory = discover(open_host(HOSTS / name))
    assert not [p for p in inventory.all_problems() if p.code == "link-down"]
    assert "rayaccel.io/degraded-links" not in to_ray_node(inventory).labels


def test_doctor_names_the_gpu_and_does_not_blame_the_driver(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ACCEL_DISABLE", raising=False)
    assert main(["doctor", "--root", str(HOSTS / "h100-sxm-nvlink-down"), "--format", "json"]) == 1
    findings = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["cause"] != "ray-version"]
    assert findings == json.loads((DOCTOR / "h100-sxm-nvlink-down.json").read_text())
