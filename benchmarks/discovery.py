"""Discovery cost on the 8x H100 snapshot, and what the start hook adds to ``ray start --head``.

    .venv/bin/python benchmarks/discovery.py [--runs 200] [--starts 3] [--skip-ray]

Prints one table, measured in this run:

* ``discover(open_host(snapshot))`` (median of ``--runs``), the same with the backends already
  loaded (what a second call in one process costs; the entry-point scan is paid once per
  process), and the nvidia_gpu backend alone;
* the floor: plain ``open(path).read()`` of exactly the files discovery read (recorded by running
  discovery once on a host that logs every read), plus the same with the directory listings
  discovery made (``os.listdir``); ratio = discovery / floor;
* ``ray start --head --block`` wall time until it prints that the node is up, with and without
  ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook`` + ``RAY_ACCEL_ROOT=<snapshot>``,
  interleaved, each start with its own ``--temp-dir``, a free ``--port`` and explicit token auth
  (reference/ray-2.60.md section 11); the process group is killed afterwards.

Budget (issue 2): discovery under 20 ms and within 3x the floor; the hook adds under 5% to
``ray start``.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

from ray_accel_ext.discovery import discover
from ray_accel_ext.host import FsHost, open_host
from ray_accel_ext.registry import load_backends

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "tests" / "data" / "hosts" / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
READY = "Ray runtime started."


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


# -- ray start ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(with_hook: bool, timeout_s: float = 120.0) -> float:
    temp_dir = tempfile.mkdtemp(prefix="rayaccel-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_START_HOOK", "RAY_ACCEL_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_USAGE_STATS_ENABLED="0")
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


def _hook_cost_s() -> float:
    """Import of ray_accel_ext plus the hook call, in a fresh process that has imported ray."""
    env = dict(os.environ, RAY_ACCEL_ROOT=str(SNAPSHOT))
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
    full, loaded, alone, floor_all, floor_nv = _interleaved_medians_ms(
        [
            lambda: discover(open_host(SNAPSHOT)),
            lambda: discover(open_host(SNAPSHOT), backends=backends),
            lambda: discover(open_host(SNAPSHOT), backends=nvidia),
            _floor(all_files, all_dirs),
            _floor(nv_files, nv_dirs),
        ],
        args.runs,
    )
    rows = [
        (f"discover(open_host(h100)): entry-point scan + {names}", full, floor_all),
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
    print("budget: discovery < 20 ms and <= 3x floor")

    if args.skip_ray:
        return 0
    without, with_hook, hook = [], [], []
    for _ in range(args.starts):
        without.append(_ray_start(False))
        with_hook.append(_ray_start(True))
        hook.append(_hook_cost_s())
    a, b, h = statistics.median(without), statistics.median(with_hook), statistics.median(hook)
    print()
    print(f"{'ray start --head --block, until ' + repr(READY):<70} {'median s':>9}  runs (s)")
    print(f"{'without hook':<70} {a:>9.2f}  {', '.join(f'{x:.2f}' for x in without)}")
    print(f"{'with RAY_START_HOOK + RAY_ACCEL_ROOT=h100 snapshot':<70} {b:>9.2f}  {', '.join(f'{x:.2f}' for x in with_hook)}")
    print(f"{'hook alone: import ray_accel_ext + start_hook(), fresh process':<70} {h:>9.3f}  {', '.join(f'{x:.3f}' for x in hook)}")
    print(f"hook overhead: A/B difference of medians {100 * (b - a) / a:+.1f}%; "
          f"hook cost / ray start {100 * h / a:.1f}% (budget < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
