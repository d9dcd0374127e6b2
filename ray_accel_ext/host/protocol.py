"""What a backend may ask of the machine: the :class:`Host` protocol, the discovery deadline, and
the settings every host shares.

Paths are host-absolute strings (``/sys/bus/pci/devices``); implementations resolve symlinks inside
their root (:mod:`ray_accel_ext.host.fs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..bounds import setting

if TYPE_CHECKING:
    from .metadata import MetadataClient

__all__ = [
    "Host",
    "Deadline",
    "budget_from_env",
    "ROOT_ENV",
    "BUDGET_ENV",
    "GCE_METADATA_HOST_ENV",
    "GCE_METADATA_IP_ENV",
    "IMDS_ENDPOINT_ENV",
    "IMDS_MODE_ENV",
    "IMDS_DISABLED_ENV",
    "METADATA_ENV",
    "METADATA_TIMEOUT_ENV",
    "AWS_TOPOLOGY_ENV",
    "EC2_API_ENDPOINT_ENV",
    "TPU_API_ENDPOINT_ENV",
    "DISABLE_ENV",
    "ISOLATION_ENV",
    "CACHE_DIR_ENV",
    "DEFAULT_BUDGET_S",
    "MAX_BUDGET_S",
    "MAX_READ_BYTES",
    "PASSTHROUGH_ENV",
]

# Every environment variable a host passes on is named here once; the modules that read one
# import its name from here (host/ sits below the wings that read them).
ROOT_ENV = "RAY_ACCEL_ROOT"
BUDGET_ENV = "RAY_ACCEL_BUDGET_S"
GCE_METADATA_HOST_ENV = "GCE_METADATA_HOST"
GCE_METADATA_IP_ENV = "GCE_METADATA_IP"
IMDS_ENDPOINT_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
IMDS_MODE_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"
IMDS_DISABLED_ENV = "AWS_EC2_METADATA_DISABLED"
METADATA_ENV = "RAY_ACCEL_METADATA"  # "off": no metadata server is asked
METADATA_TIMEOUT_ENV = "RAY_ACCEL_METADATA_TIMEOUT_S"
AWS_TOPOLOGY_ENV = "RAY_ACCEL_AWS_TOPOLOGY"  # hw/aws_topology.py
EC2_API_ENDPOINT_ENV = "RAY_ACCEL_EC2_API_ENDPOINT"  # hw/aws_topology.py
TPU_API_ENDPOINT_ENV = "RAY_ACCEL_TPU_API_ENDPOINT"  # backends/tpu/api.py
DISABLE_ENV = "RAY_ACCEL_DISABLE"  # node/registry.py
ISOLATION_ENV = "RAY_ACCEL_ISOLATION"  # node/isolate.py
CACHE_DIR_ENV = "RAY_ACCEL_CACHE_DIR"  # hw/topology_cache.py
DEFAULT_BUDGET_S = 3.0
# A budget above this is a typo, not a wish (and 1e10 s overflows Thread.join): refused.
MAX_BUDGET_S = 60.0
MAX_READ_BYTES = 1 << 20
# Variables taken from the real process even when the host is a snapshot: they say how to reach
# the (fake or real) metadata servers and how to run discovery, not what the machine is.
PASSTHROUGH_ENV = (
    GCE_METADATA_HOST_ENV,
    GCE_METADATA_IP_ENV,
    IMDS_ENDPOINT_ENV,
    IMDS_MODE_ENV,
    IMDS_DISABLED_ENV,
    AWS_TOPOLOGY_ENV,
    BUDGET_ENV,
    DISABLE_ENV,
    METADATA_ENV,
    METADATA_TIMEOUT_ENV,
    TPU_API_ENDPOINT_ENV,
    EC2_API_ENDPOINT_ENV,
    ISOLATION_ENV,
    CACHE_DIR_ENV,
)


def budget_from_env(env: Mapping[str, str]) -> float:
    """The discovery budget ``RAY_ACCEL_BUDGET_S`` names (default :data:`DEFAULT_BUDGET_S`; a
    value outside ``(0, MAX_BUDGET_S]`` is refused with a warning and the default used)."""
    return setting(env, BUDGET_ENV, DEFAULT_BUDGET_S, high=MAX_BUDGET_S)


class Deadline:
    """A point in time after which discovery stops waiting for anything.

    The node path resolves its budget once (:meth:`from_env`) and hands this one object to every
    step: the host, discovery, the hook's wait and Ray's own families."""

    __slots__ = ("budget_s", "_end")

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._end = time.monotonic() + budget_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Deadline":
        """A deadline of the budget ``env`` names, starting now."""
        return cls(budget_from_env(env))

    @property
    def end(self) -> float:
        """The deadline as a ``time.monotonic()`` value."""
        return self._end

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def clamp(self, timeout_s: float) -> float:
        """``timeout_s`` cut to what is left of the budget."""
        return min(timeout_s, self.remaining())


@runtime_checkable
class Host(Protocol):
    """What a backend may ask of the machine. Every method is side-effect free."""

    root: Path
    env: Mapping[str, str]
    deadline: Deadline
    live: bool
    metadata: MetadataClient

    def read_text(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str:
        """Contents of a text file; raises HostReadError if missing, unreadable, binary or huge."""

    def read_optional(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str | None:
        """Like read_text, but None when the file does not exist."""

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Sorted entry names; empty when the directory does not exist."""

    def realpath(self, path: str) -> str:
        """Host-absolute canonical path, symlinks resolved inside the root."""

    def run(self, argv: list[str], *, timeout_s: float) -> str:
        """Stdout of a tool at a fixed absolute path, never through a shell; raises CommandError."""

    def library(self, name: str, live_reader: Callable[[], Any]) -> Any:
        """A library reading (``nvml``): recorded on a snapshot, ``live_reader()`` on a live host,
        None where neither exists."""
