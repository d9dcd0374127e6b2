"""A self-contained web page of the cluster's accelerators (``ray-accel dashboard``).

Ray's dashboard shows node labels, not accelerators and how they are wired. This page shows the
domains (TPU slices, NVLink domains, UltraServers, racks, hosts) as groups of hosts, each host's
devices with their fabric links (NVLink, ICI, NeuronLink, XGMI) and nearest NICs, which
placement groups occupy which domain, and the degraded nodes with their reasons.

Served by the standard library's ``http.server`` on 127.0.0.1 only:

* ``/``: the page; HTML, CSS and JS inline (no CDN, works without external network), with the
  current inventory embedded so it renders at once;
* ``/api/cluster``: the inventory as JSON (:meth:`ClusterInventory.to_dict`), which the page
  polls every few seconds to follow the cluster as it changes;
* ``/healthz``: ``ok``.

A background thread gathers the inventory every ``refresh_s`` seconds (node probes run once per
node, see :class:`~ray_accel_ext.cluster.inventory.InventoryCollector`), so page loads never wait on Ray.
Markup is accessible: landmarks, a heading per domain and host, tables with header cells and
captions, ``aria-live`` status, and every state written as text, never by colour alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..labels import FABRIC_WORKER

__all__ = ["DashboardServer", "render_page"]


def render_page(data: dict[str, Any] | None, *, refresh_ms: int = 2000) -> str:
    """The HTML page with ``data`` (an inventory dict, or None) embedded for the first render."""
    embedded = json.dumps(data) if data is not None else "null"
    embedded = embedded.replace("</", "<\\/").replace("<!--", "<\\!--")
    page = _PAGE.replace("__REFRESH_MS__", str(int(refresh_ms))).replace("__FABRIC_WORKER_KEY__", json.dumps(FABRIC_WORKER))
    return page.replace("__INITIAL_DATA__", embedded)


class DashboardServer:
    """Serves the page and its JSON endpoint; ``source()`` returns the inventory dict."""

    def __init__(
        self,
        source: Callable[[], dict[str, Any]],
        *,
        port: int = 0,
        refresh_s: float = 2.0,
    ) -> None:
        self.source = source
        self.refresh_s = refresh_s
        self._data: dict[str, Any] | None = None
        self._error: str | None = None
        self._generation = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fresh = threading.Condition(self._lock)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server._serve(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def generation(self) -> int:
        """How many inventories have been gathered so far."""
        with self._lock:
            return self._generation

    def start(self) -> "DashboardServer":
        """Serve in daemon threads; gather once before returning so the first page has data."""
        self._refresh_once()
        for target, name in ((self._httpd.serve_forever, "http"), (self._refresh_loop, "refresh")):
            t = threading.Thread(target=target, name=f"ray-accel-dashboard-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> "DashboardServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wait_for_generation(self, generation: int, timeout_s: float = 30.0) -> bool:
        """Block until at least ``generation`` inventories have been gathered."""
        end = time.monotonic() + timeout_s
        with self._fresh:
            while self._generation < generation:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._fresh.wait(left)
        return True

    def _refresh_once(self) -> None:
        try:
            data = self.source()
            error = None
        except Exception as exc:  # noqa: BLE001 - keep serving the last inventory, say why it is stale
            data, error = None, f"{type(exc).__name__}: {exc}"
        with self._fresh:
            if data is not None:
                self._data = data
            self._error = error
            self._generation += 1
            self._fresh.notify_all()

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self._refresh_once()

    def _payload(self) -> dict[str, Any]:
        with self._lock:
            data = dict(self._data) if self._data is not None else {"nodes": [], "domains": [], "placement_groups": []}
            data["dashboard"] = {"generation": self._generation, "error": self._error, "refresh_s": self.refresh_s}
        return data

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            embed = "embed=0" not in h.path
            body = render_page(self._payload() if embed else None, refresh_ms=int(self.refresh_s * 1000)).encode()
            ctype = "text/html; charset=utf-8"
        elif path == "/api/cluster":
            body = json.dumps(self._payload(), sort_keys=True).encode()
            ctype = "application/json"
        elif path == "/healthz":
            body, ctype = b"ok\n", "text/plain"
        else:
            h.send_error(404, "not found")
            return
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Cache-Control", "no-store")
        h.send_header("Content-Security-Policy",
                      "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
        h.end_headers()
        h.wfile.write(body)


_PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Ray accelerators</title>
<style>
:root { --fg:#1d1d1f; --muted:#555; --bg:#f6f7f9; --card:#fff; --line:#d0d4da; --ok:#1a7f37; --bad:#b3261e; --warn:#8a5a00; --accent:#0b57d0; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif; color:var(--fg); background:var(--bg); }
a { color: var(--accent); }
.skip { position:absolute; left:-999px; } .skip:focus { left:8px; top:8px; background:#fff; padding:4px 8px; z-index:9; }
header { background:#14213d; color:#fff; padding:12px 20px; display:flex; flex-wrap:wrap; gap:8px 24px; align-items:baseline; }
header h1 { margin:0; font-size:20px; }
#summary { margin:0; color:#e6ecff; }
nav { padding:8px 20px; background:#e9edf5; border-bottom:1px solid var(--line); }
nav ul { list-style:none; margin:0; padding:0; display:flex; flex-wrap:wrap; gap:6px 16px; }
main { padding:16px 20px; display:grid; gap:16px; }
h2 { font-size:17px; margin:4px 0 8px; }
.domains { display:grid; gap:16px; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); }
.domain { background:var(--card); border:1px solid var(--line); border-left:6px solid var(--accent); border-radius:6px; padding:10px 14px; }
.domain.kind-tpu-slice { border-left-color:#188038; } .domain.kind-nvlink-domain { border-left-color:#76b900; }
.domain.kind-ultraserver { border-left-color:#ff9900; } .domain.kind-host { border-left-color:#8894a6; }
.domain h3 { margin:0 0 2px; font-size:16px; }
.meta { color:var(--muted); margin:0 0 8px; }
.host { border-top:1px solid var(--line); padding-top:8px; margin-top:8px; }
.host h4 { margin:0 0 4px; font-size:14px; display:flex; gap:8px; align-items:center; flex-wrap:wrap; }
.badge { display:inline-block; font-size:12px; font-weight:600; padding:1px 7px; border-radius:10px; border:1px solid currentColor; }
.badge.ok { color:var(--ok); } .badge.degraded { color:var(--bad); } .badge.changed { color:var(--warn); } .badge.info { color:var(--muted); }
table { border-collapse:collapse; width:100%; margin:4px 0 6px; font-size:13px; }
caption { text-align:left; color:var(--muted); font-size:12px; padding:2px 0; }
th, td { border-bottom:1px solid #e5e7eb; padding:3px 6px; text-align:left; vertical-align:top; }
th { background:#f0f2f5; font-weight:600; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size:12px; }
.reasons { color:var(--bad); margin:4px 0; padding-left:18px; }
section.panel { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:10px 14px; }
footer { padding:8px 20px 20px; color:var(--muted); }
.empty { color:var(--muted); font-style:italic; }
</style>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header role="banner">
  <h1>Ray accelerators</h1>
  <p id="summary" aria-live="polite">Loading the cluster inventory…</p>
</header>
<nav aria-label="Domains"><ul id="domain-nav"></ul></nav>
<main id="main" tabindex="-1">
  <section aria-labelledby="domains-heading">
    <h2 id="domains-heading">Domains</h2>
    <div id="domains" class="domains"></div>
  </section>
  <section class="panel" aria-labelledby="pg-heading">
    <h2 id="pg-heading">Placement groups</h2>
    <div id="placement-groups"></div>
  </section>
  <section class="panel" aria-labelledby="degraded-heading">
    <h2 id="degraded-heading">Degraded nodes</h2>
    <div id="degraded"></div>
  </section>
</main>
<footer role="contentinfo">
  <p id="status" role="status" aria-live="polite"></p>
</footer>
<script type="application/json" id="initial-data">__INITIAL_DATA__</script>
<script>
"use strict";
const REFRESH_MS = __REFRESH_MS__;
const FABRIC_WORKER = __FABRIC_WORKER_KEY__;
const FABRIC = {"nvlink1":"NVLink 1","nvlink2":"NVLink 2","nvlink3":"NVLink 3","nvlink4":"NVLink 4","nvlink5":"NVLink 5","nvlink6":"NVLink 6",
  "ici":"ICI","xgmi":"XGMI","pcie":"PCIe","neuronlink-v2":"NeuronLink v2","neuronlink-v3":"NeuronLink v3","neuronlink-v4":"NeuronLink v4"};
const KIND = {"tpu-slice":"TPU slice","nvlink-domain":"NVLink domain","ultraserver":"UltraServer","xgmi-hive":"XGMI hive","host":"Host","rack":"Rack"};
function fabricName(k) { return FABRIC[k] || (k || "").replace(/^neuronlink/, "NeuronLink").toUpperCase(); }
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) { if (v !== null && v !== undefined) e.setAttribute(k, v); }
  for (const kid of kids.flat()) { if (kid === null || kid === undefined) continue; e.append(kid instanceof Node ? kid : String(kid)); }
  return e;
}
function slug(s) { return String(s).replace(/[^A-Za-z0-9_-]/g, "-"); }
function badge(status) {
  const text = {"ok":"✓ OK","degraded":"⚠ DEGRADED","changed":"△ CHANGED"}[status] || status;
  return el("span", {"class":"badge " + status}, text);
}
function table(caption, headers, rows) {
  const t = el("table", {}, el("caption", {}, caption));
  t.append(el("thead", {}, el("tr", {}, headers.map(h => el("th", {"scope":"col"}, h)))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, r.map((c, i) => i === 0 ? el("th", {"scope":"row"}, c) : el("td", {}, c))));
  t.append(body);
  return t;
}
function deviceRows(desc, health) {
  const gone = new Set(((health && health.missing) || []).map(m => m.pci_address).filter(Boolean));
  const peers = {};  // device -> link label -> [peer indices]
  const remote = {};  // device -> link label -> ["worker W chip C", ...] (links to other hosts)
  for (const l of desc.links || []) {
    const label = fabricName(l.kind) + (l.lanes > 1 ? " ×" + l.lanes : "");
    if (l.peer_worker !== undefined && l.peer_worker !== null) {
      const m = (remote[l.a] = remote[l.a] || {});
      (m[label] = m[label] || []).push("worker " + l.peer_worker + " chip " + l.b + (l.wrap ? " (wrap-around)" : ""));
      continue;
    }
    for (const [a, b] of [[l.a, l.b], [l.b, l.a]]) {
      const m = (peers[a] = peers[a] || {});
      (m[label] = m[label] || []).push(b + (l.wrap ? " (wrap-around)" : ""));
    }
  }
  const n = desc.devices.length;
  const linkText = i => Object.entries(peers[i] || {}).map(([label, to]) =>
    label + " to " + (to.length === n - 1 && n > 2 ? "all " + to.length + " others" : "device" + (to.length > 1 ? "s " : " ") + to.sort((x, y) => parseInt(x) - parseInt(y)).join(", "))
  ).concat(Object.entries(remote[i] || {}).map(([label, to]) => label + " to " + to.join(", "))).join("; ");
  return desc.devices.map(d => [
    String(d.index),
    el("code", {}, d.pci_address || d.id),
    d.numa_node === null || d.numa_node === undefined ? "–" : String(d.numa_node),
    d.coords ? d.coords.join(",") + (d.host_coords ? " (host " + d.host_coords.join(",") + ")" : "") :
      (d.host_coords ? "host " + d.host_coords.join(",") : "–"),
    linkText(d.index) || "none",
    (d.nics || []).map(n => n.nic + " " + n.path).join(", ") || "none",
    gone.has(d.pci_address) ? el("span", {"class":"badge degraded"}, "⚠ MISSING") : "present",
  ]);
}
function hostSection(node, domId) {
  const id = "host-" + slug(node.node_id);
  const status = node.health && node.health.status && node.health.status !== "ok" ? node.health.status : (node.degraded ? "degraded" : "ok");
  const sec = el("section", {"class":"host", "aria-labelledby": id + "-h", "data-host": node.hostname, "data-node-id": node.node_id});
  const worker = node.labels[FABRIC_WORKER];
  sec.append(el("h4", {"id": id + "-h"}, node.hostname, badge(status),
    node.is_head ? el("span", {"class":"badge info"}, "head") : null,
    worker !== undefined ? el("span", {"class":"badge info"}, "worker " + worker) : null));
  const inv = node.inventory;
  const descs = inv ? inv.descriptions : [];
  if (!descs.length) sec.append(el("p", {"class":"meta"}, inv ? "No accelerators." : "Not probed yet."));
  for (const desc of descs) {
    sec.append(el("p", {"class":"meta"}, desc.devices.length + " × " + (desc.sku.product || desc.sku.name) +
      " · " + fabricName(desc.interconnect) + " · " + desc.resource_name + " " + desc.resource_quantity +
      (desc.nics.length ? " · " + desc.nics.length + " RDMA NICs" : "")));
    sec.append(table("Devices of " + node.hostname + " (" + desc.backend + "): fabric links and nearest NICs",
      ["Device", "PCI address", "NUMA", "Coords", "Links to", "Nearest NICs", "State"], deviceRows(desc, node.health)));
  }
  const reasons = node.reasons || [];
  if (reasons.length) sec.append(el("ul", {"class":"reasons", "aria-label": "Why " + node.hostname + " is degraded"}, reasons.map(r => el("li", {}, r))));
  return sec;
}
function render(data) {
  if (!data) return;
  const nodes = Object.fromEntries((data.nodes || []).map(n => [n.node_id, n]));
  const pgs = Object.fromEntries((data.placement_groups || []).map(p => [p.id, p]));
  const s = data.summary || {};
  document.getElementById("summary").textContent =
    (s.nodes || 0) + " nodes · " + (s.domains || 0) + " domains · " + (s.devices || 0) + " accelerators · " +
    (s.degraded || 0) + " degraded · " + (s.placement_groups || 0) + " placement groups";
  const nav = document.getElementById("domain-nav"); nav.replaceChildren();
  const box = document.getElementById("domains"); box.replaceChildren();
  for (const d of data.domains || []) {
    const id = "domain-" + slug(d.level + "-" + d.id);
    const kind = KIND[d.kind] || d.kind;
    nav.append(el("li", {}, el("a", {"href": "#" + id}, kind + " " + d.id)));
    const art = el("article", {"class":"domain kind-" + d.kind, "id": id, "aria-labelledby": id + "-h", "data-domain-id": d.id, "data-domain-kind": d.kind});
    art.append(el("h3", {"id": id + "-h"}, kind + " ", el("code", {}, d.id)));
    const total = d.expected_hosts || d.nodes.length;
    const hosts = d.nodes.length + (d.expected_hosts ? " of " + d.expected_hosts : "") + (total === 1 ? " host" : " hosts") +
      (d.complete === false ? " (incomplete)" : "");
    const bits = [hosts, d.product, d.topology ? "topology " + d.topology : null].filter(Boolean);
    const held = (d.placement_groups || []).map(p => pgs[p] ? (pgs[p].name || p.slice(0, 12)) : p.slice(0, 12));
    bits.push(held.length ? "placement groups: " + held.join(", ") : "no placement group");
    art.append(el("p", {"class":"meta"}, bits.join(" · ")));
    for (const nid of d.nodes) if (nodes[nid]) art.append(hostSection(nodes[nid], id));
    box.append(art);
  }
  if (!(data.domains || []).length) box.append(el("p", {"class":"empty"}, "No nodes."));
  const pgBox = document.getElementById("placement-groups"); pgBox.replaceChildren();
  const pgRows = (data.placement_groups || []).map(p => [p.name || p.id.slice(0, 12), p.state, p.strategy,
    String(p.bundles.length), p.domains.join(", ") || "not placed",
    p.topology_strategy ? Object.entries(p.topology_strategy).map(([k, v]) => k + "=" + v).join(", ") : "–"]);
  pgBox.append(pgRows.length ? table("Placement groups and the domains their bundles occupy",
    ["Name", "State", "Strategy", "Bundles", "Domains", "Topology strategy"], pgRows) : el("p", {"class":"empty"}, "None."));
  const bad = (data.nodes || []).filter(n => n.degraded);
  const degBox = document.getElementById("degraded"); degBox.replaceChildren();
  degBox.append(bad.length ? table("Nodes that came up degraded or changed after start, with the reason",
    ["Host", "Node", "Reason"], bad.map(n => [n.hostname, el("code", {}, n.node_id.slice(0, 12)), el("ul", {}, n.reasons.map(r => el("li", {}, r)))])) :
    el("p", {"class":"empty"}, "None: every node discovered its accelerators fully."));
  const dash = data.dashboard || {};
  const when = data.gathered_at ? new Date(data.gathered_at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "never";
  document.getElementById("status").textContent = "Inventory of " + when + " (update " + (dash.generation || 0) +
    "; refreshes every " + (REFRESH_MS / 1000) + " s)" + (dash.error ? " · last refresh failed: " + dash.error : "");
  document.body.dataset.generation = String(dash.generation || 0);
}
async function poll() {
  try {
    const r = await fetch("api/cluster", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    document.getElementById("status").textContent = "Cannot reach the dashboard server (" + e.message + "); retrying.";
  } finally {
    setTimeout(poll, REFRESH_MS);
  }
}
render(JSON.parse(document.getElementById("initial-data").textContent));
setTimeout(poll, document.getElementById("initial-data").textContent.trim() === "null" ? 0 : REFRESH_MS);
</script>
</body>
</html>
"""
