"""The NVML seam: recorded readings, the sysfs-only fallback without NVML, and bad recordings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext.backends.nvidia_gpu import nvml as _nvml
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS as ALL_HOSTS

HOSTS = ALL_HOSTS / "nvidia_gpu"


@pytest.fixture
def h100(tmp_path) -> Path:
    dst = tmp_path / "h100"
    shutil.copytree(HOSTS / "h100-sxm-8gpu-dgx", dst, symlinks=True)
    return dst


def describe(root):
    inventory = discover(open_host(root))
    (desc,) = inventory.descriptions
    return inventory, desc


@pytest.mark.parametrize(
    "nvml,sysfs",
    [
        ("00000000:1A:00.0", "0000:1a:00.0"),
        ("0000:1A:00.0", "0000:1a:00.0"),  # busIdLegacy
        ("00000008:01:00.0", "0008:01:00.0"),  # Grace systems use non-zero domains
        ("00000000:C1:1F.7", "0000:c1:1f.7"),
        ("garbage", None),
        ("", None),
    ],
)
def test_bus_id_normalisation(nvml, sysfs):
    assert _nvml.sysfs_address(nvml) == sysfs


def test_without_nvml_sysfs_facts_remain_and_node_is_not_degraded(h100, capsys):
    (h100 / "libraries" / "nvml.json").unlink()
    inventory, desc = describe(h100)
    assert not inventory.degraded
    assert len(desc.devices) == 8 and desc.sku.name == "h100-sxm5-80gb"
    assert desc.interconnect == "pcie" and desc.links == ()
    assert [d.id for d in desc.devices] == [d.pci_address for d in desc.devices]
    assert all(d.nics and d.nics[0].path == "PIX" for d in desc.devices)
    assert desc.fabric.kind == "host"
    assert main(["ray-args", "--root", str(h100), "--format", "json"]) == 0
    labels = json.loads(capsys.readouterr().out)["labels"]
    assert labels["nvidia.rayaccel.io/nvml"] == "absent"
    assert labels["rayaccel.io/memory-gib"] == "80"  # from the SKU table
    assert labels["rayaccel.io/discovery"] == "ok"


def test_garbled_recording_is_a_problem_naming_the_file(h100):
    (h100 / "libraries" / "nvml.json").write_text('{"format": 1, "devices": [')
    inventory, desc = describe(h100)
    assert inventory.degraded
    assert any("libraries/nvml.json" in p for p in [q.message for q in desc.problems]), desc.problems
    assert len(desc.devices) == 8 and desc.interconnect == "pcie"


def test_malformed_recording_is_a_problem(h100):
    path = h100 / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    reading["devices"][2]["bus_id"] = "not-a-bus-id"
    path.write_text(json.dumps(reading))
    inventory, desc = describe(h100)
    assert any("devices[2].bus_id" in p for p in [q.message for q in desc.problems]), desc.problems
    assert len(desc.devices) == 8


def test_nvml_and_sysfs_disagreeing_on_gpus_is_a_problem(h100):
    path = h100 / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    gone = reading["devices"].pop(5)
    reading["devices"].append(dict(gone, bus_id="00000000:EE:00.0"))
    path.write_text(json.dumps(reading))
    inventory, desc = describe(h100)
    text = "\n".join(p.message for p in desc.problems)
    assert "00000000:EE:00.0" in text and "0000:a0:00.0" in text
    # Only GPUs both sysfs and NVML show are usable: GPU 0000:a0:00.0 (NVML cannot reach it) is
    # not counted, nor is the phantom NVML device.
    assert len(desc.devices) == 7 and "0000:a0:00.0" not in [d.pci_address for d in desc.devices]
    assert [d.index for d in desc.devices] == list(range(7))


def test_container_sees_only_the_gpus_nvml_lists(h100, capsys):
    """A pod given GPUs 2 and 5: sysfs still shows all eight, NVML (and CUDA) only those two."""
    path = h100 / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    kept = [reading["devices"][2], reading["devices"][5]]
    reading["devices"] = [dict(d, index=i) for i, d in enumerate(kept)]
    path.write_text(json.dumps(reading))
    (h100 / "env.json").write_text(json.dumps({"NVIDIA_VISIBLE_DEVICES": kept[0]["uuid"] + "," + kept[1]["uuid"]}))
    inventory, desc = describe(h100)
    assert not inventory.degraded, inventory.reasons()
    assert [d.id for d in desc.devices] == [kept[0]["uuid"], kept[1]["uuid"]]
    assert [d.pci_address for d in desc.devices] == ["0000:3c:00.0", "0000:a0:00.0"]
    assert [n.nic for d in desc.devices for n in d.nics] == ["mlx5_2", "mlx5_5"]
    assert main(["ray-args", "--root", str(h100), "--format", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["resources"]["GPU"] == 2
    assert spec["labels"]["nvidia.rayaccel.io/gpus-not-visible"] == "6"


def test_nvml_error_fields_are_problems(h100):
    path = h100 / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    reading["devices"][0]["errors"] = ["nvmlDeviceGetMemoryInfo: Unknown Error"]
    path.write_text(json.dumps(reading))
    inventory, desc = describe(h100)
    assert any("nvmlDeviceGetMemoryInfo: Unknown Error" in p for p in [q.message for q in desc.problems])


def test_live_reader_on_this_machine_is_none_or_valid():
    """Runs the real reader against whatever NVML this machine has (none on CI runners)."""
    reading = _nvml.read_live()
    assert reading is None or _nvml.validate(reading) == []


def test_without_nvidia_ml_py_rays_bundled_pynvml_reads_nvml(monkeypatch):
    """No ``pynvml`` module (nvidia-ml-py not installed) but Ray installed: NVML is read through
    Ray's bundled copy, and the reading says so (so NVLink and the NVLink domain are not lost)."""
    import sys

    pytest.importorskip("ray._private.thirdparty.pynvml")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    module, binding = _nvml.import_binding()
    assert binding == "ray-bundled" and module.__name__ == "ray._private.thirdparty.pynvml"
    reading = _nvml.read_live()  # no driver here: None, else a reading that names its binding
    assert reading is None or (reading["binding"] == "ray-bundled" and _nvml.validate(reading) == [])


def test_binding_of_a_live_reading_is_published(h100):
    path = h100 / "libraries" / "nvml.json"
    reading = json.loads(path.read_text())
    reading["binding"] = "ray-bundled"
    path.write_text(json.dumps(reading))
    inventory, desc = describe(h100)
    assert desc.attributes["nvidia.rayaccel.io/nvml-binding"] == "ray-bundled"
    assert desc.links and not inventory.degraded


class _FakeNvml:
    """Just enough of a ``pynvml`` module for one Grace-attached GPU (a GB200 of a tray)."""

    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND = 3, 13
    NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED = 12, 9
    NVML_FI_DEV_C2C_LINK_COUNT, NVML_FI_DEV_C2C_LINK_GET_STATUS = 170, 171

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

    def __init__(self, c2c_status=(1, 1), numa=2):
        self.c2c_status, self.numa = c2c_status, numa

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlSystemGetDriverVersion(self): return "570.172.08"
    def nvmlDeviceGetCount(self): return 1
    def nvmlDeviceGetHandleByIndex(self, i): return i

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": b"00000008:01:00.0"})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Mem", (), {"total": 189471 << 20})()

    def nvmlDeviceGetUUID(self, h): return "GPU-00000000-0000-0000-0000-000000000000"
    def nvmlDeviceGetName(self, h): return "NVIDIA GB200"

    def nvmlDeviceGetNvLinkState(self, h, link):
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNumaNodeId(self, h):
        if self.numa is None:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.numa

    def nvmlDeviceGetFieldValues(self, h, ids):
        def value(v, ret=0):
            return type("FV", (), {"nvmlReturn": ret, "value": type("V", (), {"uiVal": v})()})()
        if ids == [self.NVML_FI_DEV_C2C_LINK_COUNT]:
            return [value(len(self.c2c_status))]
        return [value(self.c2c_status[scope]) for field, scope in ids]


@pytest.mark.parametrize("status, numa, links, node", [((1, 1), 2, 2, 2), ((1, 0), 10, 1, 10), ((), None, 0, None)])
def test_live_reading_counts_active_c2c_links_and_the_gpu_numa_node(monkeypatch, status, numa, links, node):
    """As NCCL's xml.cc counts them: NVML_FI_DEV_C2C_LINK_COUNT, then each link's status == 1;
    nvmlDeviceGetNumaNodeId is the capture's GPU NUMA ID (N/A, here None, where not supported)."""
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(status, numa))
    reading = _nvml.read_live()
    assert _nvml.validate(reading) == [] and reading["binding"] == "nvidia-ml-py"
    (dev,) = reading["devices"]
    assert (dev["c2c_links"], dev["numa_node_id"], dev["errors"]) == (links, node, [])
