"""Neuron device health after start from the driver's hardware counters in sysfs.

``/sys/devices/virtual/neuron_device/neuronN/stats/hardware/<counter>/total`` counts, since the
driver loaded, the device's uncorrected ECC events (aws-neuron-sdk
``tools/neuron-sys-tools/neuron-sysfs-user-guide.rst``, "hardware/: Hardware statistics"):

* ``mem_ecc_uncorrected``: unrepairable uncorrected ECC events in the device's DRAM;
* ``sram_ecc_uncorrected``: uncorrected ECC events in the device's SRAM;
* ``mem_ecc_repairable_uncorrected``: repairable uncorrected DRAM events.

The first two growing after start is a ``ras_uncorrectable`` fault event (the same counters
neuron-monitor reports as ``neuron_hw_counters``); a repairable one is ``ecc_repairable``,
informational. A snapshot records later readings in ``libraries/neuron_hw_counters.json``
(``{"format": 1, "samples": [{"neuron0": {"mem_ecc_uncorrected": 1}}, ...]}``), diffed against
its sysfs at start by the same code as the live poll.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...host import Host
from .read import VIRTUAL_DIR, device_numbers

__all__ = ["FATAL_COUNTERS", "INFO_COUNTERS", "RECORDING", "read_counters", "counter_events", "recorded_samples"]

FATAL_COUNTERS = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
INFO_COUNTERS = ("mem_ecc_repairable_uncorrected",)
RECORDING = "neuron_hw_counters"
Counters = dict[str, dict[str, int]]  # "neuronN" -> counter -> total


def read_counters(host: Host, names: Iterable[str]) -> Counters:
    """The hardware counters' totals of each ``neuronN`` (a counter the driver lacks is left out)."""
    out: Counters = {}
    for name in names:
        values = {}
        for counter in FATAL_COUNTERS + INFO_COUNTERS:
            text = (host.read_optional(f"{VIRTUAL_DIR}/{name}/stats/hardware/{counter}/total") or "").strip()
            if text.isdigit():
                values[counter] = int(text)
        out[name] = values
    return out


def device_names(host: Host, devices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``neuronN`` -> the watched device's id: device index ``i`` is the i-th ``neuronN`` in order."""
    numbers = device_numbers(host)
    return {f"neuron{numbers[d['index']]}": d["id"] for d in devices
            if isinstance(d.get("index"), int) and d["index"] < len(numbers)}


def counter_events(ids: Mapping[str, Any], baseline: Counters, sample: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """Events for the counters of ``sample`` grown past ``baseline`` (which is moved up)."""
    events = []
    for name, values in sample.items():
        if name not in ids:
            continue
        seen = baseline.setdefault(name, {})
        for counter, total in sorted(values.items()):
            before = seen.get(counter, 0)
            if isinstance(total, int) and total > before:
                kind = "ras_uncorrectable" if counter in FATAL_COUNTERS else "ecc_repairable"
                events.append({"device": ids[name], "kind": kind, "counter": counter, "count": total - before})
                seen[counter] = total
    return events


def recorded_samples(host: Host) -> list[dict[str, Any]] | None:
    """The snapshot's recorded counter readings, None when it has none (a live host)."""
    reading = host.library(RECORDING, lambda: None)
    if not isinstance(reading, dict) or reading.get("format") != 1 or not isinstance(reading.get("samples"), list):
        return None
    return [s for s in reading["samples"] if isinstance(s, dict)]
