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

from ray_accel_ext.labels import is_valid_key, is_valid_value
from tests.support.paths import REPO

RESULTS_DIR = REPO / "artifacts" / "reliability"
OUTCOMES = ("correct", "degraded", "clear error", "unflagged change")
# The ray.io/ keys the adapter may set (DESIGN section 4); anything else under ray.io/ is an injection.
RAY_KEYS = frozenset(
    f"ray.io/{k}" for k in ("accelerator-type", "tpu-slice-name", "tpu-worker-id", "tpu-topology", "tpu-pod-type", "gpu-domain")
)
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
    ) -> dict[str, Any]:
        """Record one case. ``group`` is the table section (``metadata fault``, ``corrupt host``...)."""
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
