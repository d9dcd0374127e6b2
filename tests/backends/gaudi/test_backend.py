"""What the Gaudi backend does beyond the shared suite: module order for HABANA_VISIBLE_MODULES,
containers given some devices, hl-smi absent or broken, unknown ids, the HPU resource in Ray."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext.backends.gaudi import GaudiBackend
from ray_accel_ext.host import open_host
from ray_accel_ext.ray_hook import node_spec
from tests.support.paths import HOSTS

HLS3 = HOSTS / "gaudi" / "hls3-gaudi3-8"


@pytest.fixture
def hls3(tmp_path: Path) -> Path:
    dst = tmp_path / "hls3"
    shutil.copytree(HLS3, dst, symlinks=True)
    return dst


def _describe(root: Path):
    return GaudiBackend().describe(open_host(root, environ={}))


def _module_of(snap: Path, address: str) -> int:
    return int((snap / "rootfs/sys/bus/pci/devices" / address / "module_id").read_text())


def test_devices_are_in_module_order_as_habana_visible_modules_counts():
    """Ray writes HABANA_VISIBLE_MODULES=0..n-1 and the runtime reads module ids: device k is module k."""
    desc = _describe(HLS3)
    assert [_module_of(HLS3, d.pci_address) for d in desc.devices] == list(range(8))
    backend = GaudiBackend()
    env = backend.visible_devices_env([desc.devices[1], desc.devices[6]])
    assert env == {"HABANA_VISIBLE_MODULES": "1,6"} and backend.parse_visible_devices(env) == [1, 6]


def test_each_device_lists_its_own_scale_out_ports():
    desc = _describe(HLS3)
    for dev in desc.devices:
        ports = [n for n in desc.nics if n.pci_address == dev.pci_address]
        assert len(ports) == 3 and all(p.rate_gbps == 200.0 and p.kind == "roce" for p in ports)
        assert [p.nic for p in dev.nics] == [p.name for p in ports]
    assert len(desc.links) == 28 and {link.lanes for link in desc.links} == {3}


def test_hpu_resource_and_no_type_as_ray_at_node_start():
    spec = node_spec(HLS3, environ={})
    assert spec.resources == {"HPU": 8.0}  # Ray's HPU manager names a type only once HPU is initialised
    assert "ray.io/accelerator-type" not in spec.labels
    capped = node_spec(HLS3, environ={"HABANA_VISIBLE_MODULES": "0,1"})
    assert capped.resources == {"HPU": 2.0} and capped.labels["rayaccel.io/count"] == "8"


def test_container_given_some_devices(hls3: Path):
    """The Habana runtime mounts only the devices of HABANA_VISIBLE_DEVICES: modules 4 and 5 here,
    so Ray's ids 0,1 would name modules 0 and 1; the node says so."""
    keep = {p.name for p in (hls3 / "rootfs/sys/bus/pci/devices").iterdir() if _module_of(hls3, p.name) in (4, 5)}
    for link in (hls3 / "rootfs/sys/class/accel").iterdir():
        if link.resolve().parent.parent.name not in keep:
            (hls3 / "rootfs/dev/accel" / link.name).unlink()
    (hls3 / "env.json").write_text(json.dumps({"HABANA_VISIBLE_DEVICES": "4,5"}))
    desc = _describe(hls3)
    assert [_module_of(hls3, d.pci_address) for d in desc.devices] == [4, 5]
    assert desc.attributes["gaudi.rayaccel.io/devices-not-visible"] == "6"
    assert any("module ids [4, 5] are not 0..1" in p for p in [q.message for q in desc.problems]), desc.problems


def test_without_hl_smi_sysfs_is_a_complete_answer(hls3: Path):
    (hls3 / "commands/hl-smi.json").write_text(json.dumps({"missing": True}))
    desc = _describe(hls3)
    assert desc.problems == () and len(desc.devices) == 8
    assert desc.devices[0].id == desc.devices[0].pci_address and desc.devices[0].memory_bytes == 128 << 30
    assert desc.attributes["gaudi.rayaccel.io/hl-smi"] == "absent"


def test_unparsable_hl_smi_output_is_a_problem(hls3: Path):
    record = json.loads((hls3 / "commands/hl-smi.json").read_text())
    record["stdout"] = "0, 2, 0000:33:00.0, HL-325L\n"
    (hls3 / "commands/hl-smi.json").write_text(json.dumps(record))
    desc = _describe(hls3)
    assert len(desc.devices) == 8
    assert any("hl-smi printed unparsable output: line 1: 4 fields" in p for p in [q.message for q in desc.problems]), desc.problems


def test_unknown_device_id_bound_to_the_driver_is_counted_and_reported(hls3: Path):
    for fn in (hls3 / "rootfs/sys/bus/pci/devices").iterdir():
        (fn.resolve() / "device").write_text("0x1070\n")
    desc = _describe(hls3)
    assert len(desc.devices) == 8 and desc.resource_quantity == 8
    assert (desc.sku.name, desc.sku.known, desc.sku.generation) == ("gaudi3", False, "unknown")  # the driver's device_type
    assert any("1da3:1070" in p and "not in the SKU database" in p for p in [q.message for q in desc.problems])
    assert desc.links == ()  # scale-up wiring is only known for the OAM parts


def test_a_device_that_needs_reset_is_counted_and_reported(hls3: Path):
    victim = sorted((hls3 / "rootfs/sys/bus/pci/devices").iterdir())[0]
    (victim.resolve() / "status").write_text("Needs reset\n")
    desc = _describe(hls3)
    assert len(desc.devices) == 8
    assert any(f"{victim.name} reports status 'Needs reset'" in p for p in [q.message for q in desc.problems])


def test_driver_not_loaded_is_not_detected_and_doctor_says_why(hls3: Path, capsys):
    from ray_accel_ext.tools.cli import main

    shutil.rmtree(hls3 / "rootfs/sys/bus/pci/drivers")
    assert GaudiBackend().detect(open_host(hls3, environ={})) is False
    assert main(["doctor", "--root", str(hls3), "--format", "json"]) == 1
    found = {f["cause"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert found["driver-missing"]["backend"] == "gaudi" and "habanalabs" in found["driver-missing"]["message"]
