"""Capability gating: declared :class:`~ray_accel_ext.backend.Capabilities` decide what runs.

A suite test names the capabilities it needs with :func:`requires`; the suite never names a
vendor. For a backend that does not declare one, the test is skipped with the reason. For a
backend that declares one, the test runs, and :func:`missing` says, naming the backend, the
snapshot and the field, where the promise is not kept. "A snapshot that has it" is decided from
facts outside the backend: the golden file, the host's sysfs, and the snapshot's metadata.

Capability catalogue (what a backend that declares it must fill in):

* ``topology_links``: ``links`` on every snapshot whose golden has links, and on every snapshot
  with more than one device whose ``interconnect`` is not ``pcie``.
* ``nic_affinity``: ``nics`` and, for each device, its nearest NICs, on every snapshot whose host
  has RDMA devices under ``/sys/class/infiniband``.
* ``numa_affinity``: each PCI device's ``numa_node`` equal to its sysfs ``numa_node`` when that is
  known (not -1), and ``cpus`` set whenever ``numa_node`` is.
* ``fabric_domains``: ``fabric`` on every snapshot whose golden has one.
* ``provider_location``: ``location.provider`` on every snapshot that serves cloud metadata.
* ``device_visibility``: ``visible_devices_env`` restricts to a subset and parses back.
* ``uses_network``: without it, ``detect``/``describe`` send no request at all.

Each declared capability must also be shown by at least one snapshot
(``BaseDescriptionTests::test_declared_capabilities_are_shown``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..host import Host
from ..model import NodeDescription

__all__ = ["requires", "required_of", "missing", "shown_by", "CAPABILITY_FIELDS"]

# capability -> the NodeDescription field a message should name
CAPABILITY_FIELDS = {
    "topology_links": "links",
    "nic_affinity": "nics",
    "numa_affinity": "devices[*].numa_node",
    "fabric_domains": "fabric",
    "provider_location": "location.provider",
    "device_visibility": "visible_devices_env()",
    "uses_network": "(network use)",
}


def requires(*capabilities: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a suite test as needing ``capabilities`` (names of ``Capabilities`` fields)."""
    unknown = [c for c in capabilities if c not in CAPABILITY_FIELDS]
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; known: {sorted(CAPABILITY_FIELDS)}")

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.__accel_requires__ = tuple(capabilities)  # type: ignore[attr-defined]
        return func

    return mark


def required_of(func: Any) -> tuple[str, ...]:
    """The capabilities a test function was marked with."""
    return tuple(getattr(func, "__accel_requires__", ()))


def _has_rdma(host: Host) -> bool:
    try:
        return bool(host.listdir("/sys/class/infiniband"))
    except Exception:  # noqa: BLE001
        return False


def _sysfs_numa(host: Host, pci_address: str) -> int | None:
    try:
        text = host.read_optional(f"/sys/bus/pci/devices/{pci_address}/numa_node")
        value = int(text.strip()) if text else -1
    except Exception:  # noqa: BLE001
        return None
    return value if value >= 0 else None


def missing(
    capability: str,
    desc: NodeDescription,
    host: Host,
    golden: dict[str, Any] | None,
    has_metadata: bool,
) -> list[str]:
    """Where ``desc`` breaks the promise of ``capability`` on this snapshot; empty when kept."""
    out: list[str] = []
    golden = golden or {}
    if capability == "topology_links":
        if golden.get("links") and not desc.links:
            out.append("links is empty but the golden file lists links")
        elif len(desc.devices) > 1 and desc.interconnect != "pcie" and not desc.links:
            out.append(f"links is empty although interconnect is {desc.interconnect!r} with {len(desc.devices)} devices")
    elif capability == "nic_affinity":
        if _has_rdma(host):
            if not desc.nics:
                out.append("nics is empty although the host has RDMA devices under /sys/class/infiniband")
            else:
                # A device without a PCI address has no place in the PCIe tree: its nearest NIC is
                # unknowable (e.g. Neuron class devices without neuron-ls), not a broken promise.
                bare = [d.index for d in desc.devices if not d.nics and d.pci_address]
                if bare:
                    out.append(f"devices{bare}.nics: no nearest NIC although the node has {len(desc.nics)} NIC(s)")
    elif capability == "numa_affinity":
        for d in desc.devices:
            if d.pci_address:
                actual = _sysfs_numa(host, d.pci_address)
                if actual is not None and d.numa_node != actual:
                    out.append(f"devices[{d.index}].numa_node is {d.numa_node!r} but sysfs says {actual} for {d.pci_address}")
            if d.numa_node is not None and not d.cpus:
                out.append(f"devices[{d.index}].cpus is empty although numa_node is {d.numa_node}")
    elif capability == "fabric_domains":
        if golden.get("fabric") and desc.fabric is None:
            out.append("fabric is None but the golden file has a fabric domain")
    elif capability == "provider_location":
        if has_metadata and not desc.location.provider:
            out.append("location.provider is empty although the snapshot serves cloud metadata")
    return out


def shown_by(capability: str, desc: NodeDescription) -> bool:
    """True when ``desc`` shows ``capability`` in use (a filled field)."""
    if capability == "topology_links":
        return bool(desc.links)
    if capability == "nic_affinity":
        return bool(desc.nics) and any(d.nics for d in desc.devices)
    if capability == "numa_affinity":
        return any(d.numa_node is not None and d.cpus for d in desc.devices)
    if capability == "fabric_domains":
        return desc.fabric is not None
    if capability == "provider_location":
        return bool(desc.location.provider)
    if capability == "device_visibility":
        return bool(desc.devices)
    return True
