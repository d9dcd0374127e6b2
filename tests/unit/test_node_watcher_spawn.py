"""Node start spawns one device watcher per node with accelerators (``ray_accel_ext.node.watcher``),
off with ``RAY_ACCEL_HEALTH_WATCH=0``, never waited for; the watcher finds its raylet by the token
the hook leaves in the environment the raylet inherits."""

from __future__ import annotations

import os
import signal
import time

from ray_accel_ext.cluster.node_watch import find_raylet, raylet_alive
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.node.watcher import TOKEN_ENV, WATCHER_MODULE, spawn_watcher
from tests.support.paths import HOSTS

L4 = HOSTS / "nvidia_gpu" / "l4-single-pcie"


def _cmdline(pid: int) -> bytes:
    """The process's command line; /proc shows it empty for a moment right after the exec, so it is
    read again (up to 30 s) until it is there."""
    end = time.monotonic() + 30
    while True:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            data = f.read()
        if data or time.monotonic() > end:
            return data
        time.sleep(0.01)


def test_off_by_setting_and_for_nodes_without_accelerators():
    inventory = discover(open_host(L4))
    env = {"RAY_ACCEL_HEALTH_WATCH": "0"}
    assert spawn_watcher(inventory, env) is None and TOKEN_ENV not in env
    empty = discover(open_host(HOSTS / "nvidia_gpu" / "no-accelerators"))
    assert spawn_watcher(empty, {}) is None and spawn_watcher(None, {}) is None


def test_the_watcher_is_spawned_with_a_token_and_not_waited_for():
    inventory = discover(open_host(L4))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ACCEL_HEALTH_WATCH"}
    pid = spawn_watcher(inventory, env)
    try:
        assert pid is not None and len(env[TOKEN_ENV]) == 32
        assert WATCHER_MODULE.encode() in _cmdline(pid)
        assert find_raylet(env[TOKEN_ENV]) is None  # no raylet carries this token: it keeps waiting
        assert raylet_alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not raylet_alive(pid)


def test_a_watcher_whose_ray_start_ended_without_a_raylet_exits():
    """``ray start`` failed before launching its raylet: the watcher does not wait out its
    ten minutes (it would be left behind)."""
    import subprocess
    import sys

    script = ("import os, sys\n"
              "from ray_accel_ext.host import open_host\n"
              "from ray_accel_ext.node.discovery import discover\n"
              "from ray_accel_ext.node.watcher import spawn_watcher\n"
              "env = {k: v for k, v in os.environ.items() if k != 'RAY_ACCEL_HEALTH_WATCH'}\n"
              f"print(spawn_watcher(discover(open_host({str(L4)!r})), env))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    pid = int(out.stdout.strip())
    end = time.monotonic() + 120
    while raylet_alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    alive = raylet_alive(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the watcher outlived the process that spawned it, with no raylet"
