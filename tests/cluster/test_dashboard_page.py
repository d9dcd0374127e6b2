"""The dashboard page in real headless Chromium, over documents built from recorded hosts.

Clusters: the demo's snapshot cluster (``ci/build_demo_hosts.py``: H100 DGX, GB200 tray, L4,
TPU7x host, Trn2), and a 1,000-node synthetic one (``tests/support/synthetic_cluster.py``: TPU
v6e slices, GB200 NVL72 domains, H100 racks, Trn2 UltraServers, degraded and CPU hosts). The
page's SVG is checked against the document: a picture per domain, a host group per node, a chip
per device, a link per fabric link, an outline per placement group; the filter hides exactly
the hosts Ray's selector semantics (:func:`ray_accel_ext.placement.match_selector`) reject, and
the page's selector code agrees with the Python one on generated cases. No timing is asserted
(``benchmarks/dashboard.py`` measures time to interactive).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel_ext.cluster.dashboard import DashboardServer
from ray_accel_ext.placement import match_selector
from tests.support.chromium import Browser, require_chromium
from tests.support.dashboard_checks import READY, drawn_pictures, expected_pictures, set_filter, visible_hosts
from tests.support.synthetic_cluster import demo_snapshots, snapshot_cluster, synthetic_cluster

require_chromium()


@pytest.fixture(scope="module")
def browser():
    with Browser(width=1600, height=1000) as b:
        yield b


@pytest.fixture(scope="module")
def big():
    doc = synthetic_cluster(1000)
    with DashboardServer(lambda: doc, refresh_s=3600) as server:
        yield server, doc


@pytest.fixture(scope="module")
def demo():
    doc = snapshot_cluster(demo_snapshots())
    with DashboardServer(lambda: doc, refresh_s=3600) as server:
        yield server, doc


def _pictures_match(browser, server, doc):
    browser.navigate(server.url + "#open=all", ready=READY)
    assert browser.console == [], browser.console
    drawn = drawn_pictures(browser)
    assert drawn == expected_pictures(doc)
    return drawn


def test_demo_cluster_pictures_match_the_snapshots(browser, demo):
    server, doc = demo
    drawn = _pictures_match(browser, server, doc)
    kinds = {d["kind"] for d in doc["domains"]}
    assert {"tpu-slice", "nvlink-domain", "host"} <= kinds
    # every snapshot's devices and links are on the page, e.g. the DGX's 8 GPUs and 28 NVLink pairs
    h100 = next(n for n in doc["nodes"] if n["hostname"] == "dgx-h100-017")
    assert drawn["fabric:dgx-h100-017"]["hosts"][h100["node_id"]] == (8, 28)
    trn2 = next(n for n in doc["nodes"] if n["inventory"]["descriptions"][0]["backend"] == "neuron")
    assert trn2["node_id"] in next(v["hosts"] for v in drawn.values() if trn2["node_id"] in v["hosts"])


def test_demo_host_diagram_and_matrix(browser, demo):
    server, doc = demo
    h100 = next(n for n in doc["nodes"] if n["hostname"] == "dgx-h100-017")
    browser.navigate(server.url + "#host=" + h100["node_id"], ready=READY)
    shown = json.loads(browser.evaluate("""JSON.stringify({
      chips: document.querySelectorAll('svg.host-picture rect.chip').length,
      nics: [...document.querySelectorAll('svg.host-picture rect.nic')].map(e => e.dataset.nic).sort(),
      switches: document.querySelectorAll('svg.host-picture rect.switch').length,
      numa: document.querySelectorAll('svg.host-picture rect.numa').length,
      matrix: [...document.querySelector('table.matrix').tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)),
      head: [...document.querySelector('table.matrix').tHead.rows[0].cells].map(c => c.textContent)})"""))
    desc = h100["inventory"]["descriptions"][0]
    assert shown["chips"] == 8 and shown["nics"] == sorted(n["name"] for n in desc["nics"]) and shown["numa"] == 2
    assert shown["switches"] == len({d["pcie_switch"] for d in desc["devices"]})
    assert shown["head"][-2:] == ["CPU Affinity", "NUMA Affinity"]
    paths = h100["pcie"]["nvidia_gpu"]
    for i, row in enumerate(shown["matrix"][:8]):
        assert row[0] == f"GPU{i}" and row[1 + i] == "X"
        assert all(c == "NV18" for k, c in enumerate(row[1:9]) if k != i)  # NVLink 4 x18 between every pair
        assert row[9:9 + len(desc["nics"])] == paths["device_nic"][i]  # the probe's path classes, every NIC
        nearest = {n["nic"]: n["path"] for n in desc["devices"][i]["nics"]}
        for j, nic in enumerate(desc["nics"]):
            if nic["name"] in nearest:
                assert row[9 + j] == nearest[nic["name"]]


def test_thousand_node_pictures_match_the_inventory(browser, big):
    server, doc = big
    drawn = _pictures_match(browser, server, doc)
    assert sum(len(v["hosts"]) for v in drawn.values()) == 1000
    assert sum(c for v in drawn.values() for c, _ in v["hosts"].values()) == doc["summary"]["devices"]
    held = json.loads(browser.evaluate("JSON.stringify([...document.querySelectorAll('svg.domain-picture rect.chip.state-held')].length)"))
    assert held == doc["summary"]["devices_held"]


def test_collapsed_overview_has_a_tile_per_domain_and_a_square_per_host(browser, big):
    server, doc = big
    browser.navigate(server.url, ready=READY)
    counts = json.loads(browser.evaluate("""JSON.stringify({tiles: [...document.querySelectorAll('article.tile')].map(t => t.dataset.domain),
      hosts: [...document.querySelectorAll('svg.mini rect.host')].map(r => r.dataset.nodeId), pictures: document.querySelectorAll('svg.domain-picture').length})"""))
    assert sorted(counts["tiles"]) == sorted(f"{d['level']}:{d['id']}" for d in doc["domains"])
    assert sorted(counts["hosts"]) == sorted(n["node_id"] for n in doc["nodes"]) and counts["pictures"] == 0


SELECTORS = [
    {"ray.io/accelerator-type": "in(H100,GB200)"},
    {"ray.io/accelerator-type": "TPU-V6E", "rayaccel.io/discovery": "ok"},
    {"rayaccel.io/rack": "!in(sb0, sb1,sb2)"},
    {"rayaccel.io/fabric-worker": "!0"},
    {"rayaccel.io/discovery": "degraded"},
    {"ray.io/tpu-slice-name": "v6e-slice-003"},
    {"no.such/key": "x"},
]


@pytest.mark.parametrize("opened", ["", "#open=all"], ids=["collapsed", "opened"])
def test_filter_hides_exactly_the_non_matching_hosts(browser, big, opened):
    server, doc = big
    browser.navigate(server.url + opened, ready=READY)
    everyone = {n["node_id"] for n in doc["nodes"]}
    for selector in SELECTORS:
        want = {n["node_id"] for n in doc["nodes"] if match_selector(n["labels"], selector)}
        terms = " ".join(f"{k}={v.replace(', ', ',')}" for k, v in selector.items())
        for text in (json.dumps(selector), terms):
            status = set_filter(browser, text)
            assert status["error"] == "", text
            shown, hidden = visible_hosts(browser)
            assert shown == want and hidden == everyone - want, text
            assert status["status"] == f"{len(want)} of 1000 hosts match"
    assert set_filter(browser, "")["status"] == "1000 hosts" and visible_hosts(browser)[0] == everyone


def test_invalid_selector_says_so_and_hides_nothing(browser, big):
    server, doc = big
    browser.navigate(server.url, ready=READY)
    with pytest.raises(ValueError):
        match_selector({}, {"ray.io/accelerator-type": "in()"})
    status = set_filter(browser, "ray.io/accelerator-type=in()")
    assert "invalid label selector" in status["error"].lower()
    assert len(visible_hosts(browser)[0]) == 1000


def test_text_search_finds_hosts_by_name(browser, big):
    server, doc = big
    browser.navigate(server.url, ready=READY)
    set_filter(browser, "DGX-H100-00")
    want = {n["node_id"] for n in doc["nodes"] if "dgx-h100-00" in n["hostname"]}
    assert visible_hosts(browser)[0] == want and want


_KEY = st.sampled_from(["a", "ray.io/accelerator-type", "k.io/x", "constructor", "__proto__"])
_VALUE = st.text(alphabet=st.sampled_from(list("ab,() !i n\t\u00a0\u0085\ufeff\x1c")), max_size=8)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(labels=st.dictionaries(_KEY, _VALUE, max_size=3), selector=st.dictionaries(_KEY, _VALUE, max_size=3))
def test_page_selector_agrees_with_python(browser, demo, labels, selector):
    server, _doc = demo
    if not browser.evaluate("location.href").startswith(server.url):
        browser.navigate(server.url, ready=READY)
    try:
        want = match_selector(labels, selector)
    except ValueError:
        want = "error"
    got = browser.evaluate(
        "import('/assets/selector.js').then(m => { try { return m.matchSelector(JSON.parse(" + json.dumps(json.dumps(labels)) + "),"
        " JSON.parse(" + json.dumps(json.dumps(selector)) + ")); }"
        " catch (e) { if (e instanceof m.SelectorError) return 'error'; throw e; } })", await_promise=True)
    assert got == want, (labels, selector)


def test_slice_links_and_coordinates_are_drawn_as_described(browser):
    """ICI links and 3-D coordinates, as the TPU backend describes them (links between a host's
    chips; chips at slice coordinates): every link and chip is drawn, the slice's z layers apart,
    and the chips of the hosts the cluster lacks are dashed."""
    doc = snapshot_cluster(["tpu/gke-tpu7x-4chip-single-host", "tpu/gce-v5p-16-worker1"])
    tpu7x = next(n for n in doc["nodes"] if n["inventory"]["descriptions"][0]["sku"]["generation"] == "tpu7x")
    desc = tpu7x["inventory"]["descriptions"][0]
    assert len(desc["links"]) == 4  # a 2x2x1 host: a square of ICI links, as the backend describes it
    described = sum(1 for n in doc["nodes"] for d in n["inventory"]["descriptions"] for link in d.get("links", ())
                    if link["kind"] == "ici")  # in-host links and those to the neighbour hosts of the slice
    with DashboardServer(lambda: doc, refresh_s=3600) as server:
        _pictures_match(browser, server, doc)
        assert browser.evaluate("document.querySelectorAll('svg.domain-picture path.link.kind-ici').length") == described
        v5p = next(d for d in doc["domains"] if d["topology"] == "2x2x2")
        layers = browser.evaluate(f"[...document.querySelector('svg.domain-picture[data-domain=\"fabric:{v5p['id']}\"]')"
                                  ".querySelectorAll('text.axis')].map(t => t.textContent).filter(t => t.startsWith('z = '))")
        absent = browser.evaluate(f"document.querySelector('svg.domain-picture[data-domain=\"fabric:{v5p['id']}\"]')"
                                  ".querySelectorAll('rect.absent').length")
    assert layers == ["z = 0", "z = 1"] and absent == 8 - 4  # worker 1 holds the z = 1 layer; worker 0 is not in the cluster
