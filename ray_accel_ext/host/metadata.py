"""Cloud metadata clients with per-call timeouts, bounded retries and one shared deadline.

* GCE: ``http://metadata.google.internal/computeMetadata/v1/...`` with ``Metadata-Flavor: Google``;
  ``GCE_METADATA_HOST`` (host[:port], the google-auth convention) or ``GCE_METADATA_IP`` redirect it.
* EC2 IMDSv2: ``PUT /latest/api/token`` first, then GETs with the token;
  ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (botocore convention) redirects it.

Ray's own TPU manager calls the metadata server up to 9 times per node start without a timeout
(see ``reference/ray-2.60.md`` section 8.9). Here every answer is cached for the life of the client
(one discovery run), each call is bounded by ``RAY_ACCEL_METADATA_TIMEOUT_S`` (default 0.5 s) and
by the discovery deadline, and 429/5xx are retried at most twice, honouring ``Retry-After`` only
while it fits in the deadline. A 404 is an answer (the key does not exist): ``None``.

Each call is one bounded exchange (:mod:`.http`): whatever the server sends (headers a byte at a
time, ``100 Continue`` without end, a huge body), the call ends within its timeout, so no thread
making it outlives the budget. A redirect is an error, never followed: metadata comes from the
named server only.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import (
    MetadataRateLimited,
    MetadataServerError,
    MetadataTimeout,
    ProviderError,
)
from ..values import setting
from .http import ProtocolError, exchange

if TYPE_CHECKING:
    from .fs import Deadline

__all__ = ["MetadataClient", "GCE_DEFAULT_HOST", "IMDS_DEFAULT_ENDPOINT"]

GCE_DEFAULT_HOST = "metadata.google.internal"
IMDS_DEFAULT_ENDPOINT = "http://169.254.169.254"
DEFAULT_TIMEOUT_S = 0.5
MAX_TIMEOUT_S = 30.0
TIMEOUT_ENV = "RAY_ACCEL_METADATA_TIMEOUT_S"
MAX_RETRIES = 2
MAX_BODY_BYTES = 256 * 1024
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
        endpoint = self._env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        if not endpoint:
            self._require_live("AWS_EC2_METADATA_SERVICE_ENDPOINT", IMDS_DEFAULT_ENDPOINT)
            endpoint = IMDS_DEFAULT_ENDPOINT
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

    def _once(self, method, parts, headers, timeout) -> tuple[int, str, dict[str, str]]:
        self.calls += 1
        resp = exchange(method, parts, headers, end=time.monotonic() + timeout, max_body=MAX_BODY_BYTES)
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
