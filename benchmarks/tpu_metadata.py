"""Metadata requests per node start and per worker process: ours against Ray 2.60's TPU manager.

    .venv/bin/python benchmarks/tpu_metadata.py [--starts 10] [--latency-ms 20] [--ray-start]

Every number is measured in this run, on loopback GCE metadata fakes serving host snapshots:

* node start, ours: the start hook (``ray_accel_ext.ray_hook.start_hook``, discovery of every
  installed backend); Ray: ``ResourceAndLabelSpec.resolve()`` with Ray's own
  ``TPUAcceleratorManager``, its file reads and hard-coded metadata URL pointed at the same
  snapshot (``tests.support.ray_tpu``), alone and after our hook handed it the slice;
* per worker, ours: what ``my_devices()``/``my_tpu_chips()`` read (the description the hook
  published, or local files); Ray: what a worker's ``ray.util.tpu.get_current_pod_name()`` and
  ``get_current_pod_worker_count()`` ask, without and with the hook's variables;
* a never-answering server: how long the hook plus Ray's resolve take (Ray alone is given
  ``--hang-wait`` seconds and reported as still blocked);
* with ``--ray-start`` (needs unprivileged namespaces): whole ``ray start`` processes whose Ray
  TPU manager sees ``/dev/accel*`` chips, every request they make counted
  (``tests.support.ray_start_ns``), and their wall time with a never-answering server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TPU = REPO / "tests" / "data" / "hosts" / "tpu"
SNAPSHOTS = ("gce-v5p-16-worker1", "gce-v4-8-dev-accel", "gke-v6e-4x4-worker3")
HANG = TPU / "gce-v6e-4-metadata-timeout"
RAY_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID", "TPU_TOPOLOGY")


@contextmanager
def _environ(values: dict[str, str]):
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith(("TPU_", "RAY_ACCEL_", "GCE_")):
            del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _servers(snapshot: Path, latency_s: float = 0.0, hang: bool = False):
    from ray_accel_ext.testing.fake_metadata import MetadataServers
    from ray_accel_ext.testing.snapshots import metadata_spec

    spec = metadata_spec(snapshot)
    if hang:
        spec["gce_faults"] = {"*": {"hang": True}}
    elif latency_s:
        spec["gce_faults"] = {"*": {"delay_s": latency_s}}
    spec.setdefault("gce", {})
    return MetadataServers(spec)


def _hook(snapshot: Path, servers) -> tuple[dict[str, str], float]:
    """Run the start hook on ``snapshot``; (what it handed on, seconds)."""
    from ray._private.parameter import RayParams

    from ray_accel_ext.ray_hook import start_hook

    with _environ({"RAY_ACCEL_ROOT": str(snapshot), **servers.env()}):
        started = time.perf_counter()
        start_hook(RayParams(), False)
        elapsed = time.perf_counter() - started
        handed = {k: v for k, v in os.environ.items() if k in RAY_VARS or k.startswith("RAY_ACCEL_NODE")}
    return handed, elapsed


def _ray_start(snapshot: Path, servers, handed: dict[str, str]) -> float:
    from tests.support.ray_tpu import ray_tpu_node_spec

    started = time.perf_counter()
    ray_tpu_node_spec(snapshot, f"http://{servers.gce.address}", extra_env={k: v for k, v in handed.items() if k in RAY_VARS},
                      workers=False)
    return time.perf_counter() - started


def _ray_worker(snapshot: Path, servers, handed: dict[str, str]) -> None:
    """What a worker's ray.util.tpu.get_current_pod_name() / get_current_pod_worker_count() ask."""
    import json as _json

    from tests.support.ray_tpu import rooted_ray_tpu

    env_file = snapshot / "env.json"
    env = _json.loads(env_file.read_text()) if env_file.is_file() else {}
    env.update({k: v for k, v in handed.items() if k in RAY_VARS})
    with rooted_ray_tpu(snapshot / "rootfs", f"http://{servers.gce.address}", env) as ray_tpu:
        ray_tpu.TPUAcceleratorManager.get_current_node_tpu_name()
        with contextlib.suppress(Exception):  # Ray 2.60 raises on a node without a pod type
            ray_tpu.TPUAcceleratorManager.get_num_workers_in_current_tpu_pod()


def _our_worker(handed: dict[str, str]) -> None:
    from ray_accel_ext.worker import node_inventory

    node_inventory({k: v for k, v in os.environ.items()} | handed)


def _count(servers, fn) -> int:
    before = servers.gce.count()
    fn()
    return servers.gce.count() - before


def requests_table(starts: int) -> None:
    print("metadata requests (GETs on the loopback GCE server)")
    head = (f"{'snapshot':<22} | {'node start: ours':>16} {'Ray alone':>9} {'Ray+hook':>8} | "
            f"{'per worker: ours':>16} {'Ray alone':>9} {'Ray+hook':>8}")
    print(head)
    print("-" * len(head))
    for name in SNAPSHOTS:
        snapshot = TPU / name
        with _servers(snapshot) as servers:
            ours, ray_alone, ray_hook, w_ours, w_ray, w_ray_hook = ([] for _ in range(6))
            for _ in range(starts):
                before = servers.gce.count()
                handed, _ = _hook(snapshot, servers)
                ours.append(servers.gce.count() - before)
                s, h = snapshot, handed
                ray_alone.append(_count(servers, lambda s=s: _ray_start(s, servers, {})))
                ray_hook.append(_count(servers, lambda s=s, h=h: _ray_start(s, servers, h)))
                w_ours.append(_count(servers, lambda h=h: _our_worker(h)))
                w_ray.append(_count(servers, lambda s=s: _ray_worker(s, servers, {})))
                w_ray_hook.append(_count(servers, lambda s=s, h=h: _ray_worker(s, servers, h)))
        m = statistics.mean
        print(f"{name:<22} | {m(ours):>16g} {m(ray_alone):>9g} {m(ray_hook):>8g} | "
              f"{m(w_ours):>16g} {m(w_ray):>9g} {m(w_ray_hook):>8g}")
    print("ours: the instance/ directory read once, recursively (none with GKE's variables); per worker: the\n"
          "description the hook published. Ray+hook: Ray's manager reads the variables the hook handed it.")


def latency_table(latency_ms: float, starts: int) -> None:
    snapshot = TPU / SNAPSHOTS[0]
    with _servers(snapshot, latency_ms / 1000) as servers:
        ours = statistics.median(_hook(snapshot, servers)[1] for _ in range(starts))
        ray = statistics.median(_ray_start(snapshot, servers, {}) for _ in range(starts))
    print(f"\nnode start with {latency_ms:g} ms per metadata request ({SNAPSHOTS[0]}): ours {ours * 1000:.0f} ms "
          f"(every installed backend), Ray's manager {ray * 1000:.0f} ms; Ray/ours {ray / ours:.2f}")


def hang_line(hang_wait_s: float) -> None:
    from ray_accel_ext.host import DEFAULT_BUDGET_S
    from tests.support.ray_tpu import ray_tpu_node_spec

    servers = _servers(HANG, hang=True).start()
    try:
        handed, hook_s = _hook(HANG, servers)
        ray_after = _ray_start(HANG, servers, handed)
        done = threading.Event()
        started = time.perf_counter()
        thread = threading.Thread(target=lambda: (ray_tpu_node_spec(HANG, f"http://{servers.gce.address}", workers=False),
                                                  done.set()),
                                  daemon=True)
        thread.start()
        alone = f"{time.perf_counter() - started:.3f} s" if done.wait(hang_wait_s) else f"still blocked after {hang_wait_s:g} s"
    finally:
        servers.stop()  # releases Ray's pending request
    print(f"\nnever-answering server ({HANG.name}): hook {hook_s:.3f} s + Ray's resolve after it {ray_after:.3f} s "
          f"= {hook_s + ray_after:.3f} s (budget {DEFAULT_BUDGET_S:g} s); Ray alone: {alone}")


def ray_start_table(wait_s: float) -> None:
    from tests.support import ray_start_ns

    if not ray_start_ns.available():
        print("\nwhole ray start: skipped (no unprivileged user/mount/net/PID namespaces here)")
        return
    snapshot = TPU / "gce-v4-8-dev-accel"
    probe = "/computeMetadata/v1"  # Ray's usage library naming the cloud, 1 s timeout
    print(f"\nwhole `ray start --head` in private namespaces, /dev/accel0..3 visible to Ray ({snapshot.name})")
    print(f"{'run':<30} {'finished':>9} {'seconds':>8} {'hook s':>7} {'TPU-manager + ours':>19} {'Ray cloud probe':>16}")
    rows = [("Ray alone", False, False), ("with the hook", True, False), ("with the hook, server hangs", True, True),
            ("Ray alone, server hangs", False, True)]
    for label, hook, hang in rows:
        r = ray_start_ns.run(snapshot, hook=hook, hang=hang, wait_s=wait_s if not (hang and not hook) else 20)
        tpu = {k: v for k, v in r["requests"].items() if k != probe}
        finished = "yes" if r["returncode"] == 0 else ("no" if r["returncode"] is None else f"rc {r['returncode']}")
        event = next((json.loads(line.split(" -- ", 1)[1]) for line in r["log"].splitlines()
                      if '"event": "discovery"' in line), None)
        hook_s = f"{event['elapsed_ms'] / 1000:.2f}" if event else "-"
        print(f"{label:<30} {finished:>9} {r['seconds']:>8.1f} {hook_s:>7} {sum(tpu.values()):>19} "
              f"{r['requests'].get(probe, 0):>16}   {json.dumps(tpu, sort_keys=True)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=5, help="node starts measured per snapshot")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="per-request latency for the timing line")
    parser.add_argument("--hang-wait", type=float, default=10.0, help="how long Ray alone is given on a hanging server")
    parser.add_argument("--ray-start", action="store_true", help="also run whole `ray start`s in private namespaces")
    parser.add_argument("--ray-start-wait", type=float, default=240.0)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # degraded starts log their reasons; keep the tables readable
    requests_table(args.starts)
    latency_table(args.latency_ms, args.starts)
    hang_line(args.hang_wait)
    if args.ray_start:
        ray_start_table(args.ray_start_wait)
    return 0


if __name__ == "__main__":
    sys.exit(main())
