"""Corrupt hosts: every snapshot, every kind of damage to the files discovery reads.

For each host snapshot (in-tree backends and the downstream AMD package) the corrupt-host
generator (``ray_accel_ext.testing.corrupt``) makes damaged copies: missing, empty, binary, huge,
unreadable and looping-symlink files (and listed directories), a few random targets per kind plus
one copy with every target damaged at once. Discovery runs on each copy the way the start hook runs
it (``discover`` + ``to_ray_node``; unreadable copies as user nobody, since root reads mode-000
files). Every run must finish inside the budget, crash nothing, publish only valid labels, and be
either the intact answer or labelled degraded; answers that changed without the degraded label
are listed (they are allowed only where the damaged file was an optional hint).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")  # labels are checked by Ray's own parser (tests/support/reliability.py)

from ray_accel_ext.host import PASSTHROUGH_ENV, open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.testing.corrupt import KINDS, make_variants, remove_copy, targets_of
from ray_accel_ext.testing.snapshots import golden_of, serve_snapshot, snapshot_dirs
from tests.support.paths import HOSTS, REPO
from tests.support.reliability import SURPRISES, Results, label_errors, surprises, without_dac_override
from tests.support.scratch import scratch_dir

SNAPSHOTS = snapshot_dirs(HOSTS)
BUDGET_S = 3.0
GRACE_S = 0.5  # thread start/join and the adapter, on a busy 2-core machine
PER_KIND = 2

_results = Results("corrupt_host")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    _results.write()


@pytest.fixture(scope="module")
def workdir():
    # World-traversable, so user nobody can reach the unreadable copies.
    base = scratch_dir("ra-corrupt")
    yield base
    remove_copy(base)


def _classify(spec_ray: dict, degraded: bool, intact_ray: dict) -> str:
    if degraded:
        return "degraded"
    return "correct" if spec_ray == intact_ray else "unflagged change"


def _diff(before: dict, after: dict) -> str:
    parts = []
    for kind in ("labels", "resources"):
        a, b = before[kind], after[kind]
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                parts.append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return ", ".join(parts[:6])


@contextlib.contextmanager
def _removed(path: Path):
    """Remove ``path`` (a snapshot's damaged copies) on the way out."""
    try:
        yield
    finally:
        remove_copy(path)


def _snapshot_id(snap: Path) -> str:
    return f"{snap.parent.name}/{snap.name}"


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=_snapshot_id)
def test_corrupt_snapshot_variants(snapshot, workdir):
    """Missing/empty/binary/huge/loop damage (as root): bounded, no crash, valid labels, flagged."""
    targets = targets_of(snapshot)
    assert targets.files, f"discovery read no file of {snapshot}"
    kinds = [k for k in KINDS if k != "unreadable"]
    variants = make_variants(snapshot, workdir / snapshot.name, kinds=kinds, per_kind=PER_KIND,
                             everything=True, targets=targets)
    changed: list[str] = []
    failures: list[str] = []
    with serve_snapshot(snapshot) as env, _removed(workdir / snapshot.name):
        intact_inv = discover(open_host(snapshot, environ=env, budget_s=BUDGET_S))
        intact = golden_of(intact_inv, to_ray_node(intact_inv))["ray"]
        for v in variants:
            started = time.perf_counter()
            crash = ""
            try:
                inventory = discover(open_host(v.path, environ=env, budget_s=BUDGET_S))
                spec = to_ray_node(inventory)
            except Exception as exc:  # noqa: BLE001 - a crash is what this test looks for
                crash = f"{type(exc).__name__}: {exc}"
            elapsed = time.perf_counter() - started
            if crash:
                failures.append(f"{v.name}: discovery raised {crash}")
                _results.add("corrupt host", v.kind, "degraded", elapsed_s=elapsed, crash=True, detail=crash)
                continue
            bad = label_errors(spec.labels)
            raw = surprises(inventory)
            outcome = _classify(spec.to_dict(), inventory.degraded, intact)
            diff = ""
            if outcome == "unflagged change":
                diff = f"{v.name}: {_diff(intact, spec.to_dict())}"
                changed.append(diff)
            _results.add("corrupt host", v.kind, outcome, elapsed_s=elapsed, crash=bool(raw),
                         invalid_labels=len(bad), hang=elapsed > BUDGET_S + GRACE_S, budget_s=BUDGET_S,
                         detail="; ".join(raw + bad + ([diff] if diff else [])))
            if bad:
                failures.append(f"{v.name}: invalid labels {bad}")
            if raw:
                failures.append(f"{v.name}: backend crashed: {raw}")
            if elapsed > BUDGET_S + GRACE_S:
                failures.append(f"{v.name}: took {elapsed:.2f}s")
    assert not failures, "\n".join(failures)
    # Silent changes are reported, not failed: see docs/reliability.md for the accepted ones.
    if changed:
        print(f"{snapshot.name}: {len(changed)} answers changed without the degraded label:\n" + "\n".join(changed))


_NOBODY_RUNNER = r"""
import json, sys, time
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.host import PASSTHROUGH_ENV, open_host
out = []
for path, env in json.loads(sys.stdin.read()):
    t = time.perf_counter()
    try:
        inv = discover(open_host(path, environ=env, budget_s=%(budget)r))
        spec = to_ray_node(inv)
        out.append({"path": path, "elapsed": time.perf_counter() - t, "degraded": inv.degraded,
                    "ray": spec.to_dict(), "problems": [p.to_dict() for p in inv.problems]})
    except Exception as exc:
        out.append({"path": path, "elapsed": time.perf_counter() - t, "crash": f"{type(exc).__name__}: {exc}"})
print(json.dumps(out))
"""


def test_unreadable_files_as_nobody(workdir):
    """Mode-000 files and directories, read as user nobody: every snapshot, bounded and flagged.

    One child process as nobody runs all copies (metadata fakes of every snapshot served from here).
    """
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop privileges")
    base = workdir / "unreadable"
    with contextlib.ExitStack() as stack:
        jobs: list[tuple[object, dict, dict]] = []
        for snapshot in SNAPSHOTS:
            env = stack.enter_context(serve_snapshot(snapshot))
            intact_inv = discover(open_host(snapshot, environ=env, budget_s=BUDGET_S))
            intact = golden_of(intact_inv, to_ray_node(intact_inv))["ray"]
            run_env = {k: v for k, v in env.items() if k in PASSTHROUGH_ENV}
            for v in make_variants(snapshot, base / snapshot.name, kinds=["unreadable"], per_kind=PER_KIND, everything=True):
                jobs.append((v, run_env, intact))
        argv = [sys.executable, "-c", _NOBODY_RUNNER % {"budget": BUDGET_S}]
        if os.geteuid() == 0:
            # Root without the file-mode override reads like any other user, and can still run an
            # interpreter installed under a mode-700 home (user nobody cannot).
            argv = [*(without_dac_override() or ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]), *argv]
        proc = subprocess.run(argv, input=json.dumps([[str(v.path), e] for v, e, _ in jobs]), capture_output=True,
                              text=True, timeout=300, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)},
                              cwd="/")
    if proc.returncode != 0 and "Permission denied" in proc.stderr and not proc.stdout:
        pytest.skip(f"user nobody cannot run this interpreter: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    failures: list[str] = []
    flagged = 0
    for (v, _, intact), res in zip(jobs, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True):
        if "crash" in res:
            failures.append(f"{v.name}: {res['crash']}")
            _results.add("corrupt host", "unreadable", "degraded", elapsed_s=res["elapsed"], crash=True)
            continue
        bad = label_errors(res["ray"]["labels"])
        raw = [f"{p['backend']}: {p['error']}: {p['message']}" for p in res["problems"] if p["error"] in SURPRISES]
        outcome = _classify(res["ray"], res["degraded"], intact)
        flagged += outcome == "degraded"
        hang = res["elapsed"] > BUDGET_S + GRACE_S
        diff = f"{v.name}: {_diff(intact, res['ray'])}" if outcome == "unflagged change" else ""
        if diff:
            print(diff)
        _results.add("corrupt host", "unreadable", outcome, elapsed_s=res["elapsed"], crash=bool(raw),
                     invalid_labels=len(bad), hang=hang, budget_s=BUDGET_S, detail="; ".join(raw + bad + ([diff] if diff else [])))
        if bad or raw or hang:
            failures.append(f"{v.name}: labels {bad} crashes {raw} elapsed {res['elapsed']:.2f}s")
    assert not failures, "\n".join(failures)
    assert flagged, "no unreadable copy was flagged degraded: were the files really unreadable to nobody?"


def test_generator_damages_copies_only(tmp_path):
    """Each kind does what it says on the copy; the source snapshot (hard-linked) is untouched."""
    source = HOSTS / "nvidia_gpu" / "l4-single-pcie"

    def state(root: Path) -> dict:
        out = {}
        for p in sorted(root.rglob("*")):
            st = os.lstat(p)
            out[str(p.relative_to(root))] = (st.st_mode, os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None)
        return out

    before = state(source)
    targets = targets_of(source)
    target = next(t for t in targets.files if t.endswith("/vendor"))
    variants = {v.kind: v for v in make_variants(source, tmp_path / "v", per_kind=1, targets=type(targets)((target,), ()))}
    assert set(variants) == set(KINDS)
    get = lambda kind: variants[kind].path / target  # noqa: E731
    assert not get("missing").exists() and not get("missing").is_symlink()
    assert get("empty").read_bytes() == b""
    assert b"\x00" in get("binary").read_bytes()
    assert get("huge").stat().st_size > 1 << 20
    assert os.lstat(get("unreadable")).st_mode & 0o777 == 0
    assert get("loop").is_symlink() and os.readlink(os.path.join(get("loop").parent, os.readlink(get("loop")))) == get("loop").name
    assert state(source) == before
    remove_copy(tmp_path / "v")
    assert not (tmp_path / "v").exists()
