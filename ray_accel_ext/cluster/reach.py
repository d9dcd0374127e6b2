"""Reaching a Ray cluster without hanging: the GCS address is tried with a plain TCP connect, bounded,
before Ray is handed it (``ray.init`` retries an address nobody answers at for ever, printing
``Failed to get cluster ID from GCS server``)."""

from __future__ import annotations

import os
import socket

from ..errors import ClusterUnreachable

__all__ = ["resolve_address", "check_reachable", "CONNECT_TIMEOUT_S"]

CONNECT_TIMEOUT_S = 5.0

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
