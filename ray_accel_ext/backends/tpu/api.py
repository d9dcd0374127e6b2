"""Cloud TPU API lookups for the TPU backend (optional extra ``[gcp]``: ``google-cloud-tpu``).

Used only when metadata left the slice incomplete (no node name, hosts, type or topology). Without
the extra installed the feature is silently unavailable: :func:`enabled` is False and nothing is
imported. ``google-cloud-tpu`` is imported lazily, on first use.

Endpoint: ``RAY_ACCEL_TPU_API_ENDPOINT`` (``http://127.0.0.1:PORT`` for a loopback fake, with
anonymous credentials) or, on a live host, the public endpoint with Application Default
Credentials. A snapshot host without the variable never calls the real API.

Every call is bounded by ``RAY_ACCEL_TPU_API_TIMEOUT_S`` (default 1 s) and by the discovery
deadline; HTTP 429 and 5xx are retried at most twice, waiting ``Retry-After`` only while it fits
in the deadline, and otherwise raised as :class:`~ray_accel_ext.errors.ProviderError` carrying the
status and the server's ``Retry-After``.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...errors import ProviderError
from ...host.protocol import TPU_API_ENDPOINT_ENV as ENDPOINT_ENV

if TYPE_CHECKING:
    from ...host import Deadline

__all__ = ["ENDPOINT_ENV", "TpuNode", "available", "enabled", "find_node"]

TIMEOUT_ENV = "RAY_ACCEL_TPU_API_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1.0
MAX_RETRIES = 2


@dataclass(frozen=True, slots=True)
class TpuNode:
    """What the Cloud TPU API says about one TPU node (slice)."""

    name: str  # short node name (last path component)
    accelerator_type: str | None
    topology: str | None
    state: str | None
    health: str | None
    endpoints: tuple[str, ...]  # worker IPs in worker order ("reach out to the 0th entry first")


def available() -> bool:
    """True when ``google-cloud-tpu`` is importable."""
    try:
        return importlib.util.find_spec("google.cloud.tpu_v2") is not None
    except (ImportError, ValueError):
        return False


def enabled(env: Mapping[str, str], *, live: bool) -> bool:
    """Whether lookups may run: the extra is installed, and an endpoint is set or the host is live."""
    return (bool(env.get(ENDPOINT_ENV)) or live) and available()


def _client(env: Mapping[str, str]):
    from google.api_core.client_options import ClientOptions
    from google.cloud import tpu_v2

    endpoint = env.get(ENDPOINT_ENV)
    if not endpoint:
        return tpu_v2.TpuClient(transport="rest")
    host = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}").hostname or ""
    credentials = None
    if host in ("127.0.0.1", "localhost", "::1"):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    return tpu_v2.TpuClient(credentials=credentials, transport="rest", client_options=ClientOptions(api_endpoint=endpoint))


def _timeout(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _call(env: Mapping[str, str], deadline: Deadline, what: str, fn):
    """Run ``fn(timeout)`` with bounded retries; map every failure to ProviderError."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    endpoint = env.get(ENDPOINT_ENV) or "tpu.googleapis.com"
    attempts = 0
    while True:
        attempts += 1
        timeout = deadline.clamp(_timeout(env))
        if timeout <= 0:
            raise ProviderError(f"{what}: discovery budget spent", endpoint=endpoint, attempts=attempts - 1)
        try:
            return fn(timeout)
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as exc:
            status = int(exc.code) if exc.code is not None else None
            retry_after = _retry_after(exc)
            retryable = status is not None and (status == 429 or status >= 500)
            wait = retry_after if retry_after is not None else 0.05 * (2 ** (attempts - 1))
            if retryable and attempts <= MAX_RETRIES and wait < deadline.remaining():
                time.sleep(wait)
                continue
            hint = f", Retry-After {retry_after:g}s" if retry_after is not None else ""
            raise ProviderError(
                f"{what}: HTTP {status}{hint} after {attempts} attempt(s)",
                endpoint=endpoint, status=status, retry_after_s=retry_after, attempts=attempts,
            ) from None
        except requests.exceptions.Timeout:
            raise ProviderError(f"{what}: no answer within {timeout:.2f}s", endpoint=endpoint, attempts=attempts) from None
        except (requests.exceptions.RequestException, gexc.GoogleAPIError, auth_exc.GoogleAuthError, ValueError) as exc:
            raise ProviderError(f"{what}: {type(exc).__name__}: {exc}", endpoint=endpoint, attempts=attempts) from None


def _enum_name(value: Any) -> str | None:
    name = getattr(value, "name", None)
    if name in (None, "STATE_UNSPECIFIED", "HEALTH_UNSPECIFIED"):
        return None
    return str(name)


def _to_node(node: Any) -> TpuNode:
    config = getattr(node, "accelerator_config", None)
    return TpuNode(
        name=str(node.name).rstrip("/").rpartition("/")[2],
        accelerator_type=node.accelerator_type or None,
        topology=(config.topology if config is not None else "") or None,
        state=_enum_name(node.state),
        health=_enum_name(node.health),
        endpoints=tuple(e.ip_address for e in node.network_endpoints if e.ip_address),
    )


def find_node(
    env: Mapping[str, str], deadline: Deadline, *, project: str, zone: str, name: str | None = None, ip: str | None = None
) -> TpuNode | None:
    """The TPU node ``name`` in ``project``/``zone``, or the one with a worker at ``ip``.

    Returns None when there is no such node (or the extra is missing); raises ProviderError when
    the API does not answer usefully within the budget.
    """
    if not available():
        return None
    client = _client(env)
    parent = f"projects/{project}/locations/{zone}"
    if name:
        found = _call(env, deadline, f"GetNode {parent}/nodes/{name}",
                      lambda t: client.get_node(name=f"{parent}/nodes/{name}", retry=None, timeout=t))
        return _to_node(found) if found is not None else None
    if not ip:
        return None

    def list_all(t: float):
        return list(client.list_nodes(parent=parent, retry=None, timeout=t))

    nodes = _call(env, deadline, f"ListNodes {parent}", list_all) or []
    for node in nodes:
        if any(e.ip_address == ip for e in node.network_endpoints):
            return _to_node(node)
    return None
