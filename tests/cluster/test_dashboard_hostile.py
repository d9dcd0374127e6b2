"""Cluster-supplied strings are text on the page, whatever they hold.

A 120-node synthetic cluster whose every cluster-supplied string (host names, a label key and
value, TPU slice and NVLink domain ids, degraded reasons, health reasons, placement-group,
actor and task names) carries HTML comment openers, ``</script>``, quotes and markup with event
handlers. The page must leave "Loading", render every domain, show the strings verbatim as text,
and create no element and run no script from them.
"""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.cluster.dashboard import DashboardServer
from tests.support.chromium import Browser, require_chromium
from tests.support.dashboard_checks import READY, drawn_pictures, expected_pictures
from tests.support.synthetic_cluster import synthetic_cluster

EVIL = "<!--'\"</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\" data-injected>&amp;<b data-injected>-->"

require_chromium()


@pytest.fixture(scope="module")
def page():
    doc = synthetic_cluster(120, evil=EVIL)
    with DashboardServer(lambda: doc, refresh_s=3600) as server, Browser(width=1600, height=1000) as b:
        yield server, doc, b


def _no_injection(b):
    state = json.loads(b.evaluate("""JSON.stringify({
      pwned: window.__pwned === undefined ? null : window.__pwned,
      injected: document.querySelectorAll('[data-injected]').length,
      imgs: document.querySelectorAll('img').length,
      scripts: [...document.scripts].map(s => s.getAttribute('src')),
      state: document.body.dataset.state,
      summary: document.getElementById('summary').textContent})"""))
    assert state["pwned"] is None and state["injected"] == 0 and state["imgs"] == 0
    assert state["scripts"] == ["assets/app.js"]
    assert state["state"] == "ready" and not state["summary"].startswith("Loading")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_document_carries_the_strings(page):
    _server, doc, _b = page
    assert all(EVIL in n["hostname"] and EVIL in n["labels"]["example.com/note"] and n["labels"]["example.com/" + EVIL] == "key"
               for n in doc["nodes"])
    assert any(EVIL in r for n in doc["nodes"] for r in n["reasons"])
    assert all(EVIL in p["name"] for p in doc["placement_groups"]) and any(EVIL in h["name"] for h in doc["holders"])
    assert any(EVIL in d["id"] for d in doc["domains"]) and sum(EVIL in s for s in _strings(doc)) > 100


def test_overview_renders_and_shows_strings_as_text(page):
    server, doc, b = page
    b.navigate(server.url, ready=READY)
    _no_injection(b)
    tiles = b.evaluate("JSON.stringify([...document.querySelectorAll('article.tile')].map(t => t.dataset.domain))")
    assert sorted(json.loads(tiles)) == sorted(f"{d['level']}:{d['id']}" for d in doc["domains"])
    body = b.evaluate("document.body.innerText")
    assert EVIL in body  # a domain id, a placement group, a degraded reason: verbatim


def test_opened_domains_and_host_panels_show_strings_as_text(page):
    server, doc, b = page
    b.navigate(server.url + "#open=all", ready=READY)
    _no_injection(b)
    assert drawn_pictures(b) == expected_pictures(doc)
    for node in (doc["nodes"][0], next(n for n in doc["nodes"] if n["degraded"]), next(n for n in doc["nodes"] if n["holders"])):
        b.navigate(server.url + "#host=" + node["node_id"], ready=READY)
        _no_injection(b)
        panel = b.evaluate("document.getElementById('details').innerText")
        assert node["hostname"] in panel
        assert "example.com/" + EVIL in b.evaluate("document.getElementById('details').textContent")  # a label key, in the labels list
        for reason in node["reasons"]:
            assert reason in b.evaluate("document.body.innerText")
        tooltip = b.evaluate("[...document.querySelectorAll('#details svg title')].map(t => t.textContent).join('\\n')")
        assert node["hostname"] in tooltip


def test_filter_with_markup_is_text(page):
    server, doc, b = page
    b.navigate(server.url, ready=READY)
    b.evaluate("(() => { const f = document.getElementById('filter'); f.value = " + json.dumps(EVIL) + "; f.dispatchEvent(new Event('input')); })()")
    _no_injection(b)
    b.evaluate("(() => { const f = document.getElementById('filter'); f.value = " + json.dumps(json.dumps({"example.com/note": EVIL})) +
               "; f.dispatchEvent(new Event('input')); })()")
    assert b.evaluate("document.getElementById('filter-status').textContent") == f"{len(doc['nodes'])} of {len(doc['nodes'])} hosts match"
