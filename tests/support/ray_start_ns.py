"""A real ``ray start`` whose Ray 2.60 TPU manager sees TPU chips, with every metadata request it
makes counted: run in private user, mount, network and PID namespaces (``unshare``).

Inside them (root of the user namespace only, nothing outside changes):

* ``/dev`` is a fresh tmpfs holding ``accel0..3`` (what Ray's ``get_current_node_num_accelerators``
  globs) plus the device nodes a process needs, bound from the real ``/dev``;
* ``/etc/hosts`` maps ``metadata.google.internal`` to 127.0.0.1, where a
  :class:`~ray_accel_ext.testing.fake_metadata.FakeGceMetadata` listens on port 80: the URL Ray's
  manager has hard-coded, so its requests land there too;
* the network is the namespace's own loopback, and every process dies with the namespace.

:func:`run` starts the namespaces and returns what happened, one dict per scenario: ``ray start``
with or without ``RAY_START_HOOK``, against a healthy or a never-answering server. Ours reads the
host snapshot given (``RAY_ACCEL_ROOT``) and reaches the same server through ``GCE_METADATA_HOST``.
Used by ``tests/backends/tpu/test_ray_start_requests.py`` and ``benchmarks/tpu_metadata.py``.

    python -m tests.support.ray_start_ns SNAPSHOT [--no-hook] [--hang] [--wait S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["available", "run"]

_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_UNSHARE = ("unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--mount-proc")


def available() -> bool:
    """True when this machine lets an unprivileged process create the namespaces."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def run(snapshot: str | os.PathLike[str], *, hook: bool = True, hang: bool = False, wait_s: float = 120.0,
        timeout_s: float = 300.0) -> dict[str, Any]:
    """One ``ray start --head`` in fresh namespaces; see the module doc. Returns
    ``{"returncode", "seconds", "requests": {path: n}, "node": {"Resources", "Labels"} | None, "log"}``;
    ``returncode`` is None when ``ray start`` had not finished after ``wait_s``."""
    argv = [*_UNSHARE, sys.executable, "-m", __name__, str(Path(snapshot).resolve()), "--wait", str(wait_s)]
    argv += [] if hook else ["--no-hook"]
    argv += ["--hang"] if hang else []
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"namespace run failed ({out.returncode}): {out.stderr[-3000:]}")
    result = json.loads(lines[-1])
    # Removed from out here, where the namespace's mounts (its /dev bound under it) are gone.
    shutil.rmtree(result.pop("work"), ignore_errors=True)
    return result


# -- inside the namespaces --------------------------------------------------------------------


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def _private_dev(work: Path, chips: int) -> None:
    old = work / "dev"
    old.mkdir()
    _sh("mount", "--rbind", "/dev", str(old))
    _sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/dev")
    for name in _DEVICES:
        Path("/dev", name).touch()
        _sh("mount", "--bind", str(old / name), f"/dev/{name}")
    for name in ("shm", "pts"):
        Path("/dev", name).mkdir()
    _sh("mount", "-t", "tmpfs", "tmpfs", "/dev/shm")
    _sh("mount", "--bind", str(old / "pts"), "/dev/pts")
    os.symlink("/proc/self/fd", "/dev/fd")
    for i in range(chips):
        Path(f"/dev/accel{i}").touch()


def _hosts(work: Path) -> None:
    hosts = work / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.0.1 metadata.google.internal\n::1 localhost\n")
    _sh("mount", "--bind", str(hosts), "/etc/hosts")


def _node(temp: Path, env: dict[str, str], port: int) -> dict[str, Any] | None:
    code = (f"import json, ray; ray.init(address='127.0.0.1:{port}'); n = [x for x in ray.nodes() if x['Alive']][0];"
            "print(json.dumps({'Resources': n['Resources'], 'Labels': n['Labels']}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _inside(snapshot: Path, hook: bool, hang: bool, wait_s: float) -> dict[str, Any]:
    from ray_accel_ext.testing.cluster import HOOK, with_this_package
    from ray_accel_ext.testing.fake_metadata import FakeGceMetadata
    from ray_accel_ext.testing.snapshots import metadata_spec

    _sh("ip", "link", "set", "lo", "up")
    work = Path(tempfile.mkdtemp(prefix="ray-accel-ns-"))
    _private_dev(work, 4)
    _hosts(work)
    spec = metadata_spec(snapshot)
    faults = {"*": {"hang": True}} if hang else spec.get("gce_faults")
    server = FakeGceMetadata(spec.get("gce"), faults, port=80).start()
    temp = work / "ray"
    port = 6390
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "RAY_ACCEL_", "GCE_", "RAY_START_HOOK"))}
    env.update({"RAY_ACCEL_ROOT": str(snapshot), "GCE_METADATA_HOST": "metadata.google.internal:80",
                "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "NO_PROXY": "*", "no_proxy": "*"})
    if hook:
        env["RAY_START_HOOK"] = HOOK
    env = with_this_package(env)
    ray_bin = str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"
    argv = [ray_bin, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
            "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", str(temp)]
    log = work / "ray-start.log"
    started = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)
        try:
            returncode: int | None = proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            returncode = None
    seconds = time.monotonic() - started
    requests = dict(Counter(path for _, path in server.requests))
    node = _node(temp, env, port) if returncode == 0 else None
    server.stop()
    return {"returncode": returncode, "seconds": round(seconds, 3), "requests": requests, "node": node,
            "log": log.read_text(errors="replace")[-4000:], "work": str(work)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--no-hook", action="store_true")
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--wait", type=float, default=120.0)
    args = parser.parse_args(argv)
    if os.getpid() != 1:
        print("run this through ray_start_ns.run(): it needs its own PID namespace", file=sys.stderr)
        return 2
    result = _inside(args.snapshot.resolve(), not args.no_hook, args.hang, args.wait)
    print(json.dumps(result), flush=True)
    return 0  # PID 1 exits: the kernel ends every process of the namespace (Ray's included)


if __name__ == "__main__":
    sys.exit(main())
