"""Reaching a Ray cluster without hanging: the GCS address is tried with a plain TCP connect, bounded,
before Ray is handed it (``ray.init`` retries an address nobody answers at for ever, printing
``Failed to get cluster ID from GCS server``)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ClusterUnreachable

__all__ = ["resolve_address", "check_reachable", "check_token", "bounded_init", "CONNECT_TIMEOUT_S", "INIT_TIMEOUT_S"]

CONNECT_TIMEOUT_S = 5.0
INIT_TIMEOUT_S = 60.0

_CHECK = ("check that the head node is up (`ray status` there), that {addr} is its GCS address (the --port of "
          "`ray start --head`, 6379 by default) and that no firewall blocks it; pass --address HOST:PORT or set "
          "RAY_ADDRESS")


def resolve_address(address: str | None) -> str:
    """What ``ray.init`` will connect to: ``address``, else ``$RAY_ADDRESS``, else ``auto``."""
    return address or os.environ.get("RAY_ADDRESS") or "auto"


def _host_port(target: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``target``, or None for what Ray finds by itself (``auto``, ``local``)."""
    if target in ("auto", "local"):
        try:  # the address the last `ray start` on this machine recorded, as ray.init reads it
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(None) or ""
        except Exception:  # noqa: BLE001 - nothing recorded: ray.init says so at once
            return None
    rest = target.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(target: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`ClusterUnreachable` naming ``target`` unless its GCS port accepts a connection
    within ``timeout_s``."""
    hp = _host_port(target)
    if hp is None:
        return
    host, port = hp
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.timeout:
        why = f"no answer within {timeout_s:g} s"
    except OSError as exc:
        why = exc.strerror or str(exc)
    addr = f"{host}:{port}"
    shown = target if target.endswith(addr) else f"{target} ({addr})"
    raise ClusterUnreachable(f"no Ray cluster at {shown}: {why}; " + _CHECK.format(addr=addr))


def check_token(target: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`ClusterUnreachable` at once when the GCS at ``target`` refuses this process's
    auth token (or its lack of one). ``ray.init`` asks 20 times, a second apart, before it gives up
    on a refused token (``NUM_REDIS_GET_RETRIES``, ``_init_gcs_client`` in ray/_private/node.py);
    one ``GcsClient`` answers in milliseconds. Anything else it meets is left to ``ray.init``."""
    hp = _host_port(target)
    if hp is None:
        return
    try:
        from ray._raylet import GcsClient
    except ImportError:  # a Ray without it: ray.init alone decides
        return
    out: dict[str, BaseException] = {}

    def run() -> None:
        try:
            GcsClient(address=f"{hp[0]}:{hp[1]}")
        except Exception as exc:  # noqa: BLE001 - judged below
            out["error"] = exc

    thread = threading.Thread(target=run, name="ray-accel-token", daemon=True)
    thread.start()
    thread.join(timeout_s)
    exc = out.get("error")
    if exc is not None and _refused_token(exc):
        said = str(exc).split(". ")[0]
        raise ClusterUnreachable(f"the Ray cluster at {target} refused this process's auth token ({said}): a cluster "
                                 "with token auth needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN set to its token")


def _refused_token(exc: BaseException) -> bool:
    # ray.exceptions.AuthenticationError where Ray has it; the gRPC status text otherwise.
    text = str(exc)
    return type(exc).__name__ == "AuthenticationError" or "InvalidAuthToken" in text or "Unauthenticated" in text


def bounded_init(init: Callable[[], Any], target: str, timeout_s: float = INIT_TIMEOUT_S,
                 deadline: float | None = None) -> Any:
    """``init()`` (``ray.init``), given ``timeout_s`` (or until ``deadline``, a ``time.monotonic()``
    set ``timeout_s`` before, when earlier checks spent part of it): something that accepts
    connections but is no GCS (another service's port) keeps ``ray.init`` waiting for ever. Its
    exception is re-raised."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = init()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            out["error"] = exc

    thread = threading.Thread(target=run, name="ray-accel-connect", daemon=True)
    thread.start()
    thread.join(timeout_s if deadline is None else max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise ClusterUnreachable(f"no Ray cluster answered at {target} within {timeout_s:g} s: something accepts "
                                 "connections there but it is not a Ray GCS, or the head is overloaded; "
                                 + _CHECK.format(addr=target))
    if "error" in out:
        raise out["error"]
    return out.get("value")
