"""Node start spawns the node's device watcher (:mod:`ray_accel_ext.cluster.node_watch`).

The start hook runs in the ``ray start`` process before the node's raylet exists. It starts the
watcher as a process of its own, in a session of its own, and waits for nothing: the watcher finds
the raylet this ``ray start`` launches by a token the hook puts in this process's environment
(the raylet inherits it: ``ray/_private/services.py`` ``start_ray_process`` copies
``os.environ``), connects once the node is up and exits when that raylet does (``ray stop``).

Off with ``RAY_ACCEL_HEALTH_WATCH=0``. A node without accelerators gets no watcher. Whatever goes
wrong here is logged and the node starts as if the setting were off.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import MutableMapping

__all__ = ["WATCH_ENV", "TOKEN_ENV", "PARENT_ENV", "WATCHER_MODULE", "watch_enabled", "spawn_watcher"]

WATCH_ENV = "RAY_ACCEL_HEALTH_WATCH"
TOKEN_ENV = "RAY_ACCEL_WATCH_TOKEN"
PARENT_ENV = "RAY_ACCEL_WATCH_PARENT"  # the spawning process: a watcher whose `ray start` ended with no raylet exits
WATCHER_MODULE = "ray_accel_ext.cluster.node_watch"
_OFF = {"0", "false", "no", "off"}
log = logging.getLogger("ray_accel_ext")


def watch_enabled(environ: MutableMapping[str, str]) -> bool:
    return environ.get(WATCH_ENV, "1").strip().lower() not in _OFF


def spawn_watcher(inventory, environ: MutableMapping[str, str] | None = None) -> int | None:
    """Start the node's watcher (when on and the node has devices); its process id, or None."""
    environ = os.environ if environ is None else environ
    try:
        if inventory is None or not watch_enabled(environ):
            return None
        if not any(d.devices or d.partitions for d in inventory.descriptions):
            return None
        environ[TOKEN_ENV] = uuid.uuid4().hex
        process = subprocess.Popen(
            [sys.executable, "-m", WATCHER_MODULE], env={**environ, PARENT_ENV: str(os.getpid())},
            start_new_session=True, close_fds=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        log.info("ray_accel_ext: device watcher started (pid %d); %s=0 turns it off", process.pid, WATCH_ENV)
        return process.pid
    except Exception as exc:  # noqa: BLE001 - the node starts without a watcher
        log.warning("ray_accel_ext: no device watcher for this node: %s: %s", type(exc).__name__, exc)
        return None
