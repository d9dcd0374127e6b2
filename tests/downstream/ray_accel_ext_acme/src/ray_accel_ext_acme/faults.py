"""Acme NPU faults after start: an NPU's ``uncorrectable_errors`` count growing is a fault event
(the recorded stream is the default reader's, ``libraries/device_events.json``)."""
from ray_accel_ext.backend import poll_faults


def watch_uncorrectable(npus, host, devices, on_event, stop):
    """Poll each NPU's count (``RAY_ACCEL_HEALTH_POLL_S``) until ``stop``; True."""

    def counts(h):
        out = {}
        for d in devices:
            text = (h.read_optional(f"{npus}/npu{d['index']}/uncorrectable_errors") or "0").strip()
            out[d["id"]] = int(text) if text.isdigit() else 0
        return out

    baseline = counts(host())

    def sample():
        events = []
        for dev, n in counts(host()).items():
            if n > baseline[dev]:
                events.append({"device": dev, "kind": "ras_uncorrectable", "count": n - baseline[dev]})
                baseline[dev] = n
        return events

    return poll_faults(sample, on_event, stop)
