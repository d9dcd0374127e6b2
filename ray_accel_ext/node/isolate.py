"""Third-party backends in a forked worker process, so nothing they do can end or hang the node start.

A thread bounds how long discovery *waits*, but a backend in a thread can still end the process
(``os._exit``, a crash in native code), keep a CPU busy past the budget, or leave threads the
process waits for at exit. A vendor's backend therefore runs in its own process: forked from the
discovering process (``os.fork``: about 10-50 ms on a loaded 2-core machine, against 600 ms for a
fresh interpreter, since the child already has this package imported; measured in
``benchmarks/discovery.py``), in its own process group, with stdin/stdout/stderr on ``/dev/null``
(what it prints never reaches the node log, and it holds no pipe of the parent's output open). It
imports, validates, builds, detects and describes, and sends its progress and its answer as JSON
lines on a pipe. The parent:

* reads the pipe until the answer, the worker's exit, or the deadline, whichever comes first;
* kills the worker's whole process group (``SIGKILL``) in every case, so children it forked go
  with it, and reaps it;
* reports a worker that died without answering (exit status, signal) or was still at a stage when
  the budget was spent, naming that stage;
* takes the answer as data: bounded in size and depth, rebuilt with ``NodeDescription.from_dict``
  (which validates every field) and checked again like any in-process answer.

Workers are forked from the main thread before discovery starts any thread of its own, so no lock
of ours can be held in the child. A lock of the interpreter's can: in a process that traces
allocations (``tracemalloc``, ``PYTHONTRACEMALLOC``) another thread may hold tracemalloc's lock at
the fork, and the worker then waits on it until the budget kills it (seen in
tests/reliability/test_soak.py, which measures the heap another way since). A backend that
deliberately leaves its process group (``setsid`` in a grandchild) outlives the kill; that is
sabotage, not an accident, and no user-space bound short of a cgroup stops it.

Where ``os.fork`` is missing (not Linux), backends run in threads (a recording host's workers get
the host it records: what they read is not recorded, but they cannot end ``doctor`` or ``record``); ``RAY_ACCEL_ISOLATION`` chooses
``third-party`` (default), ``all`` or ``none``.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from ..bounds import bounded_json
from ..errors import BackendLoadError
from ..host.protocol import ISOLATION_ENV
from ..hw.pci_index import pci_index
from ..model import NodeDescription
from ..problems import ProblemCode, code_of
from .answers import check_lengths
from .registry import BackendInfo, BackendSpec, construct_error, import_backend_class, problem_message

__all__ = ["ISOLATION_ENV", "ISOLATION_MODES", "isolation_mode", "can_fork", "Worker"]

ISOLATION_MODES = ("third-party", "all", "none")
MAX_OUTPUT_BYTES = 16 << 20
_POLL_S = 0.05
_REAP_S = 1.0
_MAX_VENDORS = 64  # PCI vendor ids a worker may name (a hostile one could name them all)
_VENDOR_ID = re.compile(r"0x[0-9a-f]{4}", re.ASCII)


def isolation_mode(env: Mapping[str, str]) -> str:
    """``RAY_ACCEL_ISOLATION`` (default ``third-party``); an unknown value is refused with a warning."""
    import logging

    value = env.get(ISOLATION_ENV, "").strip().lower() or "third-party"
    if value not in ISOLATION_MODES:
        logging.getLogger("ray_accel_ext").warning(
            "ray_accel_ext: %s=%r refused (one of %s); using third-party", ISOLATION_ENV, value[:40], ", ".join(ISOLATION_MODES))
        return "third-party"
    return value


def can_fork() -> bool:
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _child(spec: BackendSpec, host: Any, fd: int) -> None:
    """The worker: never returns (``os._exit``), whatever the backend does."""
    me = os.getpid()
    stage = "import"
    try:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass  # the parent did it first
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        import faulthandler

        faulthandler.disable()  # it writes to a copy of the parent's stderr, not to fd 2
        try:
            os.nice(10)  # a worker that spins never starves the node start it runs for
        except OSError:
            pass
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (ValueError, OSError):
                pass

        def send(**message: Any) -> None:
            if os.getpid() == me:  # a process the backend forked says nothing
                _write_all(fd, (json.dumps(message, default=str) + "\n").encode())

        send(stage=stage)
        try:
            cls = import_backend_class(spec)
        except BackendLoadError as exc:
            if exc.data.get("stage") != "import":
                stage = "validate"
            raise
        send(info=BackendInfo.of(cls).to_dict())
        stage = "construct"
        send(stage=stage)
        try:
            backend = cls()
        except BaseException as exc:  # noqa: BLE001 - reported as a load error, like in-process
            raise construct_error(spec, exc) from exc
        stage = "detect"
        send(stage=stage)
        found = backend.detect(host)
        if os.getpid() != me:
            os._exit(0)
        if found is not True and found is not False:
            raise TypeError(f"detect() returned {type(found).__name__}, expected bool")
        desc = None
        if found:
            stage = "describe"
            send(stage=stage)
            desc = backend.describe(host)
            if os.getpid() != me:
                os._exit(0)
            to_dict = getattr(desc, "to_dict", None)
            if not callable(to_dict):
                raise TypeError(f"describe() returned {type(desc).__name__}, expected NodeDescription")
            if isinstance(desc, NodeDescription):
                check_lengths(desc)  # before the seconds a list no node has would take to serialize
            desc = to_dict()
        # The PCI vendors the backend read functions of: the parent's host checks look at those
        # vendors' ids too (node/host_checks.py), which this process's reads cannot tell it.
        send(result=desc, pci_vendors=sorted(pci_index(host).asked)[:_MAX_VENDORS])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, whatever it was
        try:
            if os.getpid() == me:
                message = exc.message if isinstance(exc, BackendLoadError) else problem_message(exc)
                error = {"stage": stage, "error": type(exc).__name__, "message": message, "code": code_of(exc)}
                _write_all(fd, (json.dumps({"error": error}, default=str) + "\n").encode())
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(0)


class Worker:
    """One backend in a forked process; :meth:`supervise` (on a thread) waits for its answer."""

    def __init__(self, spec: BackendSpec, host: Any) -> None:
        self.spec = spec
        self.name = spec.name
        self.host = host
        self.stage = "start"
        self.info: BackendInfo | None = None
        self.result: dict[str, Any] | None = None
        self.pci_vendors: tuple[str, ...] = ()  # the PCI vendor ids the backend read functions of
        self.error: dict[str, str] | None = None
        self.exit: str | None = None  # how the worker ended without answering
        self.killed = False
        self.done = False
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, reports through the pipe
            os.close(read_fd)
            _child(spec, host, write_fd)
        os.close(write_fd)
        self.pid, self._fd = pid, read_fd
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first
        self._status: int | None = None
        self._lock = threading.Lock()

    # -- the supervising thread ---------------------------------------------------------------

    def supervise(self) -> None:
        """Read messages until the answer, the worker's end, or the deadline; then kill and reap."""
        buf = b""
        size = 0
        poller = select.poll()
        poller.register(self._fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        timed_out = False
        try:
            while not self.done:
                left = self.host.deadline.remaining()
                if left <= 0:
                    timed_out = True
                    break
                if poller.poll(min(left, _POLL_S) * 1000):
                    chunk = os.read(self._fd, 1 << 16)
                    size += len(chunk)
                    if size > MAX_OUTPUT_BYTES:
                        self.exit = f"sent more than {MAX_OUTPUT_BYTES} bytes"
                        break
                    buf = self._messages(buf + chunk)
                    if not chunk and not self.done:
                        # EOF: every writer is gone; wait (briefly) for the exit status
                        end = time.monotonic() + min(_REAP_S, max(0.0, self.host.deadline.remaining()))
                        while not self._reaped() and time.monotonic() < end:
                            time.sleep(0.005)
                        break
                elif self._reaped():
                    buf = self._messages(buf + self._drain())
                    break
        finally:
            status_before_kill = self._status
            self.kill()
        if not self.done and self.exit is None:
            if status_before_kill is not None:
                self.exit = _how(status_before_kill)
            else:
                self.killed = True
                if not timed_out:
                    self.exit = "stopped answering"

    def _messages(self, buf: bytes) -> bytes:
        *lines, rest = buf.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                message = bounded_json(line, what="worker message", max_bytes=MAX_OUTPUT_BYTES, max_depth=64)
            except ValueError as exc:
                self.exit = f"sent an unreadable message ({exc})"
                self.done = True
                break
            if not isinstance(message, dict):
                continue
            if isinstance(message.get("stage"), str):
                self.stage = message["stage"]
            if isinstance(message.get("info"), dict):
                self.info = _info(message["info"], self.name)
            if "error" in message and isinstance(message["error"], dict):
                self.error = {k: str(v)[:2000] for k, v in message["error"].items()}
                self.done = True
            if isinstance(message.get("pci_vendors"), list):
                self.pci_vendors = tuple(v for v in message["pci_vendors"][:_MAX_VENDORS]
                                         if isinstance(v, str) and _VENDOR_ID.fullmatch(v))
            if "result" in message:
                self.result = message["result"]
                self.done = True
        return rest

    def _drain(self) -> bytes:
        out = b""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while poller.poll(0):
            chunk = os.read(self._fd, 1 << 16)
            if not chunk or len(out) > MAX_OUTPUT_BYTES:
                break
            out += chunk
        return out

    def _reaped(self) -> bool:
        with self._lock:
            return self._reap()

    def _reap(self) -> bool:
        """Reap the worker if it has exited, killing what is left of its group first: until the
        leader is reaped its pid cannot be reused, so the group id still names only its own
        (``killpg`` after the reap could hit an unrelated new session with a recycled pid)."""
        if self._status is not None:
            return True
        try:
            exited = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): gone, status unknown
            self._status = -1
            return True
        if exited is None:
            return False
        self._killpg()
        try:
            _, self._status = os.waitpid(self.pid, 0)  # it has exited: does not block
        except ChildProcessError:
            self._status = -1
        return True

    def _killpg(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_now(self) -> None:
        """Send ``SIGKILL`` to the worker's process group without waiting (the supervising
        thread reaps it); nothing once the worker is reaped or while :meth:`kill` is under way."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._status is None:
                self._killpg()
        finally:
            self._lock.release()

    def kill(self) -> None:
        """Kill the worker's process group and reap the worker (idempotent, bounded)."""
        with self._lock:
            if self._status is None:
                self._killpg()
            end = time.monotonic() + _REAP_S
            while not self._reap() and time.monotonic() < end:
                time.sleep(0.005)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    # -- what happened ------------------------------------------------------------------------

    @property
    def code(self) -> str | None:
        """The problem code the worker gave what its backend raised (from the exception's structure)."""
        return self.error.get("code") if self.error is not None else None

    def problem(self) -> tuple[str, str, str] | None:
        """``(stage, error, message)`` when the worker gave no answer, else None."""
        if self.error is not None:
            return self.error.get("stage", self.stage), self.error.get("error", "Error"), self.error.get("message", "")
        if self.done and self.exit is None:
            return None
        if self.exit is not None:
            return self.stage, "WorkerDied", f"its worker process {self.exit} during {self.stage}"
        return ("budget", "TimeoutError",
                f"still at {self.stage} after the {self.host.deadline.budget_s:g}s discovery budget; its worker "
                "process was killed")


def _how(status: int) -> str:
    if status == -1:
        return "ended (status unknown)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was killed by {name}"
    return f"exited with status {os.WEXITSTATUS(status)} without an answer"


def _info(data: dict[str, Any], name: str) -> BackendInfo | None:
    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    resource, prefix = text("resource_name"), text("label_prefix")
    if data.get("name") != name or resource is None or prefix is None:
        return None
    env_vars = data.get("node_start_env_vars") or ()
    return BackendInfo(
        name=name,
        resource_name=resource,
        label_prefix=prefix,
        visible_devices_env_var=text("visible_devices_env_var"),
        node_start_env_vars=tuple(v for v in env_vars if isinstance(v, str)) if isinstance(env_vars, list) else (),
        problem_codes=_codes(data.get("problem_codes")),
    )


def _codes(data: Any) -> tuple[ProblemCode, ...]:
    """The problem codes a worker sent (as data: anything malformed is left out)."""
    out = []
    for item in data if isinstance(data, list) else ():
        fields = [item.get(k) if isinstance(item, dict) else None for k in ("code", "severity", "summary", "hint")]
        if all(isinstance(v, str) for v in fields):
            out.append(ProblemCode(*(v[:2000] for v in fields), vendor=True))
    return tuple(out[:256])
