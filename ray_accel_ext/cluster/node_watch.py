"""The node's device watcher as a process of its own, spawned by the node-start hook
(:mod:`ray_accel_ext.node.watcher`) or run by hand where nodes start without it
(``ray-accel health watch &`` before ``ray start``, e.g. a KubeRay container command).

It finds the raylet of its node (the one whose environment carries the hook's token; without a
token, the only raylet on the host), reads the node id and the GCS address from the raylet's
command line (``--node_id=``, ``--gcs-address=``, ``--node_ip_address=``:
``ray/_private/services.py`` ``start_raylet``), connects as a driver once the node is up, runs a
:class:`.device_watch.NodeWatch` and exits when the raylet does: ``ray stop`` leaves no watcher.
Linux only (``/proc``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Raylet", "find_raylet", "raylet_alive", "main", "RAYLET_WAIT_S"]

RAYLET_WAIT_S = 600.0  # how long a watcher waits for its raylet to appear
_TOKEN_ENV = "RAY_ACCEL_WATCH_TOKEN"  # ray_accel_ext.node.watcher.TOKEN_ENV
_PARENT_ENV = "RAY_ACCEL_WATCH_PARENT"  # ray_accel_ext.node.watcher.PARENT_ENV
_log = logging.getLogger("ray_accel_ext")


@dataclass(frozen=True)
class Raylet:
    pid: int
    node_id: str
    gcs_address: str
    node_ip: str | None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _raylets() -> Iterator[tuple[int, list[str], bytes]]:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        argv = [a.decode(errors="replace") for a in _read(f"/proc/{name}/cmdline").split(b"\0") if a]
        if argv and os.path.basename(argv[0]) == "raylet":
            yield int(name), argv, _read(f"/proc/{name}/environ")


def find_raylet(token: str | None) -> Raylet | None:
    """This node's raylet: the one started with ``token`` in its environment, else the only one."""
    found = []
    for pid, argv, environ in _raylets():
        if token and f"{_TOKEN_ENV}={token}".encode() not in environ.split(b"\0"):
            continue
        flags = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
        if flags.get("node_id") and flags.get("gcs-address"):
            found.append(Raylet(pid, flags["node_id"], flags["gcs-address"], flags.get("node_ip_address")))
    return found[0] if len(found) == 1 else None


def raylet_alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    return bool(stat) and stat.rpartition(")")[2].split()[:1] != ["Z"]


def _connect(raylet: Raylet, stop: threading.Event) -> bool:
    """``ray.init`` to the raylet's cluster, retried while the node registers."""
    import ray

    while raylet_alive(raylet.pid):
        try:
            ray.init(address=raylet.gcs_address, _node_ip_address=raylet.node_ip, namespace="ray_accel_ext",
                     log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False)
            return True
        except Exception as exc:  # noqa: BLE001 - the node is still registering
            _log.info("ray_accel_ext watcher: waiting for the node: %s", exc)
            stop.wait(2.0)
    return False


def _spawner() -> int:
    """The process that ran the start hook (``ray start``), as it said at the spawn: it may be gone
    before this one reads its parent."""
    try:
        return int(os.environ.get(_PARENT_ENV, ""))
    except ValueError:
        return os.getppid()


def main(argv: list[str] | None = None) -> int:
    """Wait for this node's raylet, watch its devices, exit with it."""
    stop = threading.Event()
    token = os.environ.get(_TOKEN_ENV)
    waited = 0.0
    parent = _spawner()
    raylet = find_raylet(token)
    while raylet is None and waited < RAYLET_WAIT_S:
        if os.getppid() != parent:
            # `ray start` is gone: the raylet it launched, if any, exists by now. One last look.
            raylet = find_raylet(token)
            break
        stop.wait(1.0)
        waited += 1.0
        raylet = find_raylet(token)
    if raylet is None or not _connect(raylet, stop):
        return 0
    from .device_watch import NodeWatch

    try:
        watch = NodeWatch(raylet.node_id, extra={"watcher": "node", "watcher_pid": os.getpid()}).start()
    except Exception as exc:  # noqa: BLE001 - nothing to watch on this node
        _log.warning("ray_accel_ext watcher: not watching: %s: %s", type(exc).__name__, exc)
        os._exit(0)
    while raylet_alive(raylet.pid):
        stop.wait(1.0)
    watch.stop.set()
    os._exit(0)  # the GCS may be gone with the raylet: no ray.shutdown() handshake


if __name__ == "__main__":
    raise SystemExit(main())
