"""``ray-accel conformance NAME``: run the shared conformance suite on one backend and print
CHECKLIST.md as a table of pass/fail/skip with reasons (``--format json``; ``--junit FILE``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ...conformance.checklist import ITEMS
from ...conformance.settings import ENV, REPORT_ENV
from ._common import add_format_option, clip, print_json, table


def register(sub) -> None:
    p = sub.add_parser("conformance", help="run the backend conformance suite", description=__doc__)
    p.add_argument("backend", metavar="NAME", help="installed backend entry-point name, or 'pkg.module:Class'")
    p.add_argument("--snapshots", metavar="DIR", action="append",
                   help="host snapshot directory or folder of them (repeatable; default tests/data/hosts/NAME)")
    p.add_argument("--xfails", metavar="FILE", help="known failures: 'BaseXTests::test_y[snap]  # reason link' per line")
    p.add_argument("--live-ray", action="store_true", help="also start a real Ray node from one snapshot (slow)")
    p.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report (for CI)")
    p.add_argument("--json-report", metavar="FILE", help="also write the --format json document to FILE")
    add_format_option(p)
    p.set_defaults(func=run)


def run_suite(args: argparse.Namespace) -> tuple[int, list[dict[str, Any]], str]:
    """Run the suite in a fresh pytest process; (exit code, per-test results, pytest output)."""
    with tempfile.TemporaryDirectory(prefix="ray-accel-conformance-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")  # keep the caller's own pytest configuration out of the run
        report = Path(tmp) / "report.json"
        env = dict(os.environ)
        env.update({ENV["backend"]: args.backend, REPORT_ENV: str(report)})
        if args.snapshots:
            env[ENV["snapshots"]] = os.pathsep.join(str(Path(s).resolve()) for s in args.snapshots)
        else:
            env.pop(ENV["snapshots"], None)
            default = Path("tests/data/hosts") / args.backend
            if default.is_dir():
                env[ENV["snapshots"]] = str(default.resolve())
        if args.xfails:
            env[ENV["xfails"]] = str(Path(args.xfails).resolve())
        env[ENV["live_ray"]] = "1" if args.live_ray else ""
        argv = [sys.executable, "-m", "pytest", "--pyargs", "ray_accel_ext.conformance", "-c", str(ini),
                "--rootdir", tmp, "-p", "ray_accel_ext.conformance.report", "-p", "no:cacheprovider", "-q", "-rN"]
        if args.junit:
            argv += ["--junitxml", str(Path(args.junit).resolve())]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        results = json.loads(report.read_text()) if report.is_file() else []
    return proc.returncode, results, proc.stdout + proc.stderr


def checklist(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checklist items with their tests' outcomes and an overall status each."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_id.setdefault(r["id"].split("[", 1)[0], []).append(r)
    out = []
    for item in ITEMS:
        tests = [r for t in item.tests for r in by_id.get(t, [])]
        outcomes = [t["outcome"] for t in tests]
        if not item.tests:
            status = "manual"
        elif any(o in ("failed", "error") for o in outcomes):
            status = "fail"
        elif any(o in ("passed", "xpassed") for o in outcomes):
            status = "pass" if "xfailed" not in outcomes else "pass (xfail)"
        elif outcomes and all(o == "xfailed" for o in outcomes):
            status = "xfail"
        elif outcomes:
            status = "skip"
        else:
            status = "not run"
        reasons = sorted({t["reason"] for t in tests if t["outcome"] != "passed" and t["reason"]})
        out.append({
            "item": item.slug, "title": item.title, "status": status,
            "counts": {o: outcomes.count(o) for o in sorted(set(outcomes))},
            "reasons": reasons, "tests": tests,
        })
    return out


def run(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        print("ray-accel conformance: the suite runs under pytest, which is not installed "
              "(pip install 'ray-accel-ext[test]' or pip install pytest)", file=sys.stderr)
        return 1
    code, results, output = run_suite(args)
    items = checklist(results)
    ok = code == 0 and bool(results)
    document = {"backend": args.backend, "passed": ok, "pytest_exit_code": code, "items": items, "tests": results}
    if args.json_report:
        Path(args.json_report).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    if args.format == "json":
        print_json(document)
        return 0 if ok else 1
    if not results:
        print(output.rstrip())
        print(f"ray-accel conformance: the suite did not run (pytest exit code {code})")
        return 1
    rows = []
    for it in items:
        counts = " ".join(f"{n} {o}" for o, n in it["counts"].items()) or "-"
        why = clip(it["reasons"][0], 110) if it["reasons"] else ("check by review (CHECKLIST.md)" if it["status"] == "manual" else "")
        if len(it["reasons"]) > 1:
            why += f" (+{len(it['reasons']) - 1} more)"
        rows.append((it["status"].upper(), it["title"], counts, why))
    print(f"conformance of {args.backend!r}:")
    print(table(rows, ("status", "checklist item", "tests", "first reason")))
    failures = [r for r in results if r["outcome"] in ("failed", "error")]
    if failures:
        print("\nfailures:")
        for r in failures:
            print(f"  {r['id']}: {r['reason']}")
    print(f"\n{'PASS' if ok else 'FAIL'}: {sum(r['outcome'] == 'passed' for r in results)} passed, "
          f"{len(failures)} failed, {sum(r['outcome'] == 'skipped' for r in results)} skipped, "
          f"{sum(r['outcome'] == 'xfailed' for r in results)} xfailed")
    return 0 if ok else 1
