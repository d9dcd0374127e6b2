"""NVML platform information (``nvmlDeviceGetPlatformInfo``): the tray index becomes the host's
index in its NVLink domain and the chassis serial its rack; without it the index is unknown
(never a made-up 0). Readings from copies of the GB200 tray snapshot (``tests/support/domains.py``)
and the live reader against pynvml's own structs."""

from __future__ import annotations

import ctypes
import json
import types

import pytest

from ray_accel_ext.backends.nvidia_gpu import nvml as _nvml
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.tools.cli import main
from tests.support.domains import GB200_TRAY, gb200_domain


def labels_of(root, capsys) -> dict[str, str]:
    assert main(["ray-args", "--root", str(root), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["labels"]


def test_tray_index_and_chassis_from_platform_info(tmp_path, capsys):
    (tray,) = gb200_domain(tmp_path, 7, trays=1, platform=True, tray_indices=[5])
    inventory = discover(open_host(tray))
    (desc,) = inventory.descriptions
    assert not inventory.degraded, desc.problems
    assert (desc.fabric.kind, desc.fabric.worker, desc.fabric.hosts) == ("nvlink-domain", 5, 18)
    assert desc.location.rack == "NVL72C7"
    labels = labels_of(tray, capsys)
    assert labels["rayaccel.io/fabric-worker"] == "5" and labels["rayaccel.io/rack"] == "NVL72C7"


def test_without_platform_info_the_index_is_unknown_not_zero(tmp_path, capsys):
    (tray,) = gb200_domain(tmp_path, 7, trays=1)
    (desc,) = discover(open_host(tray)).descriptions
    assert desc.fabric.worker is None and desc.location.rack is None
    labels = labels_of(tray, capsys)
    assert "rayaccel.io/fabric-worker" not in labels and "rayaccel.io/rack" not in labels
    assert labels["rayaccel.io/fabric-hosts"] == "18"  # the SKU's maximum: NVML has no partition size


def test_gpus_disagreeing_on_their_tray_is_a_problem(tmp_path):
    (tray,) = gb200_domain(tmp_path, 7, trays=1, platform=True)
    path = tray / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    reading["devices"][3]["platform"]["tray_index"] = 9
    path.write_text(json.dumps(reading))
    inventory = discover(open_host(tray))
    (desc,) = inventory.descriptions
    assert inventory.degraded and desc.fabric.worker is None
    assert any("disagree on their NVML platform position" in p for p in [q.message for q in desc.problems]), desc.problems


def test_malformed_platform_entry_is_a_problem(tmp_path):
    (tray,) = gb200_domain(tmp_path, 7, trays=1, platform=True)
    path = tray / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    reading["devices"][0]["platform"]["tray_index"] = "three"
    assert any("devices[0].platform" in e for e in _nvml.validate(reading))
    path.write_text(json.dumps(reading))
    (desc,) = discover(open_host(tray)).descriptions
    assert any("devices[0].platform" in p for p in [q.message for q in desc.problems]), desc.problems


def test_recorded_snapshot_has_no_platform_and_stays_valid():
    reading = json.loads((GB200_TRAY / "libraries" / "nvml.json").read_text())
    assert all("platform" not in d for d in reading["devices"]) and _nvml.validate(reading) == []


# -- the live reader, against pynvml's own structure definitions --------------------------------------

pynvml = pytest.importorskip("ray._private.thirdparty.pynvml")


def fake_nvml(fill=None, error=None):
    """A pynvml whose nvmlDeviceGetPlatformInfo fills the real ctypes struct (or raises ``error``)."""

    def get_platform_info(handle, ref):
        if error is not None:
            raise pynvml.NVMLError(error)
        info = ref._obj
        assert info.version in (pynvml.nvmlPlatformInfo_v1, pynvml.nvmlPlatformInfo_v2)
        fill(info)
        return pynvml.NVML_SUCCESS

    names = [n for n in dir(pynvml) if n.startswith(("NVML_", "c_nvmlPlatformInfo", "nvmlPlatformInfo_"))]
    return types.SimpleNamespace(NVMLError=pynvml.NVMLError, nvmlDeviceGetPlatformInfo=get_platform_info,
                                 **{n: getattr(pynvml, n) for n in names})


def test_live_reader_decodes_the_v2_struct():
    def fill(info):
        assert isinstance(info, pynvml.c_nvmlPlatformInfo_v2_t)
        info.chassisSerialNumber = b"1821324000123"
        info.slotNumber, info.trayIndex, info.hostId, info.peerType, info.moduleId = b"\x0c", b"\x03", b"\x00", b"\x01", b"\x02"

    errors: list[str] = []
    got = _nvml._read_platform(fake_nvml(fill), object(), errors)
    assert got == {"chassis_serial": "1821324000123", "slot_number": 12, "tray_index": 3, "host_id": 0,
                   "peer_type": 1, "module_id": 2}
    assert errors == []


def test_live_reader_says_nothing_where_the_gpu_has_no_platform_info():
    errors: list[str] = []
    assert _nvml._read_platform(fake_nvml(error=pynvml.NVML_ERROR_NOT_SUPPORTED), object(), errors) is None
    assert errors == []
    assert _nvml._read_platform(fake_nvml(error=pynvml.NVML_ERROR_UNKNOWN), object(), errors) is None
    assert len(errors) == 1 and errors[0].startswith("nvmlDeviceGetPlatformInfo")


def test_unprintable_serial_is_kept_as_hex():
    raw = (ctypes.c_char * 16)(*b"\x01\xff\x10")
    assert _nvml._serial(bytes(raw)) == "01ff10"
