"""Headless Chromium for the dashboard tests: ``--dump-dom`` and ``--screenshot``, no Selenium.

Needs Debian's ``chromium`` package (``.ci/run`` installs it); :func:`chromium_path` is None
without it and the tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--force-device-scale-factor=1",
)


def chromium_path() -> str | None:
    """The Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(url: str, extra: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("chromium not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="ops-chromium-") as profile:
        env = {**os.environ, "HOME": profile}
        return subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", *extra, url],
            capture_output=True, text=True, timeout=timeout_s, env=env, check=False,
        )


def dump_dom(url: str, *, virtual_time_ms: int = 3000, timeout_s: float = 90) -> str:
    """The DOM after the page's scripts ran (and ``virtual_time_ms`` of timers/fetches)."""
    proc = _run(url, ["--dump-dom", f"--virtual-time-budget={virtual_time_ms}"], timeout_s)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium --dump-dom failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def screenshot(url: str, path: str | os.PathLike[str], *, width: int = 1400, height: int = 1800,
               virtual_time_ms: int = 3000, timeout_s: float = 90) -> Path:
    """A PNG of the page at ``path``."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(url, [f"--screenshot={path}", f"--window-size={width},{height}",
                      f"--virtual-time-budget={virtual_time_ms}"], timeout_s)
    if proc.returncode != 0 or not path.is_file():
        raise RuntimeError(f"chromium --screenshot failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return path
