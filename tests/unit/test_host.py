"""The host seam: reads confined to the root, clear errors for bad files, tools and recordings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from ray_accel_ext.errors import CommandError, HostReadError
from ray_accel_ext.host import FsHost, open_host
from tests.support.paths import HOSTS, REPO


@pytest.fixture
def root(tmp_path):
    """A tiny host tree: a PCI device behind a relative symlink, plus hostile links."""
    r = tmp_path / "root"
    dev = r / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "binary").write_bytes(b"\x00\x01")
    (dev / "huge").write_text("x" * (2 << 20))
    links = r / "sys/bus/pci/devices"
    links.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0", links / "0000:01:00.0")
    os.symlink("/etc", r / "sys/abs-escape")  # absolute target: must resolve inside the root
    os.symlink("../../../../../../../../etc", r / "sys/dotdot-escape")
    os.symlink("loop-b", r / "sys/loop-a")
    os.symlink("loop-a", r / "sys/loop-b")
    os.symlink("missing-target", r / "sys/dangling")
    (tmp_path / "secret").write_text("outside the root\n")
    os.symlink("../../secret", r / "sys/out")
    return r


def test_relative_symlinks_resolve_inside_root(root):
    host = FsHost(root)
    assert host.read_text("/sys/bus/pci/devices/0000:01:00.0/vendor") == "0x10de\n"
    assert host.realpath("/sys/bus/pci/devices/0000:01:00.0") == "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"


@pytest.mark.parametrize("link", ["/sys/abs-escape/passwd", "/sys/dotdot-escape/passwd", "/sys/out"])
def test_links_can_not_leave_the_root(root, link):
    host = FsHost(root)
    try:  # resolves to <root>/etc/passwd or <root>/secret: absent there (or a broken link)
        got = host.read_optional(link)
    except HostReadError:
        got = None
    assert got is None
    assert host.realpath(link).startswith(("/etc", "/secret"))


def test_pci_links_resolve_where_the_kernel_does(tmp_path):
    """Device links under a bridge the host already walked take a shortcut (one readlink, one
    lstat); through a bridge that is itself a link, to a missing target, with a target that is
    not plain or to another link they are walked. Every answer is the kernel's own: no link
    here leaves the root, so ``os.path.realpath`` under it is the oracle."""
    r = tmp_path / "root"
    bridge = r / "sys/devices/pci0000:00/0000:00:01.0"
    for n in range(4):
        dev = bridge / f"0000:0{n + 1}:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(f"0x10d{n}\n")
    os.symlink("0000:00:01.0", r / "sys/devices/pci0000:00/alias")
    os.symlink("0000:01:00.0", bridge / "leaflink")
    links = r / "sys/bus/pci/devices"
    links.mkdir(parents=True)
    up = "../../../devices/pci0000:00"
    targets = {
        "a": f"{up}/0000:00:01.0/0000:01:00.0",  # first: walked, bridges become known
        "b": f"{up}/0000:00:01.0/0000:02:00.0",  # the shortcut
        "c": f"{up}/alias/0000:03:00.0",  # a directory on the way is a link
        "d": f"{up}/0000:00:01.0/gone",  # dangling
        "e": "../../../devices/./pci0000:00/0000:00:01.0/0000:04:00.0",  # not plain
        "f": f"{up}/0000:00:01.0/leaflink",  # to another link
        "g": f"{up}/0000:00:01.0/0000:01:00.0/../0000:02:00.0",  # '..' after names
    }
    for name, target in targets.items():
        os.symlink(target, links / name)
    host = FsHost(r)
    for name in targets:
        path = f"/sys/bus/pci/devices/{name}"
        assert host.realpath(path) == os.path.realpath(f"{r}{path}")[len(str(r)):], name
        want = (r / path.lstrip("/") / "vendor").read_text() if name != "d" else None
        assert host.read_optional(f"{path}/vendor") == want, name


def test_link_loop_is_a_clear_error(root):
    with pytest.raises(HostReadError, match="loop"):
        FsHost(root).read_text("/sys/loop-a")


def test_dangling_link_is_named(root):
    with pytest.raises(HostReadError) as err:
        FsHost(root).read_optional("/sys/dangling")
    assert err.value.path == "/sys/dangling" and "broken symbolic link" in str(err.value)


@pytest.mark.parametrize(
    "name, reason", [("binary", "binary content"), ("huge", "larger than")]
)
def test_bad_files_are_clear_errors(root, name, reason):
    with pytest.raises(HostReadError, match=reason):
        FsHost(root).read_text(f"/sys/bus/pci/devices/0000:01:00.0/{name}")


def test_unreadable_file(tmp_path):
    """A mode-000 file is a clear 'permission denied' (as root, checked as user nobody)."""
    base = tempfile.mkdtemp(prefix="ra-perm")
    try:
        os.chmod(base, 0o755)
        path = os.path.join(base, "sys/class/x")
        os.makedirs(os.path.dirname(path))
        for d in (os.path.join(base, "sys"), os.path.join(base, "sys/class")):
            os.chmod(d, 0o755)
        with open(path, "w") as fh:
            fh.write("1\n")
        os.chmod(path, 0)
        code = (
            "import sys; from ray_accel_ext.host import FsHost; from ray_accel_ext.errors import HostReadError\n"
            "try:\n    FsHost(sys.argv[1], env={}).read_text('/sys/class/x')\n"
            "except HostReadError as e:\n    print(e)\n"
        )
        argv = [sys.executable, "-c", code, base]
        if os.geteuid() == 0:
            if not shutil.which("setpriv"):
                pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop privileges")
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
        if "Permission denied" in out.stderr and "python" in out.stderr.lower() and not out.stdout:
            pytest.skip(f"user nobody cannot run this interpreter: {out.stderr.strip()[:200]}")
        assert out.stdout.strip() == "/sys/class/x: permission denied (root-only file?)", out.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_missing_file_and_dir(root):
    host = FsHost(root)
    assert host.read_optional("/sys/nope") is None
    assert host.listdir("/sys/nope") == []
    with pytest.raises(HostReadError, match="no such file"):
        host.read_text("/sys/nope")


def test_snapshot_env_is_recorded_plus_passthrough(tmp_path):
    snap = tmp_path / "snap"
    (snap / "rootfs").mkdir(parents=True)
    (snap / "env.json").write_text(json.dumps({"TPU_WORKER_ID": "3"}))
    host = open_host(snap, environ={"GCE_METADATA_HOST": "127.0.0.1:1", "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"})
    assert dict(host.env) == {"TPU_WORKER_ID": "3", "GCE_METADATA_HOST": "127.0.0.1:1"}
    assert not host.live


def test_tools_run_only_from_fixed_paths_without_shell(tmp_path):
    root = tmp_path / "r"
    tool = root / "opt/tool/bin/probe"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho \"args:$1\"\n")
    tool.chmod(0o755)
    host = FsHost(root, env={}, run_tools=True)
    assert host.run(["/opt/tool/bin/probe", "; rm -rf /"], timeout_s=5) == "args:; rm -rf /\n"
    with pytest.raises(CommandError, match="fixed absolute paths"):
        host.run(["probe"], timeout_s=5)
    with pytest.raises(CommandError, match="not installed"):
        host.run(["/opt/tool/bin/absent"], timeout_s=5)


def test_tool_timeout_is_bounded(tmp_path):
    root = tmp_path / "r"
    tool = root / "bin/hang"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nsleep 30\n")
    tool.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(CommandError, match="timed out"):
        FsHost(root, env={}, run_tools=True).run(["/bin/hang"], timeout_s=0.3)
    assert time.monotonic() - started < 10


def test_recorded_command_and_library(tmp_path):
    snap = tmp_path / "snap"
    (snap / "rootfs").mkdir(parents=True)
    (snap / "commands").mkdir()
    (snap / "commands/neuron-ls.json").write_text(json.dumps({"argv": ["neuron-ls", "-j"], "stdout": "[]", "returncode": 0}))
    (snap / "libraries").mkdir()
    (snap / "libraries/nvml.json").write_text(json.dumps({"gpus": []}))
    host = open_host(snap, environ={})
    assert host.run(["/opt/aws/neuron/bin/neuron-ls", "-j"], timeout_s=1) == "[]"
    assert host.library("nvml", lambda: pytest.fail("a snapshot must not read the live library")) == {"gpus": []}
    assert host.library("other", lambda: pytest.fail("no live reads")) is None


def test_host_without_a_name_is_degraded_not_merged(tmp_path):
    """Two hosts without a readable name must not silently share one fabric domain."""
    from ray_accel_ext.node.discovery import discover

    src = HOSTS / "nvidia_gpu/l4-single-pcie"
    snap = tmp_path / "l4"
    shutil.copytree(src, snap, symlinks=True)
    for rel in ("proc/sys/kernel/hostname", "etc/hostname"):
        (snap / "rootfs" / rel).unlink(missing_ok=True)
    inventory = discover(open_host(snap, environ={}))
    (desc,) = inventory.descriptions
    assert desc.fabric.id == "unknown-host"
    assert any("no readable host name" in p for p in [q.message for q in desc.problems])
    (snap / "rootfs/etc").mkdir(exist_ok=True)
    (snap / "rootfs/etc/machine-id").write_text("4c1f0e2a9b7d4e3f8a6b5c4d3e2f1a0b\n")
    (desc,) = discover(open_host(snap, environ={})).descriptions
    assert desc.fabric.id == "4c1f0e2a9b7d4e3f8a6b5c4d3e2f1a0b" and not desc.problems
