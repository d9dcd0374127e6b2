"""Explain in plain words why a node is degraded or an accelerator is not seen (``ray-accel doctor``).

:func:`diagnose` runs discovery and explains every coded problem it reports
(``NodeInventory.problems``, ``NodeDescription.problems``) from its code alone
(:mod:`ray_accel_ext.problems`, :func:`ray_accel_ext.findings.finding_of`): a reworded message
never changes a diagnosis, and a vendor backend's declared codes come with their own fixes. It then
makes a few cheap probes through the same host: accelerator PCI functions no backend described,
the kernel driver's footprint (``/proc/driver/nvidia/version``, ``/dev/neuron*``, ``/dev/vfio``,
``/dev/accel*``), ``RAY_ACCEL_DISABLE``, and the installed Ray against :mod:`ray_accel_ext.compat`.
Each :class:`~ray_accel_ext.findings.Finding` names a cause, says what it means and how to fix it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import problems as codes
from ..compat import MIN_RAY_VERSION, is_supported_ray, is_tested_ray, missing_features, ray_version, tested_range_text
from ..errors import HostReadError
from ..findings import Finding, finding, finding_of
from ..host import FsHost
from ..hw.pci import PCI_DEVICES, read_ids
from ..labels import partition_resource
from ..model import NodeInventory
from ..node.discovery import discover
from ..node.registry import DISABLE_ENV, FamilyInfo, disabled_names, families, family_of_pci
from .ray_probes import ray_interface_reports

__all__ = ["Finding", "Diagnosis", "diagnose"]

# Problems that say nothing about the driver: a device id the SKU database lacks, a generation
# without a layout, a link the driver itself reports down.
_NOT_THE_DRIVER = frozenset({codes.SKU_UNKNOWN, codes.GENERATION_UNSUPPORTED, codes.LINK_DOWN})


@dataclass
class Diagnosis:
    """The result of :func:`diagnose`: the inventory and every finding, worst first."""

    inventory: NodeInventory
    findings: list[Finding] = field(default_factory=list)
    ray_version: str | None = None

    @property
    def healthy(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def causes(self) -> list[str]:
        return [f.cause for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "degraded": self.inventory.degraded,
            "ray_version": self.ray_version,
            "families": [d.backend for d in self.inventory.descriptions],
            "devices": sum(len(d.devices) for d in self.inventory.descriptions),
            "findings": [f.to_dict() for f in self.findings],
        }


# -- probes -------------------------------------------------------------------------------------

def _pci_accelerators(host: FsHost, known: list[FamilyInfo]) -> dict[str, list[str]]:
    """Accelerator PCI functions by backend name, recognised by each family's declared PCI ids."""
    found: dict[str, list[str]] = {}
    try:
        names = host.listdir(PCI_DEVICES)
    except HostReadError:
        return found
    for bdf in names:
        try:
            vendor, device, pci_class = read_ids(host, bdf)
        except HostReadError:
            continue
        family = family_of_pci(vendor, device, pci_class, known)
        if family is not None:
            found.setdefault(family.backend, []).append(bdf)
    return found


def _probe_families(host: FsHost, inventory: NodeInventory, disabled: set[str]) -> list[Finding]:
    out: list[Finding] = []
    described = {d.backend for d in inventory.descriptions}
    failed = {p.backend for p in inventory.problems}
    # A family a backend described fully shows its driver works (NVML, neuron-ls, chips answered);
    # the driver's footprint is probed only where something is missing.
    # A device id the SKU database lacks (or a generation without a layout) says nothing about the driver.
    partial = {d.backend for d in inventory.descriptions
               if any(p.code not in _NOT_THE_DRIVER for p in d.problems) or _library_absent(d)}
    known = families()
    by_name = {f.backend: f for f in known}
    for backend, bdfs in sorted(_pci_accelerators(host, known).items()):
        fam = by_name[backend]
        where = f"{len(bdfs)} PCI function(s) {', '.join(bdfs[:4])}{' ...' if len(bdfs) > 4 else ''}"
        probe_driver = backend not in described or backend in partial
        if probe_driver and fam.driver_paths and not any(host.exists(p) for p in fam.driver_paths):
            out.append(finding(codes.DRIVER_MISSING, fam.driver_hint, backend=backend, detail=where))
        if backend in described or backend in failed:
            continue
        if backend in disabled:
            out.append(finding(codes.BACKEND_DISABLED,
                                f"{where} of the {fam.family} family are present, but the {backend} backend is "
                                f"switched off by {DISABLE_ENV}", backend=backend))
        elif not fam.installed:
            out.append(finding(codes.BACKEND_MISSING,
                                f"{where} of the {fam.family} family are present, but no backend named {backend} is "
                                f"installed (`pip install '{fam.provided_by}'`)", backend=backend))
    return out


def _library_absent(desc) -> bool:
    return desc.backend == "nvidia_gpu" and any(k.endswith("/nvml") and v == "absent" for k, v in desc.attributes.items())


def _probe_libraries(inventory: NodeInventory) -> list[Finding]:
    out = []
    for desc in inventory.descriptions:
        if _library_absent(desc):
            out.append(finding(
                codes.LIBRARY_MISSING,
                "NVIDIA GPUs were found from sysfs, but NVML is not available, so GPU UUIDs, memory, NVLink links "
                "and the multi-node NVLink domain are unknown: install `nvidia-ml-py` (`pip install "
                "'ray-accel-ext[nvidia]'`) and make libnvidia-ml.so.1 visible (containers: the NVIDIA container "
                "toolkit)",
                backend=desc.backend,
            ))
    return out


def _probe_partitions(inventory: NodeInventory) -> list[Finding]:
    """One finding per GPU in MIG mode: what it offers instead of itself."""
    out = []
    for desc in inventory.descriptions:
        by_device: dict[str, list[Any]] = {}
        for part in desc.partitions:
            by_device.setdefault(part.device, []).append(part)
        for device, parts in by_device.items():
            layout = ", ".join(f"{n} x {p}" for p, n in sorted(Counter(x.profile for x in parts).items()))
            where = f"GPU {device} at {parts[0].pci_address}" if parts[0].pci_address else f"GPU {device}"
            out.append(finding(
                codes.MIG_ENABLED,
                f"{where} is in MIG mode ({layout}): it is offered as {len(parts)} MIG instance(s), resources "
                f"{', '.join(sorted({partition_resource(p.profile) for p in parts}))}, and not as a whole GPU",
                backend=desc.backend, detail=" ".join(p.id for p in parts)))
    return out


def _probe_ray() -> tuple[str | None, list[Finding]]:
    version = ray_version()
    if version is None:
        return None, [finding(codes.RAY_MISSING, "Ray is not installed in this Python environment")]
    out = []
    if not is_supported_ray(version):
        out.append(finding(codes.RAY_VERSION, f"Ray {version} is older than the oldest supported release "
                            f"({MIN_RAY_VERSION[0]}.{MIN_RAY_VERSION[1]})", detail=version))
    elif not is_tested_ray(version):
        out.append(finding(codes.RAY_VERSION, f"Ray {version} is outside the range this package is tested with "
                            f"({tested_range_text()})", detail=version))
    for feature in missing_features(version) if is_supported_ray(version) else ():
        out.append(finding(codes.RAY_FEATURE, f"Ray {version} lacks {feature.name} (Ray {feature.since[0]}."
                            f"{feature.since[1]} and newer): {feature.without}", detail=feature.where))
    return version, out


# -- entry point --------------------------------------------------------------------------------


def diagnose(host: FsHost) -> Diagnosis:
    """Discover ``host`` and explain every reason it is degraded or shows no accelerator."""
    inventory = discover(host)
    findings = [finding_of(p) for p in inventory.all_problems()]

    findings += _probe_families(host, inventory, disabled_names(host.env))
    findings += _probe_libraries(inventory)
    findings += _probe_partitions(inventory)
    version, ray_findings = _probe_ray()
    findings += ray_findings
    findings += [finding(c, m, backend=b, detail=d) for c, m, b, d in ray_interface_reports(inventory)]
    if not inventory.descriptions and not any(f.severity == "error" for f in findings):
        findings.append(finding(
            codes.NO_ACCELERATORS,
            "no accelerator found: no backend described this node and no PCI function of a known accelerator "
            f"({', '.join(f.family for f in families())}) is on the bus",
        ))
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: order[f.severity])
    return Diagnosis(inventory=inventory, findings=_dedupe(findings), ray_version=version)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per (cause, backend): the first message, every raw reason in ``detail``."""
    merged: dict[tuple[str, str | None], list[Finding]] = {}
    for f in findings:
        merged.setdefault((f.cause, f.backend), []).append(f)
    out = []
    for group in merged.values():
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        details = list(dict.fromkeys(g.detail or g.message for g in group))
        out.append(Finding(cause=first.cause, severity=first.severity, fix=first.fix, backend=first.backend,
                           message=f"{first.message} (and {len(group) - 1} more of the same kind)",
                           detail=" | ".join(details), declared=first.declared))
    return out
