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
while it fits in the deadline. A 404 is an answer (the key does not exist): ``None``.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import MetadataDisabled, MetadataRateLimited, MetadataServerError, MetadataTimeout, ProviderError

if TYPE_CHECKING:
    from .host import Deadline

__all__ = ["MetadataClient", "GCE_DEFAULT_HOST", "IMDS_DEFAULT_ENDPOINT", "IMDS_IPV6_ENDPOINT"]

GCE_DEFAULT_HOST = "metadata.google.internal"
IMDS_DEFAULT_ENDPOINT = "http://169.254.169.254"
IMDS_IPV6_ENDPOINT = "http://[fd00:ec2::254]"
IMDS_DISABLED_ENV = "AWS_EC2_METADATA_DISABLED"
IMDS_MODE_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"
DEFAULT_TIMEOUT_S = 0.5
MAX_RETRIES = 2
MAX_BODY_BYTES = 256 * 1024
_TOKEN_TTL_S = "60"
_TOKEN_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")


class MetadataClient:
    """Reads GCE and EC2 metadata for one discovery run. Thread-safe; answers are cached."""

    def __init__(self, env: Mapping[str, str], deadline: Deadline, *, live: bool = True) -> None:
        self._env = env
        self._deadline = deadline
        # A recorded or test host is not this machine: its metadata may only come from an
        # explicitly named endpoint (a loopback fake), never from the real link-local servers.
        self._live = live
        try:
            self.timeout_s = float(env.get("RAY_ACCEL_METADATA_TIMEOUT_S", DEFAULT_TIMEOUT_S))
        except ValueError:
            self.timeout_s = DEFAULT_TIMEOUT_S
        self._cache: dict[tuple[str, str], str | None] = {}
        self._failed: dict[str, ProviderError] = {}
        self._lock = threading.Lock()
        self._imds_token: str | None = None
        self.calls = 0  # HTTP requests actually sent (benchmarks compare this with Ray's)

    # -- endpoints ------------------------------------------------------------------------------

    @property
    def gce_base(self) -> str:
        host = self._env.get("GCE_METADATA_HOST") or self._env.get("GCE_METADATA_IP")
        if not host:
            self._require_live("GCE_METADATA_HOST", GCE_DEFAULT_HOST)
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
        endpoint = self._env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        if not endpoint:
            mode = self._env.get(IMDS_MODE_ENV, "IPv4").strip().lower() or "ipv4"
            if mode not in ("ipv4", "ipv6"):
                raise MetadataServerError(
                    f"{IMDS_MODE_ENV}={self._env[IMDS_MODE_ENV]!r}: must be IPv4 or IPv6",
                    endpoint=IMDS_MODE_ENV,
                    attempts=0,
                )
            endpoint = IMDS_IPV6_ENDPOINT if mode == "ipv6" else IMDS_DEFAULT_ENDPOINT
            self._require_live("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint)
        return endpoint.rstrip("/")

    def _require_live(self, variable: str, default: str) -> None:
        if not self._live:
            raise MetadataServerError(
                f"this host is a snapshot or root directory, not the live machine: its metadata comes only "
                f"from an endpoint named by {variable} (not asking {default})",
                endpoint=default,
                attempts=0,
            )

    # -- public API -----------------------------------------------------------------------------

    def gce(self, path: str) -> str | None:
        """``computeMetadata/v1/<path>`` (``instance/attributes/tpu-env``); None on 404."""
        return self._cached("gce", path, lambda: self._get_gce(path))

    def gce_attribute(self, key: str) -> str | None:
        """An instance attribute (``accelerator-type``, ``tpu-env``, ...); None when absent."""
        return self.gce(f"instance/attributes/{key}")

    def imds(self, path: str) -> str | None:
        """``/latest/meta-data/<path>`` through IMDSv2; None on 404."""
        return self._cached("imds", path, lambda: self._get_imds(path))

    # -- internals ------------------------------------------------------------------------------

    def _cached(self, kind: str, path: str, fetch) -> str | None:
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

    def _get_gce(self, path: str) -> str | None:
        url = f"{self.gce_base}/computeMetadata/v1/{path.lstrip('/')}"
        status, body, _ = self._request("GET", url, {"Metadata-Flavor": "Google"})
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
        self, method: str, url: str, headers: dict[str, str], *, not_found_ok: bool = True
    ) -> tuple[int, str | None, dict[str, str]]:
        parts = urlsplit(url)
        attempts = 0
        while True:
            attempts += 1
            timeout = self._deadline.clamp(self.timeout_s)
            if timeout <= 0:
                raise MetadataTimeout(
                    f"{method} {url}: discovery budget spent", endpoint=url, attempts=attempts - 1
                )
            try:
                status, body, resp_headers = self._once(method, parts, headers, timeout)
            except (socket.timeout, TimeoutError):
                raise MetadataTimeout(
                    f"{method} {url}: no answer within {timeout:.2f}s", endpoint=url, attempts=attempts
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                raise MetadataServerError(
                    f"{method} {url}: {type(exc).__name__}: {exc}", endpoint=url, attempts=attempts
                ) from None
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

    def _once(self, method, parts, headers, timeout) -> tuple[int, str, dict[str, str]]:
        self.calls += 1
        end = time.monotonic() + timeout
        https = parts.scheme == "https"
        conn_cls = http.client.HTTPSConnection if https else http.client.HTTPConnection
        # The port always explicit: without one, http.client reads the last group of an IPv6
        # literal ("fd00:ec2::254") as the port number.
        conn = conn_cls(parts.hostname, parts.port or (443 if https else 80), timeout=timeout)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request(method, path or "/", headers=headers)
            resp = conn.getresponse()
            raw = _read_body(resp, conn, end)
            declared = resp.getheader("Content-Length")
            if declared is not None and declared.isdigit() and len(raw) < int(declared):
                raise http.client.HTTPException(f"truncated answer: {len(raw)} of {declared} bytes")
            if 200 <= resp.status < 300:
                if "html" in (resp.getheader("Content-Type") or "").lower():
                    raise http.client.HTTPException("an HTML page instead of a metadata value (proxy or captive portal?)")
                if b"\x00" in raw:
                    raise http.client.HTTPException("binary answer (NUL bytes) where text was expected")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise http.client.HTTPException("answer is not valid UTF-8 text") from None
            else:
                text = raw.decode("utf-8", "replace")
            return resp.status, text, {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()


def _read_body(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection, end: float) -> bytes:
    """The body, at most ``MAX_BODY_BYTES``, read before ``end``: a server that sends a byte now
    and then never trips the per-read socket timeout, so the whole read has one."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise socket.timeout("body still arriving when the call's time was up")
        if conn.sock is not None:
            conn.sock.settimeout(left)
        chunk = resp.read1(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise http.client.HTTPException(f"answer larger than {MAX_BODY_BYTES} bytes")


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # HTTP-date form: treat as no hint
    return seconds if seconds >= 0 else None
