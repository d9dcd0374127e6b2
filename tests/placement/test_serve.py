"""The Serve example (examples/serve_slice) on a simulated cluster: a GB200 NVLink domain of two
trays is the "slice", an L4 node the fallback pool; a bounded bursty load on 127.0.0.1.

Phase 1: another job holds the only domain, so the slice replica has none and every request goes
to the pool. Phase 2: the domain is released, the replica takes it, and bursts larger than the
slice's capacity split between slice and pool. No request is lost in either phase, and Ray's
Prometheus export shows the split (``rayaccel_serve_requests`` by route).
"""

from __future__ import annotations

import importlib.util
import re
import socket
import sys
import time
from collections import Counter

import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from ray_accel_ext.placement import claims_snapshot, reserve_domain  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402
from tests.support.metrics import scrape_metrics  # noqa: E402
from tests.support.paths import REPO  # noqa: E402

pytestmark = pytest.mark.ray

EXAMPLE = REPO / "examples" / "serve_slice"
GB200 = {"ray.io/accelerator-type": "GB200"}


def _load(name):
    spec = importlib.util.spec_from_file_location(f"serve_slice_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snaps = tmp_path_factory.mktemp("serve")
    with SimulatedCluster() as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        specs = [(s, {"name": s.name}) for s in gb200_domain(snaps, 31, trays=2)]
        specs.append((SNAPSHOTS / "nvidia_gpu" / "l4-single-pcie", {"name": "l4"}))
        add_in_batches(c, specs)
        c.connect()
        yield c
        serve.shutdown()


def _serve_counts():
    totals = Counter()
    for line in scrape_metrics(r"ray_rayaccel_serve_requests(_total)?\{"):
        route = re.search(r'route="([^"]+)"', line).group(1)
        totals[route] += float(line.rsplit(" ", 1)[1])
    return totals


def test_slice_replica_with_pool_fallback_loses_no_request(cluster):
    app_mod, loadgen = _load("app"), _load("loadgen")
    port = _free_port()
    held = reserve_domain("fabric", hosts=2, selector=GB200, deadline_s=60)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(app_mod.build_app(slice_capacity=4, work_s=0.05), name="slice-app", route_prefix="/")
    status = serve.get_deployment_handle("SliceModel", app_name="slice-app").status
    assert status.remote().result()["slice"] is False  # the domain is held by someone else

    phase1 = loadgen.run_load(port, bursts=2, burst_size=8, pause_s=0.2, max_seconds=60)
    assert len(phase1) == 16 and all(r["status"] == 200 for r in phase1), phase1
    assert Counter(r["body"]["route"] for r in phase1) == {"pool": 16}

    held.release()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not status.remote().result()["slice"]:
        time.sleep(0.5)
    got = status.remote().result()
    assert got["slice"] and got["step"] == "gb200-nvlink" and got["hosts"] == 2, got

    phase2 = loadgen.run_load(port, bursts=4, burst_size=12, pause_s=0.3, max_seconds=90)
    assert len(phase2) == 48 and all(r["status"] == 200 for r in phase2), [r for r in phase2 if r["status"] != 200]
    assert sorted(r["body"]["id"] for r in phase2) == sorted(str(r["id"]) for r in phase2)
    routes = Counter(r["body"]["route"] for r in phase2)
    assert routes["slice"] > 0 and routes["pool"] > 0 and sum(routes.values()) == 48, routes
    for r in phase2:
        if r["body"]["route"] == "slice":
            assert r["body"]["domain"] == got["domain"] and r["body"]["hosts"] == 2

    expected = Counter({"pool": 16}) + routes
    deadline = time.monotonic() + 60
    seen = Counter()
    while time.monotonic() < deadline:
        seen = _serve_counts()
        if seen == expected:
            break
        time.sleep(2)
    assert seen == expected, f"Prometheus export {dict(seen)} != responses {dict(expected)}"

    # Serve runs the replica's __del__ on shutdown: the slice goes back to the cluster.
    serve.delete("slice-app")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and claims_snapshot():
        time.sleep(0.5)
    assert claims_snapshot() == {}
