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
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from .host import Host
from .model import Device, NodeDescription

__all__ = ["API_VERSION", "SUPPORTED_API_VERSIONS", "Capabilities", "AcceleratorBackend"]

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
            (``CUDA_VISIBLE_DEVICES``), when the family has one.
    """

    name: ClassVar[str]
    resource_name: ClassVar[str]
    label_prefix: ClassVar[str]
    api_version: ClassVar[int] = API_VERSION
    capabilities: ClassVar[Capabilities] = Capabilities()
    visible_devices_env_var: ClassVar[str | None] = None

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
