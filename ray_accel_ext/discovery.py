"""Run every enabled backend against one host and collect a :class:`NodeInventory`.

Each backend runs in its own daemon thread (started one after another, see ``_STAGGER_S``) and
the whole run is bounded by the host's deadline
(``RAY_ACCEL_BUDGET_S``, default 3 s): a backend that is still working when the budget is spent is
abandoned and reported as a ``budget`` problem, so a stuck file read or tool can never hold up a
node start. Errors of one backend never hide another's devices.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Sequence

from .backend import AcceleratorBackend
from .errors import BackendLoadError, DescriptionError, HostReadError
from .host import Host, host_from_env
from .hw.pci import BDF_RE, PCI_DEVICES
from .labels import key_prefix
from .model import NodeDescription, NodeInventory, Problem
from .redact import redact
from .registry import load_backends

__all__ = ["discover"]

log = logging.getLogger("ray_accel_ext")

# Grace past the budget for threads that are about to finish; the budget itself is the bound.
_JOIN_GRACE_S = 0.05
_STAGGER_S = 0.25
_HEX_ID = re.compile(r"0x[0-9a-fA-F]{1,6}")
# Directories the backends' detect() start from. detect() never raises, so one that exists but
# cannot be listed (mode 000, a symlink loop) would read as "no accelerators, ok"; it is reported.
_ENTRY_DIRS = ("/sys/bus/pci/devices", "/dev")


def discover(
    host: Host | None = None,
    *,
    backends: Sequence[AcceleratorBackend] | None = None,
) -> NodeInventory:
    """Describe every accelerator family on ``host`` (default: ``RAY_ACCEL_ROOT`` or the live host)."""
    started = time.perf_counter()
    host = host if host is not None else host_from_env()
    problems: list[Problem] = []

    if backends is None:
        def on_error(name: str, exc: BaseException) -> None:
            problems.append(Problem(backend=name, stage="load", error=type(exc).__name__, message=str(exc)))

        try:
            backends = load_backends(host.env, on_error=on_error)
        except BackendLoadError as exc:  # duplicate registrations: loud, but the node still starts
            problems.append(Problem(backend="registry", stage="load", error=type(exc).__name__, message=str(exc)))
            backends = []

    problems.extend(_host_problems(host))

    results: dict[str, NodeDescription | None] = {}
    threads: list[tuple[AcceleratorBackend, threading.Thread]] = []
    lock = threading.Lock()

    def run(backend: AcceleratorBackend) -> None:
        stage = "detect"
        try:
            found = bool(backend.detect(host))
            stage = "describe"
            desc = backend.describe(host) if found else None
            if desc is not None:
                _check(backend, desc)
        except Exception as exc:  # noqa: BLE001 - a backend must never take the node down
            with lock:
                problems.append(Problem(backend=backend.name, stage=stage, error=type(exc).__name__, message=str(exc)))
            desc = None
        with lock:
            results[backend.name] = desc

    for backend in backends:
        t = threading.Thread(target=run, args=(backend,), name=f"ray-accel-{backend.name}", daemon=True)
        t.start()
        threads.append((backend, t))
        # Staggered: the next backend starts when this one is done or has had _STAGGER_S. Backends
        # mostly read the same sysfs files, and running them all at once tripled discovery time
        # through GIL hand-offs (8 ms sequential vs 20-25 ms threaded on the 8x H100 snapshot);
        # a slow or hung backend still delays the others by at most _STAGGER_S.
        t.join(min(_STAGGER_S, host.deadline.remaining()))
    for backend, t in threads:
        t.join(host.deadline.remaining() + _JOIN_GRACE_S)
        if t.is_alive():
            with lock:
                problems.append(
                    Problem(
                        backend=backend.name,
                        stage="budget",
                        error="TimeoutError",
                        message=f"still running after the {host.deadline.budget_s:g}s discovery budget; abandoned",
                    )
                )

    problems.extend(_sku_file_problems())
    with lock:
        descriptions = tuple(_redacted(results[b.name]) for b, _ in threads if results.get(b.name) is not None)
        inventory = NodeInventory(
            descriptions=descriptions,  # type: ignore[arg-type]
            problems=tuple(dataclasses.replace(p, message=redact(p.message)) for p in problems),
            elapsed_s=time.perf_counter() - started,
        )
    for reason in inventory.reasons():
        log.warning("ray_accel_ext discovery degraded: %s", reason)
    return inventory


def _host_problems(host: Host) -> list[Problem]:
    """What no backend can report, since ``detect()`` never raises: an entry directory that cannot
    be listed, and PCI functions whose vendor file is there but unreadable or garbage (a backend
    skips such a function, so its device would silently not exist)."""
    out: list[Problem] = []
    for path in _ENTRY_DIRS:
        try:
            host.listdir(path)
        except HostReadError as exc:
            out.append(Problem(backend="host", stage="detect", error=type(exc).__name__, message=str(exc)))
    bad: list[str] = []
    try:
        names = [n for n in host.listdir(PCI_DEVICES) if BDF_RE.match(n)]
    except HostReadError:
        names = []
    for name in names:
        # A dangling link or a function without a vendor file is a device that went away
        # (hot-unplug, SR-IOV teardown): not counted, not a problem. A vendor file that is there
        # but unreadable or garbage is.
        try:
            text = host.read_optional(f"{PCI_DEVICES}/{name}/vendor", max_bytes=64)
        except HostReadError:
            if not host.exists(f"{PCI_DEVICES}/{name}"):
                continue
            text = ""
        if text is not None and not _HEX_ID.fullmatch(text.strip()):
            bad.append(name)
    if bad:
        out.append(Problem(
            backend="host", stage="detect", error="HostReadError",
            message=f"{len(bad)} PCI function(s) without a readable vendor id ({', '.join(bad[:4])}"
                    f"{', ...' if len(bad) > 4 else ''}): devices there are not counted",
        ))
    return out


def _sku_file_problems() -> list[Problem]:
    """Extra SKU files that were skipped (bad JSON, a schema error): the node starts on the
    built-in data and says which file and field (``ray_accel_ext/skus/SCHEMA.md``)."""
    from . import skus

    return [Problem(backend="skus", stage="load", error="SkuFileError", message=line) for line in skus.load_problems()]


def _redacted(desc: NodeDescription) -> NodeDescription:
    """``desc`` with credentials cut out of its problem messages (they quote outside text, and
    they reach the node log, telemetry and recorded snapshots)."""
    cleaned = tuple(redact(p) for p in desc.problems)
    return desc if cleaned == desc.problems else dataclasses.replace(desc, problems=cleaned)


def _check(backend: AcceleratorBackend, desc: NodeDescription) -> None:
    if not isinstance(desc, NodeDescription):
        raise DescriptionError(f"describe() returned {type(desc).__name__}, expected NodeDescription")
    if desc.backend != backend.name:
        raise DescriptionError(f"backend is {desc.backend!r}, expected {backend.name!r}", "backend")
    for key in desc.attributes:
        if key_prefix(key) != backend.label_prefix:
            raise DescriptionError(f"key {key!r} is outside the backend's prefix {backend.label_prefix!r}", "attributes")
    errors = desc.consistency_errors()
    if errors:
        raise DescriptionError("; ".join(errors))
