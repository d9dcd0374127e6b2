"""Problem codes: the stable vocabulary of why a node is degraded or an accelerator is not seen.

A :class:`~ray_accel_ext.model.Problem` carries one of these codes next to its message. Readers
(``ray-accel doctor``, the dashboard, the cluster views, telemetry) decide from the code, never
from the words, so rewording a message never changes a diagnosis. Each code has a severity
(``error``: accelerators or facts lost; ``warning``: works, but the operator should know;
``info``), a plain-words summary and a fix hint; ``docs/problems.md`` lists them all.

A vendor backend declares its own codes with :func:`declare` (or as the ``problem_codes`` class
attribute of its backend, which discovery declares in the node-start process even when the
backend itself runs in a worker process). A vendor code never replaces a built-in one; a code
nobody declared is explained as such (:data:`UNDECLARED`), never an error.

:func:`code_of` turns an exception the host or a provider raised into its code from the
exception's structure (class, ``HostReadError.reason``, ``CommandError.reason``, HTTP status),
so backends do not each classify.
"""

from __future__ import annotations

import re
import threading
from dataclasses import asdict, dataclass
from typing import Any

from .compat import tested_range_text
from .errors import (
    BackendLoadError,
    CommandError,
    DescriptionError,
    HostReadError,
    MetadataDisabled,
    MetadataNotServed,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    RayAccelError,
)
from .trust_codes import *  # noqa: F403 - the trust-boundary codes, grouped there, re-exported here

__all__ = [
    "SEVERITIES",
    "ProblemCode",
    "Explanation",
    "declare",
    "lookup",
    "codes",
    "valid_code",
    "code_of",
    "code_of_error_name",
    "explain",
    "markdown_table",
    "DEGRADED",
    "UNDECLARED",
]

SEVERITIES = ("error", "warning", "info")
_CODE_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

# -- the built-in codes (constants: spell a code once) -------------------------------------------

DEGRADED = "degraded"  # the generic code: a plain-string problem, or nothing more precise is known
BACKEND_LOAD = "backend-load"
BACKEND_MISSING = "backend-missing"
BACKEND_DISABLED = "backend-disabled"
BACKEND_CRASH = "backend-crash"
DESCRIPTION_INVALID = "description-invalid"
BUDGET = "budget"
DRIVER_MISSING = "driver-missing"
LIBRARY_MISSING = "library-missing"
TOOL_MISSING = "tool-missing"
TOOL_FAILED = "tool-failed"
FILE_MISSING = "file-missing"
FILE_UNREADABLE = "file-unreadable"
METADATA_UNREACHABLE = "metadata-unreachable"
METADATA_TIMEOUT = "metadata-timeout"
METADATA_RATE_LIMITED = "metadata-rate-limited"
METADATA_TOKEN_REFUSED = "metadata-token-refused"
METADATA_ERROR = "metadata-error"
METADATA_DISABLED = "metadata-disabled"
METADATA_NOT_SERVED = "metadata-not-served"
KUBERAY_INDEX_MISMATCH = "kuberay-index-mismatch"
KUBERAY_INDEX_INVALID = "kuberay-index-invalid"
TPU_PROCESS_LAYOUT = "tpu-process-layout"
RAY_INTERFACE_MISSING = "ray-interface-missing"
DEVICE_ISOLATION_OFF = "device-isolation-off"
DEVICE_ISOLATION_UNAVAILABLE = "device-isolation-unavailable"
DEVICE_ISOLATION_FAILED = "device-isolation-failed"
SKU_UNKNOWN = "sku-unknown"
GENERATION_UNSUPPORTED = "generation-unsupported"
SKU_FILE = "sku-file"
LINK_DOWN = "link-down"
RAY_MISSING = "ray-missing"
RAY_VERSION = "ray-version"
RAY_FEATURE = "ray-feature"
NO_ACCELERATORS = "no-accelerators"
DEVICE_GONE = "device-gone"
DEVICE_ADDED = "device-added"
PROBE_FAILED = "probe-failed"
START_DEGRADED = "start-degraded"
MIG_ENABLED = "mig-enabled"
DEVICE_FAULT = "device-fault"
DEVICE_EVENT = "device-event"
UNDECLARED = "undeclared"  # what explain() calls a code nobody declared


@dataclass(frozen=True)
class ProblemCode:
    """One code: its name, severity, plain-words summary and fix hint; ``vendor`` marks a
    declared (not built-in) code."""

    code: str
    severity: str
    summary: str
    hint: str
    vendor: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _code(code: str, severity: str, summary: str, hint: str) -> tuple[str, ProblemCode]:
    return code, ProblemCode(code, severity, summary, hint)


_BUILTIN: dict[str, ProblemCode] = dict([
    _code(DEGRADED, "error", "discovery could not read everything",
          "see the message; record the host with `ray-accel record DIR` and report it"),
    _code(BACKEND_LOAD, "error", "a backend failed to load",
          "reinstall the package that provides the backend (`pip install --force-reinstall <dist>`), check that its "
          "version supports this ray_accel_ext, or switch it off with RAY_ACCEL_DISABLE=<name>"),
    _code(BACKEND_MISSING, "error", "accelerators are on the PCI bus but no backend for them is installed",
          "install the backend for this accelerator: `pip install 'ray-accel-ext[<extra>]'` for the in-tree "
          "families, or the vendor's ray_accel_ext backend package"),
    _code(BACKEND_DISABLED, "warning", "accelerators are on the PCI bus but their backend is switched off",
          "remove the backend from RAY_ACCEL_DISABLE if this node should use it"),
    _code(BACKEND_CRASH, "error", "a backend raised an exception",
          "a bug in the backend: report it with a snapshot from `ray-accel record DIR`"),
    _code(DESCRIPTION_INVALID, "error", "the backend produced a description that does not validate",
          "a bug in the backend (its description does not validate): report it with a snapshot from "
          "`ray-accel record DIR`"),
    _code(BUDGET, "error", "discovery did not finish within its time budget",
          "something the backend reads hangs (a tool, a file, the metadata server); find it with "
          "`ray-accel -v discover`, or raise RAY_ACCEL_BUDGET_S (default 3 s)"),
    _code(DRIVER_MISSING, "error", "accelerators are on the PCI bus but their kernel driver is not loaded",
          "install and load the kernel driver (see the message), then restart the Ray node"),
    _code(LIBRARY_MISSING, "warning", "a user-space library discovery reads is not available",
          "install the library and restart the Ray node (see the message)"),
    _code(TOOL_MISSING, "error", "a tool discovery needs is not installed",
          "install the tool at the path named, or record its output with the node's image"),
    _code(TOOL_FAILED, "error", "a tool discovery runs failed",
          "run the command by hand to see its error; a driver/firmware mismatch is the usual cause"),
    _code(FILE_MISSING, "error", "a file discovery needs does not exist",
          "the file is created by the kernel driver: check that the driver is loaded and that /sys and /proc are "
          "the host's (containers: mount them, do not fake them)"),
    _code(FILE_UNREADABLE, "error", "a file discovery needs could not be read (unreadable, broken or corrupt)",
          "run the Ray node with permission to read the file (root-only files under /proc, /sys), or fix the "
          "broken link/corrupt file it names"),
    _code(METADATA_UNREACHABLE, "error",
          "the cloud metadata server could not be reached, so provider facts are missing",
          "the cloud metadata server could not be reached: allow the node to reach 169.254.169.254 / "
          "metadata.google.internal (GKE: Workload Identity or metadata concealment may block it; EC2: IMDS "
          "enabled, hop limit >= 2 in containers)"),
    _code(METADATA_TIMEOUT, "error", "the cloud metadata server did not answer in time, so provider facts are missing",
          "the metadata server did not answer in time: retry, or raise RAY_ACCEL_METADATA_TIMEOUT_S / "
          "RAY_ACCEL_BUDGET_S"),
    _code(METADATA_RATE_LIMITED, "warning",
          "the cloud metadata server refused with HTTP 429 (rate limited), so provider facts (slice, zone, rack) "
          "are missing",
          "the metadata server answered HTTP 429 (too many requests): stagger node starts, or restart the node "
          "after the Retry-After interval"),
    _code(METADATA_TOKEN_REFUSED, "error",
          "the EC2 metadata service refused an IMDSv2 token, so provider facts are missing",
          "EC2 refused the IMDSv2 token: enable the metadata service and, in containers, raise the hop limit "
          "(`aws ec2 modify-instance-metadata-options --instance-id <id> --http-endpoint enabled "
          "--http-put-response-hop-limit 2`)"),
    _code(METADATA_ERROR, "error",
          "the cloud metadata server answered with an error, so provider facts are missing",
          "the metadata server answered with an error: retry; if it persists, check the instance's metadata "
          "configuration"),
    _code(METADATA_DISABLED, "warning",
          "the EC2 metadata service is switched off in this environment, so provider facts are missing",
          "AWS_EC2_METADATA_DISABLED=true switches the EC2 metadata service off for this process: unset it to get "
          "zone, region and instance topology labels"),
    _code(METADATA_NOT_SERVED, "warning",
          "the host is a snapshot or root directory and no metadata server is named for it, so provider facts "
          "are missing",
          "`ray-accel discover --root SNAPSHOT` serves a snapshot's metadata.json; for a plain root directory set "
          "GCE_METADATA_HOST / AWS_EC2_METADATA_SERVICE_ENDPOINT to a server with its metadata"),
    _code(KUBERAY_INDEX_MISMATCH, "error",
          "KubeRay's multi-host indices disagree with the TPU variables, so the slice identity is in doubt",
          "check the RayCluster's worker group (numOfHosts, replicas) against the TPU slice the pod was given; the "
          "message names the label and the variable that disagree (docs/tpu.md)"),
    _code(KUBERAY_INDEX_INVALID, "warning", "a KubeRay multi-host index is not a number, so it is not used",
          "check the downward-API variable or the pod labels file the message names (docs/tpu.md)"),
    _code(TPU_PROCESS_LAYOUT, "error",
          "the GKE TPU webhook's process list does not fit the slice (processes per host, host names)",
          "check the pod's TPU_PROCESS_ADDRESSES / TPU_WORKER_HOSTNAMES as the webhook set them (docs/tpu.md)"),
    _code(RAY_INTERFACE_MISSING, "warning",
          "a private Ray interface this package uses is missing or has another shape; the node starts without it",
          "the message says what the node does without it; upgrade ray-accel-ext to a release that knows this Ray"),
    _code(DEVICE_ISOLATION_OFF, "info", "per-task device isolation for families outside Ray's tree is switched off",
          "unset RAY_ACCEL_DEVICE_ISOLATION (docs/vendors.md) for per-task device ids"),
    _code(DEVICE_ISOLATION_UNAVAILABLE, "warning",
          "tasks of a family outside Ray's tree would not be given their own devices",
          "reinstall ray-accel-ext so that ray_accel_ext_devices.pth is in site-packages (docs/vendors.md, \"What a "
          "backend gets at runtime\")"),
    _code(DEVICE_ISOLATION_FAILED, "error",
          "handing a family's devices on to Ray's workers failed, so its tasks would share every device",
          "a bug: report it with the `ray start` log line and a snapshot from `ray-accel record DIR`; until then a "
          "MIG task can call backends.nvidia_gpu.worker.use_my_partition() (docs/operations.md, \"MIG\")"),
    _code(SKU_UNKNOWN, "warning",
          "devices whose PCI id the SKU database does not know were counted without a known SKU",
          "the devices are counted and scheduled; to give them their SKU, generation and memory, add their PCI id "
          "to an extra SKU file in a directory named by RAY_ACCEL_SKU_DIR or /etc/ray_accel_ext/skus.d (format: "
          "ray_accel_ext/skus/SCHEMA.md; check it with `ray-accel skus --validate FILE`), or upgrade ray-accel-ext"),
    _code(GENERATION_UNSUPPORTED, "warning",
          "devices of a generation this release cannot lay out were counted without their layout",
          "the devices are counted and scheduled with the SKU database's name, but this release cannot lay out "
          "their generation (cores, torus, device nodes): upgrade ray-accel-ext, or correct the `generation` of "
          "the extra SKU file entry the message names"),
    _code(SKU_FILE, "warning", "an extra SKU file was ignored",
          "fix the extra SKU file named in the message (`ray-accel skus --validate FILE` shows the field at fault) "
          "or remove it; until then the node uses the built-in SKU data"),
    _code(LINK_DOWN, "error", "a device-to-device or network link is down",
          "check the link's cabling, switch and firmware (the message names the link); restart the Ray node once "
          "it is up"),
    _code(MIG_ENABLED, "info", "a GPU is in MIG mode and is offered as its MIG instances, not whole",
          "ask for an instance by profile (`resources={'mig-1g.10gb': 1}`); a task asking `num_gpus` never lands on "
          "it. To offer the GPU whole again: `nvidia-smi mig -dci && nvidia-smi mig -dgi && nvidia-smi -i <gpu> -mig 0`, "
          "then restart the Ray node"),
    _code(DEVICE_FAULT, "error", "a device reported a fault after the node started (fatal Xid, double-bit ECC, "
          "pending page retirement or row remap, NVLink down, device lost)",
          "the node was drained (no new accelerator work; running work is not stopped): check `nvidia-smi -q` / the "
          "kernel log (`dmesg | grep -i xid`), reset or replace the GPU, then restart the Ray node"),
    _code(DEVICE_EVENT, "info", "a device reported an application-caused or informational event",
          "nothing to do for the device (the application that caused it sees its own error); the node keeps "
          "taking work"),
    _code(RAY_MISSING, "warning", "Ray is not installed",
          "install Ray: `pip install 'ray-accel-ext[ray]'`"),
    _code(RAY_VERSION, "warning", "the installed Ray is outside the tested range",
          f"install a tested Ray ({tested_range_text()}): `pip install 'ray-accel-ext[ray]'`; the start hook uses "
          "only public Ray inputs and still runs"),
    _code(RAY_FEATURE, "info", "the installed Ray lacks a feature this package can use",
          "upgrade Ray to get the feature (`pip install -U 'ray[default]'`); until then this package works without "
          "it as the message says"),
    _code(NO_ACCELERATORS, "info", "no accelerator found",
          "if this node should have accelerators, check that the VM/pod was given them (KubeRay: resource limits "
          "google.com/tpu, nvidia.com/gpu, aws.amazon.com/neuron) and that /sys is the host's"),
    _code(DEVICE_GONE, "error", "a device left the PCI bus or reset after the node started",
          "a device left the PCI bus or reset after the node started: check the kernel log (`dmesg`: Xid, AER, "
          "link down) and the device; restart the Ray node to relabel it once fixed"),
    _code(DEVICE_ADDED, "warning", "a device appeared after the node started; Ray does not count it yet",
          "restart the Ray node so that its resources and labels count the new device"),
    _code(PROBE_FAILED, "error", "the cluster could not run the node's inventory probe",
          "the node did not run its inventory probe (a zero-CPU task pinned to it): check that the node is alive "
          "and its raylet accepts tasks; run `ray-accel doctor` on the node"),
    _code(START_DEGRADED, "error", "the node started degraded",
          "run `ray-accel doctor` on the node; its `ray start` log has the discovery reasons"),
    *(_code(*entry) for entry in TRUST_CODES),  # noqa: F405
])

# Every code constant is public (vendors and readers name codes by them, never by their spelling).
__all__ += sorted(n for n, v in list(globals().items())
                  if n.isupper() and isinstance(v, str) and v in _BUILTIN and n not in __all__)

_DECLARED: dict[str, ProblemCode] = {}
_LOCK = threading.Lock()


def valid_code(code: object) -> bool:
    """Whether ``code`` is a well-formed code: lowercase words joined by dashes, at most 64 characters."""
    return isinstance(code, str) and len(code) <= 64 and bool(_CODE_RE.match(code))


def declare(code: str, *, severity: str, summary: str, hint: str) -> ProblemCode:
    """Declare a vendor's own problem code (idempotent for the same declaration).

    Raises ``ValueError`` for a malformed code (lowercase words joined by dashes), an unknown
    severity, a code that is built in (a vendor code never shadows one), or a code already declared
    with other words.
    """
    if not valid_code(code):
        raise ValueError(f"problem code {code!r}: expected lowercase words joined by dashes (at most 64 characters)")
    if severity not in SEVERITIES:
        raise ValueError(f"problem code {code!r}: severity {severity!r} is not one of {SEVERITIES}")
    if code in _BUILTIN or code == UNDECLARED:
        raise ValueError(f"problem code {code!r} is built in; a vendor code needs its own name")
    entry = ProblemCode(code, severity, str(summary), str(hint), vendor=True)
    with _LOCK:
        old = _DECLARED.get(code)
        if old is not None and old != entry:
            raise ValueError(f"problem code {code!r} is already declared differently")
        _DECLARED[code] = entry
    return entry


def lookup(code: str) -> ProblemCode | None:
    """The declaration of ``code`` (built in or declared), None when nobody declared it."""
    return _BUILTIN.get(code) or _DECLARED.get(code)


def codes(*, vendor: bool = True) -> list[ProblemCode]:
    """Every built-in code, then (with ``vendor``) every declared one, in declaration order."""
    return [*_BUILTIN.values(), *(_DECLARED.values() if vendor else ())]


# -- from an exception's structure ---------------------------------------------------------------

_TOKEN_REFUSED = (401, 403, 405)
_BY_NAME = {
    "HostReadError": FILE_UNREADABLE,
    "CommandError": TOOL_FAILED,
    "MetadataTimeout": METADATA_TIMEOUT,
    "ProviderTimeout": METADATA_TIMEOUT,
    "MetadataRateLimited": METADATA_RATE_LIMITED,
    "ProviderRateLimited": METADATA_RATE_LIMITED,
    "MetadataServerError": METADATA_ERROR,
    "ProviderServerError": METADATA_ERROR,
    "ProviderError": METADATA_ERROR,
    "MetadataDisabled": METADATA_DISABLED,
    "MetadataNotServed": METADATA_NOT_SERVED,
    "DescriptionError": DESCRIPTION_INVALID,
    "BackendLoadError": BACKEND_LOAD,
    "SkuFileError": SKU_FILE,
}


def code_of(exc: BaseException) -> str:
    """The code of what the host, a tool or a provider raised, from the exception's structure: the
    code its raiser gave it (``RayAccelError.code``), else from its class and fields."""
    own = _own_code(exc)
    if own is not None:
        return own
    if isinstance(exc, HostReadError):
        return FILE_MISSING if exc.reason == "no such file" else FILE_UNREADABLE
    if isinstance(exc, CommandError):
        return TOOL_MISSING if exc.reason == "not installed" else TOOL_FAILED
    if isinstance(exc, MetadataDisabled):
        return METADATA_DISABLED
    if isinstance(exc, MetadataNotServed):
        return METADATA_NOT_SERVED
    if isinstance(exc, ProviderTimeout):
        return METADATA_TIMEOUT
    if isinstance(exc, ProviderRateLimited):
        return METADATA_RATE_LIMITED
    if isinstance(exc, ProviderError):
        if exc.attempts == 0:  # nothing was sent: metadata switched off for this process
            return METADATA_DISABLED
        if exc.status is None:
            return METADATA_UNREACHABLE
        if exc.status == 429:
            return METADATA_RATE_LIMITED
        if exc.status in _TOKEN_REFUSED and str(exc.endpoint).endswith("/api/token"):
            return METADATA_TOKEN_REFUSED
        return METADATA_ERROR
    if isinstance(exc, DescriptionError):
        return DESCRIPTION_INVALID
    if isinstance(exc, BackendLoadError):
        return BACKEND_LOAD
    return DEGRADED


def _own_code(exc: BaseException) -> str | None:
    if not isinstance(exc, RayAccelError):
        return None
    try:
        code = vars(exc).get("code")  # an instance field: never a property of a hostile subclass
    except BaseException:  # noqa: BLE001
        return None
    return code if valid_code(code) else None


def code_of_error_name(name: str, default: str = BACKEND_CRASH) -> str:
    """The code of an error known only by its class name (a worker process's answer)."""
    return _BY_NAME.get(name, default)


# -- explaining ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Explanation:
    """A coded problem in plain words: ``cause`` (its code), severity, summary, fix; ``declared``
    is False for a code nobody declared."""

    cause: str
    severity: str
    summary: str
    fix: str
    declared: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def explain(code: str, hint: str | None = None) -> Explanation:
    """Cause, severity, summary and fix of ``code``; ``hint`` (the problem's own) comes first in
    the fix. An undeclared code is explained as such, with the problem's hint when it has one."""
    entry = lookup(code)
    if entry is None:
        fix = hint or "the backend reported a problem code it did not declare: see the message, and ask its vendor"
        return Explanation(code, "error", f"a problem the backend did not declare ({code!r})", fix, declared=False)
    fix = f"{hint}; {entry.hint}" if hint and hint != entry.hint else entry.hint
    return Explanation(entry.code, entry.severity, entry.summary, fix)


def markdown_table() -> str:
    """The built-in codes as the table of ``docs/problems.md`` (``python -m ray_accel_ext.problems``)."""
    lines = ["| code | severity | meaning | fix |", "|---|---|---|---|"]
    lines += [f"| `{c.code}` | {c.severity} | {c.summary} | {c.hint} |" for c in codes(vendor=False)]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - prints the table for the docs
    print(markdown_table())
