"""Cloud metadata clients with per-call timeouts, bounded retries and one shared deadline.

* GCE: ``http://metadata.google.internal/computeMetadata/v1/...`` with ``Metadata-Flavor: Google``;
  ``GCE_METADATA_HOST`` (host[:port], the google-auth convention) or ``GCE_METADATA_IP`` redirect it.
* EC2 IMDSv2: ``PUT /latest/api/token`` first, then GETs with the token. The botocore variables
  apply, with botocore's precedence (``botocore/utils.py`` ``InstanceMetadataFetcher``):
  ``AWS_EC2_METADATA_DISABLED=true`` sends nothing (every read is a ``MetadataDisabled`` error),
  ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` redirects it, else
  ``AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6`` picks ``http://[fd00:ec2::254]`` (AWS "Use the
  Instance Metadata Service", IPv6 endpoint on Nitro instances).

Ray's own TPU manager calls the metadata server up to 9 times per node start without a timeout
(see ``reference/ray-2.60.md`` section 8.9). Here every answer is cached for the life of the client
(one discovery run), each call is bounded by ``RAY_ACCEL_METADATA_TIMEOUT_S`` (default 0.5 s) and
by the discovery deadline, and 429/5xx are retried at most twice, honouring ``Retry-After`` only
while it fits in the deadline. A 404 is an answer (the key does not exist): ``None``. With
``RAY_ACCEL_METADATA=off`` nothing is asked (every call is a :class:`MetadataServerError`).

GCE ``instance/...`` keys are all answered from **one** request: the instance directory read
recursively (``GET /computeMetadata/v1/instance/?recursive=true``, JSON; "Query metadata
recursively", https://cloud.google.com/compute/docs/metadata/querying-metadata). In that JSON the
server's own keys are camelCase (``machine-type`` -> ``machineType``), numbered directories are
arrays (``network-interfaces/0/ip`` -> ``networkInterfaces[0].ip``) and numbers are JSON numbers
(``id``), while custom attributes keep their names (``attributes["tpu-env"]``); :func:`instance_value`
maps a plain key onto it. The answer is bounded by ``MAX_RECURSIVE_BYTES`` (all of a VM's metadata
entries together may hold 512 KB, https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations),
and its JSON by depth too (:func:`ray_accel_ext.bounds.bounded_json`).

Each call is one bounded exchange (:mod:`.http`): whatever the server sends (headers a byte at a
time, ``100 Continue`` without end, a huge body), the call ends within its timeout, so no thread
making it outlives the budget. A redirect is an error, never followed: metadata comes from the
named server only. Numeric settings and ``Retry-After`` take ASCII digits only.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..bounds import bounded_json, setting
from ..errors import (
    MetadataDisabled,
    MetadataNotServed,
    MetadataRateLimited,
    MetadataServerError,
    MetadataTimeout,
    ProviderError,
)
from ..problems import ENDPOINT_MALFORMED
from .http import ProtocolError, exchange
from .protocol import (
    GCE_METADATA_HOST_ENV,
    GCE_METADATA_IP_ENV,
    IMDS_DISABLED_ENV,
    IMDS_ENDPOINT_ENV,
    IMDS_MODE_ENV,
    METADATA_ENV,
)
from .protocol import METADATA_TIMEOUT_ENV as TIMEOUT_ENV

if TYPE_CHECKING:
    from .fs import Deadline

__all__ = ["MetadataClient", "GCE_DEFAULT_HOST", "IMDS_DEFAULT_ENDPOINT", "IMDS_IPV6_ENDPOINT", "instance_value", "camel", "NAME_DIRS"]

GCE_DEFAULT_HOST = "metadata.google.internal"
IMDS_DEFAULT_ENDPOINT = "http://169.254.169.254"
METADATA_NOT_SERVED = "metadata not served"
IMDS_IPV6_ENDPOINT = "http://[fd00:ec2::254]"
DEFAULT_TIMEOUT_S = 0.5
MAX_TIMEOUT_S = 30.0
MAX_RETRIES = 2
MAX_BODY_BYTES = 256 * 1024
MAX_RECURSIVE_BYTES = 1024 * 1024
INSTANCE_DIR = "instance/"
# Directories whose entries are names, kept as they are in the recursive JSON (custom attributes,
# service-account names); every other key there is camelCase.
NAME_DIRS = ("attributes", "service-accounts")
# Endpoints under instance/ that a recursive listing does not contain (they mint a value per call).
_NOT_IN_LISTING = ("instance/service-accounts/", "instance/guest-attributes/")
_TOKEN_TTL_S = "60"
_TOKEN_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")
_RETRY_AFTER_RE = re.compile(r"[0-9]{1,6}(\.[0-9]{1,3})?", re.ASCII)


class MetadataClient:
    """Reads GCE and EC2 metadata for one discovery run. Thread-safe; answers are cached."""

    def __init__(self, env: Mapping[str, str], deadline: Deadline, *, live: bool = True) -> None:
        self._env = env
        self._deadline = deadline
        # A recorded or test host is not this machine: its metadata may only come from an
        # explicitly named endpoint (a loopback fake), never from the real link-local servers.
        self._live = live
        self.timeout_s = setting(env, TIMEOUT_ENV, DEFAULT_TIMEOUT_S, high=MAX_TIMEOUT_S)
        self._cache: dict[tuple[str, str], str | None] = {}
        self._failed: dict[str, ProviderError] = {}
        self._lock = threading.Lock()
        self._imds_token: str | None = None
        self._instance: dict[str, object] | None = None
        # RAY_ACCEL_METADATA=off: never ask (worker processes describing their node again).
        self.enabled = env.get(METADATA_ENV, "").strip().lower() not in ("off", "0", "false", "no")
        self.calls = 0  # HTTP requests actually sent (benchmarks compare this with Ray's)

    # -- endpoints ------------------------------------------------------------------------------

    @property
    def gce_base(self) -> str:
        host = self._env.get(GCE_METADATA_HOST_ENV) or self._env.get(GCE_METADATA_IP_ENV)
        if not host:
            self._require_live(GCE_METADATA_HOST_ENV, GCE_DEFAULT_HOST)
            host = GCE_DEFAULT_HOST
        return host if "://" in host else f"http://{host}"

    @property
    def imds_base(self) -> str:
        if self._env.get(IMDS_DISABLED_ENV, "").strip().lower() == "true":
            raise MetadataDisabled(
                f"EC2 instance metadata is switched off ({IMDS_DISABLED_ENV}={self._env[IMDS_DISABLED_ENV]}); "
                "zone, region and instance id stay unknown",
                endpoint=IMDS_DISABLED_ENV,
                attempts=0,
            )
        endpoint = self._env.get(IMDS_ENDPOINT_ENV)
        if not endpoint:
            mode = self._env.get(IMDS_MODE_ENV, "IPv4").strip().lower() or "ipv4"
            if mode not in ("ipv4", "ipv6"):
                raise MetadataServerError(
                    f"{IMDS_MODE_ENV}={self._env[IMDS_MODE_ENV]!r}: must be IPv4 or IPv6",
                    endpoint=IMDS_MODE_ENV,
                    attempts=0,
                )
            endpoint = IMDS_IPV6_ENDPOINT if mode == "ipv6" else IMDS_DEFAULT_ENDPOINT
            self._require_live(IMDS_ENDPOINT_ENV, endpoint)
        return endpoint.rstrip("/")

    def _require_live(self, variable: str, default: str) -> None:
        if not self._live:
            # The host, not the URL: ProviderError.reason() cuts the endpoint's URL out of its message.
            server = urlsplit(default).netloc or default
            raise MetadataNotServed(
                f"{METADATA_NOT_SERVED}: this host is a snapshot or root directory, not the live machine, so this "
                f"machine's own metadata server ({server}) is not asked; set {variable} to a server with the host's "
                "metadata "
                "(`ray-accel discover --root SNAPSHOT` and `ray-accel demo` serve a snapshot's metadata.json "
                "themselves)",
                endpoint=default,
                attempts=0,
            )

    # -- public API -----------------------------------------------------------------------------

    def gce(self, path: str) -> str | None:
        """``computeMetadata/v1/<path>`` (``instance/attributes/tpu-env``); None on 404.

        ``instance/...`` keys come from the one recursive read of :meth:`gce_instance`."""
        path = path.lstrip("/")
        if path.startswith(INSTANCE_DIR) and not path.startswith(_NOT_IN_LISTING):
            return instance_value(self.gce_instance(), path)
        return self._cached("gce", path, lambda: self._get_gce(path))

    def gce_instance(self) -> Mapping[str, object]:
        """The whole ``instance/`` directory, read once (``?recursive=true``) and cached."""
        with self._lock:
            if self._instance is not None:
                return self._instance
        text = self._cached("gce", INSTANCE_DIR, lambda: self._get_gce(f"{INSTANCE_DIR}?recursive=true",
                                                                         max_bytes=MAX_RECURSIVE_BYTES))
        url = f"{self.gce_base}/computeMetadata/v1/{INSTANCE_DIR}?recursive=true"
        try:
            doc = bounded_json(text or "{}", what="JSON", max_bytes=MAX_RECURSIVE_BYTES)
        except ValueError as exc:
            raise MetadataServerError(f"GET {url}: the recursive answer is not JSON ({exc})", endpoint=url) from None
        if not isinstance(doc, dict):
            raise MetadataServerError(f"GET {url}: the recursive answer is not a JSON object", endpoint=url)
        with self._lock:
            self._instance = doc
        return doc

    def gce_attribute(self, key: str) -> str | None:
        """An instance attribute (``accelerator-type``, ``tpu-env``, ...); None when absent."""
        return self.gce(f"instance/attributes/{key}")

    def imds(self, path: str) -> str | None:
        """``/latest/meta-data/<path>`` through IMDSv2; None on 404."""
        return self._cached("imds", path, lambda: self._get_imds(path))

    # -- internals ------------------------------------------------------------------------------

    def _cached(self, kind: str, path: str, fetch) -> str | None:
        if not self.enabled:
            raise MetadataServerError(f"{kind} metadata {path}: not asked (RAY_ACCEL_METADATA=off)", endpoint=path, attempts=0)
        key = (kind, path)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            # Once a server has timed out, later keys fail fast instead of spending the budget again.
            if kind in self._failed and isinstance(self._failed[kind], MetadataTimeout):
                raise self._failed[kind]
        try:
            value = fetch()
        except ProviderError as exc:
            with self._lock:
                self._failed[kind] = exc
            raise
        with self._lock:
            self._cache[key] = value
        return value

    def _get_gce(self, path: str, *, max_bytes: int = MAX_BODY_BYTES) -> str | None:
        url = f"{self.gce_base}/computeMetadata/v1/{path.lstrip('/')}"
        status, body, _ = self._request("GET", url, {"Metadata-Flavor": "Google"}, max_bytes=max_bytes)
        return body

    def _get_imds(self, path: str) -> str | None:
        if self._imds_token is None:
            token_url = f"{self.imds_base}/latest/api/token"
            status, body, _ = self._request(
                "PUT", token_url, {"X-aws-ec2-metadata-token-ttl-seconds": _TOKEN_TTL_S}, not_found_ok=False
            )
            if not body:
                raise MetadataServerError("IMDS returned an empty token", endpoint=token_url, status=status)
            if not _TOKEN_RE.match(body.strip()):
                # It goes into a header: control characters or a page of HTML must not reach it.
                raise MetadataServerError("IMDS returned a malformed token", endpoint=token_url, status=status)
            self._imds_token = body.strip()
        url = f"{self.imds_base}/latest/meta-data/{path.lstrip('/')}"
        _, body, _ = self._request("GET", url, {"X-aws-ec2-metadata-token": self._imds_token})
        return body

    def _request(
        self, method: str, url: str, headers: dict[str, str], *, not_found_ok: bool = True,
        max_bytes: int = MAX_BODY_BYTES,
    ) -> tuple[int, str | None, dict[str, str]]:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
        except ValueError as exc:  # GCE_METADATA_HOST='::1', '[::1', 'x:abc', '127.0.0.1:99999'
            raise MetadataServerError(
                f"{method} {url[:200]}: malformed endpoint (GCE_METADATA_HOST or AWS_EC2_METADATA_SERVICE_ENDPOINT: {exc})",
                endpoint=url[:200], attempts=0, code=ENDPOINT_MALFORMED) from None
        attempts = 0
        while True:
            attempts += 1
            timeout = self._deadline.clamp(self.timeout_s)
            if timeout <= 0:
                raise MetadataTimeout(
                    f"{method} {url}: discovery budget spent", endpoint=url, attempts=attempts - 1
                )
            try:
                status, body, resp_headers = self._once(method, parts, headers, timeout, max_bytes)
            except TimeoutError as exc:
                detail = "" if str(exc) in ("no answer", "timed out", "") else f" ({exc})"
                raise MetadataTimeout(
                    f"{method} {url}: no {'complete ' if detail else ''}answer within {timeout:.2f}s{detail}",
                    endpoint=url, attempts=attempts,
                ) from None
            except (OSError, ProtocolError) as exc:
                raise MetadataServerError(
                    f"{method} {url}: {type(exc).__name__}: {exc}", endpoint=url, attempts=attempts
                ) from None
            if 300 <= status < 400:
                where = resp_headers.get("location", "")[:200]
                raise MetadataServerError(
                    f"{method} {url}: HTTP {status} redirect{' to ' + where if where else ''} refused "
                    "(metadata is read from the named server only)",
                    endpoint=url, status=status, attempts=attempts,
                )
            if 200 <= status < 300:
                return status, body, resp_headers
            if status == 404 and not_found_ok:
                return status, None, resp_headers
            retry_after = _retry_after(resp_headers.get("retry-after"))
            retryable = status == 429 or status >= 500
            wait = retry_after if retry_after is not None else 0.05 * (2 ** (attempts - 1))
            if retryable and attempts <= MAX_RETRIES and wait < self._deadline.remaining():
                time.sleep(wait)
                continue
            cls = MetadataRateLimited if status == 429 else MetadataServerError
            hint = f", Retry-After {retry_after:g}s" if retry_after is not None else ""
            raise cls(
                f"{method} {url}: HTTP {status}{hint} after {attempts} attempt(s)",
                endpoint=url,
                status=status,
                retry_after_s=retry_after,
                attempts=attempts,
            )

    def _once(self, method, parts, headers, timeout, max_bytes=MAX_BODY_BYTES) -> tuple[int, str, dict[str, str]]:
        self.calls += 1
        resp = exchange(method, parts, headers, end=time.monotonic() + timeout, max_body=max_bytes)
        raw = resp.body
        if 200 <= resp.status < 300:
            if "html" in resp.headers.get("content-type", "").lower():
                raise ProtocolError("an HTML page instead of a metadata value (proxy or captive portal?)")
            if b"\x00" in raw:
                raise ProtocolError("binary answer (NUL bytes) where text was expected")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("answer is not valid UTF-8 text") from None
        else:
            text = raw.decode("utf-8", "replace")
        return resp.status, text, resp.headers


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (ASCII digits only); None for the HTTP-date form or junk."""
    if value is None or not _RETRY_AFTER_RE.fullmatch(value.strip()):
        return None
    return float(value.strip())


def camel(segment: str) -> str:
    """A metadata server key as the recursive JSON spells it (``machine-type`` -> ``machineType``)."""
    head, *rest = segment.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def instance_value(doc: Mapping[str, object], path: str) -> str | None:
    """The plain-GET answer for ``path`` (``instance/attributes/tpu-env``) out of the recursive
    ``instance/`` document, None where the key does not exist (a plain GET would answer 404).

    Custom attributes keep their names; every other key is camelCase; a number indexes an
    array; a JSON number or boolean reads as its text (``instance/id`` -> ``"6331980990053453154"``).
    """
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts or parts[0] != "instance":
        return None
    node: object = doc
    parent = "instance"
    for part in parts[1:]:
        if isinstance(node, list):
            if not (part.isascii() and part.isdigit()) or int(part) >= len(node):
                return None
            node = node[int(part)]
        elif isinstance(node, Mapping):
            key = part if parent in NAME_DIRS else camel(part)
            if key not in node:
                return None
            node = node[key]
        else:
            return None
        parent = part
    if isinstance(node, bool):
        return "TRUE" if node else "FALSE"
    if isinstance(node, (int, float)):
        return str(node)
    if isinstance(node, str):
        return node
    return None  # a directory: callers ask for values
