"""MIG: read live over NVML (a fake pynvml), recorded in format 2 (format 1 still read), offered as
per-profile resources with layout labels, never whole, and explained by ``ray-accel doctor``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from ray_accel_ext.backends.nvidia_gpu import nvml as _nvml
from ray_accel_ext.host import open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS as ALL_HOSTS

HOSTS = ALL_HOSTS / "nvidia_gpu"
MIG_HOSTS = ("a100-80gb-mig-homogeneous", "h100-80gb-mig-mixed", "h100-partly-mig")
DOCTOR = Path(__file__).parent / "doctor"


class _Error(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakePynvml:
    """The pynvml calls the MIG reader makes, over one GPU with ``layout`` (slot -> instance)."""

    NVMLError = _Error
    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND, NVML_ERROR_FUNCTION_NOT_FOUND = 3, 6, 13

    def __init__(self, mode: tuple[int, int] | None, layout: dict[int, tuple[str, int, int, int]]) -> None:
        self.mode, self.layout = mode, layout

    def nvmlDeviceGetMigMode(self, handle):
        if self.mode is None:
            raise _Error(self.NVML_ERROR_NOT_SUPPORTED)
        return list(self.mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        if slot not in self.layout:
            raise _Error(self.NVML_ERROR_NOT_FOUND)
        return slot

    def nvmlDeviceGetAttributes(self, slot):
        name, gi, slices, mib = self.layout[slot]
        return SimpleNamespace(gpuInstanceSliceCount=slices, computeInstanceSliceCount=slices, memorySizeMB=mib,
                               multiprocessorCount=14 * slices)

    def nvmlDeviceGetUUID(self, slot):
        return f"MIG-0000000{slot}-aaaa-bbbb-cccc-dddddddddddd".encode()

    def nvmlDeviceGetName(self, slot):
        return self.layout[slot][0].encode()

    def nvmlDeviceGetGpuInstanceId(self, slot):
        return self.layout[slot][1]

    def nvmlDeviceGetComputeInstanceId(self, slot):
        return 0


def test_live_reader_lists_the_instances_in_sparse_slots_with_the_drivers_profile_names():
    fake = FakePynvml((1, 1), {0: ("NVIDIA A100-SXM4-80GB MIG 3g.39gb", 2, 3, 40192),
                               4: ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 9, 1, 9728)})
    errors: list[str] = []
    mig = _nvml.read_mig(fake, "gpu0", errors)
    assert errors == []
    # The driver's own name wins over any table (mig-parted#31: 3g.39gb on drivers 535/545).
    assert [(i["profile"], i["gpu_instance"], i["memory_total"] >> 20) for i in mig["instances"]] == [
        ("3g.39gb", 2, 40192), ("1g.10gb", 9, 9728)]
    assert _nvml.validate({"format": 2, "devices": [{"bus_id": "00000000:41:00.0", "mig": mig}]}) == []


def test_live_reader_without_a_name_builds_go_nvlibs_form_and_reads_no_instances_when_mig_is_off():
    fake = FakePynvml((1, 0), {3: ("NVIDIA H100", 5, 2, 20224)})
    assert _nvml.read_mig(fake, "gpu0", [])["instances"][0]["profile"] == "2g.20gb"
    assert _nvml.read_mig(FakePynvml((0, 1), {3: ("x", 5, 2, 20224)}), "gpu0", []) == {
        "current": 0, "pending": 1, "instances": []}
    assert _nvml.read_mig(FakePynvml(None, {}), "gpu0", []) is None


@pytest.mark.parametrize("name", MIG_HOSTS)
def test_a_gpu_in_mig_mode_is_offered_only_as_its_instances(name):
    inventory = discover(open_host(HOSTS / name))
    (desc,) = inventory.descriptions
    spec = to_ray_node(inventory)
    mig_gpus = {p.device for p in desc.partitions}
    assert mig_gpus and not mig_gpus & {d.id for d in desc.devices}
    assert spec.resources.get("GPU", 0) == len(desc.devices)
    assert sum(v for k, v in spec.resources.items() if k.startswith("mig-")) == len(desc.partitions)
    assert spec.labels["rayaccel.io/mig-instances"] == str(len(desc.partitions))
    for part in desc.partitions:  # each instance sits at its GPU's NUMA node and NIC
        assert part.id.startswith("MIG-") and part.numa_node == 0 and part.nics


def test_partly_mig_host_keeps_the_whole_gpu_as_ray_gpu_zero():
    inventory = discover(open_host(HOSTS / "h100-partly-mig"))
    (desc,) = inventory.descriptions
    assert [(d.index, d.pci_address, d.numa_node) for d in desc.devices] == [(0, "0000:c1:00.0", 1)]
    assert {p.pci_address for p in desc.partitions} == {"0000:41:00.0"}


def test_a_format_1_recording_is_still_read_with_every_gpu_whole(tmp_path):
    snap = tmp_path / "old"
    shutil.copytree(HOSTS / "a100-80gb-mig-homogeneous", snap, symlinks=True)
    reading = json.loads((snap / "libraries/nvml.json").read_text())
    reading["format"] = 1
    for dev in reading["devices"]:
        del dev["mig"]
    (snap / "libraries/nvml.json").write_text(json.dumps(reading))
    (desc,) = discover(open_host(snap)).descriptions
    assert (len(desc.devices), desc.partitions, desc.problems) == (1, (), ())


def test_a_malformed_mig_reading_is_a_problem(tmp_path):
    snap = tmp_path / "bad"
    shutil.copytree(HOSTS / "h100-80gb-mig-mixed", snap, symlinks=True)
    reading = json.loads((snap / "libraries/nvml.json").read_text())
    reading["devices"][0]["mig"]["instances"][1]["uuid"] = reading["devices"][0]["mig"]["instances"][0]["uuid"]
    (snap / "libraries/nvml.json").write_text(json.dumps(reading))
    (desc,) = discover(open_host(snap)).descriptions
    assert [p.code for p in desc.problems] == ["file-unreadable"]
    assert "duplicate MIG UUIDs" in desc.problems[0].message


@pytest.mark.parametrize("name", MIG_HOSTS)
def test_doctor_explains_each_mig_gpu(name, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ACCEL_DISABLE", raising=False)
    assert main(["doctor", "--root", str(HOSTS / name), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    mig = [f for f in report["findings"] if f["cause"] == "mig-enabled"]
    golden = DOCTOR / f"{name}.json"
    assert mig == json.loads(golden.read_text())


def test_partitions_survive_the_inventory_round_trip_workers_read():
    inventory = discover(open_host(HOSTS / "h100-80gb-mig-mixed"))
    again = type(inventory).from_dict(json.loads(json.dumps(inventory.to_dict())))
    assert again.descriptions[0].partitions == inventory.descriptions[0].partitions


def test_a_task_on_an_instance_gets_its_gpus_instance_and_nics():
    from ray_accel_ext.backends.nvidia_gpu.worker import partition_nccl_env, use_my_partition

    inventory = discover(open_host(HOSTS / "h100-partly-mig"))
    env: dict[str, str] = {}
    part = use_my_partition(env, inventory=inventory, resource_ids={"mig-1g.10gb": [[3, 1.0]], "CPU": [[0, 1.0]]})
    assert env == {"CUDA_VISIBLE_DEVICES": inventory.descriptions[0].partitions[3].id}
    assert partition_nccl_env(part, inventory) == {"NCCL_IB_HCA": "=mlx5_0"}
    with pytest.raises(Exception, match="holds 2 MIG instances"):
        use_my_partition({}, inventory=inventory, resource_ids={"mig-1g.10gb": [[0, 1.0], [1, 1.0]]})
    # In a placement group Ray names the slots by the group (with and without the bundle index).
    pg = "a" * 36
    grouped = {f"mig-1g.10gb_group_0_{pg}": [[5, 1.0]], f"mig-1g.10gb_group_{pg}": [[5, 1.0]]}
    assert use_my_partition(env, inventory=inventory, resource_ids=grouped) == inventory.descriptions[0].partitions[5]
