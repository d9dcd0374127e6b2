"""One walk of the PCI tree per discovery (``ray_accel_ext/hw/pci_index.py``), through the CLI.

The host is the 8x H100 snapshot with 64 NVMe functions added (Samsung ``144d:a80a``, class
``0x010802``) whose sysfs ``vendor`` files hold garbage, plus the kernel's one-file summary
``/proc/bus/pci/devices`` (``"%02x%02x\\t%04x%04x\\t..."`` per function, kernel
``drivers/pci/proc.c``) written from the snapshot's own sysfs. Where the summary agrees with sysfs,
no backend and no host check reads a function the summary gives to another vendor, so the garbage
is never seen; where it does not (a line missing), every function is read again as before and the
garbage is reported.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
EXTRA = 64


def _summary_rows(sysfs) -> list[str]:
    rows = []
    for name in sorted(os.listdir(sysfs)):
        m = re.fullmatch(r"[0-9a-f]{4}:([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", name)
        if not m:
            continue
        vendor = (sysfs / name / "vendor").read_text().strip()
        vendor = "144d" if vendor == "garbage" else vendor[2:]
        device = (sysfs / name / "device").read_text().strip()[2:]
        devfn = (int(m.group(2), 16) << 3) | int(m.group(3))
        rows.append(f"{m.group(1)}{devfn:02x}\t{vendor:0>4}{device:0>4}\t0\t0\n")
    return rows


@pytest.fixture
def host(tmp_path):
    snap = tmp_path / "h100-nvme"
    shutil.copytree(H100, snap, symlinks=True)
    sysfs = snap / "rootfs" / "sys" / "bus" / "pci" / "devices"
    for i in range(EXTRA):
        bdf = f"0000:e{i // 32:01x}:{i % 32:02x}.0"
        dev = snap / "rootfs" / "sys" / "devices" / "pci0000:e0" / bdf
        dev.mkdir(parents=True)
        for name, value in {"vendor": "garbage", "device": "0xa80a", "class": "0x010802", "numa_node": "1"}.items():
            (dev / name).write_text(value + "\n")
        os.symlink(os.path.relpath(dev, sysfs), sysfs / bdf)
    proc = snap / "rootfs" / "proc" / "bus" / "pci"
    proc.mkdir(parents=True)

    def write_summary(rows):
        (proc / "devices").write_text("".join(rows))

    write_summary(_summary_rows(sysfs))
    return snap, write_summary, _summary_rows(sysfs)


def _discover(snap, capsys):
    assert main(["discover", "--root", str(snap), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_functions_the_kernel_gives_to_other_vendors_are_not_read(host, capsys):
    snap, _, _ = host
    out = _discover(snap, capsys)
    (gpus,) = out["descriptions"]
    assert len(gpus["devices"]) == 8
    assert out["problems"] == [] and gpus["problems"] == []


def test_a_summary_that_disagrees_with_sysfs_is_ignored(host, capsys):
    snap, write_summary, rows = host
    write_summary(rows[:-1])  # one function short: a summary of another moment
    out = _discover(snap, capsys)
    assert len(out["descriptions"][0]["devices"]) == 8
    assert any(f"{EXTRA} PCI function(s) without readable ids" in p["message"] for p in out["problems"])
