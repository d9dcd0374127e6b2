"""Fault sources as a backend capability: the node's watcher asks each family's backend for its
recorded stream or its live source (NVIDIA's recorded Xids, Neuron's hardware ECC counters, AMD's
RAS counters) and drains once at the first device fault. No Ray: the mark and the drain are
captured."""

from __future__ import annotations

import shutil
import threading

from ray_accel_ext.cluster.device_watch import NodeWatch
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS


class Captured:
    def __init__(self) -> None:
        self.marks: list[dict] = []
        self.drains: list[tuple] = []
        self.drained = threading.Event()

    def report(self, node_id, state):
        self.marks.append(state)

    def drain(self, node_id, message, resources):
        self.drains.append((node_id, message, resources))
        self.drained.set()
        return {"how": "test", "accepted": True}


def _watch(snap, host=None) -> tuple[NodeWatch, Captured]:
    seen = Captured()
    opener = host or (lambda: open_host(snap, environ={}))
    watch = NodeWatch("n1", discover(opener()), host=opener, report=seen.report, drain=seen.drain, extra={"watcher": "test"})
    return watch, seen


def _replayed(snap) -> tuple[dict, Captured]:
    watch, seen = _watch(snap)
    watch.start()
    for t in watch.threads:
        t.join()
    return watch.state(), seen


def test_a_recorded_nvidia_xid_is_replayed_through_the_backend_and_drains_once():
    state, seen = _replayed(HOSTS / "nvidia_gpu" / "l4-xid-fatal")
    assert [(d["health"], d["reason"]) for d in state["devices"]] == [(0, "Xid 79")]
    assert len(seen.drains) == 1 and seen.drains[0][2] == {"GPU": 1.0}
    assert seen.marks[-1]["drained"] == {"how": "test", "accepted": True} and seen.marks[-1]["watcher"] == "test"


def test_recorded_neuron_ecc_counters_fail_the_device_and_a_repairable_error_does_not():
    state, seen = _replayed(HOSTS / "neuron" / "inf2-xlarge-ecc-fatal")
    (dev,) = state["devices"]
    assert (dev["backend"], dev["health"], dev["reason"]) == ("neuron", 0, "ras_uncorrectable (2)")
    assert [(e["kind"], e["verdict"]) for e in state["device_events"]] == [
        ("ecc_repairable", "info"), ("ras_uncorrectable", "fault")]
    assert len(seen.drains) == 1 and seen.drains[0][2] == {"neuron_cores": 2.0}


def test_a_host_without_a_recording_is_watched_live():
    watch, seen = _watch(HOSTS / "neuron" / "inf2-xlarge")
    watch.start()
    assert [t.name for t in watch.threads] == ["ray-accel-faults-neuron"]
    watch.stop.set()
    for t in watch.threads:
        t.join()
    assert watch.state()["device_status"] == "ok" and not seen.drains


def _stepping_host(snap, write, after: int):
    """A live-host opener that writes a counter once it has been opened ``after`` times (the
    baseline is read before), so the poll sees the growth without racing it."""
    calls = []

    def opener():
        calls.append(1)
        if len(calls) == after:
            write()
        return open_host(snap, environ={})

    return opener


def test_the_live_neuron_source_polls_the_driver_counters(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ACCEL_HEALTH_POLL_S", "0.01")
    snap = tmp_path / "inf2"
    shutil.copytree(HOSTS / "neuron" / "inf2-xlarge-ecc-fatal", snap, symlinks=True)
    (snap / "libraries" / "neuron_hw_counters.json").unlink()  # now a "live" host
    total = snap / "rootfs/sys/devices/virtual/neuron_device/neuron0/stats/hardware/sram_ecc_uncorrected/total"
    # opened: discovery, start(), the source's baseline, then each poll
    watch, seen = _watch(snap, _stepping_host(snap, lambda: total.write_text("3\n"), after=5))
    watch.start()
    assert seen.drained.wait(120), "the counter growth was not seen"
    watch.stop.set()
    assert watch.state()["devices"][0]["reason"] == "ras_uncorrectable (3)"


def test_the_live_amd_source_polls_the_ras_counters(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ACCEL_HEALTH_POLL_S", "0.01")
    snap = tmp_path / "mi300x"
    shutil.copytree(HOSTS / "amd_gpu" / "mi300x-8gpu-hive", snap, symlinks=True)
    watch, seen = _watch(snap)
    addr = watch.health.devices[2]["pci_address"]
    ras = snap / "rootfs" / "sys" / "bus" / "pci" / "devices" / addr / "ras"
    ras.mkdir()
    (ras / "umc_err_count").write_text("ue: 0\nce: 4\n")
    watch._host = _stepping_host(snap, lambda: (ras / "umc_err_count").write_text("ue: 1\nce: 4\n"), after=4)
    watch.start()
    assert seen.drained.wait(120), "the RAS count growth was not seen"
    watch.stop.set()
    assert [d["device"] for d in watch.state()["devices"] if d["health"] == 0] == [watch.health.devices[2]["id"]]
