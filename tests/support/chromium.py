"""Headless Chromium driven over the DevTools protocol on a pipe: no Selenium, no extra package.

Needs Debian's ``chromium`` package (``ci/test.sh`` installs it); :func:`chromium_path` is None
without it and the tests skip, saying so. ``--remote-debugging-pipe`` makes Chromium read
protocol messages on fd 3 and write them on fd 4, each a JSON object ended by a NUL byte
(https://chromedevtools.github.io/devtools-protocol/); a ``bash -c exec`` with redirections puts
the pipes there, so Python never runs code between fork and exec.

    with Browser(width=1600, height=1000) as b:
        b.navigate(url, ready="document.body.dataset.state === 'ready'")
        b.evaluate("document.querySelectorAll('rect.chip').length")
        b.screenshot("docs/x.png")
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser", "BrowserError", "chromium_path", "require_chromium"]

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--hide-scrollbars", "--force-device-scale-factor=1", "--mute-audio", "--disable-dev-shm-usage",
)


class BrowserError(RuntimeError):
    """Chromium exited, a command failed, or a wait ran out; the message says which."""


def chromium_path() -> str | None:
    """The Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page attached; see the module doc."""

    def __init__(self, *, width: int = 1600, height: int = 1000, timeout_s: float = 120.0) -> None:
        exe = chromium_path()
        if exe is None:
            raise FileNotFoundError("chromium not installed (apt-get install -y chromium)")
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="rayaccel-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        argv = [exe, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "about:blank"]
        # Via high numbers first: the pipes themselves may be fds 3 or 4.
        script = f'exec "$@" 100<&{cmd_r} 101>&{res_w} {cmd_r}<&- {res_w}>&- 3<&100 4>&101 100<&- 101>&-'
        self.proc = subprocess.Popen([shutil.which("bash") or "/bin/bash", "-c", script, "bash", *argv], pass_fds=(cmd_r, res_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "HOME": self._profile})
        os.close(cmd_r)
        os.close(res_w)
        self._next = 0
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self.console: list[str] = []
        self._reader = threading.Thread(target=self._read, name="chromium-pipe", daemon=True)
        self._reader.start()
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for method in ("Page.enable", "Runtime.enable"):
            self.send(method, session=True)
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _read(self) -> None:
        buf = b""
        with os.fdopen(self._res_r, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(1 << 16)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    msg = json.loads(raw)
                    if "id" in msg:
                        with self._lock:
                            q = self._replies.get(msg["id"])
                        if q is not None:
                            q.put(msg)
                    elif msg.get("method") == "Runtime.consoleAPICalled":
                        args = msg["params"].get("args", [])
                        self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
                    elif msg.get("method") == "Runtime.exceptionThrown":
                        self.console.append("exception: " + json.dumps(msg["params"].get("exceptionDetails", {}))[:2000])

    def send(self, method: str, *, session: bool = False, timeout_s: float | None = None, **params: Any) -> dict[str, Any]:
        """One protocol command; its result, or BrowserError with the protocol's error."""
        with self._lock:
            self._next += 1
            mid = self._next
            q: queue.Queue = queue.Queue()
            self._replies[mid] = q
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        try:
            os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        except OSError as exc:
            raise BrowserError(f"chromium is gone ({exc}): {self._stderr()}") from None
        try:
            reply = q.get(timeout=timeout_s or self.timeout_s)
        except queue.Empty:
            raise BrowserError(f"no answer to {method} within {timeout_s or self.timeout_s:.0f}s: {self._stderr()}") from None
        finally:
            with self._lock:
                self._replies.pop(mid, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return "still running"
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def evaluate(self, expression: str, *, await_promise: bool = False, timeout_s: float | None = None) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values only)."""
        result = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=await_promise, timeout_s=timeout_s)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float | None = None, poll_s: float = 0.05) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"still false after {timeout_s or self.timeout_s:.0f}s: {expression}; console: {self.console[-5:]}")
            time.sleep(poll_s)

    def navigate(self, url: str, *, ready: str | None = None, timeout_s: float | None = None) -> None:
        """Open ``url`` as a fresh page load; with ``ready``, wait until that expression is truthy."""
        self.send("Page.navigate", session=True, url="about:blank")  # else a fragment change would not reload
        self.wait_for("location.href === 'about:blank'")
        self.evaluate("document.body && (document.body.dataset.state = 'leaving')")
        self.send("Page.navigate", session=True, url=url)
        if ready:
            self.wait_for(f"document.body && document.body.dataset.state !== 'leaving' && ({ready})", timeout_s=timeout_s)

    def screenshot(self, path: str | os.PathLike[str], *, clip: dict[str, float] | None = None) -> Path:
        """A PNG of the viewport (or of ``clip``: x, y, width, height in page pixels)."""
        params: dict[str, Any] = {"format": "png"}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", session=True, **params)["data"]
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout_s=10)
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._cmd_w)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def require_chromium() -> None:
    """Skip the calling test module where Chromium is missing; in CI (``CI=true``), where
    ``ci/test.sh`` installs it, its absence is an error instead of a skip."""
    import pytest

    if chromium_path() is None:
        if os.environ.get("CI") == "true":
            raise RuntimeError("chromium not installed (apt-get install -y chromium)")
        pytest.skip("chromium not installed (apt-get install -y chromium)", allow_module_level=True)
