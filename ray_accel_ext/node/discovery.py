"""Run every enabled backend against one host and collect a :class:`NodeInventory`.

The whole run is bounded by the host's deadline (``RAY_ACCEL_BUDGET_S``, default 3 s), from the
first entry-point read to the last answer; nothing it starts can make the caller wait longer:

* the entry-point scan runs on a daemon thread (a stuck ``site-packages`` read cannot hold it);
* an in-tree backend is imported, built, and asked ``detect``/``describe`` on its own daemon thread
  (started one after another, :data:`~.envelope.STAGGER_S` apart at most); a third-party backend does the same in a forked
  worker process (:mod:`ray_accel_ext.node.isolate`), so ``os._exit``, a native crash or a busy loop
  ends only that worker;
* the host checks (entry directories, PCI functions, directories that could not be listed) run on
  a daemon thread too, since any read can block.

A backend still at a stage when the budget is spent is abandoned (a worker killed) and reported
as a ``budget`` problem naming the stage; whatever a backend raises, ``BaseException`` included,
is reported like an exception. Errors of one backend never hide another's devices. Answers are
checked (prefix, consistency, text that no node should publish: :mod:`ray_accel_ext.bounds`) and
every message is redacted (:mod:`ray_accel_ext.redact`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backend import AcceleratorBackend
from ..errors import BackendLoadError, DescriptionError
from ..host import FsHost, Host, host_from_env
from ..labels import key_prefix
from ..model import NodeDescription, NodeInventory, Problem
from ..problems import (
    BACKEND_CRASH,
    BACKEND_LOAD,
    BACKEND_NOT_STARTED,
    BUDGET,
    DEGRADED,
    code_of,
    code_of_error_name,
    valid_code,
)
from ..redact import redact
from .answers import LabelBudget, bounded, check_counts, declaration_problems
from .checks import description_problems
from .envelope import CHECKS_MARGIN_S, STAGGER_S, join_ends
from .host_checks import access_problems, host_problems, sku_file_problems
from .isolate import Worker, can_fork, isolation_mode
from .registry import BackendInfo, BackendSpec, construct_error, import_backend_class, problem_message, scan_backends

__all__ = ["discover", "discover_node", "Discovery"]

log = logging.getLogger("ray_accel_ext")

_MAX_MESSAGE = 1000
MAX_WORKERS = 32


@dataclass(frozen=True)
class Discovery:
    """A discovery run: the inventory, and the declared data of every backend that answered
    (the visible-devices capping needs it; a worker's backend class never exists here)."""

    inventory: NodeInventory
    backends: Mapping[str, BackendInfo] = field(default_factory=dict)


def discover(host: Host | None = None, *, backends: Sequence[AcceleratorBackend] | None = None) -> NodeInventory:
    """Describe every accelerator family on ``host`` (default: ``RAY_ACCEL_ROOT`` or the live host)."""
    return discover_node(host, backends=backends).inventory


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


class _InProcess:
    """One backend on a daemon thread: (import and build, when given a spec) detect, describe."""

    def __init__(self, host: Host, *, spec: BackendSpec | None = None, backend: AcceleratorBackend | None = None) -> None:
        self.host, self.spec, self.backend = host, spec, backend
        self.name = spec.name if spec is not None else backend.name  # type: ignore[union-attr]
        self.in_tree = spec.in_tree if spec is not None else True  # a backend object handed in by the caller
        self.stage = "import" if spec is not None else "detect"
        self.info: BackendInfo | None = None
        self.desc: Any = None
        self.failure: tuple[str, str, str] | None = None
        self.code: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"ray-accel-{self.name}", daemon=True)

    def _run(self) -> None:
        try:
            backend = self.backend
            if backend is None:
                spec = self.spec
                cls = import_backend_class(spec)  # type: ignore[arg-type]
                self.stage = "construct"
                try:
                    backend = cls()
                except BaseException as exc:  # noqa: BLE001 - SystemExit in a constructor included
                    raise construct_error(spec, exc) from exc  # type: ignore[arg-type]
            self.info = BackendInfo.of(backend)
            self.stage = "detect"
            found = backend.detect(self.host)
            if found:
                self.stage = "describe"
                self.desc = backend.describe(self.host)
        except BackendLoadError as exc:
            self.failure = ("load", type(exc).__name__, exc.message)
            self.code = code_of(exc)
        except BaseException as exc:  # noqa: BLE001 - a backend must never take the node down
            self.failure = (self.stage, type(exc).__name__, problem_message(exc))
            self.code = code_of(exc)

    def problem(self) -> tuple[str, str, str] | None:
        if self.thread.is_alive():
            return ("budget", "TimeoutError",
                    f"still at {self.stage} after the {self.host.deadline.budget_s:g}s discovery budget; abandoned")
        return self.failure

    def answer(self) -> Any:
        return self.desc


class _Isolated:
    """One backend in a worker process, supervised by a daemon thread."""

    def __init__(self, host: Host, spec: BackendSpec) -> None:
        self.name = spec.name
        self.in_tree = spec.in_tree
        self.worker = Worker(spec, host)
        self.thread = threading.Thread(target=self.worker.supervise, name=f"ray-accel-{spec.name}-worker", daemon=True)

    @property
    def info(self) -> BackendInfo | None:
        return self.worker.info

    @property
    def code(self) -> str | None:
        return self.worker.code

    def problem(self) -> tuple[str, str, str] | None:
        found = self.worker.problem()
        if found is not None and found[0] in ("import", "validate", "construct"):
            return ("load", found[1], found[2])
        return found

    def answer(self) -> Any:
        data = self.worker.result
        if data is None:
            return None
        check_counts(data)
        return NodeDescription.from_dict(data)


def _scan(host: Host, problems: list[Problem]) -> list[BackendSpec]:
    """The enabled backends' entry points, read on a daemon thread within the budget."""
    found: list[Any] = []

    def run() -> None:
        try:
            found.append(scan_backends(host.env))
        except BaseException as exc:  # noqa: BLE001 - a broken distribution on sys.path
            found.append(exc)

    t = threading.Thread(target=run, name="ray-accel-entry-points", daemon=True)
    t.start()
    t.join(host.deadline.remaining())
    if not found:
        problems.append(Problem(code=BUDGET, backend="registry", stage="budget", error="TimeoutError",
                                message=f"reading the installed backends' entry points took more than the "
                                        f"{host.deadline.budget_s:g}s discovery budget; no backend loaded"))
        return []
    if isinstance(found[0], BaseException):
        problems.append(Problem(code=BACKEND_LOAD, backend="registry", stage="load", error=type(found[0]).__name__,
                                message=f"reading the installed backends' entry points failed: {_text(found[0])}"))
        return []
    specs, clashes = found[0]
    for name, code, message in clashes:
        if name == "registry":  # a distribution skipped, an entry point refused
            problems.append(Problem(code=code, backend=name, stage="load", error=BackendLoadError.__name__,
                                    message=message))
            continue
        problems.append(Problem(code=BACKEND_LOAD, backend=name, stage="load", error=BackendLoadError.__name__,
                                message=f"{message}; this name is not loaded, the other backends are"))
    return specs


def discover_node(host: Host | None = None, *, backends: Sequence[AcceleratorBackend] | None = None) -> Discovery:
    """:func:`discover`, with the declared data of the backends that answered."""
    started = time.perf_counter()
    host = host if host is not None else host_from_env()
    problems: list[Problem] = []
    tasks = _tasks(host, problems) if backends is None else [_InProcess(host, backend=b) for b in backends]
    _start(tasks, host)
    host_found: list[Problem] = []

    def backends_done() -> set[str]:
        """Waits for the backends, up to just before the budget's end; the PCI vendors their
        workers read."""
        end = host.deadline.end - CHECKS_MARGIN_S
        for task in tasks:
            task.thread.join(max(0.0, end - time.monotonic()))
        return {v for task in tasks if isinstance(task, _Isolated) for v in task.worker.pci_vendors}

    def check_host() -> None:
        host_found.extend(host_problems(host, backends_done))
        host_found.extend(sku_file_problems())  # may read extra SKU files: on this thread too

    checker = threading.Thread(target=check_host, name="ray-accel-host-checks", daemon=True)
    checker.start()
    _join(tasks, checker, host)
    descriptions, declared = _answers(tasks, problems)
    if checker.is_alive():
        problems.append(Problem(code=BUDGET, backend="host", stage="budget", error="TimeoutError",
                                message=f"the host checks (PCI functions, device directories) were still reading after "
                                        f"the {host.deadline.budget_s:g}s discovery budget; abandoned"))
    problems.extend(list(host_found))
    problems.extend(access_problems(host, problems))
    inventory = NodeInventory(
        descriptions=tuple(descriptions),
        problems=tuple(dataclasses.replace(p, message=_clean(p.message)) for p in problems),
        elapsed_s=time.perf_counter() - started,
    )
    for reason in inventory.reasons():
        log.warning("ray_accel_ext discovery degraded: %s", reason)
    return Discovery(inventory, declared)


def _tasks(host: Host, problems: list[Problem]) -> list[Any]:
    """A task per enabled backend: third-party ones (all, in ``all`` mode) in a worker process."""
    tasks: list[Any] = []
    mode = isolation_mode(host.env)
    # A recording host (doctor, record) cannot be shared with a child: its workers get the host
    # it records, so a backend's os._exit or stray thread never ends those commands (what a
    # worker's backend reads is not in the recording).
    forkable = host if isinstance(host, FsHost) else getattr(host, "inner", None)
    fork = can_fork() and isinstance(forkable, FsHost) and mode != "none"
    # Workers first, from this thread, before any thread of ours runs (isolate's module doc);
    # at most MAX_WORKERS, and none once half the budget is spent forking: 600 backends that sleep
    # at import would otherwise take the whole budget before any backend ran.
    workers = 0
    unstarted: list[str] = []
    for spec in _scan(host, problems):
        if fork and (mode == "all" or not spec.in_tree):
            if workers >= MAX_WORKERS or host.deadline.remaining() < host.deadline.budget_s / 2:
                unstarted.append(spec.name)
                continue
            workers += 1
            try:
                tasks.append(_Isolated(forkable, spec))
                continue
            except OSError as exc:  # no fork possible (process limit): in a thread instead
                log.warning("ray_accel_ext: no worker process for %s (%s); running it in a thread", spec.name, exc)
        tasks.append(_InProcess(host, spec=spec))
    why = (f"a node runs at most {MAX_WORKERS} backend worker processes, started in the first half of the "
           f"{host.deadline.budget_s:g}s discovery budget")
    for name in unstarted[:MAX_WORKERS]:  # each named; past that, one line for the rest
        problems.append(Problem(code=BACKEND_NOT_STARTED, backend=name, stage="budget", error="TimeoutError",
                                message=f"not started: {why}"))
    if len(unstarted) > MAX_WORKERS:
        rest = unstarted[MAX_WORKERS:]
        problems.append(Problem(code=BACKEND_NOT_STARTED, backend="registry", stage="budget", error="TimeoutError",
                                message=f"{len(rest)} more third-party backend(s) not started "
                                        f"({', '.join(rest[:3])}, ...): {why}"))
    return tasks


def _start(tasks: list[Any], host: Host) -> None:
    for task in tasks:
        if isinstance(task, _Isolated):
            task.thread.start()
    for task in tasks:
        if isinstance(task, _InProcess):
            task.thread.start()
            # Staggered: the next backend starts when this one is done or has had STAGGER_S.
            # Backends mostly read the same sysfs files, and running them all at once tripled
            # discovery time through GIL hand-offs (8 ms sequential vs 20-25 ms threaded on the
            # 8x H100 snapshot); a slow or hung backend delays the others by at most STAGGER_S.
            task.thread.join(min(STAGGER_S, host.deadline.remaining()))


def _join(tasks: list[Any], checker: threading.Thread, host: Host) -> None:
    """Wait for every task and the host checks up to one end (a join per task with its own grace
    would add up); kill the workers still running then."""
    in_process_end, worker_end = join_ends(host.deadline)
    for task in tasks:
        end = worker_end if isinstance(task, _Isolated) else in_process_end
        task.thread.join(max(0.0, end - time.monotonic()))
    checker.join(max(0.0, in_process_end - time.monotonic()))
    for task in tasks:
        if isinstance(task, _Isolated) and task.thread.is_alive():
            task.worker.kill_now()


def _answers(tasks: list[Any], problems: list[Problem]) -> tuple[list[NodeDescription], dict[str, BackendInfo]]:
    """The checked descriptions and the declarations of the backends that gave one; every failure
    appended to ``problems``."""
    descriptions: list[NodeDescription] = []
    declared: dict[str, BackendInfo] = {}
    budget = LabelBudget()
    checked: dict[int, tuple[Any, Any, Any]] = {}
    for task in sorted(tasks, key=lambda t: not t.in_tree):  # the in-tree families' labels first
        failure, code = task.problem(), task.code
        desc = None
        if task.info is not None:
            for line in task.info.declare_codes():
                log.warning("ray_accel_ext: backend %s: %s", task.name, line)
        if failure is None:
            try:
                desc = _checked(task.info, task.answer(), in_tree=task.in_tree, budget=budget)
            except Exception as exc:  # noqa: BLE001 - a malformed answer (from a worker: any data)
                failure, code = ("describe", type(exc).__name__, _text(exc)), code_of(exc)
        checked[id(task)] = failure, code, desc
    for task in tasks:
        failure, code, desc = checked[id(task)]
        if failure is not None:
            problems.append(Problem(code=_failure_code(failure[0], failure[1], code), backend=task.name,
                                    stage=failure[0], error=failure[1], message=failure[2]))
        if desc is not None:
            descriptions.append(desc)
            declared[task.name] = task.info
    return descriptions, declared


def _failure_code(stage: str, error: str, code: str | None) -> str:
    """The code of a backend-level failure: a precise code its raiser gave it (a reserved prefix
    at load), else its stage for load and budget, else the code of what was raised (from its
    structure), else a crash."""
    precise = code if code and code != DEGRADED and valid_code(code) else None
    if stage == "load":
        return precise if precise is not None and precise != BACKEND_CRASH else BACKEND_LOAD
    if stage == "budget":
        return BUDGET
    return precise or code_of_error_name(error, BACKEND_CRASH)


def _clean(message: str) -> str:
    """A message fit for the node log: redacted, one bounded line."""
    text = redact(message)
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + f"... ({len(text)} characters)"


def _checked(info: BackendInfo | None, desc: Any, *, in_tree: bool, budget: LabelBudget) -> NodeDescription | None:
    """``desc`` validated against the backend's declarations (checked again here: :mod:`.answers`)
    and bounded, with value problems added and every problem message cleaned; None when the
    backend found nothing."""
    if desc is None:
        return None
    if info is None:
        raise DescriptionError("the backend's declarations (name, prefix, resource) never arrived")
    found = declaration_problems(info, in_tree=in_tree)
    if found:
        raise DescriptionError("; ".join(text for _, text in found) + " (checked again in the node-start process)",
                               "declarations", code=found[0][0])
    if not isinstance(desc, NodeDescription):
        raise DescriptionError(f"describe() returned {type(desc).__name__}, expected NodeDescription")
    if desc.backend != info.name:
        raise DescriptionError(f"backend is {desc.backend!r}, expected {info.name!r}", "backend")
    for key in desc.attributes:
        if key_prefix(key) != info.label_prefix:
            raise DescriptionError(f"key {key!r} is outside the backend's prefix {info.label_prefix!r}", "attributes")
    if desc.resource_name != info.resource_name:
        raise DescriptionError(f"resource_name is {desc.resource_name!r}, the backend declares {info.resource_name!r}",
                               "resource_name")
    desc = bounded(desc, budget)
    errors = desc.consistency_errors()
    if errors:
        raise DescriptionError("; ".join(errors))
    cleaned = tuple(_cleaned(p) for p in (*desc.problems, *description_problems(desc)))
    return desc if cleaned == desc.problems else dataclasses.replace(desc, problems=cleaned)


def _cleaned(problem: Problem) -> Problem:
    """``problem`` fit for the node log: message and hint cleaned, a malformed code (what a
    backend made up: not lowercase words joined by dashes) named in the message instead."""
    code, message = problem.code, problem.message
    if not valid_code(code):
        code, message = DEGRADED, f"[malformed problem code {str(code)[:40]!r}] {message}"
    hint = _clean(problem.hint) if problem.hint else problem.hint
    device = problem.device if isinstance(problem.device, int) or problem.device is None else _clean(str(problem.device))
    return dataclasses.replace(problem, code=code, message=_clean(message), hint=hint, device=device)
