"""Per-device utilisation and memory, and the project's own metrics, from what Ray exports.

Every Ray node serves Prometheus text at ``http://<node>:<MetricsExportPort>/metrics`` (the port is
in ``ray.nodes()``). Ray's reporter agent exports, per device
(``ray/dashboard/modules/reporter/reporter_agent.py``, Ray 2.60):

=================================================  ===========================================
``ray_node_gpus_utilization{GpuIndex,GpuUuid}``    percent
``ray_node_gram_used``, ``ray_node_gram_available``  MiB, although the gauge declares ``bytes``:
                                                   ``gpu_providers.py`` divides NVML's bytes by MB
``ray_tpu_tensorcore_utilization{TpuIndex}``       percent
``ray_tpu_memory_used``, ``ray_tpu_memory_total``  bytes
=================================================  ===========================================

The project's metrics (:mod:`ray_accel_ext.telemetry`) come out of the same endpoints with a
``ray_`` prefix. :class:`MetricsHistory` keeps the last samples of each series for sparklines.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["DeviceSample", "parse_exposition", "device_samples", "project_totals", "scrape", "MetricsHistory"]

_MIB = 1024 * 1024
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

# The project's series on the page: Prometheus name -> the label it is summed by.
PROJECT_SERIES = {
    "ray_rayaccel_placements_total": "outcome",
    "ray_rayaccel_placements": "outcome",
    "ray_rayaccel_placement_wait_seconds_sum": "outcome",
    "ray_rayaccel_placement_wait_seconds_count": "outcome",
    "ray_rayaccel_reserved_domains": "level",
    "ray_rayaccel_nodes": "discovery",
}


_PREFIXES = ("ray_node_gpus_utilization", "ray_node_gram_", "ray_tpu_", "ray_rayaccel_")


@dataclass(frozen=True)
class DeviceSample:
    """One device's reading: ``family`` is ``gpu`` or ``tpu``; memory in bytes."""

    family: str
    index: int
    uuid: str | None
    utilization: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None


def parse_exposition(text: str, prefixes: tuple[str, ...] = ("",)) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line of Prometheus text whose name starts with one
    of ``prefixes``; comments and malformed lines are skipped."""
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(prefixes):
            continue
        m = _LINE.match(line.strip())
        if m is None:
            continue
        try:
            value = float(m[3])
        except ValueError:
            continue
        labels = {k: _unescape(v) if "\\" in v else v for k, v in _LABEL.findall(m[2] or "")}
        yield m[1], labels, value


def _unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda x: _UNESCAPE[x[0]], value)


def device_samples(samples: Iterable[tuple[str, dict[str, str], float]]) -> list[DeviceSample]:
    """Per-device readings from Ray's reporter metrics (see the module doc for names and units)."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for name, labels, value in samples:
        if name.startswith("ray_node_g") and "GpuIndex" in labels:
            key = ("gpu", labels["GpuIndex"])
            entry = acc.setdefault(key, {"uuid": labels.get("GpuUuid")})
            if name == "ray_node_gpus_utilization":
                entry["utilization"] = value
            elif name == "ray_node_gram_used":
                entry["memory_used"] = value * _MIB
            elif name == "ray_node_gram_available":
                entry["available"] = value * _MIB
        elif name.startswith("ray_tpu_") and "TpuIndex" in labels:
            entry = acc.setdefault(("tpu", labels["TpuIndex"]), {"uuid": None})
            field = {"ray_tpu_tensorcore_utilization": "utilization", "ray_tpu_memory_used": "memory_used",
                     "ray_tpu_memory_total": "memory_total"}.get(name)
            if field:
                entry[field] = value
    out = []
    for (family, index), e in acc.items():
        if not index.isdigit():
            continue
        total = e.get("memory_total")
        if total is None and e.get("available") is not None and e.get("memory_used") is not None:
            total = e["available"] + e["memory_used"]
        out.append(DeviceSample(family, int(index), e.get("uuid"), e.get("utilization"), e.get("memory_used"), total))
    return sorted(out, key=lambda s: (s.family, s.index))


def project_totals(samples: Iterable[tuple[str, dict[str, str], float]]) -> dict[str, dict[str, float]]:
    """The project's series summed by their page label: ``{name: {label value: total}}``."""
    out: dict[str, dict[str, float]] = {}
    for name, labels, value in samples:
        by = PROJECT_SERIES.get(name)
        if by is None:
            continue
        key = name.removesuffix("_total").removeprefix("ray_")
        bucket = out.setdefault(key, {})
        bucket[labels.get(by, "none")] = bucket.get(labels.get(by, "none"), 0.0) + value
    return out


def scrape(url: str, timeout_s: float = 2.0) -> str:
    """The exposition text at ``url``; raises OSError when the endpoint does not answer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - a node's own metrics port
        return resp.read(16 * _MIB).decode("utf-8", "replace")


class MetricsHistory:
    """The last ``keep`` samples of every device series and project total, gathered from nodes."""

    def __init__(self, keep: int = 60, *, workers: int = 16, timeout_s: float = 2.0) -> None:
        self.keep = keep
        self.workers = workers
        self.timeout_s = timeout_s
        self._series: dict[tuple[str, ...], deque] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, str] = {}
        self.nodes_scraped = 0

    def _push(self, key: tuple[str, ...], t: float, value: float | None) -> None:
        if value is None:
            return
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = deque(maxlen=self.keep)
        series.append((round(t, 3), round(float(value), 3)))

    def record(self, t: float, texts: dict[str, str], errors: dict[str, str] | None = None) -> None:
        """Add one round: exposition text per node id (and why the others did not answer)."""
        totals: dict[str, dict[str, float]] = {}
        alive = set(texts) | set(errors or {})
        for key in [k for k in self._series if k[0] == "dev" and k[1] not in alive]:
            del self._series[key]
        self._last = {k: v for k, v in self._last.items() if k in alive}
        for node_id, text in texts.items():
            samples = list(parse_exposition(text, _PREFIXES))
            devices = device_samples(samples)
            self._last[node_id] = {f"{s.family}:{s.index}": s for s in devices}
            for s in devices:
                self._push(("dev", node_id, s.family, str(s.index), "utilization"), t, s.utilization)
                self._push(("dev", node_id, s.family, str(s.index), "memory_used"), t, s.memory_used)
            for name, by_label in project_totals(samples).items():
                for label, value in by_label.items():
                    bucket = totals.setdefault(name, {})
                    bucket[label] = bucket.get(label, 0.0) + value
        for name, by_label in totals.items():
            for label, value in by_label.items():
                self._push(("project", name, label), t, value)
        self.errors = dict(errors or {})
        self.nodes_scraped = len(texts)

    def gather(self, targets: dict[str, str]) -> None:
        """Scrape ``{node id: metrics url}`` in parallel and :meth:`record` the round."""
        texts: dict[str, str] = {}
        errors: dict[str, str] = {}

        def one(item: tuple[str, str]) -> tuple[str, str | None, str | None]:
            node_id, url = item
            try:
                return node_id, scrape(url, self.timeout_s), None
            except (OSError, ValueError) as exc:
                return node_id, None, f"{type(exc).__name__}: {exc}"

        if targets:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(targets))) as pool:
                for node_id, text, err in pool.map(one, targets.items()):
                    if text is not None:
                        texts[node_id] = text
                    else:
                        errors[node_id] = str(err)[:300]
        self.record(time.time(), texts, errors)

    def device(self, node_id: str) -> dict[str, DeviceSample]:
        """The latest readings of one node, keyed ``<family>:<index>``."""
        return self._last.get(node_id, {})

    def series(self, *key: str) -> list[list[float]]:
        return [list(p) for p in self._series.get(tuple(key), ())]

    def project(self) -> dict[str, dict[str, list[list[float]]]]:
        out: dict[str, dict[str, list[list[float]]]] = {}
        for key, points in self._series.items():
            if key[0] == "project":
                out.setdefault(key[1], {})[key[2]] = [list(p) for p in points]
        return out
