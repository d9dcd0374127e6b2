"""Corrupt, missing, unreadable and dangling sysfs entries on the 8x H100 snapshot: the node is
described with what can be read, labelled degraded, the log names the file, nothing raises."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS
from tests.support.reliability import without_dac_override

SOURCE = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
GPU0 = "rootfs/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0"


@pytest.fixture
def snap(tmp_path) -> Path:
    dst = tmp_path / "h100"
    shutil.copytree(SOURCE, dst, symlinks=True)
    return dst


def ray_args(capsys, caplog, root) -> tuple[dict, str]:
    with caplog.at_level(logging.WARNING, logger="ray_accel_ext"):
        assert main(["ray-args", "--root", str(root), "--format", "json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), caplog.text + out.err


def replace(path: Path, content: bytes | None = None) -> None:
    path.unlink()
    if content is not None:
        path.write_bytes(content)


def corrupt_numa(root):
    replace(root / GPU0 / "numa_node", b"zero\n")
    return "/sys/bus/pci/devices/0000:1a:00.0/numa_node", 8


def corrupt_cpulist(root):
    replace(root / GPU0 / "local_cpulist", b"0-55,oops\n")
    return "/sys/bus/pci/devices/0000:1a:00.0/local_cpulist", 8


def missing_cpulist(root):
    replace(root / GPU0 / "local_cpulist")
    return "/sys/bus/pci/devices/0000:1a:00.0/local_cpulist: missing", 8


def missing_class(root):
    replace(root / GPU0 / "class")
    return "/sys/bus/pci/devices/0000:1a:00.0/class", 7


def binary_device(root):
    replace(root / GPU0 / "device", b"\x00\x23\x30")
    return "/sys/bus/pci/devices/0000:1a:00.0/device", 7


def looping_vendor(root):
    (root / GPU0 / "vendor").unlink()
    os.symlink("vendor", root / GPU0 / "vendor")
    return "/sys/bus/pci/devices/0000:1a:00.0/vendor", 7


def directory_cpulist(root):
    (root / GPU0 / "local_cpulist").unlink()
    (root / GPU0 / "local_cpulist").mkdir()
    return "/sys/bus/pci/devices/0000:1a:00.0/local_cpulist", 8


def broken_device_link(root):
    link = root / "rootfs/sys/bus/pci/devices/0000:1e:00.0"
    link.unlink()
    os.symlink("../../../devices/pci0000:15/0000:15:01.0/gone/0000:1e:00.0", link)
    return "/sys/bus/pci/devices/0000:1e:00.0", 7


def broken_nic_link(root):
    link = root / "rootfs/sys/class/infiniband/mlx5_3"
    link.unlink()
    os.symlink("../../devices/pci0000:37/nowhere/infiniband/mlx5_3", link)
    return "/sys/class/infiniband/mlx5_3: broken symbolic link", 8


CASES = [corrupt_numa, corrupt_cpulist, missing_cpulist, missing_class, binary_device, looping_vendor, directory_cpulist,
         broken_device_link, broken_nic_link]


@pytest.mark.parametrize("damage", CASES, ids=lambda f: f.__name__)
def test_damage_gives_degraded_node_naming_the_file(snap, capsys, caplog, damage):
    path, gpus = damage(snap)
    spec, log = ray_args(capsys, caplog, snap)
    assert spec["labels"]["rayaccel.io/discovery"] == "degraded"
    assert spec["resources"]["GPU"] == gpus
    assert spec["labels"]["rayaccel.io/sku"] == "h100-sxm5-80gb"
    assert path in log, log


def test_unreadable_file_is_named(snap, capsys, caplog):
    """As root (CI) the command runs without CAP_DAC_OVERRIDE, so the file's mode applies to it too."""
    (snap / GPU0 / "local_cpulist").chmod(0)
    named = "/sys/bus/pci/devices/0000:1a:00.0/local_cpulist: permission denied"
    if os.geteuid() != 0:
        spec, log = ray_args(capsys, caplog, snap)
        assert spec["labels"]["rayaccel.io/discovery"] == "degraded"
        assert named in log
        return
    prefix = without_dac_override()
    if prefix is None:
        pytest.skip("running as root without setpriv: root reads files whatever their mode")
    cli = [*prefix, sys.executable, "-m", "ray_accel_ext.tools.cli"]
    for command in ("ray-args", "discover"):  # the labels, then the coded problem that explains them
        proc = subprocess.run([*cli, command, "--root", str(snap), "--format", "json"], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        if command == "ray-args":
            assert out["labels"]["rayaccel.io/discovery"] == "degraded"
            assert out["resources"]["GPU"] == 8
        else:
            (gpus,) = out["descriptions"]
            assert [(p["code"], p["message"].startswith(named)) for p in gpus["problems"]] == [("file-unreadable", True)]


def test_whole_pci_directory_missing_is_no_gpu_not_an_error(snap, capsys, caplog):
    shutil.rmtree(snap / "rootfs/sys/bus/pci")
    spec, _ = ray_args(capsys, caplog, snap)
    assert "GPU" not in spec["resources"]
    assert spec["labels"]["rayaccel.io/count"] == "0"


_FILES = sorted(
    str(p.relative_to(SOURCE / "rootfs")) for p in (SOURCE / "rootfs").rglob("*") if p.is_file() or p.is_symlink()
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from(_FILES),
    mode=st.sampled_from(["delete", "empty", "garbage", "binary", "dangling"]),
)
def test_any_single_damage_never_raises(tmp_path_factory, target, mode):
    root = tmp_path_factory.mktemp("h100")
    shutil.copytree(SOURCE, root, dirs_exist_ok=True, symlinks=True)
    path = root / "rootfs" / target
    if path.is_symlink() or path.is_file():
        path.unlink()
    if mode == "empty":
        path.write_text("")
    elif mode == "garbage":
        path.write_text("\x7f{not sysfs}\n")
    elif mode == "binary":
        path.write_bytes(b"\xff\x00\xfe")
    elif mode == "dangling":
        os.symlink("does/not/exist", path)
    inventory = discover(open_host(root))
    for desc in inventory.descriptions:
        assert desc.consistency_errors() == []
    assert not any(p.stage == "describe" for p in inventory.problems), inventory.problems
