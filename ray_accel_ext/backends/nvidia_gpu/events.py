"""NVIDIA device health after start, live over NVML: events and counters as health events.

The same event dicts a snapshot records (:mod:`ray_accel_ext.cluster.device_health`). One NVML
event set for every GPU with ``XidCriticalError | DoubleBitEccError | SingleBitEccError |
MigConfigChange`` masked by ``nvmlDeviceGetSupportedEventTypes`` (as the NVIDIA device plugin
registers, ``internal/rm/health.go``), waited on in 5 s steps; between waits the counters that
have no event are read: pending page retirement (``nvmlDeviceGetRetiredPagesPendingStatus``),
row remapping (``nvmlDeviceGetRemappedRows``: pending, failure) and NVLink state against the links
active at start. ``NVML_ERROR_GPU_IS_LOST`` from the wait is a lost GPU. Each fact is reported
once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["watch"]

_XID, _DBE, _SBE, _MIG = 0x8, 0x2, 0x1, 0x100
_WAIT_MS = 5000


def watch(on_event: Callable[[dict[str, Any]], Any], stop: threading.Event) -> bool:
    """Feed ``on_event`` until ``stop`` is set; False when there is no NVML to watch."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no module, library or driver: nothing to watch
        return False
    try:
        _loop(pynvml, on_event, stop)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return True


def _uuid(pynvml: Any, handle: Any) -> str:
    raw = pynvml.nvmlDeviceGetUUID(handle)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _loop(pynvml: Any, on_event: Callable[[dict[str, Any]], Any], stop: threading.Event) -> None:
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    uuids = [_uuid(pynvml, h) for h in handles]
    events = pynvml.nvmlEventSetCreate()
    for h in handles:
        try:
            mask = (_XID | _DBE | _SBE | _MIG) & pynvml.nvmlDeviceGetSupportedEventTypes(h)
            pynvml.nvmlDeviceRegisterEvents(h, mask, events)
        except pynvml.NVMLError:
            continue  # NOT_SUPPORTED leaves the set usable (nvml.h)
    links = [_active_links(pynvml, h) for h in handles]
    seen: set[tuple[str, str, Any]] = set()

    def report(event: dict[str, Any]) -> None:
        key = (event["device"], event["kind"], event.get("link", event.get("xid")))
        if event["kind"] == "xid" or key not in seen:
            seen.add(key)
            on_event(event)

    try:
        while not stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(events, _WAIT_MS)
                report(_event(pynvml, data, handles, uuids))
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) == getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", 15):
                    for u in uuids:
                        report({"device": u, "kind": "gpu_lost"})
                elif getattr(exc, "value", None) != getattr(pynvml, "NVML_ERROR_TIMEOUT", 10):
                    stop.wait(1.0)
            for h, u, start in zip(handles, uuids, links):
                for event in _counters(pynvml, h, u, start):
                    report(event)
    finally:
        pynvml.nvmlEventSetFree(events)


def _event(pynvml: Any, data: Any, handles: list[Any], uuids: list[str]) -> dict[str, Any]:
    device = _uuid(pynvml, data.device)
    kind = {_XID: "xid", _DBE: "ecc_dbe", _SBE: "ecc_sbe", _MIG: "mig_config_change"}.get(int(data.eventType), "other")
    out: dict[str, Any] = {"device": device, "kind": kind}
    if kind == "xid":
        out["xid"] = int(data.eventData)
    return out


def _active_links(pynvml: Any, handle: Any) -> set[int]:
    active = set()
    for link in range(36):  # NVML_NVLINK_MAX_LINKS
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link):
                active.add(link)
        except pynvml.NVMLError:
            continue
    return active


def _counters(pynvml: Any, handle: Any, uuid: str, links_at_start: set[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        if pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle):
            out.append({"device": uuid, "kind": "retired_pages_pending"})
    except pynvml.NVMLError:
        pass
    try:
        _corr, _unc, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
        if pending:
            out.append({"device": uuid, "kind": "row_remap_pending"})
        if failure:
            out.append({"device": uuid, "kind": "row_remap_failure"})
    except pynvml.NVMLError:
        pass  # NOT_SUPPORTED before Ampere and while MIG instances exist
    for link in sorted(links_at_start - _active_links(pynvml, handle)):
        out.append({"device": uuid, "kind": "nvlink_down", "link": link})
    return out
