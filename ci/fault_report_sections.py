"""Sections of docs/reliability.md about the hostile host (``ci/fault_report.py`` assembles the page).

Only prose and tables built from the results: ``hostile_ray`` (real ``ray start`` per class,
tests/reliability/test_hostile_ray.py), ``hostile`` (the same classes in-process,
tests/reliability/test_hostile.py), ``trust`` and ``trust_ray`` (the trust boundaries with each
case's problem code, test_trust.py and test_trust_ray.py) and the benchmark's ``bench_discovery.json``.
"""

from __future__ import annotations

import re

GUARANTEE = [
    "## The guarantee and the bound",
    "",
    "- A node start never fails and never hangs because of this package: the start hook",
    "  (`RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook`) returns within the **discovery budget**",
    "  `RAY_ACCEL_BUDGET_S` (default **3 s**) **plus one second**: discovery runs on a daemon thread the",
    "  hook waits for at most the budget plus `HOOK_GRACE_S` (0.75 s), and Ray's own accelerator",
    "  families (`ray_native`) get what is left of that second. Everything from the first entry-point read to the",
    "  last answer is under the budget: the entry-point scan, each in-tree backend (import,",
    "  construction, `detect`, `describe`) and the host checks run on daemon threads; each third-party",
    "  backend runs in a forked worker process (see *Process boundary*), killed with whatever it forked",
    "  when the budget is spent. A backend still at a stage then is reported naming that stage; whatever",
    "  a backend raises, `SystemExit`, `KeyboardInterrupt`, `GeneratorExit` and bare `BaseException`",
    "  included, is reported like an exception; a name two distributions register is dropped alone",
    "  (loudly) and `RAY_ACCEL_DISABLE=<name>` resolves it.",
    "- Reads: only regular files are opened. A FIFO, socket or device node is refused and named,",
    "  never opened (`stat`, then `open` with `O_NONBLOCK|O_NOCTTY` and, under a root, `O_NOFOLLOW`, then",
    "  `fstat` of what was opened: a file swapped in between can neither block the open nor be read).",
    "  A directory on the device path that cannot be listed or searched is a problem, never",
    "  \"no devices, ok\".",
    "- Metadata: each call is one exchange bounded as a whole (name lookup, connect, TLS, status line,",
    "  headers, `1xx` answers, body) by `RAY_ACCEL_METADATA_TIMEOUT_S` (default 0.5 s) and the budget;",
    "  the head is at most 64 KiB, at most 8 interim answers, the body at most 256 KiB (the one recursive",
    "  GCE `instance/` read 1 MiB, its JSON 32 levels deep); redirects are",
    "  refused; 429/5xx are retried at most twice, `Retry-After` honoured only while it fits. No thread",
    "  making a call outlives the budget, so the process exits promptly after the hook.",
    "- Values: only ASCII digits are numbers; numeric settings that are NaN, infinite, negative, zero,",
    "  absurd (budget over 60 s, timeout over 30 s) or not plain decimals are refused with a warning and",
    "  the default used; JSON is bounded (1 MiB, 32 levels) before it is parsed; a description's strings",
    "  are at most 1024 characters without control characters, and a value that becomes a Ray resource",
    "  name (an accelerator type, a TPU slice name) must be a valid label value, else it is left out and",
    "  the field named.",
    "- Secrets (`ray_accel_ext/redact.py`, the one owner): by name, and by structure (PEM blocks, URL",
    "  userinfo, `Bearer`/`Basic` credentials, secret-looking `key=value`, long high-entropy tokens)",
    "  in records, their README and golden, label values, logs and telemetry.",
    "- Whatever went wrong, the node is labelled `rayaccel.io/discovery=degraded` and the node log",
    "  says why; every label it publishes is valid for Ray's label selectors (checked with our rules",
    "  and with Ray 2.60's own validators), and the resources it adds are ones `ray start` accepts.",
    "",
    "What is outside the bound, and why:",
    "",
    "- A broken distribution on `sys.path` (a FIFO, non-UTF-8 bytes or a line without `=` as its",
    "  `entry_points.txt`): the `ray` command's own import builds a pydantic model, whose plugin scan",
    "  parses every distribution's entry points and blocks or raises there, before any hook runs",
    "  (`import ray` alone does not; `docs/vendors.md`, \"Register it\"). With",
    "  `PYDANTIC_DISABLE_PLUGINS=__all__` the node starts; our own scan skips that distribution and",
    "  says so (`distribution-skipped`).",
    "- A regular file whose read blocks in the kernel (a hung NFS or FUSE mount, a wedged driver):",
    "  the reading thread is abandoned at the budget and nothing waits for it; a worker process stuck",
    "  that way cannot be killed until the read returns.",
    "- A third-party backend that deliberately leaves its process group (`setsid` in a grandchild)",
    "  outlives the kill of the group; only a cgroup would stop it.",
    "- In-tree backends run in threads: this package's own code is trusted not to call `os._exit` or",
    "  spin; `RAY_ACCEL_ISOLATION=all` puts them in workers too, `none` runs every backend in threads.",
    "- Ray's own TPU manager copies `TPU_TOPOLOGY` and friends from the environment into node labels",
    "  unchecked; a hostile value there is Ray's to refuse.",
    "",
]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def hostile_ray_section(cases: list[dict]) -> list[str]:
    """A row per class that went through a real ``ray start``."""
    rows = [c for c in cases if c["module"] == "hostile_ray"]
    if not rows:
        return []
    nodes = sorted({c.get("node") for c in rows})
    hook = max((c["elapsed_s"] or 0) for c in rows)
    budget = rows[0].get("budget_s") or 3.0
    within = sum(bool(c["elapsed_s"] is not None and c["elapsed_s"] <= budget + 1.0) for c in rows)
    out = [
        "## Hostile host: real `ray start` per class",
        "",
        f"{len(rows)} classes through {len(nodes)} real `ray start` processes with the hook (classes of one kind",
        "share a node; every batch of nodes starts with an intact baseline node). Each `ray start` exited 0",
        "with its healthy families, valid labels and `rayaccel.io/discovery=degraded`, and left no process",
        "of its own behind; after the kill-based cleanup (no `ray stop`) nothing of the cluster was left.",
        f"Worst hook time **{hook:.2f} s** (budget {budget:g} s); {within} of {len(rows)} classes within the",
        "budget plus one second. `ray start` times are wall times on the shared 2-core test machine,",
        "launch to exit, next to the baseline node started with them.",
        "",
        "| class | what the host does | node | `ray start` (s) | baseline (s) | hook (s) | outcome | what was reported |",
        "|---|---|---|--:|--:|--:|---|---|",
    ]
    for c in rows:
        group = c["group"].removeprefix("ray start (").removesuffix(")")
        out.append(f"| {_cell(group)} | {_cell(c['class'])} | {c.get('node', '-')} | {c.get('start_s', '-')} | "
                   f"{c.get('baseline_s', '-')} | {c['elapsed_s'] if c['elapsed_s'] is not None else '-'} | "
                   f"{c['outcome']} | {_cell(c.get('reported', ''))[:160]} |")
    out.append("")
    return out


def hostile_inprocess_section(cases: list[dict]) -> list[str]:
    rows = [c for c in cases if c["module"] == "hostile"]
    if not rows:
        return []
    seen: dict[str, dict] = {}
    for c in rows:
        seen.setdefault(c["class"], c)
    out = ["## Hostile host in-process", "",
           "The same kit through `node_spec()` (what the hook runs) and its parts, plus what a real",
           "`ray start` cannot show on this machine (backends in threads, settings one by one, the",
           "metadata client alone, the process exit after the hook).", "",
           "| class | outcome | what was reported |", "|---|---|---|"]
    for cls, c in seen.items():
        out.append(f"| {_cell(cls)} | {c['outcome']} | {_cell(c.get('reported') or c['detail'])[:160]} |")
    out.append("")
    return out


def trust_section(cases: list[dict]) -> list[str]:
    """A row per trust-boundary case (CLI and real ``ray start``) with the problem code it was said with."""
    rows = [c for c in cases if c["module"] in ("trust", "trust_ray")]
    if not rows:
        return []
    out = ["## Trust boundaries: snapshots, third-party answers, settings and the dashboard", "",
           "Each case through the command a user runs (`ray-accel discover`, `ray-args`, `doctor`, `skus`,",
           "`record`; `tests/reliability/test_trust.py`) or a real `ray start` with the hook",
           "(`test_trust_ray.py`). The code is the problem's code (`docs/problems.md`) in",
           "`discover --format json`, `doctor --format json` or the hook's discovery event; readers decide",
           "from it, never from the words.", "",
           "| where | class | outcome | code | what was reported |", "|---|---|---|---|---|"]
    for c in rows:
        where = "ray start" if c["module"] == "trust_ray" else "CLI"
        group = c["group"].removeprefix("ray start (").removesuffix(")")
        code = f"`{c['code']}`" if c.get("code") else "-"
        said = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/\s]+", "<tmp>", str(c.get("reported") or c["detail"]))
        out.append(f"| {where} | {_cell(group)}: {_cell(c['class'])} | {c['outcome']} | {code} | {_cell(said)[:160]} |")
    out.append("")
    return out


def boundary_section(bench: dict | None) -> list[str]:
    out = [
        "## Process boundary: in-tree backends in threads, third-party backends in forked workers",
        "",
        "A thread bounds how long discovery *waits*, not what the code in it does: `os._exit`, a crash",
        "in native code or a loop that never yields ends or starves the `ray start` process. Only a",
        "process boundary contains those, so a backend that is not this package's own (module outside",
        "`ray_accel_ext.`, or another distribution) runs in a worker process `fork`ed from the discovering",
        "process (`ray_accel_ext/node/isolate.py`): its own process group, niced, stdio on `/dev/null`,",
        "progress and answer as bounded JSON lines on a pipe, the whole group killed at the answer or at",
        "the budget. Fork, not a fresh interpreter: the child already has this package imported (about",
        "10-50 ms per worker on the loaded 2-core machine, against about 600 ms to start and import in a",
        "new interpreter, which would eat the budget on such a machine). Workers are forked from the",
        "discovering thread before any other thread of discovery starts, so no lock of ours is held in",
        "the child. In-tree backends stay in threads: they are this package's code, need no fork, and",
        "`ray-accel record` (whose recording host must see every read) runs all backends in threads.",
        "",
    ]
    if not bench:
        return out + ["Cost: not measured in this run (`benchmarks/discovery.py` writes it).", ""]
    out += [f"Measured by `benchmarks/discovery.py` ({bench.get('written', '?')}, {bench.get('cpus', '?')} CPUs, "
            f"load {bench.get('load', '?')}), 8x H100 snapshot:", "",
            f"- discovery in-process with {len(bench.get('third_party', []))} third-party backend(s) installed "
            f"({', '.join(bench.get('third_party', []))}): {bench.get('threads_ms')} ms with every backend in a thread, "
            f"{bench.get('workers_ms')} ms with the third-party ones in forked workers (the default)."]
    if "ray_start_s" in bench:
        a = bench["ray_start_s"]
        out += [f"- `ray start --head` until up (median of {bench.get('starts')}): {a} s without the hook, "
                f"{bench['ray_start_hook_s']} s with it, {bench['ray_start_worker_s']} s with it and one more third-party "
                "backend (A/B medians on a shared machine: the noise is larger than the hook).",
                f"- the hook alone (import + `start_hook()` in a fresh process that imported ray): {bench['hook_s']} s "
                f"= **{100 * bench['hook_s'] / a:.1f} %** of `ray start`; with the worker {bench['hook_worker_s']} s = "
                f"**{100 * bench['hook_worker_s'] / a:.1f} %** (budget: under 5 %)."]
    return out + [""]
