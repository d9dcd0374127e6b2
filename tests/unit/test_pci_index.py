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
import time

import pytest

from ray_accel_ext.backends.nvidia_gpu.backend import NvidiaGPUBackend
from ray_accel_ext.host import open_host
from ray_accel_ext.hw.pci_index import functions_of
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.node.envelope import STAGGER_S
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


def _add_functions(snap, vendors: dict[str, str]) -> None:
    """PCI functions (address -> vendor id) added to the snapshot, each under its domain's root."""
    sysfs = snap / "rootfs" / "sys" / "bus" / "pci" / "devices"
    for address, vendor in vendors.items():
        dev = snap / "rootfs" / "sys" / "devices" / f"pci{address[:4]}:00" / address
        dev.mkdir(parents=True)
        for name, value in {"vendor": vendor, "device": "0xa80a", "class": "0x010802", "numa_node": "0"}.items():
            (dev / name).write_text(value + "\n")
        os.symlink(os.path.relpath(dev, sysfs), sysfs / address)


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


def _device_unreadable(sysfs, address: str) -> None:
    (sysfs / address / "device").unlink()
    (sysfs / address / "device").mkdir()  # a directory where the id file should be: unreadable


def test_without_the_summary_only_the_vendors_asked_for_have_their_device_read(host, capsys):
    """Each function's vendor file alone is read; device and class only for a vendor a backend
    asked for, so an NVMe function with an unreadable device id costs nothing and says nothing,
    while an NVIDIA GPU with one is reported (its backend would skip it)."""
    snap, _, _ = host
    (snap / "rootfs" / "proc" / "bus" / "pci" / "devices").unlink()
    sysfs = snap / "rootfs" / "sys" / "bus" / "pci" / "devices"
    for name in sorted(os.listdir(sysfs)):
        if name.startswith("0000:e"):
            (sysfs / name / "vendor").write_text("0x144d\n")
    _device_unreadable(sysfs, "0000:e0:00.0")
    out = _discover(snap, capsys)
    assert len(out["descriptions"][0]["devices"]) == 8
    assert out["problems"] == [], "an unreadable id of a vendor no backend reads is no problem"

    gpu = out["descriptions"][0]["devices"][0]["pci_address"]
    _device_unreadable(sysfs, gpu)
    out = _discover(snap, capsys)
    assert len(out["descriptions"][0]["devices"]) == 7
    unreadable = [p for p in out["problems"] if p["code"] == "file-unreadable"]
    assert len(unreadable) == 1 and gpu in unreadable[0]["message"]
    assert "0000:e0:00.0" not in unreadable[0]["message"]


class _LateNvidia(NvidiaGPUBackend):
    """The NVIDIA backend, asking for its functions only after the stagger has let the host
    checks start (a backend busy with something else first)."""

    def detect(self, host):
        time.sleep(STAGGER_S + 0.5)
        return super().detect(host)


def _without_summary_one_gpu_unreadable(snap) -> str:
    (snap / "rootfs" / "proc" / "bus" / "pci" / "devices").unlink()
    sysfs = snap / "rootfs" / "sys" / "bus" / "pci" / "devices"
    for name in sorted(os.listdir(sysfs)):
        if name.startswith("0000:e"):
            (sysfs / name / "vendor").write_text("0x144d\n")
    gpu = next(n for n in sorted(os.listdir(sysfs)) if (sysfs / n / "vendor").read_text().strip() == "0x10de"
               and (sysfs / n / "class").read_text().startswith("0x03"))  # a GPU, not an NVSwitch
    _device_unreadable(sysfs, gpu)
    return gpu


@pytest.mark.parametrize("how", ["late-thread", "worker-process"])
def test_the_vendors_a_backend_reads_are_checked_however_late_or_far_it_asks(host, how):
    """Which vendors' device ids the host checks read does not depend on thread timing: a backend
    that asks for its functions after the checks have walked the PCI tree still has its unreadable
    GPU reported, and so does one in a worker process (``RAY_ACCEL_ISOLATION=all``), whose asks
    happen in another process and reach the checks with its answer."""
    snap, _, _ = host
    gpu = _without_summary_one_gpu_unreadable(snap)
    if how == "late-thread":
        inventory = discover(open_host(snap, budget_s=10), backends=[_LateNvidia()])
    else:
        inventory = discover(open_host(snap, environ={"RAY_ACCEL_ISOLATION": "all"}, budget_s=10))
    assert len(inventory.descriptions[0].devices) == 7
    unreadable = [p for p in inventory.problems if p.code == "file-unreadable" and p.backend == "host"]
    assert len(unreadable) == 1 and gpu in unreadable[0].message, [p.message for p in inventory.problems]


def test_a_shared_slot_reads_vendor_files_only_until_the_summarys_count_is_met(host):
    """A (bus, devfn) in three domains, the summary giving NVIDIA one of its lines: where the GPU
    sits in the last domain, the two NVMe functions before it are read and the GPU is then a
    candidate without a read (the summary's other-vendor lines are all seen); a vendor file that
    cannot be read keeps its function a candidate and settles nothing."""
    snap, write_summary, _ = host
    sysfs = snap / "rootfs" / "sys" / "bus" / "pci" / "devices"
    slot = "7f:00.0"
    layout = {f"0000:{slot}": "0x144d", f"0001:{slot}": "0x144d", f"0002:{slot}": "0x10de"}
    _add_functions(snap, layout)
    write_summary(_summary_rows(sysfs))
    gpu = f"0002:{slot}"
    assert [c for c in functions_of(open_host(snap), ["0x10de"]) if c.endswith(slot)] == [gpu]
    (sysfs / gpu / "vendor").write_text("0x8086\n")  # not read: the two NVMe lines settle it
    assert [c for c in functions_of(open_host(snap), ["0x10de"]) if c.endswith(slot)] == [gpu]
    (sysfs / gpu / "vendor").write_text("0x10de\n")
    (sysfs / f"0000:{slot}" / "vendor").unlink()  # unreadable: a candidate, and the GPU is still read
    assert [c for c in functions_of(open_host(snap), ["0x10de"]) if c.endswith(slot)] == [f"0000:{slot}", gpu]


def test_a_vendors_slot_is_looked_up_in_every_pci_domain(host, capsys):
    """The summary has no PCI domain: a GPU's (bus, devfn) is looked for in each domain the listing
    has. An NVMe at a GPU's (bus, devfn) in another domain is told apart by its vendor file (the
    summary gives that (bus, devfn) to NVIDIA once, the listing has it twice); a GPU function in a
    second domain is a candidate."""
    snap, write_summary, _ = host
    sysfs = snap / "rootfs" / "sys" / "bus" / "pci" / "devices"
    gpus = [n for n in sorted(os.listdir(sysfs)) if (sysfs / n / "vendor").read_text().strip() == "0x10de"]
    twin, second = f"0002{gpus[0][4:]}", f"0001{gpus[0][4:8]}1f.0"
    _add_functions(snap, {twin: "0x144d", second: "0x10de"})
    write_summary(_summary_rows(sysfs))
    candidates = functions_of(open_host(snap), ["0x10de"])
    assert candidates == sorted(candidates)
    assert set(gpus) | {second} <= set(candidates)
    assert twin not in candidates, "the summary's one NVIDIA line at this (bus, devfn) is the GPU's: the NVMe's vendor file says so"
    assert not any(c.startswith("0000:e") for c in candidates), "NVMe slots of no NVIDIA line are not candidates"
    # Read only until the summary's count is met: the GPU's vendor file accounts for the one NVIDIA
    # line, so the twin's is not read (gone, it changes nothing) ...
    twin_vendor = (sysfs / twin / "vendor").read_text()
    (sysfs / twin / "vendor").unlink()
    assert twin not in functions_of(open_host(snap), ["0x10de"])
    (sysfs / twin / "vendor").write_text(twin_vendor)
    # ... and a GPU whose vendor file cannot be read stays a candidate, whose reader reports it.
    gpu_vendor = (sysfs / gpus[0] / "vendor").read_text()
    (sysfs / gpus[0] / "vendor").unlink()
    assert gpus[0] in functions_of(open_host(snap), ["0x10de"])
    assert twin not in functions_of(open_host(snap), ["0x10de"])
    (sysfs / gpus[0] / "vendor").write_text(gpu_vendor)
    out = _discover(snap, capsys)
    assert len(out["descriptions"][0]["devices"]) == 8  # neither extra function is a GPU NVML lists
    assert {twin, second}.isdisjoint(d["pci_address"] for d in out["descriptions"][0]["devices"])
