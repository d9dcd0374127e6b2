"""Metadata calls and discovery time per node start: ours against Ray 2.60's TPU manager.

    .venv/bin/python benchmarks/tpu_metadata.py [--starts 20] [--latency-ms 0,5,20]

On the GCE v5p-16 worker 1 snapshot (the metadata path: no GKE variables), both sides are served
by one loopback GCE metadata fake, with an optional per-request latency (``delay_s`` fault) to
stand for a real metadata server:

* ours: ``ray_accel_ext.ray_hook.node_spec(snapshot)``, what the start hook runs (every
  installed backend; the TPU backend asks each key once, plus zone, machine type and
  ``physical_host_topology`` for the location labels);
* Ray: ``ResourceAndLabelSpec.resolve()`` with Ray's own ``TPUAcceleratorManager``, its file
  reads and hard-coded metadata URL pointed at the same snapshot and fake
  (``tests.support.ray_tpu``).

Then the hanging server (``gce-v6e-4-metadata-timeout``): ours returns within its budget; Ray's
calls carry no timeout, so it is given ``--hang-wait`` seconds and reported as still blocked.

Prints one table measured in this run: metadata GETs per start (and how many distinct keys),
median time per start, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GCE_SNAPSHOT = REPO / "tests" / "data" / "hosts" / "tpu" / "gce-v5p-16-worker1"
HANG_SNAPSHOT = REPO / "tests" / "data" / "hosts" / "tpu" / "gce-v6e-4-metadata-timeout"


def _spec(snapshot: Path, latency_s: float) -> dict:
    spec = json.loads((snapshot / "metadata.json").read_text())
    if latency_s:
        spec["gce_faults"] = {"*": {"delay_s": latency_s}}
    return spec


def _ours(snapshot: Path, gce) -> float:
    from ray_accel_ext.ray_hook import node_spec

    saved = {k: os.environ.get(k) for k in ("GCE_METADATA_HOST", "RAY_ACCEL_TPU_API_ENDPOINT")}
    os.environ["GCE_METADATA_HOST"] = gce.address
    os.environ.pop("RAY_ACCEL_TPU_API_ENDPOINT", None)
    try:
        started = time.perf_counter()
        spec = node_spec(str(snapshot))
        elapsed = time.perf_counter() - started
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert "TPU" in spec.resources, spec
    return elapsed


def _ray(snapshot: Path, gce) -> float:
    from tests.support.ray_tpu import ray_tpu_node_spec

    started = time.perf_counter()
    out = ray_tpu_node_spec(snapshot, f"http://{gce.address}")
    elapsed = time.perf_counter() - started
    assert "TPU" in out["resources"], out
    return elapsed


def _measure(fn, snapshot: Path, latency_s: float, starts: int) -> tuple[float, float, int]:
    """(median seconds per start, metadata GETs per start, distinct keys asked)."""
    from ray_accel_ext.testing.fake_metadata import FakeGceMetadata

    spec = _spec(snapshot, latency_s)
    times, calls, keys = [], [], set()
    with FakeGceMetadata(spec["gce"], spec.get("gce_faults")) as gce:
        fn(snapshot, gce)  # warm-up: imports, entry-point scan
        for _ in range(starts):
            gce.requests.clear()
            times.append(fn(snapshot, gce))
            counted = Counter(p for _, p in gce.requests)
            calls.append(sum(counted.values()))
            keys |= set(counted)
    return statistics.median(times), statistics.mean(calls), len(keys)


def _hang(hang_wait_s: float) -> tuple[float, str]:
    from ray_accel_ext.testing.fake_metadata import FakeGceMetadata
    from tests.support.ray_tpu import ray_tpu_node_spec

    spec = json.loads((HANG_SNAPSHOT / "metadata.json").read_text())
    with FakeGceMetadata(spec["gce"], spec["gce_faults"]) as gce:
        ours = _ours(HANG_SNAPSHOT, gce)
    gce = FakeGceMetadata(spec["gce"], spec["gce_faults"]).start()
    done = threading.Event()
    started = time.perf_counter()
    thread = threading.Thread(target=lambda: (ray_tpu_node_spec(HANG_SNAPSHOT, f"http://{gce.address}"), done.set()), daemon=True)
    thread.start()
    finished = done.wait(hang_wait_s)
    ray_text = f"{time.perf_counter() - started:.3f} s" if finished else f"still blocked after {hang_wait_s:g} s"
    gce.stop()  # releases Ray's pending request
    thread.join(30)
    return ours, ray_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=20, help="node starts measured per side and latency")
    parser.add_argument("--latency-ms", default="0,5,20", help="per-request metadata latencies to try")
    parser.add_argument("--hang-wait", type=float, default=10.0, help="how long Ray is given on a hanging server")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)  # the hang case logs its degradation; keep the table readable

    print(f"snapshot: {GCE_SNAPSHOT.relative_to(REPO)}  starts per cell: {args.starts}")
    header = (f"{'latency':>8} | {'ours GETs':>9} {'keys':>4} {'ours ms':>8} | {'Ray GETs':>8} {'keys':>4} {'Ray ms':>8} | "
              f"{'GETs Ray/ours':>13} {'time Ray/ours':>13}")
    print(header)
    print("-" * len(header))
    for latency_ms in (float(x) for x in args.latency_ms.split(",")):
        ours_t, ours_calls, ours_keys = _measure(_ours, GCE_SNAPSHOT, latency_ms / 1000, args.starts)
        ray_t, ray_calls, ray_keys = _measure(_ray, GCE_SNAPSHOT, latency_ms / 1000, args.starts)
        print(f"{latency_ms:>6g}ms | {ours_calls:>9.1f} {ours_keys:>4} {ours_t * 1000:>8.1f} | {ray_calls:>8.1f} {ray_keys:>4} "
              f"{ray_t * 1000:>8.1f} | {ray_calls / ours_calls:>13.2f} {ray_t / ours_t:>13.2f}")
    print("ours asks 5 TPU keys + 3 location keys (zone, machine type, physical_host_topology) once each;")
    print("Ray asks 4 TPU keys, repeating accelerator-type 4x, instance-id 2x, agent-worker-number 2x, no timeout.")
    ours_hang, ray_hang = _hang(args.hang_wait)
    print(f"hanging metadata server ({HANG_SNAPSHOT.name}): ours {ours_hang:.3f} s (degraded, budget 3 s); Ray: {ray_hang}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
