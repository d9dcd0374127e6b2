"""The Serve example (examples/serve_slice) on a simulated cluster, driven by its open-loop load
generator (bursts of 200 concurrent requests, Poisson gaps) on 127.0.0.1: two GB200 NVLink
domains of two trays each are the slices, an L4 node the fallback pool, the router and slice
replica run on the head.

1. Another job holds both domains: every request goes to the pool. The domains are given back,
   the replica takes one, bursts split between slice and pool, and Ray's Prometheus export counts
   the same split.
2. A tray of the replica's domain is killed while a burst is in flight. The replica stops using
   the slice, releases the reservation, serves from the pool meanwhile, reserves the other (whole,
   free) domain and returns to it; every request is answered (none fails on the dead shard).
   p50/p99 latency, errors and the time back on a domain are reported, not asserted.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections import Counter

import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from ray_accel_ext.placement import claims_snapshot, reserve_domain  # noqa: E402
from ray_accel_ext.testing.cluster import NODE_NAME_LABEL, SimulatedCluster, free_port  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402
from tests.support.metrics import scrape_metrics  # noqa: E402
from tests.support.paths import REPO  # noqa: E402

pytestmark = pytest.mark.ray

EXAMPLE = REPO / "examples" / "serve_slice"
GB200 = {"ray.io/accelerator-type": "GB200"}
FABRIC = "rayaccel.io/fabric-domain"
BURST = 200
# Ray declares a node dead after health_check_failure_threshold (5) failed checks; checking every
# second instead of every 3 s makes a killed tray leave the node table sooner (a slow node still
# has 5 x health_check_timeout_ms, 10 s each, before it is declared dead).
SYSTEM_CONFIG = json.dumps({"health_check_period_ms": 1000})


def _load(name):
    spec = importlib.util.spec_from_file_location(f"serve_slice_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


app_mod, loadgen = _load("app"), _load("loadgen")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snaps = tmp_path_factory.mktemp("serve")
    with SimulatedCluster(system_config=SYSTEM_CONFIG) as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        specs = [(s, {"name": s.name}) for clique in (31, 32) for s in gb200_domain(snaps, clique, trays=2)]
        specs.append((SNAPSHOTS / "nvidia_gpu" / "l4-single-pcie", {"name": "l4"}))
        add_in_batches(c, specs)
        c.connect()
        yield c
        serve.shutdown()


@pytest.fixture(scope="module")
def app(cluster):
    port = free_port()
    held = [reserve_domain("fabric", hosts=2, selector=GB200, deadline_s=60) for _ in range(2)]
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    serve.run(app_mod.build_app(slice_capacity=8, work_s=0.05, check_s=0.5, replica_selector={NODE_NAME_LABEL: "head"}),
              name="slice-app", route_prefix="/")
    status = serve.get_deployment_handle("SliceModel", app_name="slice-app").status
    yield {"port": port, "held": held, "status": lambda: status.remote().result()}
    serve.delete("slice-app")


def wait_for(what, check, deadline_s=120.0):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def _serve_counts():
    totals = Counter()
    for line in scrape_metrics(r"ray_rayaccel_serve_requests(_total)?\{"):
        route = re.search(r'route="([^"]+)"', line).group(1)
        totals[route] += float(line.rsplit(" ", 1)[1])
    return totals


def _all_answered(records, n):
    assert len(records) == n and sorted(r["id"] for r in records) == list(range(n))
    bad = [r for r in records if r.get("status") != 200 or "body" not in r]
    assert not bad, bad[:5]
    assert all(r["body"]["id"] == str(r["id"]) for r in records)


def test_pool_while_held_then_bursts_split_and_prometheus_agrees(app):
    assert app["status"]()["slice"] is False  # both domains are held by another job
    phase1 = loadgen.run_load(app["port"], bursts=1, burst_size=BURST, mean_gap_s=0, seed=1)
    _all_answered(phase1, BURST)
    assert Counter(r["body"]["route"] for r in phase1) == {"pool": BURST}

    for r in app["held"]:
        r.release()
    got = wait_for("the replica on a domain", lambda: (s := app["status"]())["slice"] and s)
    assert got["step"] == "gb200-nvlink" and got["hosts"] == 2, got

    phase2 = loadgen.run_load(app["port"], bursts=2, burst_size=BURST, mean_gap_s=1.0, seed=2)
    _all_answered(phase2, 2 * BURST)
    routes = Counter(r["body"]["route"] for r in phase2)
    assert routes["slice"] > 0 and routes["pool"] > 0, routes
    for r in phase2:
        if r["body"]["route"] == "slice":
            assert r["body"]["domain"] == got["domain"] and r["body"]["hosts"] == 2

    expected = Counter({"pool": BURST}) + routes
    seen = wait_for("Prometheus to show every request", lambda: (c := _serve_counts()) == expected and c, 90)
    assert seen == expected


def test_killed_tray_replica_recovers_on_a_whole_free_domain(cluster, app):
    before = wait_for("the replica on a domain", lambda: (s := app["status"]())["slice"] and s)
    old_domain, victim = before["domain"], before["nodes"][1]
    victim_node = next(n for n in cluster.nodes if n.node_id == victim)
    killed_at: list[float] = []

    def kill(burst):
        if burst == 1:
            killed_at.append(time.monotonic())
            cluster.kill_node(victim_node)

    def back(records) -> bool:
        return any(r.get("body", {}).get("route") == "slice" and r["body"].get("domain") != old_domain for r in records)

    def more(records) -> bool:
        # until the replica serves from another domain, and then for two more bursts
        later = {r["burst"] for r in records if r.get("body", {}).get("route") == "slice"
                 and r["body"].get("domain") != old_domain}
        return not back(records) or len(later) < 2

    records = loadgen.run_load(app["port"], bursts=3, burst_size=BURST, mean_gap_s=2.0, seed=15, max_seconds=300,
                               on_burst=kill, more_while=more)
    _all_answered(records, len(records))
    assert killed_at, "the load ended before the kill"
    after = app["status"]()
    assert after["slice"] and after["domain"] != old_domain and after["hosts"] == 2, after
    events = [(h["event"], h["domain"]) for h in after["history"]]
    assert events[-3:] == [("reserved", old_domain), ("lost", old_domain), ("reserved", after["domain"])], events
    # The dead domain is given back; the new one is held whole.
    claims = claims_snapshot()
    assert f"{FABRIC}={old_domain}" not in claims and f"{FABRIC}={after['domain']}" in claims
    assert set(after["nodes"]) == {n["NodeID"] for n in ray.nodes() if n["Alive"]
                                   and n["Labels"].get(FABRIC) == after["domain"]}
    # Requests that met the dead shard were answered by the pool.
    lost = [r for r in records if r["body"].get("slice_reason") == "lost"]
    assert all(r["body"]["route"] == "pool" for r in lost)
    routes = Counter((r["body"]["route"], r["body"].get("domain")) for r in records)
    assert routes[("slice", old_domain)] > 0 and routes[("slice", after["domain"])] > 0, routes

    first_back = min(r["sent_at"] for r in records if r["body"].get("route") == "slice"
                     and r["body"].get("domain") == after["domain"])
    summary = loadgen.summarize(records) | {"met_dead_shard": len(lost),
                                            "back_on_domain_s": round(first_back - killed_at[0], 2),
                                            "recovery": after["history"][-2:]}
    print(f"\nserve node kill: {json.dumps(summary)}")
    assert summary["errors"] == 0 and summary["bursts"] >= 4
