"""Problem codes of the trust boundaries: snapshots are data, third-party answers and
distributions are bounded, settings and host directories are read within bounds.

:mod:`ray_accel_ext.problems` owns every code and re-exports these constants; they live here so
that module stays one job long. Each entry is ``(code, severity, summary, fix)``.
"""

from __future__ import annotations

__all__ = [  # noqa: RUF022 - in the order below
    "TRUST_CODES", "TOOL_NOT_RECORDED", "RECORDING_INVALID", "SNAPSHOT_ENV_INVALID", "DECLARATION_INVALID",
    "PREFIX_RESERVED", "VALUE_BOUNDED", "ANSWER_TOO_LARGE", "LABELS_CUT", "DISTRIBUTION_SKIPPED", "ENTRY_POINT_REFUSED",
    "BACKEND_NOT_STARTED", "ENDPOINT_MALFORMED", "ENTRIES_DANGLING", "ENTRIES_CAPPED",
]

TOOL_NOT_RECORDED = "tool-not-recorded"
RECORDING_INVALID = "recording-invalid"
SNAPSHOT_ENV_INVALID = "snapshot-env-invalid"
DECLARATION_INVALID = "declaration-invalid"
PREFIX_RESERVED = "prefix-reserved"
VALUE_BOUNDED = "value-bounded"
ANSWER_TOO_LARGE = "answer-too-large"
LABELS_CUT = "labels-cut"
DISTRIBUTION_SKIPPED = "distribution-skipped"
ENTRY_POINT_REFUSED = "entry-point-refused"
BACKEND_NOT_STARTED = "backend-not-started"
ENDPOINT_MALFORMED = "endpoint-malformed"
ENTRIES_DANGLING = "entries-dangling"
ENTRIES_CAPPED = "entries-capped"

TRUST_CODES: tuple[tuple[str, str, str, str], ...] = (
    (TOOL_NOT_RECORDED, "error",
     "a snapshot has no recording of a tool discovery runs; under a root other than / no program is executed",
     "record the snapshot again with `ray-accel record DIR` on a host where the tool is installed (its output goes "
     "to commands/<tool>.json); a program inside a snapshot is never run"),
    (RECORDING_INVALID, "error", "a recording in the snapshot (a tool's output, a library reading) is unusable",
     "record the snapshot again with `ray-accel record DIR`; the message names the recording"),
    (SNAPSHOT_ENV_INVALID, "error",
     "the snapshot's env.json is not a JSON object of variables; discovery ran without the recorded environment",
     "record the snapshot again with `ray-accel record DIR`, or fix env.json: one JSON object of string variables"),
    (DECLARATION_INVALID, "error",
     "a backend's declarations (name, resource_name, label_prefix, variable names) are unusable; its answer is "
     "refused",
     "a bug in the backend (checked again where the answer is used: a value that changes after validation is "
     "refused too): report it to its vendor, or switch it off with RAY_ACCEL_DISABLE=<name>"),
    (PREFIX_RESERVED, "error",
     "a backend's label_prefix is reserved (ray.io, rayaccel.io and, for a third-party backend, *.rayaccel.io)",
     "the backend must use a label prefix of its vendor's own domain: report it to its vendor, or switch it off "
     "with RAY_ACCEL_DISABLE=<name>"),
    (VALUE_BOUNDED, "error",
     "a value is beyond what the hardware or Ray can hold (a NUMA node, a CPU list, a resource quantity); it is "
     "left out",
     "the message names the file or field: a corrupt host file (check the kernel and firmware) or a bug in the "
     "backend that answered it"),
    (ANSWER_TOO_LARGE, "error",
     "a backend answered more entries (devices, links, NICs, attributes) than any node has; its answer is refused",
     "a bug in the backend: report it to its vendor, or switch it off with RAY_ACCEL_DISABLE=<name>"),
    (LABELS_CUT, "error",
     "the node's labels passed what one node publishes (count or bytes); the attributes named were left out",
     "the backend answered too many or too long attributes: report it to its vendor; the devices are kept"),
    (DISTRIBUTION_SKIPPED, "error",
     "an installed distribution's metadata (METADATA, entry_points.txt) cannot be read; its entry points are not "
     "loaded",
     "reinstall or remove the distribution named (`pip install --force-reinstall <dist>`); the other "
     "distributions' backends are loaded. A broken entry_points.txt also stops the `ray` command before any hook "
     "(pydantic's plugin scan): until it is fixed, start Ray with PYDANTIC_DISABLE_PLUGINS=__all__ (docs/vendors.md)"),
    (ENTRY_POINT_REFUSED, "error",
     "a third-party entry point has the name of an in-tree backend; the in-tree backend keeps the name",
     "the third-party package must use a name of its own: report it to its vendor, or uninstall it"),
    (BACKEND_NOT_STARTED, "error",
     "a third-party backend was not started: a node runs a bounded number of backend worker processes within its "
     "budget",
     "uninstall the backends this node does not need, or switch them off with RAY_ACCEL_DISABLE=<name>"),
    (ENDPOINT_MALFORMED, "error",
     "a metadata endpoint setting is malformed, so provider facts are missing (the devices are kept)",
     "fix or unset GCE_METADATA_HOST / AWS_EC2_METADATA_SERVICE_ENDPOINT (a host, host:port or URL)"),
    (ENTRIES_DANGLING, "warning",
     "a host directory holds many dangling entries (devices that went away); they are left out",
     "nothing is lost; the entries point at devices that are gone (hot-unplug, SR-IOV teardown): check the kernel "
     "log if they should be there"),
    (ENTRIES_CAPPED, "error",
     "a host directory holds more entries than any machine has; only the first ones were read",
     "check what fills the directory named (a bind mount, a broken driver); devices past the cap are not counted"),
)
