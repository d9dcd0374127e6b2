"""Discovery cost on the 8x H100 snapshot, and what the start hook adds to ``ray start --head``.

    .venv/bin/python benchmarks/discovery.py [--runs 200] [--starts 3] [--skip-ray]

Prints one table, measured in this run:

* ``discover(open_host(snapshot))`` (median of ``--runs``): with every backend in a thread
  (``RAY_ACCEL_ISOLATION=none``: the entry-point scan and the backends, what the floor compares),
  and as the hook runs it (third-party backends such as the test environment's ``acme_npu`` in a
  forked worker each); the same with the backends already loaded; the nvidia_gpu backend alone;
* the entry-point scan alone: as every call after the first in a process makes it (kept per
  ``sys.path`` directory), with that cache emptied (the first call), and
  ``importlib.metadata.entry_points(group=...)`` for reference;
* the floor: plain ``open(path).read()`` of exactly the files discovery read (recorded by running
  discovery once on a host that logs every read), plus the same with the directory listings
  discovery made (``os.listdir``); ratio = discovery / floor;
* the process boundary: the same discovery with one third-party backend installed (a
  ``FakeBackend`` under another name, in a temporary distribution), which runs in a forked worker
  process (``ray_accel_ext.node.isolate``); the difference is what the boundary costs per backend;
* ``ray start --head --block`` wall time until it prints that the node is up, with and without
  ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook`` + ``RAY_ACCEL_ROOT=<snapshot>`` (and with
  the third-party backend too), interleaved, each start with its own ``--temp-dir``, a free
  ``--port`` and explicit token auth (reference/ray-2.60.md section 11); the process group is
  killed afterwards; plus the hook alone in a fresh process that has imported ray.

Budget (issue 2): discovery under 20 ms and within 3x the floor, within 4x with the entry-point
scan (issue 27); the hook adds under 5% to
``ray start``, process boundary included (issue 13). The numbers are also written to
``artifacts/reliability/bench_discovery.json``, which ``ci/fault_report.py`` quotes in
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata as importlib_metadata
from pathlib import Path

from ray_accel_ext.host import FsHost, open_host
from ray_accel_ext.host import entry_points as entry_point_scan
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.node.registry import load_backends, scan_backends

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "tests" / "data" / "hosts" / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
READY = "Ray runtime started."
RESULTS = REPO / "artifacts" / "reliability" / "bench_discovery.json"
THIRD_PARTY = "bench_third_party"


def _third_party_site() -> Path:
    """A temporary distribution registering one third-party backend (the FakeBackend, renamed)."""
    site = Path(tempfile.mkdtemp(prefix="rayaccel-bench-site-"))
    info = site / "bench_third_party-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-third-party\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ray_accel_ext.backends]\n{THIRD_PARTY} = bench_third_party_mod:Bench\n")
    (site / "bench_third_party_mod.py").write_text(
        "from ray_accel_ext.testing.fake_backend import FakeBackend\n\n\n"
        f"class Bench(FakeBackend):\n    name = {THIRD_PARTY!r}\n"
    )
    return site


class _LoggingHost(FsHost):
    """An FsHost that records every file read and directory listing (host paths, in order)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str] = []
        self.listings: list[str] = []

    def read_optional(self, path, *, max_bytes=1 << 20):
        self.reads.append(path)
        return super().read_optional(path, max_bytes=max_bytes)

    def listdir(self, path):
        self.listings.append(path)
        return super().listdir(path)


def _recorded_accesses(backends=None) -> tuple[list[str], list[str]]:
    """Host-absolute file paths and directories one discovery run reads, as plain paths."""
    base = open_host(SNAPSHOT)
    host = _LoggingHost(base.root, env=base.env, snapshot_dir=SNAPSHOT)
    inventory = discover(host, backends=backends)
    assert not inventory.degraded, inventory.reasons()
    root = str(host.root)
    # Plain paths inside the snapshot; the kernel follows the relative symlinks as sysfs does.
    # Each distinct file once: the floor is reading what the node has, not our call pattern
    # (the host answers repeated reads of one file from memory within a run).
    files = list(dict.fromkeys(root + p for p in host.reads))
    files.append(str(SNAPSHOT / "libraries" / "nvml.json"))
    dirs = list(dict.fromkeys(root + p for p in host.listings))
    return files, dirs


def _interleaved_medians_ms(fns: list, runs: int) -> list[float]:
    """Median wall time of each function, run in turn ``runs`` times so load hits all alike."""
    for fn in fns:
        fn()  # warm
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, acc in zip(fns, times):
            t = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t)
    return [statistics.median(acc) * 1000 for acc in times]


def _floor(files: list[str], dirs: list[str]):
    """Plain ``os.listdir`` of the directories and ``open().read()`` of the files, in order."""

    def read_all() -> None:
        for d in dirs:
            try:
                os.listdir(d)
            except FileNotFoundError:
                pass
        for path in files:
            try:
                with open(path) as fh:
                    fh.read()
            except FileNotFoundError:
                pass

    return read_all


def _scan_rows(runs: int) -> None:
    """The entry-point scan alone: cached, first in a process, and the standard library's."""
    group = "ray_accel_ext.backends"

    def first() -> None:
        entry_point_scan._cache.clear()
        list(entry_point_scan.group_entry_points(group))

    cached, cold, stdlib = _interleaved_medians_ms(
        [lambda: list(entry_point_scan.group_entry_points(group)), first,
         lambda: importlib_metadata.entry_points(group=group)], runs)
    dists = sum(1 for _ in importlib_metadata.distributions())
    print()
    print(f"{'entry-point scan of ' + group + f' ({dists} distributions installed)':<70} {'median ms':>9} "
          f"{'stdlib ms':>9} {'ratio':>6}")
    for what, ms in (("group_entry_points, every call after the first in a process", cached),
                     ("group_entry_points, first call in a process (cache emptied)", cold),
                     ("importlib.metadata.entry_points(group=...)", stdlib)):
        print(f"{what:<70} {ms:>9.3f} {stdlib:>9.3f} {ms / stdlib:>6.2f}")


# -- ray start ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(with_hook: bool, timeout_s: float = 120.0, site: Path | None = None) -> float:
    temp_dir = tempfile.mkdtemp(prefix="rayaccel-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_START_HOOK", "RAY_ACCEL_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_USAGE_STATS_ENABLED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *([str(site)] if site else [])])  # this checkout's code
    if with_hook:
        env.update(RAY_START_HOOK="ray_accel_ext.ray_hook.start_hook", RAY_ACCEL_ROOT=str(SNAPSHOT))
    ray = str(Path(sys.executable).parent / "ray")
    argv = [ray, "start", "--head", "--block", "--port", str(_free_port()), "--temp-dir", temp_dir,
            "--num-cpus", "1", "--include-dashboard", "false", "--disable-usage-stats"]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    elapsed = None
    output = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            output.append(line)
            if READY in line:
                elapsed = time.perf_counter() - started
                break
            if time.perf_counter() - started > timeout_s:
                break
    finally:
        _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)
    if elapsed is None:
        raise RuntimeError("ray start did not come up:\n" + "".join(output[-20:]))
    if with_hook and not any("ray_accel_ext" in line for line in output):
        raise RuntimeError("the start hook did not report in ray start's output:\n" + "".join(output[-20:]))
    return elapsed


_HOOK_PROBE = """
import time, ray  # ray start has imported ray before it calls the hook
t = time.perf_counter()
from ray_accel_ext.ray_hook import start_hook
class Params:
    num_gpus = None
    resources = None
    labels = None
p = Params()
start_hook(p, True)
assert p.num_gpus == 8, p.num_gpus
print(time.perf_counter() - t)
"""


def _hook_cost_s(site: Path | None = None) -> float:
    """Import of ray_accel_ext plus the hook call, in a fresh process that has imported ray."""
    env = dict(os.environ, RAY_ACCEL_ROOT=str(SNAPSHOT),
               PYTHONPATH=os.pathsep.join([str(REPO), *([str(site)] if site else [])]))
    out = subprocess.run([sys.executable, "-c", _HOOK_PROBE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # raylet/gcs children share the group; make sure none outlives the benchmark.
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=200, help="discovery repetitions (median)")
    parser.add_argument("--starts", type=int, default=3, help="ray start repetitions per arm")
    parser.add_argument("--skip-ray", action="store_true", help="only the discovery rows")
    args = parser.parse_args(argv)

    backends = load_backends({})
    nvidia = [b for b in backends if b.name == "nvidia_gpu"]
    all_files, all_dirs = _recorded_accesses(backends)
    nv_files, nv_dirs = _recorded_accesses(nvidia)
    names = ", ".join(b.name for b in backends)
    site = _third_party_site()
    threads_env = {**os.environ, "RAY_ACCEL_ISOLATION": "none"}
    scanned, full, loaded, alone, floor_all, floor_nv = _interleaved_medians_ms(
        [
            lambda: discover(open_host(SNAPSHOT, environ=threads_env)),
            lambda: discover(open_host(SNAPSHOT)),
            lambda: discover(open_host(SNAPSHOT), backends=backends),
            lambda: discover(open_host(SNAPSHOT), backends=nvidia),
            _floor(all_files, all_dirs),
            _floor(nv_files, nv_dirs),
        ],
        args.runs,
    )
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    check = discover(open_host(SNAPSHOT))  # the third-party backend ran in its worker, found nothing
    assert not check.degraded, check.reasons()
    third = [s.name for s in scan_backends({})[0] if not s.in_tree]
    runs = max(20, args.runs // 4)
    threads_ms, workers_ms = _interleaved_medians_ms(
        [lambda: discover(open_host(SNAPSHOT, environ=threads_env)), lambda: discover(open_host(SNAPSHOT))], runs)
    sys.path.remove(str(site))
    importlib.invalidate_caches()
    installed = [b.name for b in backends if not b.__module__.startswith("ray_accel_ext.")]
    rows = [
        (f"discover(open_host(h100)): entry-point scan + {names}, in threads", scanned, floor_all),
        (f"the same as the hook runs it ({', '.join(installed) or 'no third-party backend'} in a forked worker)",
         full, floor_all),
        (f"discover, backends preloaded: {names}", loaded, floor_all),
        ("discover, nvidia_gpu backend only", alone, floor_nv),
    ]
    print(f"snapshot: {SNAPSHOT.relative_to(REPO)}   python {sys.version.split()[0]}   "
          f"cpus {os.cpu_count()}   load average {os.getloadavg()[0]:.2f}   runs {args.runs}")
    print(f"floor = plain os.listdir + open().read() of what that discovery read: all backends "
          f"{len(all_dirs)} dirs + {len(all_files)} files, nvidia_gpu alone {len(nv_dirs)} dirs + {len(nv_files)} files")
    print(f"{'what':<70} {'median ms':>9} {'floor ms':>9} {'ratio':>6}")
    for what, ms, floor in rows:
        print(f"{what:<70} {ms:>9.2f} {floor:>9.2f} {ms / floor:>6.2f}")
    print("budget: discovery < 20 ms and <= 3x floor; <= 4x floor with the entry-point scan (first row);")
    print("a third-party backend's worker process costs what the process boundary rows below say")
    _scan_rows(args.runs)
    print()
    print(f"{'process boundary: ' + str(len(third)) + ' third-party backend(s) ' + ', '.join(third):<70} {'median ms':>9}")
    print(f"{'every backend in a thread (RAY_ACCEL_ISOLATION=none)':<70} {threads_ms:>9.2f}")
    print(f"{'third-party backends in forked workers (the default)':<70} {workers_ms:>9.2f}")
    print(f"process boundary cost: {workers_ms - threads_ms:+.2f} ms for {len(third)} worker(s) (median of {runs})")
    result = {"written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
              "load": round(os.getloadavg()[0], 2), "discover_ms": round(full, 2), "threads_ms": round(threads_ms, 2),
              "workers_ms": round(workers_ms, 2), "third_party": third}

    if not args.skip_ray:
        without, with_hook, with_worker, hook, hook_worker = [], [], [], [], []
        for _ in range(args.starts):
            without.append(_ray_start(False))
            with_hook.append(_ray_start(True))
            with_worker.append(_ray_start(True, site=site))
            hook.append(_hook_cost_s())
            hook_worker.append(_hook_cost_s(site))
        a, b, c = statistics.median(without), statistics.median(with_hook), statistics.median(with_worker)
        h, hw = statistics.median(hook), statistics.median(hook_worker)
        print()
        print(f"{'ray start --head --block, until ' + repr(READY):<70} {'median s':>9}  runs (s)")
        print(f"{'without hook':<70} {a:>9.2f}  {', '.join(f'{x:.2f}' for x in without)}")
        print(f"{'with RAY_START_HOOK + RAY_ACCEL_ROOT=h100 snapshot':<70} {b:>9.2f}  {', '.join(f'{x:.2f}' for x in with_hook)}")
        more = "with the hook + one more third-party backend (forked worker)"
        print(f"{more:<70} {c:>9.2f}  {', '.join(f'{x:.2f}' for x in with_worker)}")
        print(f"{'hook alone: import ray_accel_ext + start_hook(), fresh process':<70} {h:>9.3f}  {', '.join(f'{x:.3f}' for x in hook)}")
        print(f"{'hook alone, with the third-party backend':<70} {hw:>9.3f}  {', '.join(f'{x:.3f}' for x in hook_worker)}")
        print(f"hook overhead: A/B difference of medians {100 * (b - a) / a:+.1f}% ({100 * (c - a) / a:+.1f}% with the worker); "
              f"hook cost / ray start {100 * h / a:.1f}%, with the worker {100 * hw / a:.1f}% (budget < 5%)")
        result.update(ray_start_s=round(a, 2), ray_start_hook_s=round(b, 2), ray_start_worker_s=round(c, 2),
                      hook_s=round(h, 3), hook_worker_s=round(hw, 3), starts=args.starts)
    shutil.rmtree(site, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
