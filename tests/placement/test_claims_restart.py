"""The claim registry survives its own restart (simulated cluster: two GB200 NVLink domains of one
tray each, through the start hook).

The registry actor is killed while both domains are held and four callers wait in line. The
restarted registry rebuilds both claims from Ray's placement-group table (the groups are named
after their claims), a newcomer is refused, the waiters come back in their original order, and
as domains are given back they go to the waiters first come, first served; no domain is ever
held by two callers at once.
"""

from __future__ import annotations

import threading
import time

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext.errors import NoDomainAvailable  # noqa: E402
from ray_accel_ext.placement import (  # noqa: E402
    CLAIMS_ACTOR,
    CLAIMS_NAMESPACE,
    DomainRequest,
    claims_queue,
    claims_snapshot,
    reserve,
)
from ray_accel_ext.placement.claims import claims_registry  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402

pytestmark = pytest.mark.ray

FABRIC = "rayaccel.io/fabric-domain"
ONE_TRAY = DomainRequest(hosts=1, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=300, name="one-tray")
DEADLINE_S = 180


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snaps = tmp_path_factory.mktemp("claims")
    with SimulatedCluster() as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        specs = [(s, {"name": s.name}) for clique in (41, 42) for s in gb200_domain(snaps, clique, trays=1)]
        add_in_batches(c, specs)
        c.connect()
        yield c


def wait_for(what, check, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def restart_registry():
    """Kill the registry actor (Ray restarts it); wait for the new incarnation; what the old held."""
    before = ray.get(claims_registry().info.remote())
    ray.kill(ray.get_actor(CLAIMS_ACTOR, namespace=CLAIMS_NAMESPACE), no_restart=False)
    wait_for("the restarted registry",
             lambda: ray.get(claims_registry().info.remote())["incarnation"] != before["incarnation"])
    assert ray.get(claims_registry().info.remote())["restarted"]
    return before


class Holders:
    """Who holds which domain, checked at every hand-over: a domain is never held twice."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now: dict[str, str] = {}
        self.served: list[str] = []

    def got(self, who, r):
        with self.lock:
            assert r.domain not in self.now, f"{r.domain} given to {who} while {self.now.get(r.domain)} holds it"
            self.now[r.domain] = who
            self.served.append(who)

    def give_back(self, who, r):
        with self.lock:
            assert self.now.pop(r.domain) == who
        r.release()


def test_restart_keeps_held_domains_and_the_order_of_waiters(cluster):
    holders = Holders()
    first, second = reserve(ONE_TRAY), reserve(ONE_TRAY)
    holders.got("R1", first)
    holders.got("R2", second)
    assert {first.domain, second.domain} == {n["Labels"][FABRIC] for n in ray.nodes() if FABRIC in n["Labels"]}

    got: dict[str, object] = {}
    errors: list[BaseException] = []

    def waiter(name):
        try:
            r = reserve(ONE_TRAY)
            holders.got(name, r)
            got[name] = r
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = []
    for i in range(4):
        t = threading.Thread(target=waiter, args=(f"W{i + 1}",), daemon=True)
        t.start()
        threads.append(t)
        wait_for(f"waiter {i + 1} in line", lambda n=i + 1: len(claims_queue()) == n)
    line = [w["owner"] for w in claims_queue()]

    before = restart_registry()
    assert before["claims"] == 2 and before["waiters"] == 4
    # The new registry knows both claims from the placement-group table, with their owners.
    held = claims_snapshot()
    assert {k: (v["owner"], v["rebuilt"]) for k, v in held.items()} == {
        f"{FABRIC}={first.domain}": (first.owner, True), f"{FABRIC}={second.domain}": (second.owner, True)}
    assert ray.get(claims_registry().info.remote())["rebuilt"] == 2
    # ...and the waiters come back in the order they first queued.
    wait_for("the waiters back in line", lambda: [w["owner"] for w in claims_queue()] == line)
    # A newcomer is not given a held domain (nor one promised to the line).
    with pytest.raises(NoDomainAvailable) as info:
        reserve(DomainRequest(hosts=1, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=1.0))
    assert info.value.data["reason_class"] == "no-domain-free"

    # Hand the domains over one at a time: first come, first served.
    holders.give_back("R1", first)
    wait_for("W1 served", lambda: "W1" in got)
    holders.give_back("R2", second)
    wait_for("W2 served", lambda: "W2" in got)
    holders.give_back("W1", got["W1"])
    wait_for("W3 served", lambda: "W3" in got)
    holders.give_back("W2", got["W2"])
    wait_for("W4 served", lambda: "W4" in got)
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert holders.served == ["R1", "R2", "W1", "W2", "W3", "W4"]
    for name in ("W3", "W4"):
        holders.give_back(name, got[name])
    assert claims_snapshot() == {} and claims_queue() == []


def test_a_claim_lost_with_the_registry_is_reasserted_only_while_free(cluster):
    """A claim made just before a restart, whose group did not exist yet, is not in the table:
    its owner's attach claims again if the domain is still free; else the owner must look again."""
    domains = sorted(n["Labels"][FABRIC] for n in ray.nodes() if FABRIC in n["Labels"])
    nodes = {n["Labels"][FABRIC]: n["NodeID"] for n in ray.nodes() if FABRIC in n["Labels"]}
    key_a, key_b = (f"{FABRIC}={d}" for d in domains)
    registry = claims_registry()
    assert ray.get(registry.claim.remote(key_a, [nodes[domains[0]]], "early", 60.0)) == "ok"
    assert ray.get(registry.claim.remote(key_b, [nodes[domains[1]]], "early-b", 60.0)) == "ok"
    restart_registry()
    registry = claims_registry()
    assert ray.get(registry.info.remote())["rebuilt"] == 0
    assert ray.get(registry.snapshot.remote()) == {}  # neither had a group: nothing to rebuild from
    # Someone else takes B meanwhile; A is still free.
    assert ray.get(registry.claim.remote(key_b, [nodes[domains[1]]], "later", 60.0)) == "ok"
    assert ray.get(registry.attach.remote(key_a, "early", "ff" * 14, [nodes[domains[0]]])) is True
    assert ray.get(registry.attach.remote(key_b, "early-b", "ee" * 14, [nodes[domains[1]]])) is False
    assert {k: v["owner"] for k, v in ray.get(registry.snapshot.remote()).items()} == {key_a: "early", key_b: "later"}
    ray.get(registry.release.remote(key_b, "later"))
    # A's group id is not in Ray's table: the registry drops the claim when it next looks.
    wait_for("the claim without a real group dropped", lambda: claims_snapshot() == {})


def test_a_domain_given_back_wakes_the_callers_waiting_for_one(cluster):
    """A caller waiting in ``changed`` returns as soon as a claim is released, not at its timeout."""
    node = next(n for n in ray.nodes() if FABRIC in n["Labels"])
    key = f"{FABRIC}={node['Labels'][FABRIC]}"
    registry = claims_registry()
    assert ray.get(registry.claim.remote(key, [node["NodeID"]], "holder", 60.0)) == "ok"
    version = ray.get(registry.look.remote())["version"]
    assert ray.get(registry.changed.remote(version, 0.01)) == version  # nothing given back: its timeout
    waiting = registry.changed.remote(version, 3600.0)
    assert ray.get(registry.release.remote(key, "holder"))
    assert ray.get(waiting, timeout=DEADLINE_S) != version
    assert claims_snapshot() == {}


def test_a_caller_that_gave_up_holds_nothing_whatever_order_its_calls_run(cluster):
    """``reserve()`` that raised (here: the registry cannot answer in 0 s) withdraws; a claim of
    its that runs after the withdrawal (Ray may run an asyncio actor's calls out of order:
    https://docs.ray.io/en/latest/ray-core/actors/task-orders.html) is refused, so the domain is
    free for the next caller at once, not after the claim's TTL."""
    nodes = {n["Labels"][FABRIC]: n["NodeID"] for n in ray.nodes() if FABRIC in n["Labels"]}
    domain = sorted(nodes)[0]
    key, node = f"{FABRIC}={domain}", [nodes[domain]]
    registry = claims_registry()
    # The order that left a domain held for a whole TTL: the withdrawal first, then the claim.
    assert ray.get(registry.withdraw.remote("gave-up")) == 0
    answer = ray.get(registry.claim_first.remote([[key, node]], "gave-up", 120.0))
    assert answer["verdict"] == "held" and answer["claims"] == {}
    assert ray.get(registry.claim.remote(key, node, "gave-up", 120.0)) == "held"
    assert ray.get(registry.attach.remote(key, "gave-up", "ab" * 14, node)) is False
    ray.get(registry.wait_in_line.remote("gave-up", [key], None, 60.0))
    assert "gave-up" not in [w["owner"] for w in claims_queue()]
    assert claims_snapshot() == {}
    # The usual order: the withdrawal drops what the claim took.
    assert ray.get(registry.claim.remote(key, node, "slow", 120.0)) == "ok"
    assert ray.get(registry.withdraw.remote("slow")) == 1 and claims_snapshot() == {}

    # Through reserve(): every try that timed out leaves nothing held, so both domains are free.
    timed_out = 0
    for _ in range(10):
        try:
            reserve(ONE_TRAY, registry_timeout_s=0).release()
        except ray.exceptions.GetTimeoutError:
            timed_out += 1
    assert timed_out > 0, "the claim registry answered within 0 s ten times"
    wait_for("the withdrawals to arrive", lambda: claims_snapshot() == {}, deadline_s=30)
    quick = DomainRequest(hosts=1, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=30, domain_wait_s=30)
    both = [reserve(quick), reserve(quick)]
    assert {r.domain for r in both} == set(nodes)
    for r in both:
        r.release()
