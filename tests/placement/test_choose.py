"""The domain chooser over synthetic inventories (pure: no Ray), selectors, requests, errors, events."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel_ext.cluster.state import inventory_metrics
from ray_accel_ext.errors import NoDomainAvailable, RayVersionError, SchedulingError, WouldSplitDomain
from ray_accel_ext.placement import DomainRequest, choose_domain, match_selector, node_views, use_topology_strategy
from ray_accel_ext.telemetry import TELEMETRY_LOGGER, placement_event

FABRIC = "rayaccel.io/fabric-domain"


def node(nid, domain=None, *, gen="v6e", acc="TPU-V6E", res=None, hosts=None, rack=None, block=None, **extra):
    labels = {"rayaccel.io/generation": gen, "ray.io/accelerator-type": acc, **extra}
    if domain:
        labels[FABRIC] = domain
    if hosts:
        labels["rayaccel.io/fabric-hosts"] = str(hosts)
    if rack:
        labels["rayaccel.io/rack"] = rack
    if block:
        labels["rayaccel.io/block"] = block
    return {"NodeID": nid, "Alive": True, "Labels": labels, "Resources": res or {"CPU": 1, "TPU": 4}}


def slices(n_slices, hosts=4, prefix="s", **kw):
    return [node(f"{prefix}{s}-{w}", f"{prefix}{s}", hosts=hosts, **kw) for s in range(n_slices) for w in range(hosts)]


# -- selectors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "selector, expected",
    [
        ({"k": "a"}, True),
        ({"k": "b"}, False),
        ({"k": "!b"}, True),
        ({"k": "!a"}, False),
        ({"k": "in(a,b)"}, True),
        ({"k": "in(b, c)"}, False),
        ({"k": "!in(b,c)"}, True),
        ({"absent": "!x"}, True),  # Ray: a negative selector matches a node without the key
        ({"absent": "!in(x,y)"}, True),
        ({"absent": "x"}, False),
        ({"k": "a", "j": "!in(1,2)"}, True),
    ],
)
def test_selector_semantics_follow_ray(selector, expected):
    assert match_selector({"k": "a"}, selector) is expected


def test_empty_in_list_is_rejected_like_ray():
    with pytest.raises(ValueError, match="in\\(\\)"):
        match_selector({}, {"k": "in()"})


# -- requests --------------------------------------------------------------------------------------


def test_request_validation():
    with pytest.raises(ValueError, match="unknown placement level"):
        DomainRequest(level="zone")
    with pytest.raises(ValueError, match="not both"):
        DomainRequest(hosts=2, bundles=({"GPU": 1},))
    with pytest.raises(ValueError, match=">= 1"):
        DomainRequest(hosts=0)
    assert DomainRequest(level="ray.io/tpu-slice-name").key == "ray.io/tpu-slice-name"
    assert DomainRequest(hosts=2).node_strategy == "STRICT_SPREAD"
    assert DomainRequest(bundles=({"GPU": 1},)).node_strategy == "PACK"
    assert DomainRequest(hosts=2, selector={"a": "b"}).label() == "fabric:2h[a=b]"


# -- choosing --------------------------------------------------------------------------------------


def test_whole_domain_gets_one_bundle_per_host_with_its_accelerators():
    choice = choose_domain(slices(2), DomainRequest())
    assert choice.domain == "s0"
    assert choice.node_ids == ("s0-0", "s0-1", "s0-2", "s0-3")
    assert choice.bundles == ({"TPU": 4.0},) * 4
    assert choice.strategy == "STRICT_SPREAD"
    # Ray pins every bundle to the domain through its label, plus the caller's selector.
    assert all(s == {FABRIC: "s0"} for s in choice.selectors)
    assert choice.claim_key == f"{FABRIC}=s0"
    assert (choice.generation, choice.topology) == ("v6e", None)


def test_best_fit_prefers_the_smallest_domain_that_fits():
    inv = slices(1, hosts=8, prefix="big") + slices(1, hosts=2, prefix="small") + slices(1, hosts=4, prefix="mid")
    assert choose_domain(inv, DomainRequest(hosts=2)).domain == "small0"
    assert choose_domain(inv, DomainRequest(hosts=3)).domain == "mid0"
    assert choose_domain(inv, DomainRequest(hosts=5)).domain == "big0"


def test_selector_restricts_nodes_and_is_carried_into_every_bundle():
    inv = slices(1, prefix="v6e") + slices(1, prefix="v5p", gen="v5p", acc="TPU-V5P")
    req = DomainRequest(hosts=4, selector={"rayaccel.io/generation": "v5p"})
    choice = choose_domain(inv, req)
    assert choice.domain == "v5p0"
    assert all(s == {FABRIC: "v5p0", "rayaccel.io/generation": "v5p"} for s in choice.selectors)


def test_busy_domains_and_overlapping_nodes_are_skipped():
    inv = slices(3)
    req = DomainRequest(hosts=4)
    assert choose_domain(inv, req, busy_domains={f"{FABRIC}=s0"}).domain == "s1"
    # A claim at another level holding one node of s1 makes s1 busy too.
    assert choose_domain(inv, req, busy_domains={f"{FABRIC}=s0"}, busy_nodes={"s1-2"}).domain == "s2"


def test_all_fitting_domains_busy_is_retryable():
    inv = slices(2)
    with pytest.raises(NoDomainAvailable) as info:
        choose_domain(inv, DomainRequest(hosts=4), busy_domains={f"{FABRIC}=s0", f"{FABRIC}=s1"})
    assert info.value.retryable
    assert info.value.data["reason"] == "busy"
    assert info.value.data["busy"] == ["s0", "s1"]


def test_tried_domains_are_not_offered_again():
    with pytest.raises(NoDomainAvailable) as info:
        choose_domain(slices(1), DomainRequest(), exclude={f"{FABRIC}=s0"})
    assert not info.value.retryable and info.value.data["reason"] == "tried"


def test_larger_than_any_domain_would_split():
    with pytest.raises(WouldSplitDomain) as info:
        choose_domain(slices(3), DomainRequest(hosts=5))
    err = info.value
    assert err.data["reason"] == "too-large" and not err.retryable
    assert err.data["largest_matching_domain_hosts"] == 4
    assert err.data["matching_domains"] == 3
    d = err.to_dict()
    assert d["error"] == "WouldSplitDomain" and d["layer"] == "scheduling"


def test_bundles_that_do_not_fit_any_host_would_split():
    with pytest.raises(WouldSplitDomain):
        choose_domain(slices(2), DomainRequest(hosts=2, bundle={"TPU": 8}))


def test_no_matching_node_says_which_label_or_selector():
    with pytest.raises(WouldSplitDomain, match="no node has label rayaccel.io/rack"):
        choose_domain(slices(1), DomainRequest(level="rack", hosts=1))
    with pytest.raises(WouldSplitDomain, match="matches") as info:
        choose_domain(slices(1), DomainRequest(hosts=1, selector={"rayaccel.io/generation": "v5p"}))
    assert info.value.data["reason"] == "no-match"


def test_complete_skips_partial_slices():
    inv = slices(1, prefix="full") + [node("p-0", "part", hosts=4), node("p-1", "part", hosts=4)]
    assert choose_domain(inv, DomainRequest(complete=True)).domain == "full0"
    # Without `complete`, the smaller (partial) domain is the best fit for a whole-domain request.
    assert choose_domain(inv, DomainRequest()).domain == "part"
    with pytest.raises(WouldSplitDomain, match="incomplete"):
        choose_domain(inv[4:], DomainRequest(complete=True))


def test_explicit_bundles_pack_into_one_domain():
    inv = [
        node("a0", "A", res={"GPU": 4, "CPU": 8}, acc="GB200"),
        node("a1", "A", res={"GPU": 4, "CPU": 8}, acc="GB200"),
        node("b0", "B", res={"GPU": 4, "CPU": 8}, acc="GB200"),
    ]
    req = DomainRequest(bundles=({"GPU": 2},) * 4)  # 8 GPUs: only domain A has them
    choice = choose_domain(inv, req)
    assert choice.domain == "A" and choice.strategy == "PACK" and len(choice.bundles) == 4
    with pytest.raises(WouldSplitDomain):
        choose_domain(inv, DomainRequest(bundles=({"GPU": 4},) * 3))


def test_rack_and_block_levels():
    inv = [
        node("r1a", "s0", rack="r1", block="b1"),
        node("r1b", "s0", rack="r1", block="b1"),
        node("r2a", "s1", rack="r2", block="b1"),
        node("r3a", "s2", rack="r3", block="b2"),
    ]
    assert choose_domain(inv, DomainRequest(level="rack", hosts=2)).domain == "r1"
    choice = choose_domain(inv, DomainRequest(level="block", hosts=3))
    assert choice.domain == "b1" and choice.selectors[0] == {"rayaccel.io/block": "b1"}


def test_dead_nodes_and_plain_dicts():
    inv = [{"node_id": "x", "labels": {FABRIC: "d"}, "resources": {"CPU": 1}},
           {"NodeID": "y", "Alive": False, "Labels": {FABRIC: "d"}, "Resources": {"CPU": 1}}]
    assert [n.node_id for n in node_views(inv)] == ["x"]
    choice = choose_domain(inv, DomainRequest())
    assert choice.node_ids == ("x",) and choice.bundles == ({"CPU": 1.0},)


_domain_sizes = st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(sizes=_domain_sizes, want=st.integers(min_value=1, max_value=7), busy=st.sets(st.integers(0, 7)))
def test_choice_is_one_free_domain_that_fits_or_a_clear_error(sizes, want, busy):
    inv = [node(f"d{d}-{w}", f"d{d}") for d, size in enumerate(sizes) for w in range(size)]
    busy_keys = {f"{FABRIC}=d{b}" for b in busy}
    req = DomainRequest(hosts=want)
    try:
        choice = choose_domain(inv, req, busy_domains=busy_keys)
    except SchedulingError as exc:
        fits = [d for d, size in enumerate(sizes) if size >= want]
        if isinstance(exc, WouldSplitDomain):
            assert not fits
        else:
            assert fits and all(d in busy for d in fits)
        return
    members = {f"d{d}-{w}" for d, size in enumerate(sizes) for w in range(size) if f"d{d}" == choice.domain}
    assert set(choice.node_ids) == members  # the whole domain and nothing outside it
    assert choice.claim_key not in busy_keys
    assert len(choice.bundles) == want <= len(members)
    # best fit: no free fitting domain is smaller
    free_fit = [size for d, size in enumerate(sizes) if size >= want and d not in busy]
    assert len(members) == min(free_fit)


# -- events ----------------------------------------------------------------------------------------


def test_placement_event_is_one_json_line_with_incident_fields(caplog):
    caplog.set_level(logging.INFO, logger=TELEMETRY_LOGGER)
    placement_event({"outcome": "ready", "level": "fabric", "domain": "s0", "step": 1, "step_name": "gb200",
                     "fallback": True, "wait_s": 0.25, "hosts": 4, "generation": "blackwell", "topology": None,
                     "attempts": [{"step": 0, "outcome": "too-large"}]})
    lines = [r.getMessage() for r in caplog.records if r.name == TELEMETRY_LOGGER]
    assert len(lines) == 1
    event = json.loads(lines[0])
    for key in ("event", "ts", "outcome", "level", "domain", "step", "fallback", "wait_s", "hosts", "generation",
                "topology", "attempts"):
        assert key in event
    assert event["event"] == "placement" and event["fallback"] is True


def test_inventory_counts_nodes_by_discovery_result():
    inv = slices(2) + [node("g", "G", gen="blackwell", acc="GB200", **{"rayaccel.io/discovery": "degraded"})]
    counts = inventory_metrics(inv)
    # unknown values are empty strings, never "none"
    assert counts[("v6e", "", "", "")] == 8
    assert counts[("blackwell", "", "degraded", "")] == 1


def test_topology_strategy_is_used_only_where_ray_has_it():
    assert use_topology_strategy(None, "2.60.0") is True
    assert use_topology_strategy(None, "2.57.1") is True  # the first release with it (compat.RAY_FEATURES)
    assert use_topology_strategy(None, "2.56.1") is False  # falls back to bundle_label_selector + strategy
    assert use_topology_strategy(None, "2.61.0") is True  # newer than CI's newest: no version list decides
    assert use_topology_strategy(False, "2.60.0") is False
    with pytest.raises(RayVersionError, match=r"topology_strategy needs Ray 2.57 or newer .*installed: 2.55.1"):
        use_topology_strategy(True, "2.55.1")
