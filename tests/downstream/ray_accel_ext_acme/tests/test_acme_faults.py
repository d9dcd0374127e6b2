"""The Acme backend's live fault source: an NPU's uncorrectable error count growing after start is
a fault event of that NPU; a count that stays put is not."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from ray_accel_ext.host import open_host
from ray_accel_ext_acme import AcmeNPUBackend

HOSTS = Path(__file__).parent / "hosts"


def test_a_growing_uncorrectable_count_is_a_fault_of_that_npu(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ACCEL_HEALTH_POLL_S", "0.01")
    snap = tmp_path / "acme"
    shutil.copytree(HOSTS / "acme-4npu", snap, symlinks=True)
    counter = snap / "rootfs/sys/class/acme_npu/npu2/uncorrectable_errors"
    counter.write_text("0\n")
    backend = AcmeNPUBackend()
    desc = backend.describe(open_host(snap, environ={}))
    devices = [{"id": d.id, "index": d.index, "pci_address": None, "backend": backend.name} for d in desc.devices]
    opened, events, stop = [], [], threading.Event()

    def host():  # the baseline is read on the first open; the error appears before the second
        opened.append(1)
        if len(opened) == 2:
            counter.write_text("1\n")
        return open_host(snap, environ={})

    def on_event(event):
        events.append(event)
        stop.set()

    assert backend.watch_faults(host, devices, on_event, stop) is True
    assert events == [{"device": "ACME-002", "kind": "ras_uncorrectable", "count": 1}]
