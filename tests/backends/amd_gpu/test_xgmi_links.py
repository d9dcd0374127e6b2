"""Link health at start on AMD: an MI300X OAM has seven XGMI links (a fully connected 8-GPU
platform, the SKU database's ``xgmi_links``); a GPU with fewer active peers is the same coded
``link-down`` problem and ``rayaccel.io/degraded-links`` label as NVIDIA's."""

from __future__ import annotations

import shutil

from ray_accel_ext import skus
from ray_accel_ext.host import open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS

HIVE = HOSTS / "amd_gpu" / "mi300x-8gpu-hive"
NODES = "rootfs/sys/class/kfd/kfd/topology/nodes"


def test_the_database_gives_the_mi300x_oam_seven_xgmi_links():
    by_id = {e.device_id: e for e in skus.entries("amd")}
    assert by_id["0x74a1"].xgmi_links == 7 and by_id["0x75a3"].xgmi_links is None  # MI355X: no cited count


def _drop_link(snap, a: int, b: int) -> None:
    """Remove the XGMI io_links between KFD nodes ``a`` and ``b`` (both directions)."""
    for src, dst in ((a, b), (b, a)):
        for link in (snap / NODES / str(src) / "io_links").iterdir():
            props = (link / "properties").read_text()
            if "type 11\n" in props and f"node_to {dst}\n" in props:
                shutil.rmtree(link)


def test_a_down_xgmi_link_degrades_both_of_its_gpus(tmp_path):
    snap = tmp_path / "hive"
    shutil.copytree(HIVE, snap, symlinks=True)
    _drop_link(snap, 3, 6)  # KFD nodes 3 and 6 are GPUs 1 and 4
    inventory = discover(open_host(snap))
    (desc,) = inventory.descriptions
    assert [(p.code, p.device) for p in desc.problems] == [("link-down", 1), ("link-down", 4)]
    assert "6 of its 7 XGMI links" in desc.problems[0].message
    labels = to_ray_node(inventory).labels
    assert (labels["rayaccel.io/discovery"], labels["rayaccel.io/degraded-links"]) == ("degraded", "2")


def test_a_whole_hive_has_no_link_problem():
    inventory = discover(open_host(HIVE))
    assert not [p for p in inventory.all_problems() if p.code == "link-down"]
    assert "rayaccel.io/degraded-links" not in to_ray_node(inventory).labels
