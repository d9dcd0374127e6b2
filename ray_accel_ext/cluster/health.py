"""Health after start: notice accelerators and RDMA NICs that disappear or appear on a running node.

Node labels and resources cannot change after a node starts (``reference/ray-2.60.md`` section
2), so a GPU that falls off the bus, or a NIC that resets, leaves Ray scheduling onto hardware
that is gone. :class:`HealthMonitor` (``pyudev``, the ``[udev]`` extra) takes a baseline of the
node's accelerator PCI functions (vendor + class/device id of the families ray_accel_ext knows)
and RDMA NICs (``infiniband`` class devices and their netdevs), then listens to udev events:

* ``pci`` remove/add of a known accelerator or RDMA NIC function;
* ``infiniband`` add/remove; ``net`` add/remove of an interface on an RDMA NIC.

Each change is a telemetry event (``ray_accel_ext.telemetry.emit("device_change", ...)``) and
updates the node's mark: ``ok``; ``degraded`` while a device of the baseline is missing; or
``changed`` when a device appeared that the node's Ray resources do not count (restart the node
to use it).

How the mark reaches the inventory and dashboard (kept simple, public Ray APIs only): one named,
detached registry actor (``ray_accel_ext_health`` in namespace ``ray_accel_ext``) holds the
latest mark per node id; monitors report to it, and :mod:`ray_accel_ext.cluster.inventory` reads it with
:func:`registry_marks`. :func:`start_node_monitors` starts one detached monitor actor per alive
node, pinned to it with ``NodeAffinitySchedulingStrategy`` (``ray-accel health start``).

Limits: the ``udev`` netlink source needs a udevd on the host (containers usually have none;
pass ``source="kernel"`` for raw kernel uevents, which reach only the initial network namespace).
pyudev cannot read a fake sysfs root; tests run under ``umockdev-wrapper``
(``reference/hardware.md`` section 7).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..hw.nics import is_rdma_nic_pci
from ..node.registry import families, family_of_pci
from ..problems import DEVICE_ADDED, DEVICE_GONE
from ..telemetry import emit
from .nodes import alive_nodes

__all__ = [
    "DeviceRecord",
    "HealthMonitor",
    "classify_pci",
    "registry_marks",
    "report_state",
    "start_node_monitors",
    "REGISTRY_NAME",
    "NAMESPACE",
]

REGISTRY_NAME = "ray_accel_ext_health"
NAMESPACE = "ray_accel_ext"
_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_MAX_EVENTS = 100


def classify_pci(vendor: str | None, device: str | None, pci_class: str | None) -> str | None:
    """``accelerator``, ``rdma_nic`` or None for a PCI function (``0x10de``, ``0x2330``, ``0x030200``):
    accelerators by the families the registry knows (:func:`ray_accel_ext.node.registry.families`)."""
    if family_of_pci(vendor, device, pci_class, _families()) is not None:
        return "accelerator"
    if is_rdma_nic_pci(vendor, device, pci_class):
        return "rdma_nic"
    return None


@functools.lru_cache(maxsize=1)
def _families():
    return tuple(families())


@dataclass(frozen=True)
class DeviceRecord:
    """A device the monitor tracks: ``key`` (``pci:<bdf>``, ``infiniband:<name>``, ``net:<name>``)."""

    key: str
    kind: str  # accelerator | rdma_nic
    subsystem: str
    name: str
    pci_address: str | None = None
    vendor: str | None = None
    device: str | None = None
    pci_class: str | None = None


def _attr(dev: Any, name: str) -> str | None:
    try:
        value = dev.attributes.get(name)
    except Exception:  # noqa: BLE001 - a removed device has no attributes left
        return None
    if value is None:
        return None
    return (value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)).strip()


def _pci_ids(dev: Any) -> tuple[str | None, str | None, str | None]:
    """(vendor, device, class) of a pci udev device: attributes, else the uevent's PCI_ID/PCI_CLASS
    (all a kernel ``remove`` event still carries)."""
    vendor, device, pci_class = _attr(dev, "vendor"), _attr(dev, "device"), _attr(dev, "class")
    props = dev.properties
    if (vendor is None or device is None) and props.get("PCI_ID"):
        v, _, d = props["PCI_ID"].partition(":")
        vendor = vendor or f"0x{v.lower()}"
        device = device or f"0x{d.lower()}"
    if pci_class is None and props.get("PCI_CLASS"):
        pci_class = f"0x{int(props['PCI_CLASS'], 16):06x}"
    return vendor, device, pci_class


def _pci_parent(sys_path: str) -> str | None:
    parts = [p for p in sys_path.split("/") if _BDF_RE.match(p)]
    return parts[-1] if parts else None


class HealthMonitor:
    """Watches one node's accelerators and RDMA NICs through udev.

    ``on_change(state)`` is called after every change with :meth:`state`; events also go to
    telemetry. Use :meth:`handle` directly to feed a device (tests, replay).
    """

    def __init__(
        self,
        *,
        node_id: str | None = None,
        context: Any = None,
        source: str = "udev",
        on_change: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        import pyudev

        self._pyudev = pyudev
        self.node_id = node_id
        self.context = context if context is not None else pyudev.Context()
        self.source = source
        self.on_change = on_change
        self.baseline: dict[str, DeviceRecord] = {}
        self.present: dict[str, DeviceRecord] = {}
        self.events: list[dict[str, Any]] = []
        self.started_at = time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._monitor = None
        self.take_baseline()

    # -- devices --------------------------------------------------------------------------------

    def _record(self, dev: Any, *, known: dict[str, DeviceRecord] | None = None) -> DeviceRecord | None:
        subsystem = dev.subsystem
        name = dev.sys_name
        known = known if known is not None else {**self.present, **self.baseline}
        if subsystem == "pci":
            key = f"pci:{name}"
            if key in known:
                return known[key]
            vendor, device, pci_class = _pci_ids(dev)
            kind = classify_pci(vendor, device, pci_class)
            if kind is None:
                return None
            return DeviceRecord(key, kind, "pci", name, name, vendor, device, pci_class)
        if subsystem in ("infiniband", "net"):
            key = f"{subsystem}:{name}"
            if key in known:
                return known[key]
            parent = _pci_parent(dev.sys_path)
            nic = known.get(f"pci:{parent}") if parent else None
            if subsystem == "net" and (nic is None or nic.kind != "rdma_nic"):
                return None  # an ordinary Ethernet interface
            return DeviceRecord(key, "rdma_nic", subsystem, name, parent,
                                nic.vendor if nic else None, nic.device if nic else None, nic.pci_class if nic else None)
        return None

    def take_baseline(self) -> None:
        """Record what is present now; later changes are measured against it."""
        found: dict[str, DeviceRecord] = {}
        for subsystem in ("pci", "infiniband", "net"):
            for dev in self.context.list_devices(subsystem=subsystem):
                rec = self._record(dev, known=found)
                if rec is not None:
                    found[rec.key] = rec
        with self._lock:
            self.baseline = dict(found)
            self.present = dict(found)

    def handle(self, dev: Any, action: str | None = None) -> dict[str, Any] | None:
        """Apply one udev event; the telemetry event emitted, or None when it does not concern us."""
        action = action or dev.action
        if action not in ("add", "remove"):
            return None
        rec = self._record(dev)
        if rec is None:
            return None
        with self._lock:
            if action == "remove":
                if rec.key not in self.present:
                    return None
                del self.present[rec.key]
                change = "removed"
            else:
                if rec.key in self.present:
                    return None
                self.present[rec.key] = rec
                change = "restored" if rec.key in self.baseline else "added"
        event = emit(
            "device_change",
            node_id=self.node_id,
            change=change,
            kind=rec.kind,
            subsystem=rec.subsystem,
            device=rec.name,
            pci_address=rec.pci_address,
            vendor=rec.vendor,
            device_id=rec.device,
            pci_class=rec.pci_class,
        )
        with self._lock:
            self.events.append(event)
            del self.events[:-_MAX_EVENTS]
        if self.on_change is not None:
            self.on_change(self.state())
        return event

    def state(self) -> dict[str, Any]:
        """The node's mark: status, reasons, missing and added devices, recent events."""
        with self._lock:
            missing = [self.baseline[k] for k in sorted(self.baseline) if k not in self.present]
            added = [self.present[k] for k in sorted(self.present) if k not in self.baseline]
            events = list(self.events)
        problems = [{"code": DEVICE_GONE,
                     "message": f"{r.kind.replace('_', ' ')} {r.name}"
                                f"{' (' + r.vendor + ':' + r.device + ')' if r.vendor and r.device else ''} disappeared "
                                "after the node started"} for r in missing]
        problems += [{"code": DEVICE_ADDED,
                      "message": f"{r.kind.replace('_', ' ')} {r.name} appeared after the node started; Ray does not "
                                 "count it until the node restarts"} for r in added]
        status = "degraded" if missing else ("changed" if added else "ok")
        return {
            "status": status,
            "reasons": [p["message"] for p in problems],
            "problems": problems,
            "missing": [asdict(r) for r in missing],
            "added": [asdict(r) for r in added],
            "baseline": {"accelerators": sum(1 for r in self.baseline.values() if r.kind == "accelerator"),
                         "rdma_nics": sum(1 for r in self.baseline.values() if r.kind == "rdma_nic" and r.subsystem == "pci")},
            "events": events,
            "since": self.started_at,
            "updated": time.time(),
        }

    # -- listening ------------------------------------------------------------------------------

    def start(self) -> "HealthMonitor":
        """Start listening in a daemon thread."""
        monitor = self._pyudev.Monitor.from_netlink(self.context, source=self.source)
        for subsystem in ("pci", "infiniband", "net"):
            monitor.filter_by(subsystem)
        monitor.start()
        self._monitor = monitor
        self._thread = threading.Thread(target=self._loop, name="ray-accel-health", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            dev = self._monitor.poll(timeout=0.2)
            if dev is not None:
                try:
                    self.handle(dev)
                except Exception as exc:  # noqa: BLE001 - one odd event must not stop the monitor
                    emit("device_change_error", node_id=self.node_id, error=f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


# -- the registry: how marks reach the inventory ------------------------------------------------


class _Registry:
    """Latest health mark per node id (a named detached actor)."""

    def __init__(self) -> None:
        self.marks: dict[str, dict[str, Any]] = {}

    def report(self, node_id: str, state: dict[str, Any]) -> None:
        # The udev monitor and the device watcher each report their own keys of one mark.
        self.marks[node_id] = {**self.marks.get(node_id, {}), **state}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self.marks)


def _registry(create: bool):
    import ray

    if create:
        return ray.remote(num_cpus=0)(_Registry).options(
            name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True
        ).remote()
    try:
        return ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def report_state(node_id: str, state: dict[str, Any]) -> None:
    """Publish ``state`` (see :meth:`HealthMonitor.state`) as the mark of ``node_id``."""
    import ray

    ray.get(_registry(create=True).report.remote(node_id, state), timeout=30)


def registry_marks(timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
    """Every node's latest mark; empty when no monitor has reported yet."""
    import ray

    handle = _registry(create=False)
    if handle is None:
        return {}
    try:
        return ray.get(handle.snapshot.remote(), timeout=timeout_s)
    except Exception:  # noqa: BLE001 - the inventory must not fail because health is unavailable
        return {}


class _NodeMonitor:
    """Runs a :class:`HealthMonitor` on the node it is pinned to and reports to the registry."""

    def __init__(self, node_id: str, source: str = "udev") -> None:
        self.node_id = node_id
        import ray

        self.monitor = HealthMonitor(node_id=node_id, source=source, on_change=self._report)
        # the baseline is in the registry before the actor counts as started
        ray.get(self._report(self.monitor.state()), timeout=60)
        self.monitor.start()

    def _report(self, state: dict[str, Any]):
        return _registry(create=True).report.remote(self.node_id, state)

    def state(self) -> dict[str, Any]:
        return self.monitor.state()


def start_node_monitors(source: str = "udev") -> dict[str, Any]:
    """One detached monitor actor per alive node (idempotent); returns their handles by node id."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0)(_NodeMonitor)
    handles = {}
    for node in alive_nodes():
        nid = node.node_id
        handles[nid] = actor_cls.options(
            name=f"ray_accel_ext_health_{nid[:16]}",
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nid, soft=False),
        ).remote(nid, source)
    ray.get([h.state.remote() for h in handles.values()], timeout=120)
    return handles
