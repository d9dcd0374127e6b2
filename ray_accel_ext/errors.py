"""Error taxonomy.

The classes separate the layers an operator must tell apart when a node comes up degraded or a
placement fails:

* ``DiscoveryError``: the host itself (a sysfs file missing, corrupt or unreadable, a tool that
  hangs); carries the host path or command.
* ``ProviderError``: cloud metadata and provider APIs (timeout, HTTP 429 with ``Retry-After``,
  5xx); carries endpoint, status and retry hint.
* ``SchedulingError``: placement (no domain free, a request that would split a domain); carries
  what was asked and what was tried.
* ``RuntimeTopologyError``: worker-side questions asked outside a task, or about devices the
  worker was not given.
* ``BackendLoadError`` / ``DescriptionError``: the extension point (a broken or duplicate
  backend, a description that does not validate; the latter names the field path).

Every error has ``to_dict()`` so telemetry and ``ray-accel doctor`` can report it as data.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "RayAccelError",
    "DiscoveryError",
    "HostReadError",
    "CommandError",
    "ProviderError",
    "ProviderTimeout",
    "ProviderRateLimited",
    "ProviderServerError",
    "MetadataTimeout",
    "MetadataRateLimited",
    "MetadataServerError",
    "ClusterUnreachable",
    "MetadataDisabled",
    "MetadataNotServed",
    "SchedulingError",
    "NoDomainAvailable",
    "WouldSplitDomain",
    "RuntimeTopologyError",
    "BackendLoadError",
    "DescriptionError",
    "TopologyStringError",
    "RayVersionError",
]


class RayAccelError(Exception):
    """Base class of every error this package raises on purpose. ``code``: the problem code its
    raiser gives it (:mod:`ray_accel_ext.problems`), when the class and fields alone do not say it."""

    layer = "internal"

    def __init__(self, message: str, *, code: str | None = None, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "layer": self.layer, "message": self.message, **self.data}


# -- hardware discovery -------------------------------------------------------------------------


class DiscoveryError(RayAccelError):
    """Something on the host could not be read or made sense of."""

    layer = "discovery"


class HostReadError(DiscoveryError):
    """A host file or directory is missing where required, unreadable, corrupt, or loops."""

    def __init__(self, path: str, reason: str, *, code: str | None = None) -> None:
        super().__init__(f"{path}: {reason}", code=code, path=path, reason=reason)
        self.path = path
        self.reason = reason


class CommandError(DiscoveryError):
    """An external tool was missing, timed out, failed, or printed something unparsable."""

    def __init__(self, argv: list[str] | tuple[str, ...], reason: str, *, code: str | None = None) -> None:
        super().__init__(f"{argv[0]}: {reason}", code=code, argv=list(argv), reason=reason)
        self.argv = list(argv)
        self.reason = reason


class TopologyStringError(DiscoveryError, ValueError):
    """A malformed accelerator-type or topology string (``v6e-1x``, ``4x4x``)."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"malformed topology string {text!r}: {reason}", text=text, reason=reason)
        self.text = text


# -- provider / metadata ------------------------------------------------------------------------


class ProviderError(RayAccelError):
    """A cloud metadata server or provider API did not give a usable answer."""

    layer = "provider"

    def __init__(
        self,
        message: str,
        *,
        endpoint: str,
        status: int | None = None,
        retry_after_s: float | None = None,
        attempts: int = 1,
        code: str | None = None,
    ) -> None:
        super().__init__(
            message, code=code, endpoint=endpoint, status=status, retry_after_s=retry_after_s, attempts=attempts
        )
        self.endpoint = endpoint
        self.status = status
        self.retry_after_s = retry_after_s
        self.attempts = attempts

    def reason(self, *, request: bool = True) -> str:
        """``<Class>: <message>`` for a problem line, with the server's address cut out (it holds a
        per-run port in tests and says nothing an operator needs). ``request=False`` also drops a
        leading ``GET <url>: `` where the caller names the keys itself."""
        message = self.message
        if self.endpoint and not request:
            for method in ("GET ", "PUT "):
                if message.startswith(f"{method}{self.endpoint}: "):
                    message = message[len(method) + len(self.endpoint) + 2 :]
        if self.endpoint:
            try:
                parts = urlsplit(self.endpoint)
            except ValueError:  # a malformed endpoint setting ('http://[::1'): nothing to cut out
                parts = urlsplit("")
            if parts.scheme and parts.netloc:
                message = message.replace(f"{parts.scheme}://{parts.netloc}", "")
        return f"{type(self).__name__}: {message}"


class ProviderTimeout(ProviderError):
    """A provider API (EC2 ``DescribeInstanceTopology``, Cloud TPU API) did not answer in time."""


class ProviderRateLimited(ProviderError):
    """A provider API throttled the call (HTTP 429, ``RequestLimitExceeded``)."""


class ProviderServerError(ProviderError):
    """A provider API refused the call, failed (5xx), or could not be reached."""


class MetadataTimeout(ProviderTimeout):
    """No answer from a metadata server within the per-call timeout or the discovery budget."""


class MetadataRateLimited(ProviderRateLimited):
    """HTTP 429 from a metadata server; ``retry_after_s`` holds its ``Retry-After`` when sent."""


class MetadataServerError(ProviderServerError):
    """HTTP 5xx, a refused token, a reset connection, or a malformed metadata answer."""


class MetadataDisabled(ProviderError):
    """The environment switched the metadata server off (``AWS_EC2_METADATA_DISABLED=true``):
    nothing was sent."""


class MetadataNotServed(MetadataServerError):
    """The host is a snapshot or root directory and no metadata server is named for it (this
    machine's own is never asked for another host's facts): nothing was sent."""


# -- scheduling ---------------------------------------------------------------------------------


class SchedulingError(RayAccelError):
    """A placement request could not be satisfied.

    Data (``ray_accel_ext.placement``): ``request`` (every step asked for), ``attempts`` (one
    entry per step and domain tried: step, level, domain, outcome, reason, waited_s), ``wait_s``;
    from the domain chooser also ``reason`` (``busy``, ``tried``, ``no-match``, ``too-large``,
    ``incomplete``), ``retryable`` and the inventory facts behind it (matching nodes/domains,
    largest matching domain, busy domains).
    """

    layer = "scheduling"

    @property
    def attempts(self) -> list[dict[str, Any]]:
        """What was tried, in order, and why each failed."""
        return list(self.data.get("attempts") or [])

    @property
    def retryable(self) -> bool:
        """True when waiting can help (fitting domains exist but are held by others)."""
        return bool(self.data.get("retryable", False))


class NoDomainAvailable(SchedulingError):
    """No domain of the requested level has enough free capacity within the deadline (fitting
    domains exist but are held, or their placement group did not become ready in time)."""


class WouldSplitDomain(SchedulingError):
    """The request can only be met by spreading one collective group over several domains: it is
    larger than any (complete) matching domain, or no node matches at all; waiting cannot help."""


# -- runtime ------------------------------------------------------------------------------------


class ClusterUnreachable(RayAccelError):
    """No Ray cluster answered at the given address."""

    layer = "runtime"


class RuntimeTopologyError(RayAccelError):
    """A worker-side topology call was made where it cannot be answered."""

    layer = "runtime"


# -- extension point ----------------------------------------------------------------------------


class BackendLoadError(RayAccelError):
    """A backend entry point could not be loaded, is malformed, or is registered twice."""

    layer = "extension"


class DescriptionError(RayAccelError, ValueError):
    """A node description does not validate; ``path`` names the field (``devices[3].numa_node``)."""

    layer = "extension"

    def __init__(self, message: str, path: str = "", *, code: str | None = None) -> None:
        full = f"{path}: {message}" if path else message
        super().__init__(full, code=code, path=path)
        self.path = path


class RayVersionError(RayAccelError):
    """The installed Ray is outside the range a Ray-internal feature was tested with."""

    layer = "extension"
