"""Device isolation's node-start side, through the start hook and ``ray-accel doctor``, without a cluster.

What the hook hands on for a vendor family outside Ray's registry, that nothing is handed on for
a node with Ray's own families only or with the setting off, that a private Ray interface faked
away is reported (log line and doctor finding) while the rest of the node starts as before, and
that ``import ray`` loads nothing of this feature where no node handed a family on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray_accel_ext_acme", reason="pip install -e tests/downstream/ray_accel_ext_acme")

import ray._private.accelerators as ray_accelerators  # noqa: E402

from ray_accel_ext.labels import DISCOVERY  # noqa: E402
from ray_accel_ext.node.handoff import NODE_INVENTORY_ENV, handed_off_inventory  # noqa: E402
from ray_accel_ext.node.ray_devices import DEVICES_ENV, SETTING_ENV, UNIT_ENV  # noqa: E402
from ray_accel_ext.problems import DEVICE_ISOLATION_UNAVAILABLE  # noqa: E402
from ray_accel_ext.ray_hook import start_hook  # noqa: E402
from ray_accel_ext.testing.cluster import with_this_package  # noqa: E402
from ray_accel_ext.tools.cli import main  # noqa: E402
from ray_accel_ext_acme import AcmeNPUBackend  # noqa: E402
from tests.support.paths import HOSTS, TESTS  # noqa: E402

H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
PARTLY_MIG = HOSTS / "nvidia_gpu" / "h100-partly-mig"
ACME = TESTS / "downstream" / "ray_accel_ext_acme" / "tests" / "hosts" / "acme-4npu"


def _raylet_default_units() -> set[str]:
    """The default ``custom_unit_instance_resources`` compiled into this Ray's raylet (a C++ string
    constant: ``neuron_cores,TPU,...``, ``reference/ray-2.60.md`` section 3)."""
    import re

    raylet = Path(ray.__file__).parent / "core" / "src" / "ray" / "raylet" / "raylet"
    tail = b""
    with open(raylet, "rb") as fh:
        while chunk := fh.read(1 << 22):
            found = re.search(rb"neuron_cores,TPU[A-Za-z0-9_,]*\x00", tail + chunk)
            if found is not None:
                return set(found.group()[:-1].decode().split(","))
            tail = chunk[-256:]
    raise AssertionError(f"no default unit-instance list in {raylet}")


@pytest.fixture
def environ(monkeypatch):
    """os.environ restored afterwards (the hook writes its hand-off into it)."""
    saved = dict(os.environ)
    for key in (DEVICES_ENV, UNIT_ENV, SETTING_ENV, NODE_INVENTORY_ENV, "RAY_ACCEL_ROOT", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    snap = tmp_path_factory.mktemp("mixed") / "h100-acme"
    shutil.copytree(H100, snap, symlinks=True)
    shutil.copytree(ACME / "rootfs" / "sys" / "class" / "acme_npu", snap / "rootfs" / "sys" / "class" / "acme_npu")
    (snap / "expected.json").unlink(missing_ok=True)
    return snap


def _start(environ, snapshot) -> SimpleNamespace:
    environ["RAY_ACCEL_ROOT"] = str(snapshot)
    params = SimpleNamespace(num_gpus=None, resources=None, labels=None)
    start_hook(params, True)
    return params


def test_vendor_family_is_handed_on_and_ray_units_keep_their_defaults(environ, mixed):
    params = _start(environ, mixed)
    assert params.num_gpus == 8 and params.resources["acme_npu"] == 4
    families = json.loads(environ[DEVICES_ENV])
    assert [(f["resource"], f["env_var"], f["entry"]) for f in families] == [
        ("acme_npu", "ACME_VISIBLE_DEVICES", "ray_accel_ext_acme:AcmeNPUBackend")]
    assert [d["index"] for d in families[0]["devices"]] == [0, 1, 2, 3]
    units = environ[UNIT_ENV].split(",")
    # Ray's default list is replaced by the variable: it must hold every name of that default.
    assert set(units) == _raylet_default_units() | {"acme_npu"} and "GPU" not in units


def test_mig_instances_are_handed_on_as_unit_families_of_their_uuids(environ):
    params = _start(environ, PARTLY_MIG)
    assert (params.num_gpus, params.resources["mig-1g.10gb"], params.labels[DISCOVERY]) == (1, 7, "ok")
    (family,) = json.loads(environ[DEVICES_ENV])
    parts = handed_off_inventory(environ).descriptions[0].partitions
    assert (family["resource"], family["env_var"], family["units"]) == (
        "mig-1g.10gb", "CUDA_VISIBLE_DEVICES", [p.id for p in parts])
    assert "mig-1g.10gb" in environ[UNIT_ENV].split(",") and "GPU" not in environ[UNIT_ENV].split(",")


def test_a_mig_node_names_its_whole_gpus_by_uuid_for_rays_gpu_ids(environ):
    """CUDA reads CUDA_VISIBLE_DEVICES=0 as nvidia-smi's GPU 0, which on this host is the MIG GPU
    (0000:41:00.0 sorts before the whole GPU at 0000:c1:00.0); the node's value maps Ray's GPU id 0
    to the whole GPU's UUID instead."""
    _start(environ, PARTLY_MIG)
    (desc,) = handed_off_inventory(environ).descriptions
    assert [d.pci_address for d in desc.devices] == ["0000:c1:00.0"]
    assert {p.pci_address for p in desc.partitions} == {"0000:41:00.0"}
    assert environ["CUDA_VISIBLE_DEVICES"] == desc.devices[0].id and desc.devices[0].id.startswith("GPU-")


def test_an_operators_cuda_visible_devices_stands_and_all_mig_nodes_set_none(environ):
    environ["CUDA_VISIBLE_DEVICES"] = "0"
    _start(environ, PARTLY_MIG)
    assert environ["CUDA_VISIBLE_DEVICES"] == "0"
    del environ["CUDA_VISIBLE_DEVICES"]
    _start(environ, HOSTS / "nvidia_gpu" / "a100-80gb-mig-homogeneous")
    assert "CUDA_VISIBLE_DEVICES" not in environ and "mig-1g.10gb" in environ[UNIT_ENV].split(",")


def test_a_unit_list_set_by_the_operator_is_extended_not_replaced(environ):
    environ[UNIT_ENV] = "neuron_cores,MY_UNIT"
    _start(environ, ACME)
    assert environ[UNIT_ENV] == "neuron_cores,MY_UNIT,acme_npu"


def test_node_with_ray_families_only_hands_nothing_on(environ):
    params = _start(environ, H100)
    assert params.num_gpus == 8
    assert DEVICES_ENV not in environ and UNIT_ENV not in environ


def test_the_setting_turns_it_off(environ):
    environ[SETTING_ENV] = "off"
    params = _start(environ, ACME)
    assert params.resources["acme_npu"] == 4
    assert DEVICES_ENV not in environ and UNIT_ENV not in environ


def test_missing_private_interface_is_reported_and_the_rest_of_the_node_starts(environ, mixed, monkeypatch, caplog, capsys):
    before = _start(environ, mixed)
    for key in (DEVICES_ENV, UNIT_ENV):
        environ.pop(key)
    monkeypatch.delattr(ray_accelerators, "get_accelerator_manager_for_resource")
    with caplog.at_level(logging.WARNING, logger="ray_accel_ext"):
        after = _start(environ, mixed)
    assert (after.num_gpus, after.resources) == (before.num_gpus, before.resources)
    # Its tasks would share every device: the node is degraded, the coded problem handed on.
    assert {k: v for k, v in after.labels.items() if k != DISCOVERY} == {k: v for k, v in before.labels.items() if k != DISCOVERY}
    assert (before.labels[DISCOVERY], after.labels[DISCOVERY]) == ("ok", "degraded")
    (problem,) = handed_off_inventory(environ).problems
    assert (problem.code, problem.backend) == (DEVICE_ISOLATION_UNAVAILABLE, "acme_npu")
    assert DEVICES_ENV not in environ and UNIT_ENV not in environ
    text = caplog.text
    assert "device isolation for acme_npu is off on this node" in text and "lacks get_accelerator_manager_for_resource" in text
    assert "Ray's own accelerator families are not pinned next to ours" in text

    assert main(["doctor", "--root", str(mixed), "--format", "json"]) in (0, 1)
    findings = json.loads(capsys.readouterr().out)["findings"]
    missing = [f for f in findings if f["cause"] == "ray-interface-missing"]
    assert missing and "get_accelerator_manager_for_resource" in missing[0]["message"], findings
    assert any(f["cause"] == "device-isolation-unavailable" and f["backend"] == "acme_npu" for f in findings), findings


def _imported_after_import_ray(extra: dict[str, str]) -> bool:
    env = with_this_package({k: v for k, v in os.environ.items() if k != DEVICES_ENV})
    env.update(extra)
    code = "import sys, ray; print('_ray_accel_ext_devices' in sys.modules, 'ray_accel_ext' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out[1] == "False", "import ray must not import ray_accel_ext"
    return out[0] == "True"


def test_import_ray_loads_nothing_unless_a_node_handed_a_family_on():
    assert _imported_after_import_ray({}) is False
    family = [{"resource": "acme_npu", "backend": "acme_npu", "entry": "", "env_var": "ACME_VISIBLE_DEVICES", "devices": []}]
    assert _imported_after_import_ray({DEVICES_ENV: json.dumps(family)}) is True


class RaisingAcme(AcmeNPUBackend):
    """Acme with a visible_devices_env that fails (a vendor bug at task start)."""

    def visible_devices_env(self, devices):
        raise RuntimeError("firmware table unreadable")


def _adapter(monkeypatch, entry: str):
    """Ray's registry in this process with one adapter for acme_npu (restored afterwards)."""
    import _ray_accel_ext_devices as boot

    monkeypatch.setattr(ray_accelerators, "get_all_accelerator_managers", ray_accelerators.get_all_accelerator_managers)
    cache = ray_accelerators.get_accelerator_manager_for_resource.__dict__
    monkeypatch.setitem(cache, "_resource_name_to_accelerator_manager", dict(cache.get("_resource_name_to_accelerator_manager", {})))
    family = {"resource": "acme_npu", "backend": "acme_npu", "entry": entry, "env_var": "ACME_VISIBLE_DEVICES",
              "devices": [{"index": i, "id": f"ACME-00{i}"} for i in range(4)]}
    gpu = {**family, "resource": "GPU", "backend": "not_ray"}
    assert boot.install([family, gpu]) == ["acme_npu"]  # Ray's own GPU keeps Ray's managers
    monkeypatch.setenv("ACME_VISIBLE_DEVICES", "")  # recorded: the adapter's writes are undone afterwards
    monkeypatch.delenv("ACME_VISIBLE_DEVICES")
    return ray_accelerators.get_accelerator_manager_for_resource("acme_npu")


def test_the_adapter_asks_the_backend_and_never_counts(monkeypatch):
    manager = _adapter(monkeypatch, "ray_accel_ext_acme:AcmeNPUBackend")
    assert manager.get_current_node_num_accelerators() == 0  # the hook passes the count: no family race
    assert manager.get_current_process_visible_accelerator_ids() is None
    manager.set_current_process_visible_accelerator_ids(["3", "1"])
    assert os.environ["ACME_VISIBLE_DEVICES"] == "3,1"
    assert manager.get_current_process_visible_accelerator_ids() == ["3", "1"]
    assert manager.validate_resource_request_quantity(1.5)[0] is False and manager.validate_resource_request_quantity(0.5)[0]
    assert ray_accelerators.get_accelerator_manager_for_resource("GPU").__module__.startswith("ray.")


def test_a_failing_visible_devices_env_still_restricts_by_the_ids(monkeypatch, capsys):
    manager = _adapter(monkeypatch, "tests.unit.test_device_isolation:RaisingAcme")
    manager.set_current_process_visible_accelerator_ids(["2"])
    assert os.environ["ACME_VISIBLE_DEVICES"] == "2"
    assert "visible_devices_env failed for ids ['2']: RuntimeError: firmware table unreadable" in capsys.readouterr().err


def test_a_partition_adapter_writes_last_and_never_blanks(monkeypatch):
    """Ray calls the managers in the order its resource names iterate; the partition adapter comes
    last, so its CUDA_VISIBLE_DEVICES wins over Ray's GPU manager; without ids it writes nothing."""
    import _ray_accel_ext_devices as boot

    for name in ("get_all_accelerator_managers", "get_all_accelerator_resource_names"):
        monkeypatch.setattr(ray_accelerators, name, getattr(ray_accelerators, name))
    cache = ray_accelerators.get_accelerator_manager_for_resource.__dict__
    monkeypatch.setitem(cache, "_resource_name_to_accelerator_manager", dict(cache.get("_resource_name_to_accelerator_manager", {})))
    units = ["MIG-a", "MIG-b", "MIG-c"]
    family = {"resource": "mig-1g.10gb", "backend": "nvidia_gpu", "entry": "", "env_var": "CUDA_VISIBLE_DEVICES",
              "devices": [], "units": units}
    assert boot.install([family]) == ["mig-1g.10gb"]
    names = list(ray_accelerators.get_all_accelerator_resource_names())
    assert names[-1] == "mig-1g.10gb" and "GPU" in names
    manager = ray_accelerators.get_accelerator_manager_for_resource("mig-1g.10gb")
    assert manager.get_current_process_visible_accelerator_ids() is None  # slots never mapped through whole GPUs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    manager.set_current_process_visible_accelerator_ids([])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    manager.set_current_process_visible_accelerator_ids(["2"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "MIG-c"
