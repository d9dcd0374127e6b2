"""Link health at start on Trainium2: each device has four NeuronLink neighbours within its
trn2.48xlarge (the SKU database's ``neuronlinks``); a device whose driver lists fewer is the same
coded ``link-down`` problem and ``rayaccel.io/degraded-links`` label as NVIDIA's."""

from __future__ import annotations

import shutil

from ray_accel_ext import skus
from ray_accel_ext.host import open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS

TRN2 = HOSTS / "neuron" / "trn2-48xlarge"


def test_the_database_gives_trainium2_four_neuronlinks():
    by_sku = {e.sku: e.neuronlinks for e in skus.entries("neuron")}
    assert by_sku["trainium2"] == 4 and by_sku["trainium1"] is None  # Trainium1: no cited count


def test_a_device_listing_fewer_neighbours_is_a_link_problem(tmp_path):
    snap = tmp_path / "trn2"
    shutil.copytree(TRN2, snap, symlinks=True)
    (snap / "rootfs/sys/devices/virtual/neuron_device/neuron5/connected_devices").write_text("4, 9, 1\n")
    inventory = discover(open_host(snap))
    (desc,) = inventory.descriptions
    down = [p for p in desc.problems if getattr(p, "code", None) == "link-down"]
    assert [(p.device, p.message.split(";")[0]) for p in down] == [(5, "neuron5 lists 3 of its 4 NeuronLink neighbours")]
    assert to_ray_node(inventory).labels["rayaccel.io/degraded-links"] == "1"


def test_a_whole_instance_and_a_small_one_have_no_link_problem():
    for name in ("trn2-48xlarge", "trn1-32xlarge", "inf2-xlarge"):
        inventory = discover(open_host(HOSTS / "neuron" / name))
        assert not [p for p in inventory.all_problems() if p.code == "link-down"], name
