"""The Neuron host snapshots through the public CLI: the documented resources and labels.

``tests/unit/test_snapshot_goldens.py`` compares every snapshot with its whole golden; this file spells
out the values each snapshot's README promises, so the test documents them.
"""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

NEURON = HOSTS / "neuron"
TYPE = "aws-neuron-core"  # ray.util.accelerators.AWS_NEURON_CORE, what Ray's own manager reports

COMMON = {"ray.io/accelerator-type": TYPE, "rayaccel.io/vendor": "aws", "rayaccel.io/schema": "1",
          "rayaccel.io/families": "neuron"}
TRN2 = {
    **COMMON,
    "rayaccel.io/sku": "trainium2",
    "rayaccel.io/generation": "trainium2",
    "rayaccel.io/count": "16",
    "rayaccel.io/memory-gib": "96",
    "rayaccel.io/interconnect": "neuronlink-v3",
    "rayaccel.io/rdma-nics": "16",
    "neuron.rayaccel.io/logical-nc-config": "2",
    "neuron.rayaccel.io/cores-per-device": "4",
    "neuron.rayaccel.io/physical-cores-per-device": "8",
    "neuron.rayaccel.io/neuroncore": "v3",
    "neuron.rayaccel.io/topology": "2d-torus",
}
INF2 = {
    **COMMON,
    "rayaccel.io/sku": "inferentia2",
    "rayaccel.io/generation": "inferentia2",
    "rayaccel.io/count": "1",
    "rayaccel.io/memory-gib": "32",
    "rayaccel.io/interconnect": "neuronlink-v2",
    "rayaccel.io/rdma-nics": "0",
    "rayaccel.io/fabric-hosts": "1",
    "neuron.rayaccel.io/logical-nc-config": "1",
    "neuron.rayaccel.io/cores-per-device": "2",
}

# snapshot -> (neuron_cores, labels that must have exactly these values, labels that must be absent)
DOCUMENTED = {
    "inf2-xlarge": (2, {**INF2, "rayaccel.io/discovery": "ok", "neuron.rayaccel.io/instance-type": "inf2.xlarge",
                        "rayaccel.io/fabric-domain": "ip-10-0-2-11", "rayaccel.io/numa-nodes": "1"},
                    ("rayaccel.io/gpudirect", "rayaccel.io/fabric-topology")),
    # The same host with the driver's hardware ECC counters and a recorded fatal ECC stream:
    # nothing of it shows at start (tests/cluster/test_fault_sources.py replays the stream).
    "inf2-xlarge-ecc-fatal": (2, {**INF2, "rayaccel.io/discovery": "ok", "neuron.rayaccel.io/instance-type": "inf2.xlarge",
                                  "rayaccel.io/fabric-domain": "inf2-ecc-3", "rayaccel.io/numa-nodes": "1"},
                              ("rayaccel.io/gpudirect", "rayaccel.io/fabric-topology")),
    "inf2-xlarge-imds-no-token": (2, {**INF2, "rayaccel.io/discovery": "degraded"},
                                  ("neuron.rayaccel.io/instance-type",)),
    "trn1-32xlarge": (32, {
        **COMMON,
        "rayaccel.io/sku": "trainium1",
        "rayaccel.io/generation": "trainium1",
        "rayaccel.io/count": "16",
        "rayaccel.io/memory-gib": "32",
        "rayaccel.io/interconnect": "neuronlink-v2",
        "rayaccel.io/rdma-nics": "8",
        "rayaccel.io/gpudirect": "true",
        "rayaccel.io/numa-nodes": "2",
        "rayaccel.io/fabric-topology": "4x4",
        "rayaccel.io/discovery": "ok",
        "neuron.rayaccel.io/logical-nc-config": "1",
        "neuron.rayaccel.io/cores-per-device": "2",
        "neuron.rayaccel.io/instance-type": "trn1.32xlarge",
    }, ()),
    "trn2-48xlarge": (64, {**TRN2, "rayaccel.io/discovery": "ok", "rayaccel.io/gpudirect": "true",
                           "rayaccel.io/numa-nodes": "2", "rayaccel.io/fabric-domain": "ip-10-0-4-31",
                           "rayaccel.io/fabric-hosts": "1", "rayaccel.io/fabric-worker": "0",
                           "rayaccel.io/fabric-topology": "4x4",
                           "neuron.rayaccel.io/instance-type": "trn2.48xlarge"}, ()),
    "trn2-48xlarge-no-neuron-ls": (64, {**TRN2, "rayaccel.io/discovery": "degraded",
                                        "rayaccel.io/fabric-topology": "4x4"},
                                   ("rayaccel.io/gpudirect", "rayaccel.io/numa-nodes")),
    "trn2u-48xlarge-node1": (64, {**TRN2, "rayaccel.io/discovery": "ok", "rayaccel.io/gpudirect": "true",
                                  "rayaccel.io/fabric-domain": "5f3a9c1e00b2d471", "rayaccel.io/fabric-hosts": "4",
                                  "rayaccel.io/fabric-worker": "1", "rayaccel.io/fabric-topology": "4x4x4",
                                  "neuron.rayaccel.io/instance-type": "trn2u.48xlarge"}, ()),
}


def cli_json(capsys, monkeypatch, snapshot, command):
    with serve_snapshot(snapshot) as env:
        for key, value in env.items():
            if key.startswith(("AWS_EC2_", "RAY_ACCEL_")):
                monkeypatch.setenv(key, value)
        assert main([command, "--root", str(snapshot), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_documented_snapshot_is_shipped():
    shipped = {p.name for p in NEURON.iterdir() if (p / "rootfs").is_dir()}
    assert shipped == set(DOCUMENTED) | {"no-neuron-m7i-2xlarge"}


def test_ec2_host_without_neuron_devices_offers_none(capsys, monkeypatch):
    # Its ENA NIC has the AWS vendor id 0x1d0f too: the vendor alone must not count as a Neuron device.
    out = cli_json(capsys, monkeypatch, NEURON / "no-neuron-m7i-2xlarge", "ray-args")
    assert out["resources"] == {}
    assert out["labels"]["rayaccel.io/count"] == "0" and out["labels"]["rayaccel.io/discovery"] == "ok"


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_ray_args_give_the_documented_values(name, capsys, monkeypatch):
    cores, labels, absent = DOCUMENTED[name]
    out = cli_json(capsys, monkeypatch, NEURON / name, "ray-args")
    assert out["resources"] == {"neuron_cores": cores, f"accelerator_type:{TYPE}": 1}
    assert {k: out["labels"].get(k) for k in labels} == labels
    for key in absent:
        assert key not in out["labels"], key
    assert all(k.startswith(("ray.io/", "rayaccel.io/", "neuron.rayaccel.io/")) for k in out["labels"])


def test_trn2_devices_cores_links_and_efa(capsys, monkeypatch):
    out = cli_json(capsys, monkeypatch, NEURON / "trn2-48xlarge", "discover")
    (desc,) = out["descriptions"]
    devices = desc["devices"]
    # neuron-ls's map (reference/hardware.md 5.1): device 0 is cc:00.0 on NUMA 1, device 4 is 6f:00.0 on NUMA 0.
    assert [d["pci_address"] for d in devices[:5]] == ["0000:cc:00.0", "0000:b5:00.0", "0000:b6:00.0",
                                                       "0000:cb:00.0", "0000:6f:00.0"]
    assert [d["numa_node"] for d in devices] == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert all(d["cores"] == 4 for d in devices)
    assert devices[0]["cpus"][:2] == [48, 49] and 191 in devices[0]["cpus"]
    # 4x4 torus: 32 links, every device with 4 neighbours; device 0 - 1, 3, 4, 12 (driver table).
    links = {(l["a"], l["b"]) for l in desc["links"]}
    assert len(links) == 32 and {l["kind"] for l in desc["links"]} == {"neuronlink-v3"}
    assert {b for a, b in links if a == 0} == {1, 3, 4, 12}
    assert devices[5]["coords"] == [1, 1]
    # Each device's nearest EFAs are the two behind its own PCIe switch.
    assert {n["kind"] for n in desc["nics"]} == {"efa"}
    assert devices[0]["nics"] == [{"nic": "rdmap202s0", "path": "PIX"}, {"nic": "rdmap205s0", "path": "PIX"}]
    assert devices[1]["nics"] == [{"nic": "rdmap180s0", "path": "PIX"}, {"nic": "rdmap183s0", "path": "PIX"}]
    assert desc["fabric"]["kind"] == "host" and desc["location"]["zone"] == "us-east-2b"
    assert desc["problems"] == []


def test_ultraserver_node_has_3d_coords_and_product(capsys, monkeypatch):
    out = cli_json(capsys, monkeypatch, NEURON / "trn2u-48xlarge-node1", "discover")
    (desc,) = out["descriptions"]
    fabric = desc["fabric"]
    assert (fabric["kind"], fabric["id"], fabric["hosts"], fabric["worker"], fabric["product"]) == (
        "ultraserver", "5f3a9c1e00b2d471", 4, 1, "trn2u.48xlarge")
    assert desc["devices"][6]["coords"] == [1, 2, 1]  # row, column in the instance's torus; node id


def test_missing_neuron_ls_keeps_devices_and_links_but_names_what_is_lost(capsys, monkeypatch):
    out = cli_json(capsys, monkeypatch, NEURON / "trn2-48xlarge-no-neuron-ls", "discover")
    (desc,) = out["descriptions"]
    assert len(desc["devices"]) == 16 and len(desc["links"]) == 32
    assert all(d["pci_address"] is None and d["numa_node"] is None and d["nics"] == [] for d in desc["devices"])
    assert desc["devices"][3]["id"] == "neuron3"
    (problem,) = [p["message"] for p in desc["problems"]]
    assert "neuron-ls not installed" in problem and "EFA affinity" in problem


def test_refused_imds_token_is_named(capsys, monkeypatch):
    out = cli_json(capsys, monkeypatch, NEURON / "inf2-xlarge-imds-no-token", "discover")
    (desc,) = out["descriptions"]
    assert desc["location"]["instance_type"] is None
    assert desc["sku"]["name"] == "inferentia2"  # from the PCI id, no instance type needed
    (problem,) = [p["message"] for p in desc["problems"]]
    assert "PUT /latest/api/token: HTTP 403" in problem
