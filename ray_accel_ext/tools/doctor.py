"""Explain in plain words why a node is degraded or an accelerator is not seen (``ray-accel doctor``).

:func:`diagnose` runs discovery through a :class:`~ray_accel_ext.host.recording.RecordingHost`, so besides
the structured problems (``NodeInventory.problems``, ``NodeDescription.problems``) it knows every
error the host raised (the file, the tool, the metadata endpoint). It then makes a few cheap
probes through the same host: accelerator PCI functions no backend described, the kernel
driver's footprint (``/proc/driver/nvidia/version``, ``/dev/neuron*``, ``/dev/vfio``,
``/dev/accel*``), ``RAY_ACCEL_DISABLE``, and the installed Ray against
:mod:`ray_accel_ext.compat`. Each :class:`Finding` names a cause, says what it means and how to
fix it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends._sku import NO_LAYOUT_MARK, UNKNOWN_SKU_MARK
from ..compat import MIN_RAY_VERSION, is_supported_ray, is_tested_ray, missing_features, ray_version, tested_range_text
from ..errors import HostReadError
from ..host import FsHost
from ..host.recording import RecordingHost
from ..hw.pci import PCI_DEVICES, read_ids
from ..model import NodeInventory
from ..node.discovery import discover
from ..node.registry import DISABLE_ENV, FamilyInfo, disabled_names, families, family_of_pci
from .ray_probes import ray_interface_reports

__all__ = ["Finding", "Diagnosis", "diagnose", "explain", "CAUSES"]

# cause -> (severity, fix). Severity: "error" (accelerators or facts lost), "warning" (works, but
# something the operator should know), "info".
CAUSES: dict[str, tuple[str, str]] = {
    "backend-load": ("error", "reinstall the package that provides the backend (`pip install --force-reinstall <dist>`), "
                              "check that its version supports this ray_accel_ext, or switch it off with "
                              f"{DISABLE_ENV}=<name>"),
    "backend-missing": ("error", "install the backend for this accelerator: `pip install 'ray-accel-ext[<extra>]'` "
                                 "for the in-tree families, or the vendor's ray_accel_ext backend package"),
    "backend-disabled": ("warning", f"remove the backend from {DISABLE_ENV} if this node should use it"),
    "backend-crash": ("error", "a bug in the backend: report it with a snapshot from `ray-accel record DIR`"),
    "description-invalid": ("error", "a bug in the backend (its description does not validate): report it with "
                                     "a snapshot from `ray-accel record DIR`"),
    "budget": ("error", "something the backend reads hangs (a tool, a file, the metadata server); find it with "
                        "`ray-accel -v discover`, or raise RAY_ACCEL_BUDGET_S (default 3 s)"),
    "driver-missing": ("error", "install and load the kernel driver (see the message), then restart the Ray node"),
    "library-missing": ("warning", "install the library and restart the Ray node (see the message)"),
    "tool-missing": ("error", "install the tool at the path named, or record its output with the node's image"),
    "tool-failed": ("error", "run the command by hand to see its error; a driver/firmware mismatch is the usual cause"),
    "file-missing": ("error", "the file is created by the kernel driver: check that the driver is loaded and that "
                              "/sys and /proc are the host's (containers: mount them, do not fake them)"),
    "file-unreadable": ("error", "run the Ray node with permission to read the file (root-only files under /proc, "
                                 "/sys), or fix the broken link/corrupt file it names"),
    "metadata-unreachable": ("error", "the cloud metadata server could not be reached: allow the node to reach "
                                      "169.254.169.254 / metadata.google.internal (GKE: Workload Identity or "
                                      "metadata concealment may block it; EC2: IMDS enabled, hop limit >= 2 in containers)"),
    "metadata-timeout": ("error", "the metadata server did not answer in time: retry, or raise "
                                  "RAY_ACCEL_METADATA_TIMEOUT_S / RAY_ACCEL_BUDGET_S"),
    "metadata-rate-limited": ("warning", "the metadata server answered HTTP 429 (too many requests): stagger node "
                                         "starts, or restart the node after the Retry-After interval"),
    "metadata-token-refused": ("error", "EC2 refused the IMDSv2 token: enable the metadata service and, in containers, "
                                        "raise the hop limit (`aws ec2 modify-instance-metadata-options --instance-id <id> "
                                        "--http-endpoint enabled --http-put-response-hop-limit 2`)"),
    "metadata-error": ("error", "the metadata server answered with an error: retry; if it persists, check the "
                                "instance's metadata configuration"),
    "metadata-disabled": ("warning", "AWS_EC2_METADATA_DISABLED=true switches the EC2 metadata service off for this "
                                     "process: unset it to get zone, region and instance topology labels"),
    "sku-unknown": ("warning", "the devices are counted and scheduled; to give them their SKU, generation and memory, "
                               "add their PCI id to an extra SKU file in a directory named by RAY_ACCEL_SKU_DIR or "
                               "/etc/ray_accel_ext/skus.d (format: ray_accel_ext/skus/SCHEMA.md; check it with "
                               "`ray-accel skus --validate FILE`), or upgrade ray-accel-ext"),
    "generation-unsupported": ("warning", "the devices are counted and scheduled with the SKU database's name, but "
                                          "this release cannot lay out their generation (cores, torus, device "
                                          "nodes): upgrade ray-accel-ext, or correct the `generation` of the extra "
                                          "SKU file entry the message names"),
    "sku-file": ("warning", "fix the extra SKU file named in the message (`ray-accel skus --validate FILE` shows the "
                            "field at fault) or remove it; until then the node uses the built-in SKU data"),
    "ray-missing": ("warning", "install Ray: `pip install 'ray-accel-ext[ray]'`"),
    "ray-version": ("warning", f"install a tested Ray ({tested_range_text()}): `pip install 'ray-accel-ext[ray]'`; "
                               "the start hook uses only public Ray inputs and still runs"),
    "ray-feature": ("info", "upgrade Ray to get the feature (`pip install -U 'ray[default]'`); until then this "
                            "package works without it as the message says"),
    "ray-interface-missing": ("warning", "a private Ray interface changed shape: the message says what the node does "
                                         "without it; upgrade ray-accel-ext to a release that knows this Ray"),
    "device-isolation-off": ("info", "unset RAY_ACCEL_DEVICE_ISOLATION (docs/vendors.md) for per-task device ids"),
    "device-isolation-unavailable": ("warning", "reinstall ray-accel-ext so ray_accel_ext_devices.pth is in site-packages "
                                                "(docs/vendors.md, \"What a backend gets at runtime\")"),
    "no-accelerators": ("info", "if this node should have accelerators, check that the VM/pod was given them "
                                "(KubeRay: resource limits google.com/tpu, nvidia.com/gpu, aws.amazon.com/neuron) "
                                "and that /sys is the host's"),
    "degraded": ("error", "see the message; record the host with `ray-accel record DIR` and report it"),
    "device-gone": ("error", "a device left the PCI bus or reset after the node started: check the kernel log (`dmesg`: Xid, "
                             "AER, link down) and the device; restart the Ray node to relabel it once fixed"),
    "device-added": ("warning", "restart the Ray node so that its resources and labels count the new device"),
    "probe-failed": ("error", "the node did not run its inventory probe (a zero-CPU task pinned to it): check that "
                              "the node is alive and its raylet accepts tasks; run `ray-accel doctor` on the node"),
    "start-degraded": ("error", "run `ray-accel doctor` on the node; its `ray start` log has the discovery reasons"),
}


@dataclass(frozen=True)
class Finding:
    """One explained cause: ``cause`` (a key of :data:`CAUSES`), plain-words ``message``, ``fix``."""

    cause: str
    severity: str
    message: str
    fix: str
    backend: str | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _finding(cause: str, message: str, *, backend: str | None = None, detail: str | None = None) -> Finding:
    severity, fix = CAUSES[cause]
    return Finding(cause=cause, severity=severity, message=message, fix=fix, backend=backend, detail=detail)


# -- classification -----------------------------------------------------------------------------

_ERROR_CLASS_CAUSE = {
    "MetadataTimeout": "metadata-timeout",
    "MetadataRateLimited": "metadata-rate-limited",
    "MetadataServerError": "metadata-error",
    "MetadataDisabled": "metadata-disabled",
    "DescriptionError": "description-invalid",
    "TopologyStringError": "degraded",
}


def _host_error_cause(err: dict[str, Any]) -> str:
    """Cause of one structured error the host raised."""
    name = err.get("error", "")
    reason = str(err.get("reason") or err.get("message") or "")
    if name == "CommandError":
        return "tool-missing" if reason == "not installed" else "tool-failed"
    if name == "HostReadError":
        return "file-missing" if reason == "no such file" else "file-unreadable"
    if name == "MetadataServerError" and err.get("status") is None:
        return "metadata-unreachable"
    if name == "MetadataServerError" and str(err.get("endpoint", "")).endswith("/api/token") and err.get("status") in (401, 403, 405):
        return "metadata-token-refused"
    return _ERROR_CLASS_CAUSE.get(name, "degraded")


_TEXT_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"AWS_EC2_METADATA_DISABLED"), "metadata-disabled"),
    (re.compile(re.escape(UNKNOWN_SKU_MARK)), "sku-unknown"),
    (re.compile(re.escape(NO_LAYOUT_MARK)), "generation-unsupported"),
    (re.compile(r"/api/token: HTTP 40[135]"), "metadata-token-refused"),
    (re.compile(r"HTTP 429"), "metadata-rate-limited"),
    (re.compile(r"did not answer|not asked", re.I), "metadata-timeout"),
    (re.compile(r"no answer within|budget spent|timed out", re.I), "metadata-timeout"),
    (re.compile(r"Connection(Refused|Reset)Error|Name or service not known|nodename nor servname|"
                r"RemoteDisconnected|No route to host|Temporary failure in name resolution", re.I), "metadata-unreachable"),
    (re.compile(r"HTTP [45]\d\d"), "metadata-error"),
    (re.compile(r"not installed"), "tool-missing"),
    (re.compile(r"exit status"), "tool-failed"),
    (re.compile(r"permission denied|broken symbolic link|binary content|not valid UTF-8|too many levels|"
                r"is a directory|larger than|unparsable|malformed|cannot read", re.I), "file-unreadable"),
    (re.compile(r"no such file", re.I), "file-missing"),
)


def _text_cause(message: str) -> str:
    for pattern, cause in _TEXT_RULES:
        if pattern.search(message):
            return cause
    return "degraded"


def _errors_in(message: str, errors: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The host errors a problem message talks about (by path, tool, or endpoint)."""
    found = []
    for err in errors:
        keys = [err.get("path"), err.get("endpoint"), (err.get("argv") or [None])[0]]
        if any(k and k in message for k in keys):
            found.append(err)
    return found


def _plain(cause: str, backend: str | None, raw: str) -> str:
    who = f"{backend}: " if backend else ""
    words = {
        "metadata-rate-limited": "the cloud metadata server refused with HTTP 429 (rate limited), so provider facts "
                                 "(slice, zone, rack) are missing",
        "metadata-timeout": "the cloud metadata server did not answer in time, so provider facts are missing",
        "metadata-unreachable": "the cloud metadata server could not be reached, so provider facts are missing",
        "metadata-error": "the cloud metadata server answered with an error, so provider facts are missing",
        "metadata-token-refused": "the EC2 metadata service refused an IMDSv2 token, so provider facts are missing",
        "metadata-disabled": "the EC2 metadata service is switched off in this environment, so provider facts are missing",
        "tool-missing": "a tool discovery needs is not installed",
        "tool-failed": "a tool discovery runs failed",
        "file-unreadable": "a file discovery needs could not be read (unreadable, broken or corrupt)",
        "file-missing": "a file discovery needs does not exist",
        "description-invalid": "the backend produced a description that does not validate",
        "sku-unknown": "devices whose PCI id the SKU database does not know were counted without a known SKU",
        "generation-unsupported": "devices of a generation this release cannot lay out were counted without their layout",
        "degraded": "discovery could not read everything",
    }.get(cause, "discovery could not read everything")
    return f"{who}{words}: {raw}"


_REASON_RE = re.compile(r"^(?P<backend>[A-Za-z0-9_.-]+)(?: (?P<stage>load|detect|describe|budget))?: (?:(?P<error>[A-Za-z]+Error|"
                        r"Metadata[A-Za-z]+|[A-Za-z]+Timeout|[A-Za-z]+RateLimited): )?(?P<raw>.*)$", re.S)


def explain(reason: str) -> Finding:
    """The cause, plain words and fix for one line of ``ClusterNode.reasons()`` (what the
    dashboard and ``ray-accel cluster`` show next to a degraded node)."""
    if "after the node started" in reason:
        return _finding("device-added" if " appeared " in reason else "device-gone", reason)
    if reason.startswith("inventory probe failed"):
        return _finding("probe-failed", reason)
    if reason.startswith("started with "):
        return _finding("start-degraded", reason)
    m = _REASON_RE.match(reason)
    if m is None:
        cause = _text_cause(reason)
        return _finding(cause, _plain(cause, None, reason), detail=reason)
    backend, stage, error, raw = m["backend"], m["stage"], m["error"], m["raw"]
    if stage == "load":
        return _finding("backend-load", f"the backend {backend} failed to load: {raw}", backend=backend, detail=reason)
    if stage == "budget":
        return _finding("budget", f"the backend {backend} {raw}", backend=backend, detail=reason)
    cause = _ERROR_CLASS_CAUSE.get(error or "", "") or _text_cause(raw)
    return _finding(cause, _plain(cause, backend, raw), backend=backend, detail=reason)


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
               if any(UNKNOWN_SKU_MARK not in p and NO_LAYOUT_MARK not in p for p in d.problems) or _library_absent(d)}
    known = families()
    by_name = {f.backend: f for f in known}
    for backend, bdfs in sorted(_pci_accelerators(host, known).items()):
        fam = by_name[backend]
        where = f"{len(bdfs)} PCI function(s) {', '.join(bdfs[:4])}{' ...' if len(bdfs) > 4 else ''}"
        probe_driver = backend not in described or backend in partial
        if probe_driver and fam.driver_paths and not any(host.exists(p) for p in fam.driver_paths):
            out.append(_finding("driver-missing", fam.driver_hint, backend=backend, detail=where))
        if backend in described or backend in failed:
            continue
        if backend in disabled:
            out.append(_finding("backend-disabled",
                                f"{where} of the {fam.family} family are present, but the {backend} backend is "
                                f"switched off by {DISABLE_ENV}", backend=backend))
        elif not fam.installed:
            out.append(_finding("backend-missing",
                                f"{where} of the {fam.family} family are present, but no backend named {backend} is "
                                f"installed (`pip install '{fam.provided_by}'`)", backend=backend))
    return out


def _library_absent(desc) -> bool:
    return desc.backend == "nvidia_gpu" and any(k.endswith("/nvml") and v == "absent" for k, v in desc.attributes.items())


def _probe_libraries(inventory: NodeInventory) -> list[Finding]:
    out = []
    for desc in inventory.descriptions:
        if _library_absent(desc):
            out.append(_finding(
                "library-missing",
                "NVIDIA GPUs were found from sysfs, but NVML is not available, so GPU UUIDs, memory, NVLink links "
                "and the multi-node NVLink domain are unknown: install `nvidia-ml-py` (`pip install "
                "'ray-accel-ext[nvidia]'`) and make libnvidia-ml.so.1 visible (containers: the NVIDIA container "
                "toolkit)",
                backend=desc.backend,
            ))
    return out


def _probe_ray() -> tuple[str | None, list[Finding]]:
    version = ray_version()
    if version is None:
        return None, [_finding("ray-missing", "Ray is not installed in this Python environment")]
    out = []
    if not is_supported_ray(version):
        out.append(_finding("ray-version", f"Ray {version} is older than the oldest supported release "
                            f"({MIN_RAY_VERSION[0]}.{MIN_RAY_VERSION[1]})", detail=version))
    elif not is_tested_ray(version):
        out.append(_finding("ray-version", f"Ray {version} is outside the range this package is tested with "
                            f"({tested_range_text()})", detail=version))
    for feature in missing_features(version) if is_supported_ray(version) else ():
        out.append(_finding("ray-feature", f"Ray {version} lacks {feature.name} (Ray {feature.since[0]}."
                            f"{feature.since[1]} and newer): {feature.without}", detail=feature.where))
    return version, out


# -- entry point --------------------------------------------------------------------------------


def diagnose(host: FsHost) -> Diagnosis:
    """Discover ``host`` and explain every reason it is degraded or shows no accelerator."""
    rec = RecordingHost(host)
    inventory = discover(rec)
    findings: list[Finding] = []

    for p in inventory.problems:
        detail = f"{p.error}: {p.message}"
        if p.backend == "skus":
            findings.append(_finding("sku-file", f"an extra SKU file was ignored: {p.message}", detail=detail))
        elif p.stage == "load":
            findings.append(_finding("backend-load", f"the backend {p.backend} failed to load: {p.message}",
                                     backend=p.backend, detail=detail))
        elif p.stage == "budget":
            findings.append(_finding("budget", f"the backend {p.backend} {p.message}", backend=p.backend, detail=detail))
        else:
            errs = _errors_in(p.message, rec.errors)
            if p.error in ("CommandError", "HostReadError") or p.error in _ERROR_CLASS_CAUSE:
                cause = _host_error_cause(errs[0]) if errs else _ERROR_CLASS_CAUSE.get(p.error, _text_cause(p.message))
                if p.error == "DescriptionError":
                    cause = "description-invalid"
            elif p.error.startswith("Metadata"):
                cause = _ERROR_CLASS_CAUSE.get(p.error, "metadata-error")
            else:
                cause = "backend-crash"
            msg = (f"the backend {p.backend} crashed in {p.stage}(): {p.error}: {p.message}" if cause == "backend-crash"
                   else _plain(cause, p.backend, p.message))
            findings.append(_finding(cause, msg, backend=p.backend, detail=detail))

    for desc in inventory.descriptions:
        for raw in desc.problems:
            errs = _errors_in(raw, rec.errors)
            cause = _host_error_cause(errs[0]) if errs else _text_cause(raw)
            findings.append(_finding(cause, _plain(cause, desc.backend, raw), backend=desc.backend, detail=raw))

    findings += _probe_families(host, inventory, disabled_names(host.env))
    findings += _probe_libraries(inventory)
    version, ray_findings = _probe_ray()
    findings += ray_findings
    findings += [_finding(c, m, backend=b, detail=d) for c, m, b, d in ray_interface_reports(inventory)]
    if not inventory.descriptions and not any(f.severity == "error" for f in findings):
        findings.append(_finding(
            "no-accelerators",
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
                           detail=" | ".join(details)))
    return out
