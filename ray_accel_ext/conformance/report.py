"""pytest plugin (loaded explicitly with ``-p ray_accel_ext.conformance.report``): write each
suite test's outcome as JSON to ``$RAY_ACCEL_CONFORMANCE_REPORT`` for ``ray-accel conformance``."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from .settings import REPORT_ENV

_RESULTS = pytest.StashKey[dict]()


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (file, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr or "")
    return " ".join(text.split())[:400]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    from ._core import suite_id

    cls = getattr(item, "cls", None)
    if cls is None:
        return
    results = item.config.stash[_RESULTS]
    entry = results.setdefault(item.nodeid, {"id": suite_id(cls, item.name), "nodeid": item.nodeid, "outcome": "passed", "reason": ""})
    if report.when == "call" and hasattr(report, "wasxfail"):
        if report.skipped:
            entry["outcome"], entry["reason"] = "xfailed", report.wasxfail
        else:  # only non-strict xfail marks get here; the suite's are strict
            entry["outcome"], entry["reason"] = "xpassed", report.wasxfail
    elif report.failed:
        if entry["outcome"] != "failed":
            entry["outcome"] = "error" if report.when != "call" else "failed"
            entry["reason"] = _reason(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"], entry["reason"] = ("xfailed", report.wasxfail) if hasattr(report, "wasxfail") else ("skipped", _reason(report))


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "w") as fh:
            json.dump(list(session.config.stash[_RESULTS].values()), fh, indent=1)
