"""Shared helpers of the reliability tests: label checks and the results file the fault report reads.

Every reliability test module records each case it tried (class, outcome, discovery time, hang,
crash, invalid labels) in a :class:`Results`; at module end it is written to
``artifacts/reliability/<module>.json``, which ``ci/fault_report.py`` turns into the table in
``docs/reliability.md``. Outcomes: ``correct`` (the same answer as without the fault), ``degraded``
(the node starts labelled ``rayaccel.io/discovery=degraded`` and says why), ``clear error`` (a typed
error of ``ray_accel_ext.errors`` or a ``ValueError`` that names the bad input), ``unflagged change``
(a different answer without the degraded label: listed in the report, so each one is looked at).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray._private import label_utils

from ray_accel_ext.labels import TPU_SUBSLICE_PREFIX, is_valid_key, is_valid_value
from ray_accel_ext.node.tpu_subslices import RAY_SHAPES_2D, RAY_SHAPES_3D
from tests.support.paths import REPO

RESULTS_DIR = REPO / "artifacts" / "reliability"
# What a loaded 2-core machine may add to a bounded operation before a test calls it a failure:
# far below every hang the kits have (10 s, an hour, until the server stops).
LOAD_SLACK_S = 5.0
OUTCOMES = ("correct", "degraded", "clear error", "unflagged change")
# The ray.io/ keys the adapter may set (DESIGN section 4); anything else under ray.io/ is an injection.
RAY_KEYS = frozenset(
    f"ray.io/{k}" for k in ("accelerator-type", "tpu-slice-name", "tpu-worker-id", "tpu-topology", "tpu-pod-type", "gpu-domain")
) | frozenset(TPU_SUBSLICE_PREFIX + shape for shape in RAY_SHAPES_2D + RAY_SHAPES_3D)
# Python errors that mean a backend or parser was surprised by its input (not a clear error).
SURPRISES = frozenset(
    {"TypeError", "KeyError", "IndexError", "AttributeError", "ZeroDivisionError", "RecursionError",
     "UnicodeDecodeError", "UnicodeEncodeError", "OverflowError", "MemoryError", "AssertionError",
     "NameError", "UnboundLocalError", "StopIteration", "NotImplementedError"}
)


def label_errors(labels: Mapping[str, str]) -> list[str]:
    """Why ``labels`` would not work with Ray's label selectors (empty when every pair is valid).

    Checked twice: by our own rules (``ray_accel_ext.labels``) and by Ray 2.60's validators
    (``ray._private.label_utils``: node-label syntax and the selector syntax a user would write to
    match the value).
    """
    errors: list[str] = []
    for key, value in labels.items():
        if not is_valid_key(key) or label_utils.validate_label_key(key):
            errors.append(f"invalid key {key!r}")
        if not isinstance(value, str) or not is_valid_value(value):
            errors.append(f"invalid value {key}={value!r}")
            continue
        try:
            label_utils.validate_node_label_syntax({key: value})
        except ValueError as exc:
            errors.append(f"Ray rejects {key}={value!r}: {exc}")
        if value and label_utils.validate_label_selector({key: value}):
            errors.append(f"no selector matches {key}={value!r}")
        if key.startswith("ray.io/") and key not in RAY_KEYS:
            errors.append(f"unexpected key in Ray's namespace {key!r}")
    return errors


def surprises(inventory) -> list[str]:
    """Problems that are raw Python exceptions of a backend (a crash inside discovery)."""
    return [f"{p.backend}/{p.stage}: {p.error}: {p.message}" for p in inventory.problems if p.error in SURPRISES]


class Results:
    """The cases one test module tried; :meth:`write` puts them where the fault report reads."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.cases: list[dict[str, Any]] = []

    def add(
        self,
        group: str,
        cls: str,
        outcome: str,
        *,
        elapsed_s: float | None = None,
        hang: bool = False,
        crash: bool = False,
        invalid_labels: int = 0,
        detail: str = "",
        budget_s: float | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Record one case. ``group`` is the table section (``metadata fault``, ``corrupt host``...);
        ``extra`` fields (``reported``, ``start_s``...) are kept for the report's own sections."""
        assert outcome in OUTCOMES, outcome
        case = {
            "group": group,
            "class": cls,
            "outcome": outcome,
            "elapsed_s": None if elapsed_s is None else round(elapsed_s, 4),
            "budget_s": budget_s,
            "hang": hang,
            "crash": crash,
            "invalid_labels": invalid_labels,
            "detail": detail[:300],
            **{k: (v[:400] if isinstance(v, str) else v) for k, v in extra.items()},
        }
        self.cases.append(case)
        return case

    def write(self) -> Path | None:
        """Write the cases (a run that selected none of them, ``-k``, leaves the last file alone)."""
        if not self.cases:
            return None
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{self.module}.json"
        data = {"module": self.module, "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "pid": os.getpid(), "cases": self.cases}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(path)
        return path


# -- real `ray start` through the hook, for the hostile-host classes --------------------------------


RAY_STARTUP_TIMEOUT = "The current node timed out during startup"


def without_dac_override() -> list[str] | None:
    """A command prefix that runs a program as root without ``CAP_DAC_OVERRIDE`` and
    ``CAP_DAC_READ_SEARCH`` (file modes then apply, as to an unprivileged user, while the program
    can still read the interpreter under a mode-700 home); None where that is not possible."""
    import shutil

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def _is_ray_start(cmdline: list[str]) -> bool:
    return len(cmdline) >= 3 and cmdline[1].endswith("/ray") and cmdline[2] == "start"


def start_processes(marker: str) -> list[Any]:
    """Live (non-zombie) processes of a ``ray start`` command line naming ``marker``: the ``ray
    start`` process itself and everything the hook forked (a fork keeps its parent's command line)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and _is_ray_start(proc.info["cmdline"] or []) \
                    and any(marker in part for part in proc.info["cmdline"]):
                out.append(proc)
        except (psutil.Error, TypeError):
            continue
    return out


class HookCluster:
    """A head started like ``SimulatedCluster`` does, and worker nodes started with a plain, non-
    blocking ``ray start`` (the command exits once its node is up, as on a real VM), so that each
    worker's exit status, its wall time and what is left of its process tree can be read.

    A snapshot's env.json may hold hostile values (a NUL, other scripts' digits). The harness puts
    env.json into ``ray start``'s environment (``SimulatedCluster``: Ray's own code reads some of
    it); such values are left out there and reach only the hook, through the snapshot
    (``RAY_ACCEL_ROOT``): a NUL cannot be in a process environment at all, and Ray's own TPU
    manager copies ``TPU_TOPOLOGY`` into a node label without checking it, which is Ray's to fix.
    """

    def __init__(self) -> None:
        from ray_accel_ext.testing.cluster import SimulatedCluster

        class _Cluster(SimulatedCluster):
            def _argv(self, node, head, num_cpus, extra_args):
                argv = super()._argv(node, head, num_cpus, extra_args)
                return argv if head else [*node.extra.get("prefix", ()), *(a for a in argv if a != "--block")]

            def _launch(self, node, head, num_cpus, extra_args):
                node.env = {k: v for k, v in node.env.items() if v.isascii() and "\x00" not in v}
                node.extra["launched"] = time.monotonic()
                super()._launch(node, head, num_cpus, extra_args)

        self.cluster = _Cluster()

    def __enter__(self) -> "HookCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cluster.shutdown()

    def start_batch(self, specs: list[tuple[Any, dict[str, Any]]], timeout_s: float = 180.0) -> dict[str, dict[str, Any]]:
        """Start worker nodes together (options: ``name``, ``num_cpus``, ``env``, ``prefix``: a
        command prefix such as :func:`without_dac_override`); per name: ``rc``, ``wall_s`` (launch to exit), ``left``
        (processes of that ``ray start`` still alive once it exited), ``log``, ``attempts``.

        A node whose ``ray start`` failed in Ray's own start-up after the hook returned (Ray waits
        a fixed 30 s for the raylet to register with the GCS, ``ray/_private/node.py``; on a loaded
        shared machine that can run out) is started once more; the attempts are reported."""
        out: dict[str, dict[str, Any]] = {}
        todo = [(snapshot, dict(opts), 1) for snapshot, opts in specs]
        while todo:
            launched = [(self._launch(snapshot, opts), snapshot, opts, attempt) for snapshot, opts, attempt in todo]
            todo = []
            for node, snapshot, opts, attempt in launched:
                run = self._wait_exit(node, timeout_s)
                run["attempts"] = attempt
                ray_gave_up = run["rc"] not in (0, None) and RAY_STARTUP_TIMEOUT in run["log"] and '"start_hook"' in run["log"]
                if ray_gave_up and attempt < 2:
                    self.cluster.kill_node(node)
                    self.cluster.nodes.remove(node)
                    todo.append((snapshot, opts, attempt + 1))
                else:
                    out[node.name] = run
        return out

    def _launch(self, snapshot: Any, opts: dict[str, Any]) -> Any:
        c = self.cluster
        node = c._prepare(snapshot, opts["name"], opts.get("env"))
        node.extra["prefix"] = tuple(opts.get("prefix", ()))
        c.nodes.append(node)
        c._launch(node, False, opts.get("num_cpus") or 0, ())
        return node

    @staticmethod
    def _wait_exit(node: Any, timeout_s: float) -> dict[str, Any]:
        deadline = node.extra["launched"] + timeout_s
        while time.monotonic() < deadline and node.process.poll() is None:
            time.sleep(0.05)
        rc = node.process.poll()
        wall = time.monotonic() - node.extra["launched"] if rc is not None else None
        time.sleep(0.2)  # what the hook killed is reaped by now
        left = [p.pid for p in start_processes(str(node.temp_dir))] if rc is not None else []
        return {"rc": rc, "wall_s": wall, "left": left, "log": node.log()}


def hook_events(log: str) -> dict[str, dict[str, Any]]:
    """The last ``discovery`` and ``start_hook`` telemetry events in a ``ray start`` log, by event."""
    out: dict[str, dict[str, Any]] = {}
    for line in log.splitlines():
        if '"event": "' in line and "{" in line:
            try:
                event = json.loads(line[line.index("{"):])
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") in ("discovery", "start_hook"):
                out[event["event"]] = event
    return out
