"""The extension point: one :class:`AcceleratorBackend` subclass per accelerator family.

A backend is registered under the entry-point group ``ray_accel_ext.backends``; the in-tree TPU,
NVIDIA GPU and Neuron backends use the same door as a vendor's package::

    [project.entry-points."ray_accel_ext.backends"]
    acme_npu = "ray_accel_ext_acme:AcmeNPUBackend"

Contract (checked by the conformance suite, ``pytest --pyargs ray_accel_ext.conformance``):

* Instances are built with no arguments and hold no global state.
* ``detect`` and ``describe`` read the machine only through the ``host`` they are given, return
  values, and never change the process (no ``os.environ`` writes, no global caches, no
  ``os.chdir``). ``detect`` never raises and returns False on a host without the hardware.
* ``describe`` returns a :class:`~ray_accel_ext.model.NodeDescription` whose ``backend`` equals
  ``name``, whose devices are indexed 0..n-1 in the order Ray hands out device ids, and whose
  ``attributes`` keys all start with ``label_prefix + "/"``. What cannot be read goes into
  ``problems`` (the node is then labelled ``degraded``) rather than an exception; raising is for
  when nothing at all can be described.
* Network access (cloud metadata, provider APIs) only through ``host.metadata`` and only when
  ``capabilities.uses_network`` is declared.

Device faults after start are an optional capability: :meth:`AcceleratorBackend.watch_faults` (a
live source) and :meth:`AcceleratorBackend.recorded_faults` (a snapshot's recorded stream). The
node's device watcher asks every loaded backend for both and imports no backend module.

What a backend knows about its hardware it *declares* as class attributes (:class:`PciId`,
driver paths, the visible-devices variable, its own problem codes), so ``ray-accel doctor``, the health monitors and the
node-start capping ask the registry and hold no vendor table of their own.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .host import Host
from .hw.pci import PciId
from .model import Device, NodeDescription
from .problems import ProblemCode

__all__ = ["API_VERSION", "SUPPORTED_API_VERSIONS", "Capabilities", "PciId", "AcceleratorBackend",
           "FaultSink", "recorded_stream", "device_keys", "poll_faults", "EVENTS_LIBRARY", "POLL_ENV"]

API_VERSION = 1
SUPPORTED_API_VERSIONS = frozenset({1})

# A fault event is a plain dict naming one device by id, PCI address or index
# (``{"device": "GPU-<uuid>", "kind": "xid", "xid": 79}``; the kinds and which of them are faults:
# ray_accel_ext.cluster.device_health). A snapshot records them in ``libraries/<EVENTS_LIBRARY>.json``
# as ``{"format": 1, "events": [...]}``.
FaultSink = Callable[[dict[str, Any]], Any]
EVENTS_LIBRARY = "device_events"
POLL_ENV = "RAY_ACCEL_HEALTH_POLL_S"  # seconds between counter reads of a polled live source


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a backend promises to fill in.

    The conformance suite skips the checks of a capability declared False (with that reason) and
    fails a backend that declares one True but leaves the field empty on a snapshot that has it.

    Attributes:
        topology_links: ``NodeDescription.links`` lists device-to-device fabric links.
        nic_affinity: ``nics`` and each device's nearest NICs with PCIe path classes.
        numa_affinity: each device's ``numa_node`` and ``cpus``.
        fabric_domains: ``fabric`` names a domain larger than one host when the host is in one.
        provider_location: ``location`` (zone, cluster, block, rack) from the cloud provider.
        device_visibility: ``visible_devices_env`` restricts a worker to a device subset.
        uses_network: ``describe`` may call cloud metadata or provider APIs (through the host).
    """

    topology_links: bool = False
    nic_affinity: bool = False
    numa_affinity: bool = False
    fabric_domains: bool = False
    provider_location: bool = False
    device_visibility: bool = False
    uses_network: bool = False

    def declared(self) -> list[str]:
        return [name for name in self.__dataclass_fields__ if getattr(self, name)]


class AcceleratorBackend(abc.ABC):
    """One accelerator family (Google TPU, NVIDIA GPU, AWS Neuron, or a vendor's device).

    Class attributes:
        name: equals the entry-point name; lower_snake (``nvidia_gpu``, ``acme_npu``).
        resource_name: the Ray resource devices are counted in (``GPU``, ``TPU``,
            ``neuron_cores``, or the vendor's own).
        label_prefix: DNS domain the backend owns; every key of ``attributes`` starts with it.
        api_version: the version of this contract the backend was written for.
        capabilities: what the backend promises (see :class:`Capabilities`).
        visible_devices_env_var: the variable that restricts a process to some devices
            (``CUDA_VISIBLE_DEVICES``), when the family has one. At node start, a count above
            what it lists is cut to it (Ray refuses to start such a node).
        node_start_env_vars: every variable that caps the device count at node start (Ray's own
            manager for the resource reads them and refuses a node whose count exceeds what one
            lists); empty means just ``visible_devices_env_var``.
        family: a human name for the family (``NVIDIA GPU``).
        pci_ids: the PCI functions that are this family's devices (:class:`PciId`); ``doctor``
            and the health monitors find the family on the bus with them.
        driver_paths: paths that exist when the family's kernel driver is loaded.
        driver_hint: what to do when none of ``driver_paths`` exists.
    """

    name: ClassVar[str]
    resource_name: ClassVar[str]
    label_prefix: ClassVar[str]
    api_version: ClassVar[int] = API_VERSION
    capabilities: ClassVar[Capabilities] = Capabilities()
    visible_devices_env_var: ClassVar[str | None] = None
    node_start_env_vars: ClassVar[tuple[str, ...]] = ()
    family: ClassVar[str] = ""
    pci_ids: ClassVar[tuple[PciId, ...]] = ()
    driver_paths: ClassVar[tuple[str, ...]] = ()
    driver_hint: ClassVar[str] = ""
    # The backend's own problem codes (``ProblemCode(code, severity, summary, hint)``), declared by
    # discovery in the node-start process (docs/problems.md); a built-in code is never replaced.
    problem_codes: ClassVar[tuple[ProblemCode, ...]] = ()

    @abc.abstractmethod
    def detect(self, host: Host) -> bool:
        """Cheap presence check: True when this family's devices are on ``host``. Never raises."""

    @abc.abstractmethod
    def describe(self, host: Host) -> NodeDescription:
        """The full description of this family on ``host``; called only after ``detect`` is True."""

    def visible_devices_env(self, devices: Sequence[Device]) -> Mapping[str, str]:
        """Environment restricting a worker to ``devices``. Pure: it returns, never sets.

        The default joins device indices into ``visible_devices_env_var``.
        """
        if self.visible_devices_env_var is None:
            return {}
        return {self.visible_devices_env_var: ",".join(str(d.index) for d in devices)}

    def parse_visible_devices(self, env: Mapping[str, str]) -> list[int] | None:
        """Inverse of ``visible_devices_env``: device indices named by ``env``; None means all."""
        var = self.visible_devices_env_var
        if var is None or var not in env:
            return None
        text = env[var].strip()
        return [int(x) for x in text.split(",") if x.strip()] if text else []

    # -- device faults after start (optional) -----------------------------------------------------

    def recorded_faults(self, host: Host, devices: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        """The fault events a snapshot recorded for ``devices`` (this family's, each ``{"id",
        "index", "pci_address"}``), in order; None on a live host or when nothing is recorded.

        The default keeps the events of the vendor-neutral stream (:func:`recorded_stream`) that
        name one of ``devices``; a family whose recording is raw counter samples overrides it.
        """
        events = recorded_stream(host)
        if events is None:
            return None
        keys = device_keys(devices)
        return [e for e in events if str(e.get("device")) in keys]

    def watch_faults(self, host: Callable[[], Host], devices: Sequence[Mapping[str, Any]],
                     on_event: FaultSink, stop: threading.Event) -> bool:
        """The live fault source: feed ``on_event`` the fault events of ``devices`` until ``stop``
        is set, then return True; False at once when there is nothing to watch (the default).

        ``host()`` opens the live host afresh (a host caches what it read). Runs on a thread of
        the node's watcher process; may block. :func:`poll_faults` is the loop for counters.
        """
        return False


def recorded_stream(host: Host, library: str = EVENTS_LIBRARY) -> list[dict[str, Any]] | None:
    """A snapshot's recorded event stream (``libraries/<library>.json``), None when it has none."""
    reading = host.library(library, lambda: None)
    if not isinstance(reading, dict) or reading.get("format") != 1 or not isinstance(reading.get("events"), list):
        return None
    return [e for e in reading["events"] if isinstance(e, dict)]


def device_keys(devices: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every name an event may give a device by: id, PCI address, index."""
    return {str(k) for d in devices for k in (d.get("id"), d.get("pci_address"), d.get("index")) if k is not None}


def poll_faults(sample: Callable[[], Iterable[dict[str, Any]]], on_event: FaultSink, stop: threading.Event,
                interval_s: float | None = None) -> bool:
    """Call ``sample()`` every ``interval_s`` (default ``RAY_ACCEL_HEALTH_POLL_S``, else 5 s)
    until ``stop`` is set, feeding what it returns to ``on_event``; True."""
    if interval_s is None:
        try:
            interval_s = float(os.environ.get(POLL_ENV, "5"))
        except ValueError:
            interval_s = 5.0
    while not stop.wait(interval_s):
        for event in sample():
            on_event(event)
    return True
