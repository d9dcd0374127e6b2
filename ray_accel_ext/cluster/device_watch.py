"""One device-health watcher per node: events to verdicts, the registry mark, and the drain.

``ray-accel health start`` starts, next to each node's udev monitor (:mod:`.health`), a detached
zero-CPU actor pinned to the node. It describes the node's devices (the inventory the start hook
handed over, :func:`ray_accel_ext.worker.node_inventory`), feeds :class:`.device_health.DeviceHealth`
from the node's event source, and reports every change to the health registry, where the cluster
views, the dashboard and the exporter's ``ray_rayaccel_device_health`` gauge read it. At the first
device fault the node is drained (:func:`.drain.drain_node`).

Event sources, first that exists: the snapshot's recorded stream (``libraries/device_events.json``,
``RAY_ACCEL_ROOT``), replayed in order; live NVML (:mod:`ray_accel_ext.backends.nvidia_gpu.events`).
AMD: the amdgpu RAS counters in sysfs, polled every 5 s (:mod:`ray_accel_ext.backends.amd_gpu.ras`).
Neuron (``neuron-monitor`` ``mem_ecc_uncorrected``) gives ``ras_uncorrectable`` events through the
same recording shape; its live reader is not built yet.
"""

from __future__ import annotations

import threading
from typing import Any

from .device_health import DeviceHealth
from .health import NAMESPACE, report_state
from .nodes import alive_nodes

__all__ = ["recorded_events", "node_devices", "start_device_watchers", "EVENTS_LIBRARY"]

EVENTS_LIBRARY = "device_events"


def recorded_events(host: Any) -> list[dict[str, Any]] | None:
    """The snapshot's recorded event stream, None when it has none (a live host)."""
    reading = host.library(EVENTS_LIBRARY, lambda: None)
    if not isinstance(reading, dict) or reading.get("format") != 1 or not isinstance(reading.get("events"), list):
        return None
    return [e for e in reading["events"] if isinstance(e, dict)]


def node_devices(inventory: Any) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The devices to watch (whole devices and the GPUs under MIG instances) and the node's
    accelerator resources (what the drain fallback holds)."""
    from ..labels import partition_resource

    devices: list[dict[str, Any]] = []
    resources: dict[str, float] = {}
    for desc in inventory.descriptions:
        for d in desc.devices:
            devices.append({"id": d.id, "index": d.index, "pci_address": d.pci_address, "backend": desc.backend})
        for parent in dict.fromkeys(p.device for p in desc.partitions):
            part = next(p for p in desc.partitions if p.device == parent)
            devices.append({"id": parent, "index": None, "pci_address": part.pci_address, "backend": desc.backend})
        if desc.devices:
            resources[desc.resource_name] = resources.get(desc.resource_name, 0.0) + float(desc.resource_quantity)
        for p in desc.partitions:
            name = partition_resource(p.profile)
            resources[name] = resources.get(name, 0.0) + 1.0
    return devices, resources


class _DeviceWatcher:
    """Runs on the node it is pinned to."""

    def __init__(self, node_id: str) -> None:
        from ..host import host_from_env
        from ..node.handoff import node_inventory

        self.node_id = node_id
        self.drained: dict[str, Any] | None = None
        devices, self.resources = node_devices(node_inventory())
        self.health = DeviceHealth(devices, node_id=node_id, on_fault=self._fault)
        self._stop = threading.Event()
        self._report()
        events = recorded_events(host_from_env())
        target = (lambda: self._replay(events)) if events is not None else self._live
        threading.Thread(target=target, name="ray-accel-device-health", daemon=True).start()

    def _replay(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.health.handle(event)
        self._report()

    def _live(self) -> None:
        if any(d.get("backend") == "amd_gpu" for d in self.health.devices):
            threading.Thread(target=self._poll_amd, name="ray-accel-amd-ras", daemon=True).start()
        if any(d.get("backend") == "nvidia_gpu" for d in self.health.devices):
            from ..backends.nvidia_gpu.events import watch

            watch(self._handle_live, self._stop)

    def _poll_amd(self) -> None:
        from ..backends.amd_gpu.ras import ras_events, uncorrectable_counts
        from ..host import host_from_env

        amd = [d for d in self.health.devices if d.get("backend") == "amd_gpu"]
        baseline = uncorrectable_counts(host_from_env(), [d["pci_address"] for d in amd if d.get("pci_address")])
        while not self._stop.wait(5.0):
            # A fresh host each round: a host caches what it read.
            for event in ras_events(host_from_env(), amd, baseline):
                self._handle_live(event)

    def _handle_live(self, event: dict[str, Any]) -> None:
        self.health.handle(event)
        self._report()

    def _fault(self, state: dict[str, Any]) -> None:
        from .drain import drain_node

        failed = [d for d in state["devices"] if d["health"] == 0]
        message = "ray_accel_ext: device fault: " + "; ".join(f"{d['device']} {d['reason']}" for d in failed)
        self.drained = drain_node(self.node_id, message[:500], self.resources)
        self._report()

    def _report(self) -> None:
        report_state(self.node_id, {**self.health.state(), "drained": self.drained})

    def state(self) -> dict[str, Any]:
        return {**self.health.state(), "drained": self.drained}


def start_device_watchers() -> dict[str, Any]:
    """One detached watcher per alive node (idempotent); their handles by node id."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0)(_DeviceWatcher)
    handles = {}
    for node in alive_nodes():
        nid = node.node_id
        handles[nid] = actor_cls.options(
            name=f"ray_accel_ext_devices_{nid[:16]}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nid, soft=False),
        ).remote(nid)
    ray.get([h.state.remote() for h in handles.values()], timeout=120)
    return handles
