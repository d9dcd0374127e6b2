"""One device-health watcher per node: events to verdicts, the registry mark, and the drain.

Each node runs one watcher (:class:`NodeWatch`): the node-start hook spawns it as a process of its
own that lives as long as the node's raylet (:mod:`.node_watch`); ``ray-accel health start`` starts
it as a detached zero-CPU actor pinned to each node that has none. It describes the node's devices
(the inventory the start hook handed over, :func:`ray_accel_ext.node.handoff.node_inventory`),
feeds :class:`.device_health.DeviceHealth` from the node's fault sources, and reports every change
to the health registry, where the cluster views, the dashboard and the exporter's
``ray_rayaccel_device_health`` gauge read it. At the first device fault the node is drained
(:func:`.drain.drain_node`).

Fault sources are a capability of each family's backend
(:meth:`ray_accel_ext.backend.AcceleratorBackend.recorded_faults` and ``watch_faults``), asked
through the registry like discovery asks them, in-tree families and vendors' packages alike: a
snapshot's recorded streams are replayed in order when any backend has one; otherwise every
backend with devices on the node watches its live source on a thread of its own (NVIDIA: NVML
events and counters; AMD: the driver's RAS counters; Neuron: the driver's hardware ECC counters).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .device_health import DeviceHealth
from .health import NAMESPACE, registry_marks, report_state
from .nodes import alive_nodes

__all__ = ["node_devices", "start_device_watchers", "fault_backends", "NodeWatch", "REPLAY_GATE_ENV"]

_log = logging.getLogger("ray_accel_ext")

#: A path: a recorded stream is replayed once it exists, not at once (a test starts its work on the
#: node first, then lets the fault happen; the node's environment reaches its watcher). Live
#: sources ignore it.
REPLAY_GATE_ENV = "RAY_ACCEL_REPLAY_GATE"


def fault_backends(names: set[str]) -> dict[str, Any]:
    """The loaded backends of the families ``names``, by name (one that fails to load is left out:
    discovery reported it at node start)."""
    from ..node.registry import load_backends

    return {b.name: b for b in load_backends(only=names, on_error=lambda name, exc: None)}


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


class NodeWatch:
    """The watcher of one node: its devices' health from the backends' fault sources.

    ``report(node_id, state)`` publishes the mark (default: the health registry) and
    ``drain(node_id, message, resources)`` stops the node taking work (default
    :func:`.drain.drain_node`); ``extra`` keys go into every mark (the watcher's process id).
    """

    def __init__(self, node_id: str, inventory: Any = None, *, host: Callable[[], Any] | None = None,
                 report: Callable[[str, dict[str, Any]], Any] = report_state,
                 drain: Callable[[str, str, dict[str, float]], dict[str, Any]] | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        from ..host import host_from_env
        from ..node.handoff import node_inventory

        self.node_id = node_id
        self.drained: dict[str, Any] | None = None
        self._host = host or host_from_env
        self._publish, self._drain, self._extra = report, drain, dict(extra or {})
        devices, self.resources = node_devices(node_inventory() if inventory is None else inventory)
        self.health = DeviceHealth(devices, node_id=node_id, on_fault=self._fault)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self._report()

    def start(self) -> "NodeWatch":
        """Replay the recorded streams, else start each live source; returns at once."""
        by_family: dict[str, list[dict[str, Any]]] = {}
        for d in self.health.devices:
            by_family.setdefault(d["backend"], []).append(d)
        backends = fault_backends(set(by_family))
        host = self._host()
        recorded = {n: self._recorded(b, host, by_family[n]) for n, b in backends.items()}
        if any(r is not None for r in recorded.values()):
            events = [e for n in sorted(recorded) for e in recorded[n] or []]
            self._spawn("replay", lambda: self._replay(events))
            return self
        for name, backend in sorted(backends.items()):
            self._spawn(name, lambda b=backend, n=name: self._live(b, by_family[n]))
        return self

    @staticmethod
    def _recorded(backend: Any, host: Any, devices: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        try:
            return backend.recorded_faults(host, devices)
        except Exception as exc:  # noqa: BLE001 - a vendor's reader must not stop the others
            _log.warning("ray_accel_ext: the %s recorded faults are unreadable: %s: %s", backend.name,
                         type(exc).__name__, exc)
            return None

    def _spawn(self, name: str, target: Callable[[], Any]) -> None:
        thread = threading.Thread(target=target, name=f"ray-accel-faults-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _replay(self, events: list[dict[str, Any]]) -> None:
        gate = os.environ.get(REPLAY_GATE_ENV)
        while gate and not os.path.exists(gate):
            if self.stop.wait(0.1):
                return
        for event in events:
            self.health.handle(event)
        self._report()

    def _live(self, backend: Any, devices: list[dict[str, Any]]) -> None:
        try:
            backend.watch_faults(self._host, devices, self.handle, self.stop)
        except Exception as exc:  # noqa: BLE001 - one family's source must not end the others
            _log.warning("ray_accel_ext: the %s fault source stopped: %s: %s", backend.name, type(exc).__name__, exc)

    def handle(self, event: dict[str, Any]) -> None:
        """Apply one live event and publish the mark."""
        self.health.handle(event)
        self._report()

    def _fault(self, state: dict[str, Any]) -> None:
        from .drain import drain_node

        drain = self._drain or drain_node
        failed = [d for d in state["devices"] if d["health"] == 0]
        message = "ray_accel_ext: device fault: " + "; ".join(f"{d['device']} {d['reason']}" for d in failed)
        self.drained = drain(self.node_id, message[:500], self.resources)
        self._report()

    def state(self) -> dict[str, Any]:
        return {**self.health.state(), "drained": self.drained, **self._extra}

    def _report(self) -> None:
        self._publish(self.node_id, self.state())


class _DeviceWatcher:
    """The actor form (``ray-accel health start``): runs a :class:`NodeWatch` on its node."""

    def __init__(self, node_id: str) -> None:
        self.watch = NodeWatch(node_id, extra={"watcher": "actor"}).start()

    def state(self) -> dict[str, Any]:
        return self.watch.state()


def start_device_watchers() -> dict[str, Any]:
    """One detached watcher per alive node that has none yet (a node started through the hook
    has its own, :mod:`.node_watch`); their handles by node id."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0)(_DeviceWatcher)
    marks = registry_marks()
    handles = {}
    for node in alive_nodes():
        nid = node.node_id
        if marks.get(nid, {}).get("watcher") == "node":
            continue
        handles[nid] = actor_cls.options(
            name=f"ray_accel_ext_devices_{nid[:16]}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nid, soft=False),
        ).remote(nid)
    ray.get([h.state.remote() for h in handles.values()], timeout=120)
    return handles
