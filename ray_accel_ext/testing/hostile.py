"""The hostile-host kit: third-party backends that misbehave on purpose, special files, and hostile
values. With :mod:`.hostile_metadata` (servers that break HTTP on purpose) it is what the
reliability run throws at a real ``ray start`` (``tests/reliability/test_hostile_ray.py``).

Hostile backends (:data:`HOSTILE_BACKENDS`): one installed distribution, ``ray-accel-hostile``,
registers one entry point per behaviour; each backend does exactly one bad thing at one stage
(import, construction, ``detect``, ``describe``): hang, sleep 10 s, raise ``SystemExit`` /
``KeyboardInterrupt`` / ``GeneratorExit`` / a bare ``BaseException``, ``os._exit``, crash the
interpreter (``SIGSEGV``), fork a child that lives on, spin without yielding, block reading a
FIFO, or leave a non-daemon thread behind. Install them with :func:`install_hostile_backends` and
put the folder on ``PYTHONPATH`` (or ``sys.path``)::

    site = install_hostile_backends(tmp / "site")
    env = {"PYTHONPATH": str(site)}                # a `ray start` with the hook sees them all

Special files (:func:`make_special`): a FIFO, a socket or a character device node where discovery
expects a regular file; nothing may open them. Hostile values (:data:`HUGE`, :data:`NUL`,
:data:`NON_ASCII_DIGITS`) and :func:`copy_snapshot` / :func:`set_env` / :func:`set_metadata` to put
them into a copy of a host snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import textwrap
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..backend import AcceleratorBackend
from ..host import Host
from ..model import NodeDescription

__all__ = [
    "HostileBackend",
    "HOSTILE_BACKENDS",
    "HostileBase",
    "HostileBaseException",
    "act",
    "install_hostile_backends",
    "SPECIAL_KINDS",
    "make_special",
    "HUGE",
    "NUL",
    "NON_ASCII_DIGITS",
    "copy_snapshot",
    "set_env",
    "set_metadata",
]

DIST = "ray-accel-hostile"
MODULE_PREFIX = "rayaccel_hostile_"
HANG_S = 3600.0
SLEEP_S = 10.0


class HostileBaseException(BaseException):
    """Neither an ``Exception`` nor one of Python's own: what ``except Exception`` lets through."""


@dataclass(frozen=True)
class HostileBackend:
    """One misbehaviour: the entry-point ``name``, the ``stage`` it strikes at, the ``action``."""

    stage: str  # import | construct | detect | describe
    action: str

    @property
    def name(self) -> str:
        return f"hostile_{self.stage}_{self.action.lower().replace('-', '_')}"

    @property
    def what(self) -> str:
        return f"{_ACTIONS[self.action]} at {self.stage}"


_ACTIONS = {
    "hang": f"hangs ({HANG_S:g} s)",
    "sleep": f"sleeps {SLEEP_S:g} s",
    "SystemExit": "raises SystemExit(0)",
    "KeyboardInterrupt": "raises KeyboardInterrupt",
    "GeneratorExit": "raises GeneratorExit",
    "BaseException": "raises a bare BaseException subclass",
    "exit": "calls os._exit(3)",
    "crash": "crashes the interpreter (SIGSEGV in native code)",
    "fork": "forks a child that sleeps an hour",
    "busy": "spins in a loop that never yields",
    "stuck-read": "blocks reading a FIFO no one writes",
    "thread": "starts a non-daemon thread that sleeps an hour (the process would wait for it at exit)",
}

HOSTILE_BACKENDS: tuple[HostileBackend, ...] = (
    *(HostileBackend("import", a) for a in ("hang", "sleep", "SystemExit", "KeyboardInterrupt", "BaseException")),
    *(HostileBackend("construct", a) for a in ("SystemExit", "KeyboardInterrupt", "BaseException")),
    *(HostileBackend("detect", a) for a in ("SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException",
                                             "hang", "exit", "crash", "fork", "busy", "stuck-read", "thread")),
    *(HostileBackend("describe", a) for a in ("SystemExit", "KeyboardInterrupt", "BaseException", "hang")),
)
_BY_NAME = {b.name: b for b in HOSTILE_BACKENDS}


def act(name: str, stage: str) -> None:
    """Do what backend ``name`` does at ``stage`` (nothing at the other stages)."""
    hostile = _BY_NAME[name]
    if hostile.stage != stage:
        return
    action = hostile.action
    if action == "hang":
        time.sleep(HANG_S)
    elif action == "sleep":
        time.sleep(SLEEP_S)
    elif action == "SystemExit":
        raise SystemExit(0)
    elif action == "KeyboardInterrupt":
        raise KeyboardInterrupt
    elif action == "GeneratorExit":
        raise GeneratorExit
    elif action == "BaseException":
        raise HostileBaseException(f"{name}: a BaseException that is not an Exception")
    elif action == "exit":
        os._exit(3)
    elif action == "crash":
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif action == "fork":
        if os.fork() == 0:
            time.sleep(HANG_S)
            os._exit(0)
    elif action == "busy":
        while True:
            pass
    elif action == "thread":
        import threading

        threading.Thread(target=time.sleep, args=(HANG_S,), name="hostile-non-daemon", daemon=False).start()
    elif action == "stuck-read":
        fifo = Path(tempfile.mkdtemp(prefix="rayaccel-hostile-")) / "fifo"
        os.mkfifo(fifo)
        with open(fifo, "rb") as fh:  # opening a FIFO for reading blocks until a writer comes
            fh.read()


class HostileBase(AcceleratorBackend):
    """What every hostile backend shares; each module sets only ``name``."""

    name = "hostile_base"
    resource_name = "hostile"
    label_prefix = "hostile.example.com"

    def __init__(self) -> None:
        act(self.name, "construct")

    def detect(self, host: Host) -> bool:
        act(self.name, "detect")
        return True

    def describe(self, host: Host) -> NodeDescription:
        act(self.name, "describe")
        raise RuntimeError(f"{self.name}: a hostile test backend, nothing to describe")


def install_hostile_backends(site: str | os.PathLike[str], backends: Iterable[HostileBackend] = HOSTILE_BACKENDS) -> Path:
    """Write the ``ray-accel-hostile`` distribution (dist-info with one entry point per backend,
    one module per backend) into ``site``; returns ``site`` (put it on ``PYTHONPATH``)."""
    site = Path(site)
    info = site / f"{DIST.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 1.0\n")
    entries = []
    for b in backends:
        module = MODULE_PREFIX + b.name.removeprefix("hostile_")
        (site / f"{module}.py").write_text(textwrap.dedent(f'''\
            """Hostile test backend: {b.what} (ray_accel_ext.testing.hostile)."""
            from ray_accel_ext.testing.hostile import HostileBase, act

            act({b.name!r}, "import")


            class Backend(HostileBase):
                name = {b.name!r}
            '''))
        entries.append(f"{b.name} = {module}:Backend")
    (info / "entry_points.txt").write_text("[ray_accel_ext.backends]\n" + "\n".join(entries) + "\n")
    return site


# -- special files ----------------------------------------------------------------------------

SPECIAL_KINDS = ("fifo", "socket", "device")


def make_special(path: str | os.PathLike[str], kind: str) -> Path:
    """Replace ``path`` (a file, which may be a hard link into a snapshot: it is unlinked, never
    written) by a FIFO, a listening-then-closed Unix socket, or a character device node (``/dev/null``'s
    numbers, 1:3; needs ``CAP_MKNOD``)."""
    path = Path(path)
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # bound where the path is short (AF_UNIX paths are at most 107 bytes), then moved
        short = Path(tempfile.mkdtemp(prefix="rah", dir=path.parent if len(str(path)) < 100 else None)) / "s"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(short))
        os.rename(short, path)
        short.parent.rmdir()
    elif kind == "device":
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        raise ValueError(f"unknown special file kind {kind!r} (known: {', '.join(SPECIAL_KINDS)})")
    return path


# -- hostile values ---------------------------------------------------------------------------

#: 140,000 characters: an instance id no metadata server should send (and no label can hold)
HUGE = "i" * 140_000
#: a NUL byte inside a name (no process environment can hold one; a snapshot's env.json can)
NUL = "\x00"
#: digits of other scripts: ``str.isdigit()`` and ``int()`` accept them, Ray's parsers do not
NON_ASCII_DIGITS = {"arabic-indic": "\u0663", "fullwidth": "\uff13", "superscript": "\u00b3"}


def copy_snapshot(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """A copy of a host snapshot to change (symlinks kept, golden left out)."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns("expected.json"))
    return Path(dest)


def set_env(snapshot: str | os.PathLike[str], **values: str) -> None:
    """Set variables in a snapshot's ``env.json``."""
    path = Path(snapshot) / "env.json"
    env = json.loads(path.read_text()) if path.is_file() else {}
    env.update(values)
    path.write_text(json.dumps(env, indent=2))


def set_metadata(snapshot: str | os.PathLike[str], kind: str, key: str, value: str) -> None:
    """Set one metadata answer (``kind`` ``gce`` or ``ec2``) in a snapshot's ``metadata.json``."""
    path = Path(snapshot) / "metadata.json"
    spec = json.loads(path.read_text()) if path.is_file() else {}
    spec.setdefault(kind, {})[key] = value
    path.write_text(json.dumps(spec, indent=2))
