"""The NVIDIA backend's live fault source over NVML (a scripted stand-in for ``pynvml``): an Xid
event, a link that goes down after start and pending page retirement become health events once
each; off the real machine (a snapshot root) NVML is not watched at all."""

from __future__ import annotations

import sys
import threading
import types

from ray_accel_ext.backends.nvidia_gpu.backend import NvidiaGPUBackend
from ray_accel_ext.cluster.device_health import classify
from ray_accel_ext.host import open_host
from tests.support.paths import HOSTS


class _NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _fake_pynvml(waits: list) -> types.ModuleType:
    """One GPU with NVLinks 0-1 active at start; link 1 drops after the first wait; ``waits``
    scripts what each ``nvmlEventSetWait`` returns or raises."""
    state = {"waited": 0}
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVML_ERROR_TIMEOUT, m.NVML_ERROR_GPU_IS_LOST = _NVMLError, 10, 15
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: "h0"
    m.nvmlDeviceGetUUID = lambda h: b"GPU-aaaa"
    m.nvmlEventSetCreate = lambda: "set"
    m.nvmlEventSetFree = lambda s: None
    m.nvmlDeviceGetSupportedEventTypes = lambda h: 0xFFFF
    m.nvmlDeviceRegisterEvents = lambda h, mask, s: None
    m.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: 1 if state["waited"] >= 2 else 0
    m.nvmlDeviceGetRemappedRows = lambda h: (0, 0, 0, 0)

    def link_state(h, link):
        if link > 1:
            raise _NVMLError(3)
        return 0 if (link == 1 and state["waited"] >= 1) else 1

    def wait(s, ms):
        step = waits[min(state["waited"], len(waits) - 1)]
        state["waited"] += 1
        if isinstance(step, Exception):
            raise step
        return step

    m.nvmlDeviceGetNvLinkState = link_state
    m.nvmlEventSetWait = wait
    return m


def test_live_nvml_events_and_counters_become_health_events(monkeypatch):
    xid = types.SimpleNamespace(device="h0", eventType=0x8, eventData=79)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([xid, _NVMLError(10), _NVMLError(10)]))
    events, stop = [], threading.Event()

    def on_event(event):
        events.append(event)
        if len(events) == 3:
            stop.set()

    assert NvidiaGPUBackend().watch_faults(lambda: open_host("/"), [], on_event, stop) is True
    assert events == [{"device": "GPU-aaaa", "kind": "xid", "xid": 79},
                      {"device": "GPU-aaaa", "kind": "nvlink_down", "link": 1},
                      {"device": "GPU-aaaa", "kind": "retired_pages_pending"}]
    assert {classify(e) for e in events} == {"fault"}


def test_a_snapshot_root_is_not_watched_through_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([_NVMLError(10)]))
    snapshot = HOSTS / "nvidia_gpu" / "l4-single-pcie"
    assert NvidiaGPUBackend().watch_faults(lambda: open_host(snapshot), [], print, threading.Event()) is False
