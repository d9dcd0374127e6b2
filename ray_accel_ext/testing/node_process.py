"""How a simulated node's ``ray start`` is run, told apart when it failed, and cleaned up."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from .ports import is_port_collision

__all__ = ["LAUNCHER", "STARTUP_TIMEOUT_MARK", "kill_matching", "ray_command", "retryable_start"]


# Ray's CLI module imports Ray Serve's CLI when it is imported, only to list a `serve` subcommand
# (the last lines of ray/scripts/scripts.py, 2.55 to 2.60, in a try/except that skips it when the
# import fails); where Serve is installed that is about half of a `ray start`'s CPU (1.2 of 2.3 s
# on a 2-core machine), paid by every simulated node. Nodes run the same `ray.scripts.scripts:main`
# as the `ray` console script, from a launcher named `ray` (the cluster's bin/ray) that marks that
# one module absent; what `ray start` then does is Ray's own.
LAUNCHER = """import sys
sys.modules["ray.serve.scripts"] = None  # see LAUNCHER in ray_accel_ext/testing/node_process.py
from ray.scripts.scripts import main
sys.exit(main())
"""


def ray_command(bin_dir: Path) -> list[str]:
    """How a node's ``ray`` is run: this interpreter on the launcher in ``bin_dir`` where Ray's
    console script sits next to it (Ray is importable here), else the ``ray`` on ``PATH``."""
    if not Path(sys.executable).with_name("ray").exists():
        return [shutil.which("ray") or "ray"]
    launcher = bin_dir / "ray"
    if not launcher.exists():
        bin_dir.mkdir(parents=True, exist_ok=True)
        launcher.write_text(LAUNCHER)
    return [sys.executable, str(launcher)]


# A worker node whose raylet did not register with the GCS in time (a machine so loaded that the
# GCS answers late: "The current node timed out during startup", ray/_private/node.py) leaves
# nothing behind that a second start would trip over.
STARTUP_TIMEOUT_MARK = "The current node timed out during startup"


def retryable_start(log: str) -> bool:
    """Whether a failed ``ray start`` may simply be run again: a port was taken, or the node
    timed out registering."""
    return is_port_collision(log) or STARTUP_TIMEOUT_MARK in log


def kill_matching(marker: str) -> None:
    """Kill leftover processes whose command line names ``marker`` (our unique temp dir) as a
    whole path component (node ``n1``'s marker does not match ``n10``)."""
    import psutil

    me = os.getpid()
    pattern = re.compile(re.escape(marker) + r"(?=$|[/\s])")
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.info["pid"] != me and any(pattern.search(part) for part in proc.info["cmdline"] or ()):
                proc.kill()
        except (psutil.Error, TypeError):
            continue
