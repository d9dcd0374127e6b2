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

What a backend knows about its hardware it *declares* as class attributes (:class:`PciId`,
driver paths, the visible-devices variable, its own problem codes), so ``ray-accel doctor``, the health monitors and the
node-start capping ask the registry and hold no vendor table of their own.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from .host import Host
from .hw.pci import PciId
from .model import Device, NodeDescription
from .problems import ProblemCode

__all__ = ["API_VERSION", "SUPPORTED_API_VERSIONS", "Capabilities", "PciId", "AcceleratorBackend"]

API_VERSION = 1
SUPPORTED_API_VERSIONS = frozenset({1})


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
