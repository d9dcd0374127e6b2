"""What the dashboard page should draw for a document, and what it did draw (read from the DOM).

Shared by the browser tests over synthetic and demo-snapshot clusters and the real-Ray test.
A picture's elements: ``svg.domain-picture[data-domain]`` per opened domain, in it ``g.host
[data-node-id]`` per node, ``rect.chip`` per device and ``.link`` per fabric link of the node's
primary family, and ``g.group[data-pg]`` per placement group occupying the domain.
"""

from __future__ import annotations

import json
from typing import Any

from ray_accel_ext.model import NodeInventory

__all__ = ["expected_pictures", "drawn_pictures", "visible_hosts", "set_filter", "READY"]

READY = "document.body.dataset.state === 'ready'"


def expected_pictures(doc: dict[str, Any]) -> dict[str, Any]:
    """Per domain key: its hosts, and per host (chips, links); plus the placement groups drawn."""
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    out: dict[str, Any] = {}
    for d in doc["domains"]:
        key = f"{d['level']}:{d['id']}"
        hosts = {}
        for nid in d["nodes"]:
            inv = nodes[nid]["inventory"]
            primary = NodeInventory.from_dict(inv).primary if inv else None  # the model's rule for "primary"
            hosts[nid] = (len(primary.devices), len(primary.links)) if primary else (0, 0)
        groups = sorted(p["id"] for p in doc["placement_groups"] if key in p["domains"])
        out[key] = {"hosts": hosts, "groups": groups}
    return out


_DRAWN = """(() => {
  const out = {};
  for (const pic of document.querySelectorAll('svg.domain-picture')) {
    const hosts = {};
    for (const g of pic.querySelectorAll('g.host')) {
      hosts[g.dataset.nodeId] = [g.querySelectorAll('rect.chip').length, g.querySelectorAll('.link').length];
    }
    const groups = [...pic.querySelectorAll('g.group')].map(g => g.dataset.pg).sort();
    out[pic.dataset.domain] = {hosts, groups};
  }
  return JSON.stringify(out);
})()"""


def drawn_pictures(browser) -> dict[str, Any]:
    """The same structure as :func:`expected_pictures`, read from the page's opened domains."""
    raw = json.loads(browser.evaluate(_DRAWN))
    return {k: {"hosts": {n: tuple(c) for n, c in v["hosts"].items()}, "groups": v["groups"]} for k, v in raw.items()}


_VISIBLE = """(() => {
  const seen = new Set();
  for (const e of document.querySelectorAll('#overview [data-node-id]')) {
    if (e.getClientRects().length && getComputedStyle(e).display !== 'none') seen.add(e.dataset.nodeId);
  }
  const hidden = new Set();
  for (const e of document.querySelectorAll('#overview [data-node-id]')) if (!seen.has(e.dataset.nodeId)) hidden.add(e.dataset.nodeId);
  return JSON.stringify({shown: [...seen].sort(), hidden: [...hidden].sort()});
})()"""


def visible_hosts(browser) -> tuple[set[str], set[str]]:
    """(node ids drawn visibly in the overview, node ids present but hidden)."""
    data = json.loads(browser.evaluate(_VISIBLE))
    return set(data["shown"]), set(data["hidden"])


def set_filter(browser, text: str) -> dict[str, str]:
    """Type ``text`` into the filter box (an ``input`` event, as typing sends); the status and error lines."""
    return json.loads(browser.evaluate(
        "(() => { const f = document.getElementById('filter'); f.value = " + json.dumps(text) + ";"
        " f.dispatchEvent(new Event('input', {bubbles: true}));"
        " return JSON.stringify({status: document.getElementById('filter-status').textContent,"
        " error: document.getElementById('filter-error').textContent}); })()"))
