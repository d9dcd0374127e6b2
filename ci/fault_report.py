#!/usr/bin/env python3
"""Turn the reliability tests' results into docs/reliability.md.

The tests (``tests/reliability/test_*.py``) write every case they tried to
``artifacts/reliability/<module>.json``, and ``benchmarks/discovery.py`` writes what the process
boundary costs to ``artifacts/reliability/bench_discovery.json``; this script only aggregates them
(nothing here is typed by hand but the prose around the tables). Run after the tests::

    .venv/bin/pytest tests/reliability/          # one real-Ray file at a time on a small machine
    .venv/bin/python benchmarks/discovery.py     # optional: the hook's cost, boundary included
    .venv/bin/python ci/fault_report.py                 # writes docs/reliability.md
    .venv/bin/python ci/fault_report.py --check --out artifacts/reliability.md   # CI: also fail on
                                                        # any hang, crash or invalid label
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_report_sections import (  # noqa: E402
    GUARANTEE,
    boundary_section,
    hostile_inprocess_section,
    hostile_ray_section,
    trust_section,
)

RESULTS = REPO / "artifacts" / "reliability"
MODULES = {
    "metadata_faults": "tests/reliability/test_metadata.py",
    "corrupt_host": "tests/reliability/test_corrupt.py",
    "properties": "tests/reliability/test_properties.py",
    "security": "tests/reliability/test_security.py",
    "hook_ray": "tests/reliability/test_hook_ray.py",
    "soak": "tests/reliability/test_soak.py",
    "hostile": "tests/reliability/test_hostile.py",
    "hostile_ray": "tests/reliability/test_hostile_ray.py",
    "trust": "tests/reliability/test_trust.py",
    "trust_ray": "tests/reliability/test_trust_ray.py",
}
BENCH = "bench_discovery.json"
OUTCOMES = ("correct", "degraded", "clear error", "unflagged change")


def load(results: Path) -> tuple[list[dict], dict[str, str], list[str]]:
    cases: list[dict] = []
    written: dict[str, str] = {}
    missing: list[str] = []
    for module in MODULES:
        path = results / f"{module}.json"
        if not path.is_file():
            missing.append(module)
            continue
        data = json.loads(path.read_text())
        written[module] = data["written"]
        for case in data["cases"]:
            cases.append({**case, "module": module})
    return cases, written, missing


# Why a damaged file may change the answer without a degraded label. The first that matches wins.
# "Expected" entries are states a real machine can be in; "Gap" entries are open and named here.
_EXPLANATIONS = (
    (":missing:all ", "Expected: every file discovery reads is gone, which is what a host without these devices looks like"),
    ("missing:rootfs/sys/bus/pci/devices", "Expected: no /sys/bus/pci/devices at all is a host without PCI devices"),
    ("/numa_node", "Expected: sysfs without numa_node (some VMs) leaves the NUMA label out"),
    ("kernel/hostname", "Expected: without /proc/sys/kernel/hostname the host is named by /etc/hostname or /etc/machine-id (a host with none of them is degraded)"),
    ("dmi/id/product_name", "Gap (core, location.dmi): an unreadable DMI product name silently means 'not a cloud VM', so rack/block/cluster labels go"),
    ("kfd/topology", "Gap (downstream ray-accel-ext-amd, detect): one unreadable KFD node makes the whole AMD family vanish"),
)


def _explain(case: dict) -> str:
    text = f"{case['class']}:{case['detail']}"
    for needle, why in _EXPLANATIONS:
        if needle in text:
            return why
    return "Gap (not yet explained): look at the case"


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(cases: list[dict]) -> list[str]:
    rows: dict[tuple[str, str], dict] = {}
    for c in cases:
        row = rows.setdefault((c["group"], c["class"]), {"n": 0, "worst": None, "budget": None, "hang": 0, "crash": 0,
                                                          "invalid": 0, **{o: 0 for o in OUTCOMES}})
        row["n"] += 1
        row[c["outcome"]] += 1
        row["hang"] += bool(c["hang"])
        row["crash"] += bool(c["crash"])
        row["invalid"] += int(c["invalid_labels"])
        if c["elapsed_s"] is not None:
            row["worst"] = c["elapsed_s"] if row["worst"] is None else max(row["worst"], c["elapsed_s"])
        if c.get("budget_s"):
            row["budget"] = c["budget_s"]
    out = ["| input class | tried | cases | correct | degraded | clear error | unflagged change | worst time (s) | budget (s) | hangs | crashes | invalid labels |",
           "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for (group, cls), r in rows.items():
        out.append(f"| {group} | {cls} | {r['n']} | {r['correct']} | {r['degraded']} | {r['clear error']} | "
                   f"{r['unflagged change']} | {_fmt_s(r['worst'])} | {r['budget'] or '-'} | {r['hang']} | {r['crash']} | {r['invalid']} |")
    return out


def render(cases: list[dict], written: dict[str, str], missing: list[str], bench: dict | None = None) -> str:
    total = len(cases)
    hangs = sum(bool(c["hang"]) for c in cases)
    crashes = sum(bool(c["crash"]) for c in cases)
    invalid = sum(int(c["invalid_labels"]) for c in cases)
    by_outcome = defaultdict(int)
    for c in cases:
        by_outcome[c["outcome"]] += 1
    discovery = [c for c in cases if c["elapsed_s"] is not None and c["module"] in ("metadata_faults", "corrupt_host", "soak", "hook_ray")
                 and c["group"] != "soak (50 concurrent placements)" and not c["group"].startswith("metadata client")]
    worst = max(discovery, key=lambda c: c["elapsed_s"]) if discovery else None
    ray_start = [c for c in cases if c["module"] == "hook_ray"]
    soak = [c for c in cases if c["module"] == "soak"]
    lines = [
        "# Reliability and security: what was tried, and what happened",
        "",
        "<!-- generated by ci/fault_report.py from artifacts/reliability/*.json; do not edit by hand -->",
        "",
        "Every row below is a class of fault or bad input that the test run tried, with how many cases,",
        "what the node ended up as, and the worst time discovery took. The tests write each case to",
        "`artifacts/reliability/<module>.json`; `ci/fault_report.py` writes this page from them. Results of "
        + ", ".join(f"`{MODULES[m]}` ({w})" for m, w in written.items()) + ".",
        "",
        *GUARANTEE,
        "## Summary of this run",
        "",
        f"- **{total} cases**: " + ", ".join(f"{by_outcome[o]} {o}" for o in OUTCOMES) + ".",
        f"- **{hangs} hangs** (a case past its budget plus grace), **{crashes} crashed node starts or"
        f" backends** (an exception, or a problem that is a raw Python error), **{invalid} invalid labels**.",
    ]
    if worst is not None:
        lines.append(f"- Worst discovery time: **{worst['elapsed_s']:.3f} s** ({worst['group']}: {worst['class']}; "
                     f"budget {worst.get('budget_s') or '-'} s).")
    if ray_start:
        lines.append(f"- Real `ray start` through the hook: {len(ray_start)} faulted nodes, all started, all degraded; "
                     "per-node start times in the table notes below.")
    hostile = [c for c in cases if c["module"] == "hostile_ray"]
    if hostile:
        lines.append(f"- Hostile host through real `ray start`: {len(hostile)} classes on "
                     f"{len({c.get('node') for c in hostile})} nodes, every `ray start` exited 0, every node degraded "
                     f"with its cause named; worst hook time {max((c['elapsed_s'] or 0) for c in hostile):.2f} s.")
    if missing:
        lines.append(f"- Not in this run: {', '.join(MODULES[m] for m in missing)}.")
    lines += ["", *hostile_ray_section(cases), *boundary_section(bench), "## Table", "", *table(cases), ""]
    lines += [
        "Outcomes: **correct** = the same resources and labels as the intact host (the fault was absorbed,",
        "e.g. a retried 503, or the damaged file was not needed); **degraded** = the node starts with",
        "`rayaccel.io/discovery=degraded` and the log names the cause; **clear error** = the parser or",
        "client raised a typed error (`TopologyStringError`, `HostReadError`, `MetadataTimeout`, ...) or a",
        "`ValueError` naming the input; **unflagged change** = a different answer without the degraded",
        "label (listed below, each one explained).",
        "",
    ]
    changed = [c for c in cases if c["outcome"] == "unflagged change"]
    if changed:
        lines += ["## Unflagged changes", "",
                  "Damage that changed the answer without the degraded label, sorted by why. Counts are cases.", ""]
        buckets: dict[str, list[dict]] = defaultdict(list)
        for c in changed:
            buckets[_explain(c)].append(c)
        for why, group in sorted(buckets.items(), key=lambda kv: (kv[0].startswith("Gap"), kv[0])):
            lines.append(f"- **{why}** ({len(group)}):")
            for c in group[:6]:
                lines.append(f"  - {c['class']}: {c['detail'][:200]}")
            if len(group) > 6:
                lines.append(f"  - ... {len(group) - 6} more in `artifacts/reliability/{group[0]['module']}.json`")
        lines.append("")
    if ray_start:
        lines += ["## Real `ray start` under faults", "",
                  "| node | fault | discovery in `ray start` (s) | start time |", "|---|---|--:|---|"]
        for c in ray_start:
            lines.append(f"| {c['group']} | {c['class']} | {_fmt_s(c['elapsed_s'])} | {c['detail']} |")
        lines.append("")
    if soak:
        leak = next((c["detail"] for c in soak if c["detail"].startswith("leak check")), None)
        place = next((c["detail"] for c in soak if "placement groups left" in c["detail"]), None)
        lines += ["## Soak", ""]
        if leak:
            data = json.loads(leak.split(": ", 1)[1])
            lines += ["- 200 node-start discoveries (`node_spec()`, in a process of their own) on random snapshots, intact or damaged,",
                      f"  with a random metadata fault each: worst {data['worst_s']} s (budget 1.5 s in the soak);",
                      f"  between discovery 20 and 200: file descriptors {data['fds']:+d}, threads {data['threads']:+d},",
                      f"  RSS {data['rss_mib']:+} MiB, Python heap {data['heap_blocks']:+d} blocks; outcomes {data['outcomes']}."]
        if place:
            lines += ["- 50 concurrent `placement.reserve()` calls on a 6-node simulated cluster with four fabric domains:",
                      f"  no split domain, no overlapping reservation; {place.split(' | ')[-1]}."]
        lines.append("")
    lines += [
        "## Where each guarantee is tested",
        "",
        "| guarantee | test |",
        "|---|---|",
        "| metadata faults (GCE, EC2, IMDSv2 token) through the hook, and the client alone | `tests/reliability/test_metadata.py` |",
        "| corrupt hosts: missing, empty, binary, huge, unreadable (as user nobody), looping files | `tests/reliability/test_corrupt.py` (generator: `ray_accel_ext/testing/corrupt.py`) |",
        "| every parser and the adapter under hypothesis | `tests/reliability/test_properties.py` |",
        "| label-key injection, shell text, path traversal, tools, credentials in records/logs | `tests/reliability/test_security.py` |",
        "| real `ray start` per fault class | `tests/reliability/test_hook_ray.py` |",
        "| 200 discoveries + 50 concurrent placements, leaks and split domains | `tests/reliability/test_soak.py` |",
        "| hostile host (backends, special files, metadata servers, values) through real `ray start` | `tests/reliability/test_hostile_ray.py` (kit: `ray_accel_ext/testing/hostile.py`, `hostile_metadata.py`) |",
        "| the same in-process: backends in workers and threads, settings, prompt exit, secrets by structure | `tests/reliability/test_hostile.py` |",
        "| the conformance suite bounds every backend call | `tests/conformance/test_suite_bounds.py` |",
        "",
        "Fault injection: `ray_accel_ext/testing/fake_metadata.py` (`FAULT_CLASSES`: delays, hangs, resets,",
        "429 with and without `Retry-After`, 5xx, truncated, oversized, HTML, binary and empty bodies, slow drip);",
        "`ray_accel_ext/testing/hostile_metadata.py` (`BEHAVIOURS`: header drip, status drip, endless `100 Continue`,",
        "endless and huge declared bodies, redirect to another host).",
        "",
        *hostile_inprocess_section(cases),
        *trust_section(cases),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS), help="folder of <module>.json results")
    parser.add_argument("--out", default=str(REPO / "docs" / "reliability.md"))
    parser.add_argument("--check", action="store_true", help="exit 1 on any hang, crash or invalid label")
    args = parser.parse_args(argv)
    cases, written, missing = load(Path(args.results))
    bench_path = Path(args.results) / BENCH
    bench = json.loads(bench_path.read_text()) if bench_path.is_file() else None
    if not cases:  # a run that left the reliability tests out: nothing to report or check
        print(f"no results under {args.results}: run the reliability tests first", file=sys.stderr)
        return 0
    Path(args.out).write_text(render(cases, written, missing, bench))
    bad = [c for c in cases if c["hang"] or c["crash"] or c["invalid_labels"]]
    print(f"wrote {args.out}: {len(cases)} cases, {len(bad)} with a hang, crash or invalid label")
    if args.check and bad:
        for c in bad[:20]:
            print(f"  {c['module']}: {c['group']} / {c['class']}: {c['detail'][:200]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
