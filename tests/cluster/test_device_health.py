"""Device health after start from recorded event streams: which events fail a device (and drain
the node) and which are informational; the exporter's gauge per device; the node's coded problem."""

from __future__ import annotations

import pytest

from ray_accel_ext.backend import recorded_stream
from ray_accel_ext.cluster.device_health import APPLICATION_XIDS, DeviceHealth, classify
from ray_accel_ext.cluster.device_watch import node_devices
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS

NV = HOSTS / "nvidia_gpu"


@pytest.mark.parametrize("event,verdict", [
    ({"kind": "xid", "xid": 79}, "fault"),      # fallen off the bus
    ({"kind": "xid", "xid": 48}, "fault"),      # double-bit ECC
    ({"kind": "xid", "xid": 13}, "info"),       # application: graphics engine exception
    ({"kind": "xid", "xid": 109}, "info"),      # on the device plugin's list since 2025
    ({"kind": "ecc_dbe", "count": 1}, "fault"),
    ({"kind": "retired_pages_pending"}, "fault"),
    ({"kind": "row_remap_failure"}, "fault"),
    ({"kind": "nvlink_down", "link": 3}, "fault"),
    ({"kind": "gpu_lost"}, "fault"),
    ({"kind": "ras_uncorrectable", "count": 2}, "fault"),
    ({"kind": "ecc_sbe"}, "info"),
    ({"kind": "mig_config_change"}, "info"),
])
def test_classify(event, verdict):
    assert classify(event) == verdict


def test_extra_ignored_xids_come_from_the_environment():
    health = DeviceHealth([{"id": "GPU-a", "index": 0}], environ={"RAY_ACCEL_HEALTH_IGNORE_XIDS": "94, 63"})
    health.handle({"device": "GPU-a", "kind": "xid", "xid": 94})
    assert health.state()["device_status"] == "ok" and APPLICATION_XIDS < health.ignored


def _replay(name: str):
    host = open_host(NV / name)
    devices, resources = node_devices(discover(host))
    faults = []
    health = DeviceHealth(devices, node_id="n1", on_fault=faults.append)
    for event in recorded_stream(host):
        health.handle(event)
    return health.state(), faults, resources


def test_a_recorded_fatal_xid_fails_its_device_once_and_asks_for_the_drain():
    state, faults, resources = _replay("l4-xid-fatal")
    assert state["device_status"] == "failed" and len(faults) == 1 and resources == {"GPU": 1.0}
    (dev,) = state["devices"]
    assert (dev["index"], dev["health"], dev["reason"]) == (0, 0, "Xid 79")
    assert [p["code"] for p in state["device_problems"]] == ["device-fault", "device-event"]


def test_recorded_application_xids_never_fail_or_drain():
    state, faults, _ = _replay("l4-xid-application")
    assert (state["device_status"], faults) == ("ok", [])
    assert [e["verdict"] for e in state["device_events"]] == ["info", "info"]


def test_a_live_host_has_no_recording():
    assert recorded_stream(open_host(NV / "l4-single-pcie")) is None


def test_mig_gpus_are_watched_and_their_instances_held_by_the_fallback():
    devices, resources = node_devices(discover(open_host(NV / "h100-partly-mig")))
    assert len(devices) == 2 and resources == {"GPU": 1.0, "mig-1g.10gb": 7.0}
