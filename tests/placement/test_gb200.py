"""Placement on a simulated cluster of four GB200 NVLink domains (2 trays each), real `ray start`.

Every node comes up through the start hook from a copy of the GB200 NVL72 tray snapshot whose NVML
clique id differs per domain; the head is the no-accelerators host. Shows: a whole-domain
reservation lands on exactly that domain's trays with Ray isolating the GPUs; a request larger than
any domain fails at once with WouldSplitDomain; 20 concurrent requests over 4 domains never share
or split one (the rest wait, or fail with NoDomainAvailable); the placement metrics reach Ray's
Prometheus export.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.errors import NoDomainAvailable, WouldSplitDomain  # noqa: E402
from ray_accel_ext.placement import DomainRequest, claims_snapshot, reserve, reserve_domain  # noqa: E402
from ray_accel_ext.placement.claims import claims_registry  # noqa: E402
from ray_accel_ext.telemetry import TELEMETRY_LOGGER  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402
from tests.support.metrics import scrape_metrics  # noqa: E402

pytestmark = pytest.mark.ray

FABRIC = "rayaccel.io/fabric-domain"
GB200 = {"ray.io/accelerator-type": "GB200"}
CLIQUES = (11, 12, 13, 14)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snaps = tmp_path_factory.mktemp("gb200")
    with SimulatedCluster() as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        specs = []
        for clique in CLIQUES:
            for tray, snap in enumerate(gb200_domain(snaps, clique, trays=2)):
                specs.append((snap, {"name": f"c{clique}-t{tray}"}))
        add_in_batches(c, specs)
        c.connect()
        yield c


def domain_of(node_id):
    return next(n["Labels"].get(FABRIC) for n in ray.nodes() if n["NodeID"] == node_id)


def test_four_nvlink_domains_of_two_trays(cluster):
    domains = {}
    for n in ray.nodes():
        if n["Alive"] and n["Labels"].get("ray.io/accelerator-type") == "GB200":
            domains.setdefault(n["Labels"][FABRIC], []).append(n["Resources"]["GPU"])
    assert sorted(d.rsplit(".", 1)[1] for d in domains) == [str(c) for c in CLIQUES]
    assert all(gpus == [4.0, 4.0] for gpus in domains.values())
    assert all(n["Labels"]["ray.io/gpu-domain"] == n["Labels"][FABRIC] for n in ray.nodes() if FABRIC in n["Labels"]
               and n["Labels"].get("ray.io/accelerator-type") == "GB200")


def test_whole_domain_reservation_lands_on_that_domain_only(cluster, caplog):
    caplog.set_level(logging.INFO, logger=TELEMETRY_LOGGER)
    with reserve_domain("fabric", selector=GB200, deadline_s=60) as r:
        assert r.bundles == ({"GPU": 4.0},) * 2
        placed = r.bundle_nodes()
        assert sorted(placed.values()) == sorted(r.choice.node_ids) and len(set(placed.values())) == 2
        assert {domain_of(n) for n in placed.values()} == {r.domain}

        @ray.remote(num_gpus=4, num_cpus=0)
        def where():
            import os

            return ray.get_runtime_context().get_node_id(), os.environ.get("CUDA_VISIBLE_DEVICES")

        out = ray.get([where.options(scheduling_strategy=r.scheduling_strategy(i)).remote() for i in range(2)])
        assert {node for node, _ in out} == set(r.choice.node_ids)
        assert all(visible == "0,1,2,3" for _, visible in out)
        assert f"{FABRIC}={r.domain}" in claims_snapshot()
    assert f"{FABRIC}={r.domain}" not in claims_snapshot()
    events = [json.loads(m.getMessage()) for m in caplog.records if m.name == TELEMETRY_LOGGER]
    placed_events = [e for e in events if e["event"] == "placement"]
    assert placed_events[-1]["outcome"] == "ready" and placed_events[-1]["domain"] == r.domain
    assert placed_events[-1]["generation"] == "blackwell" and placed_events[-1]["hosts"] == 2
    assert any(e["event"] == "placement_release" and e["domain"] == r.domain for e in events)


def test_request_larger_than_any_domain_fails_fast(cluster):
    before = set(ray.util.placement_group_table())
    t0 = time.monotonic()
    with pytest.raises(WouldSplitDomain) as info:
        reserve_domain("fabric", hosts=3, selector=GB200, deadline_s=120)
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"took {elapsed:.1f}s of a 120s deadline: it waited instead of failing"
    err = info.value
    assert err.attempts[0]["outcome"] == "too-large"
    assert "largest matching rayaccel.io/fabric-domain has 2 host(s)" in err.message
    assert err.to_dict()["layer"] == "scheduling"
    # No placement group was even created: the request could never be met by one domain.
    assert set(ray.util.placement_group_table()) == before


def test_domain_taken_outside_the_api_times_out_and_the_next_one_is_used(cluster):
    first = sorted({n["Labels"][FABRIC] for n in ray.nodes() if n["Labels"].get("ray.io/accelerator-type") == "GB200"})[0]
    tray = next(n["NodeID"] for n in ray.nodes() if n["Labels"].get(FABRIC) == first)

    @ray.remote(num_gpus=4, num_cpus=0)
    class Squatter:
        def ping(self):
            return True

    # A plain actor (no claim) takes every GPU of one tray of the best-fit domain.
    squatter = Squatter.options(label_selector={"ray.io/node-id": tray}).remote()
    ray.get(squatter.ping.remote())
    # A domain given back a moment ago is tried after the others of its size (claims.COOLING_S):
    # `first`, given back by an earlier test, must be the one tried first here.
    deadline = time.monotonic() + 30
    while f"{FABRIC}={first}" in ray.get(claims_registry().info.remote())["cooling"] and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with reserve_domain("fabric", hosts=2, selector=GB200, deadline_s=60, domain_wait_s=2) as r:
            assert r.domain != first
            assert [(a["domain"], a["outcome"]) for a in r.attempts] == [(first, "timeout"), (r.domain, "ready")]
            assert "not ready within 2s" in r.attempts[0]["reason"]
            assert {domain_of(n) for n in r.bundle_nodes().values()} == {r.domain}
        # Nothing of the timed-out group is left behind.
        assert all(t["state"] == "REMOVED" or t["bundles_to_node_id"] == {} or tray not in t["bundles_to_node_id"].values()
                   for t in ray.util.placement_group_table().values())
    finally:
        ray.kill(squatter)
    assert claims_snapshot() == {}


CRASHING_DRIVER = """
import os, sys, ray
from ray_accel_ext.placement import reserve_domain
ray.init(address=sys.argv[1])
r = reserve_domain("fabric", hosts=2, selector={"rayaccel.io/fabric-domain": sys.argv[2]}, deadline_s=60)
print("HELD", r.domain, flush=True)
os._exit(0)  # dies holding the domain: no release, no ray.shutdown
"""


def test_claim_of_a_driver_that_died_is_given_back(cluster, tmp_path):
    import os
    import subprocess
    import sys

    domain = sorted({n["Labels"][FABRIC] for n in ray.nodes() if n["Labels"].get("ray.io/accelerator-type") == "GB200"})[-1]
    script = tmp_path / "crash.py"
    script.write_text(CRASHING_DRIVER)
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    out = subprocess.run([sys.executable, str(script), cluster.address, domain], env=env, capture_output=True,
                         text=True, timeout=120)
    assert f"HELD {domain}" in out.stdout, out.stdout + out.stderr[-3000:]
    # Its group goes with its job; the claim is dropped when the registry next looks.
    with reserve_domain("fabric", hosts=2, selector={FABRIC: domain}, deadline_s=90) as r:
        assert r.domain == domain
    assert claims_snapshot() == {}


def _twenty(deadline_s, hold_s):
    results, lock = [], threading.Lock()

    def one(i):
        t0 = time.monotonic()
        try:
            r = reserve(DomainRequest(hosts=2, selector=GB200, deadline_s=deadline_s))
        except (NoDomainAvailable, WouldSplitDomain) as exc:
            with lock:
                results.append({"i": i, "error": exc})
            return
        got = time.monotonic()
        nodes = r.bundle_nodes()
        time.sleep(hold_s)
        released = time.monotonic()
        r.release()
        with lock:
            results.append({"i": i, "domain": r.domain, "nodes": nodes, "start": got, "end": released,
                            "waited": got - t0, "members": set(r.choice.node_ids)})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=deadline_s + 120)
    assert not any(t.is_alive() for t in threads)
    return results


def _assert_never_shared_or_split(ok):
    labels = {n["NodeID"]: n["Labels"].get(FABRIC) for n in ray.nodes()}
    for r in ok:
        # not split: both bundles on distinct trays of the chosen domain
        assert len(set(r["nodes"].values())) == 2
        assert {labels[n] for n in r["nodes"].values()} == {r["domain"]}
        assert set(r["nodes"].values()) <= r["members"]
    for a in ok:
        for b in ok:
            if a is not b and a["domain"] == b["domain"]:
                assert a["end"] <= b["start"] or b["end"] <= a["start"], "two holders of one domain at once"


def test_twenty_concurrent_requests_wait_their_turn(cluster):
    results = _twenty(deadline_s=90, hold_s=0.3)
    ok = [r for r in results if "domain" in r]
    assert len(ok) == 20, [str(r.get("error")) for r in results if "error" in r]
    assert len({r["domain"] for r in ok}) == 4
    _assert_never_shared_or_split(ok)
    assert claims_snapshot() == {}


def test_twenty_concurrent_requests_with_short_deadline_fail_clearly(cluster):
    results = _twenty(deadline_s=2, hold_s=6)
    ok = [r for r in results if "domain" in r]
    failed = [r["error"] for r in results if "error" in r]
    assert len(ok) == 4 and len({r["domain"] for r in ok}) == 4
    _assert_never_shared_or_split(ok)
    assert len(failed) == 16
    for err in failed:
        assert isinstance(err, NoDomainAvailable)
        assert err.attempts[-1]["outcome"] == "busy"
        assert "held by other requests" in err.message
    assert claims_snapshot() == {}


def test_placement_metrics_reach_rays_prometheus_export(cluster):
    """Ray's metrics agent exports what ray.util.metrics recorded (flushed every few seconds)."""
    reserve_domain("fabric", hosts=1, selector=GB200, deadline_s=30).release()
    with pytest.raises(WouldSplitDomain):
        reserve_domain("fabric", hosts=5, selector=GB200, deadline_s=30)
    deadline = time.monotonic() + 60
    counters = waits = nodes = []
    while time.monotonic() < deadline:
        counters, waits, nodes = scrape_metrics(r"ray_rayaccel_placements(_total)?\{",
                                                r"ray_rayaccel_placement_wait_seconds_count\{", r"ray_rayaccel_nodes\{")
        if counters and waits and nodes and any('outcome="failed"' in c for c in counters):
            break
        time.sleep(2)
    assert any('outcome="ready"' in c and 'generation="blackwell"' in c and 'level="fabric"' in c for c in counters), counters
    assert any('outcome="failed"' in c for c in counters), counters
    assert waits
    assert any('generation="blackwell"' in line and line.endswith(" 8.0") for line in nodes), nodes
