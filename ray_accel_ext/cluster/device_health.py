"""Health after start, per device: events in, a verdict per device out (no Ray here).

An event is a plain dict, the same whether it comes live from NVML (:mod:`.device_events`), from
an AMD or Neuron counter, from udev, or from a snapshot's recording (``libraries/device_events.json``
``{"format": 1, "events": [...]}``)::

    {"device": "GPU-<uuid>" or a PCI address, "kind": "xid", "xid": 79}
    {"device": ..., "kind": "ecc_dbe", "count": 2}              # double-bit (uncorrectable) ECC
    {"device": ..., "kind": "retired_pages_pending"}            # page retirement waits for a reset
    {"device": ..., "kind": "row_remap_pending" | "row_remap_failure"}
    {"device": ..., "kind": "nvlink_down", "link": 3}
    {"device": ..., "kind": "gpu_lost"}                         # NVML_ERROR_GPU_IS_LOST, Xid 79
    {"device": ..., "kind": "removed"}                          # udev remove of the PCI function
    {"device": ..., "kind": "ras_uncorrectable", "count": 1}    # AMD SMI total ECC, Neuron monitor
    {"device": ..., "kind": "ecc_sbe" | "thermal" | "mig_config_change"}   # informational

Rules (:func:`classify`): an Xid is a device fault unless it is one the NVIDIA device plugin
treats as application-caused (:data:`APPLICATION_XIDS`, plus ``RAY_ACCEL_HEALTH_IGNORE_XIDS``, as
the plugin's ``DP_DISABLE_HEALTHCHECKS``); double-bit ECC, pending retirement or remap, a remap
failure, an NVLink going down, a lost or removed device and uncorrectable RAS errors are faults;
everything else is informational and never drains. A failed device stays failed (the device
plugin has no way back either): the node is restarted once the device is fixed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..problems import DEVICE_EVENT, DEVICE_FAULT
from ..telemetry import emit

__all__ = ["APPLICATION_XIDS", "FAULT_KINDS", "classify", "DeviceHealth", "ignored_xids"]

# NVIDIA/k8s-device-plugin internal/rm/health.go (applicationErrorXids; 109 since 2025-02-14).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
FAULT_KINDS = frozenset({"ecc_dbe", "retired_pages_pending", "row_remap_pending", "row_remap_failure",
                         "nvlink_down", "gpu_lost", "removed", "ras_uncorrectable"})
IGNORE_ENV = "RAY_ACCEL_HEALTH_IGNORE_XIDS"
_MAX_EVENTS = 100


def ignored_xids(environ: Mapping[str, str] | None = None) -> frozenset[int]:
    """The application Xids plus those listed in ``RAY_ACCEL_HEALTH_IGNORE_XIDS`` (comma list)."""
    text = (os.environ if environ is None else environ).get(IGNORE_ENV, "")
    extra = {int(x) for x in text.split(",") if x.strip().isdigit()}
    return APPLICATION_XIDS | extra


def classify(event: Mapping[str, Any], ignored: frozenset[int] = APPLICATION_XIDS) -> str:
    """``fault`` (the device is failed; the node stops taking accelerator work) or ``info``."""
    kind = event.get("kind")
    if kind == "xid":
        return "info" if int(event.get("xid", -1)) in ignored else "fault"
    return "fault" if kind in FAULT_KINDS else "info"


def _describe(event: Mapping[str, Any]) -> str:
    kind = event.get("kind")
    if kind == "xid":
        return f"Xid {event.get('xid')}"
    extra = event.get("count", event.get("link"))
    return f"{kind}{'' if extra is None else f' ({extra})'}"


class DeviceHealth:
    """The health of one node's devices from the events fed to :meth:`handle`.

    ``devices`` are ``{"id", "index", "pci_address"}`` of the node's accelerators (an event names
    one by id or PCI address); ``on_fault(state)`` is called once, at the first fault.
    """

    def __init__(self, devices: Iterable[Mapping[str, Any]], *, node_id: str | None = None,
                 on_fault: Callable[[dict[str, Any]], None] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.node_id = node_id
        self.on_fault = on_fault
        self.ignored = ignored_xids(environ)
        self.devices = [dict(d) for d in devices]
        self._by_key = {k: d for d in self.devices for k in (d.get("id"), d.get("pci_address"), str(d.get("index"))) if k}
        self.failed: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def handle(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one event; returns the telemetry line emitted (``device_health``)."""
        verdict = classify(event, self.ignored)
        dev = self._by_key.get(str(event.get("device")))
        name = dev["id"] if dev else str(event.get("device"))
        first_fault = False
        with self._lock:
            if verdict == "fault" and name not in self.failed:
                first_fault = not self.failed
                self.failed[name] = _describe(event)
        line = emit("device_health", node_id=self.node_id, device=name, index=dev.get("index") if dev else None,
                    verdict=verdict, what=_describe(event), **{k: v for k, v in event.items() if k not in ("device",)})
        with self._lock:
            self.events.append(line)
            del self.events[:-_MAX_EVENTS]
        if first_fault and self.on_fault is not None:
            self.on_fault(self.state())
        return line

    def state(self) -> dict[str, Any]:
        """Per-device health (1 healthy, 0 failed), coded problems and recent events."""
        with self._lock:
            failed, events = dict(self.failed), list(self.events)
        devices = [{"device": d["id"], "index": d.get("index"), "pci_address": d.get("pci_address"),
                    "backend": d.get("backend"), "health": 0 if d["id"] in failed else 1, "reason": failed.get(d["id"])}
                   for d in self.devices]
        known = {d["id"] for d in self.devices}
        devices += [{"device": k, "index": None, "pci_address": None, "health": 0, "reason": r}
                    for k, r in sorted(failed.items()) if k not in known]
        problems = [{"code": DEVICE_FAULT, "device": d["device"],
                     "message": f"device {d['device']} failed after the node started: {d['reason']}"}
                    for d in devices if d["health"] == 0]
        problems += [{"code": DEVICE_EVENT, "device": e["device"], "message": f"device {e['device']}: {e['what']}"}
                     for e in events if e["verdict"] == "info"][-5:]
        return {"device_status": "failed" if failed else "ok", "devices": devices, "device_problems": problems,
                "device_events": events}
