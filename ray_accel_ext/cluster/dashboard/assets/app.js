// The page: fetches /api/cluster (and nothing else), draws the overview of domain tiles, the
// opened domains' pictures, the selected host, and the cluster-wide panels; filters by Ray's
// label-selector syntax; keeps its state in the URL fragment so a view can be linked. A page load
// takes the overview view first (preloaded by index.html; no device rows or PCIe paths: collapsed
// tiles and the filter need no more), is interactive with its first screens of tiles drawn, and
// draws everything from the whole document after it.
import {el, short, kindName, nodeStatus, held, utilisation, descsOf} from "./util.js";
import {parseFilter, matchCompiled, SelectorError} from "./selector.js";
import {domainPicture, miniPicture, setLabelKeys} from "./domain.js";
import {hostPanel, pgPanel, holderPanel, degradedPanel, metricsPanel, domainMeta} from "./panels.js";

const $ = id => document.getElementById(id);
const state = {doc: null, nodes: new Map(), holders: new Map(), pgs: new Map(), domainOfNode: new Map(),
  open: new Set(), openAll: false, host: null, device: null, filter: {kind: "all"}, q: "", group: "domain", sort: "name", signature: "",
  complete: false};

const ctx = {
  key: d => d.level + ":" + d.id,
  status: nodeStatus,
  occupancy(node) {
    if (nodeStatus(node) !== "ok") return "degraded";
    const {held: h, total} = held(node);
    if (!total) return "none";
    return h <= 0 ? "free" : h >= total ? "held" : "partly-held";
  },
  pgsOf: key => state.pgsByDomain.get(key) || [],
  holder: id => state.holders.get(id),
  holderName(id) { const h = state.holders.get(id); return h ? (h.name || short(h.id)) : short(id); },
  holderLink(id) {
    const h = state.holders.get(id);
    if (!h) return short(id);
    const url = ctx.rayUrl(h.ray_dashboard);
    const text = `${h.kind} ${h.name || short(h.id)}`;
    return url ? el("a", {href: url, target: "_blank", rel: "noopener noreferrer", class: "holder-link", "data-holder": h.id}, text)
      : el("span", {class: "holder-link", "data-holder": h.id}, text);
  },
  pgName(id) { const p = state.pgs.get(id); return p ? (p.name || short(p.id)) : short(id); },
  nodeName: id => (state.nodes.get(id) || {hostname: short(id)}).hostname,
  rayUrl: path => (state.doc && state.doc.ray_dashboard && path ? state.doc.ray_dashboard.replace(/\/$/, "") + "/" + path : null),
  domainOf: node => state.domainOfNode.get(node.node_id),
  selectedDevice: () => state.device,
  pictureWidth: () => Math.max(400, ($("overview").clientWidth || 700) - 40),
  panelWidth: () => Math.max(480, ($("details").clientWidth || 760) - 24),
  onHost(id) { state.host = id; state.device = null; saveHash(); renderDetails(true); },
  onDevice(id, backend, index) { state.host = id; state.device = backend + ":" + index; saveHash(); renderDetails(true); },
  openDomain(d) { ctx.openKey(ctx.key(d)); },
  openKey(key) { state.open.add(key); saveHash(); renderOverview(true); const t = document.querySelector(`[data-domain="${CSS.escape(key)}"]`); if (t) t.scrollIntoView({block: "start"}); },
};

function loadHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.q = p.get("q") || "";
  state.group = p.get("group") || "domain";
  state.sort = p.get("sort") || "kind";
  const open = p.get("open") || "";
  state.openAll = open === "all";
  state.open = new Set(state.openAll ? [] : open.split("\n").filter(Boolean));
  state.host = p.get("host");
  state.device = p.get("device");
}

function saveHash() {
  const p = new URLSearchParams();
  if (state.q) p.set("q", state.q);
  if (state.group !== "domain") p.set("group", state.group);
  if (state.sort !== "kind") p.set("sort", state.sort);
  if (state.openAll) p.set("open", "all"); else if (state.open.size) p.set("open", [...state.open].join("\n"));
  if (state.host) p.set("host", state.host);
  if (state.device) p.set("device", state.device);
  history.replaceState(null, "", "#" + p.toString());
}

function index(doc) {
  state.doc = doc;
  state.nodes = new Map((doc.nodes || []).map(n => [n.node_id, n]));
  state.holders = new Map((doc.holders || []).map(h => [h.id, h]));
  state.pgs = new Map((doc.placement_groups || []).map(p => [p.id, p]));
  state.pgsByDomain = new Map();
  for (const p of doc.placement_groups || []) for (const key of new Set(p.domains || [])) {
    if (!state.pgsByDomain.has(key)) state.pgsByDomain.set(key, []);
    state.pgsByDomain.get(key).push(p);
  }
  state.domainOfNode = new Map();
  state.domainByKey = new Map((doc.domains || []).map(d => [ctx.key(d), d]));
  for (const d of doc.domains || []) for (const id of d.nodes) state.domainOfNode.set(id, d);
  setLabelKeys(doc.label_keys || {});
  const group = $("group");
  if (group.options.length === 1) {
    for (const key of doc.group_by || []) group.append(el("option", {value: key}, "label " + key));
    group.value = state.group;
  }
}

function matches(node) {
  const f = state.filter;
  if (f.kind === "all") return true;
  if (f.kind === "selector") return matchCompiled(node.labels, f.compiled);
  const d = state.domainOfNode.get(node.node_id);
  const hay = [node.hostname, node.node_id, d ? d.id : "", ...descsOf(node).map(x => x.sku.name + " " + (x.sku.product || ""))].join(" ").toLowerCase();
  return hay.includes(f.text);
}

/** Tiles: the document's domains, or hosts grouped by one label's value. */
function tiles() {
  const doc = state.doc;
  if (state.group === "domain") return (doc.domains || []).map(d => ({domain: d, nodes: d.nodes.map(id => state.nodes.get(id)).filter(Boolean)}));
  const key = state.group, groups = new Map();
  for (const n of doc.nodes || []) {
    const v = Object.prototype.hasOwnProperty.call(n.labels, key) ? n.labels[key] : null;
    if (!groups.has(v)) groups.set(v, []);
    groups.get(v).push(n);
  }
  return [...groups.entries()].map(([v, nodes]) => ({domain: {level: "label", id: v === null ? `(no ${key})` : v, kind: key === doc.label_keys?.rack ? "rack" : key,
    nodes: nodes.map(n => n.node_id), expected_hosts: null, complete: null}, nodes}));
}

function sortTiles(list) {
  const agg = t => {
    let free = 0, total = 0, bad = 0, u = 0, un = 0;
    for (const n of t.nodes) {
      for (const o of Object.values(n.occupancy || {})) { free += o.free; total += o.total; }
      if (nodeStatus(n) !== "ok") bad++;
      const x = utilisation(n);
      if (x !== null) { u += x; un++; }
    }
    return {free, total, bad, util: un ? u / un : -1, size: t.nodes.length};
  };
  const by = {
    kind: (a, b) => a.order - b.order,
    name: (a, b) => String(a.domain.id).localeCompare(String(b.domain.id)),
    size: (a, b) => b.agg.size - a.agg.size,
    free: (a, b) => b.agg.free - a.agg.free,
    held: (a, b) => (b.agg.total - b.agg.free) / (b.agg.total || 1) - (a.agg.total - a.agg.free) / (a.agg.total || 1),
    util: (a, b) => b.agg.util - a.agg.util,
    degraded: (a, b) => b.agg.bad - a.agg.bad,
  }[state.sort] || (() => 0);
  return list.map((t, order) => ({...t, order, agg: agg(t)})).sort((a, b) => by(a, b) || a.order - b.order);
}

function tile(t) {
  const key = ctx.key(t.domain);
  const isOpen = state.openAll || state.open.has(key);
  const art = el("article", {class: "tile kind-" + String(t.domain.kind).replace(/[^a-z0-9-]/gi, "") + (isOpen ? " open" : ""), "data-domain": key});
  const toggle = el("button", {type: "button", class: "toggle", "aria-expanded": String(isOpen), onclick: () => {
    if (state.openAll) { state.openAll = false; state.open = new Set(tiles().map(x => ctx.key(x.domain))); }
    if (state.open.has(key)) state.open.delete(key); else state.open.add(key);
    saveHash(); renderOverview(true);
  }}, isOpen ? "Close" : "Open");
  art.append(el("header", {class: "tile-head"}, el("h3", {}, kindName(t.domain.kind)), toggle));
  art.append(el("p", {class: "tile-id"}, el("code", {}, t.domain.id)));
  art.append(el("p", {class: "meta"}, domainMeta(t.domain, t.nodes, ctx)));
  const picture = () => (state.complete ? el("div", {class: "picture-scroll"}, domainPicture(t.domain, t.nodes, ctx))
    : el("p", {class: "meta loading"}, "Drawn when the whole inventory has arrived…"));
  art.append(isOpen ? picture() : miniPicture(t.domain, t.nodes, ctx));
  return art;
}

function signature(doc) {
  return (doc.nodes || []).map(n => n.node_id + ctx.occupancy(n)).join("|") + "/" + (doc.placement_groups || []).map(p => p.id + p.state).join("|");
}

function renderOverview(force = false) {
  const sig = signature(state.doc) + state.group + state.sort + [...state.open].join() + state.openAll;
  const box = $("overview");
  if (!force && sig === state.signature) {
    for (const pic of box.querySelectorAll("svg.domain-picture")) {  // metrics changed: redraw the open pictures only
      const t = tiles().find(x => ctx.key(x.domain) === pic.dataset.domain);
      if (t) pic.replaceWith(domainPicture(t.domain, t.nodes, ctx));
    }
  } else {
    state.signature = sig;
    const list = sortTiles(tiles());
    // Until the whole document is here, only the first screens of tiles are drawn (the rest come with it).
    const drawn = state.complete ? list : list.slice(0, firstScreens());
    state.partial = drawn.length < list.length;
    box.replaceChildren(...drawn.map(tile));
    if (state.partial) box.append(el("p", {class: "meta loading"}, `Drawing ${list.length - drawn.length} more domains…`));
    if (!list.length) box.append(el("p", {class: "empty"}, "No nodes."));
  }
  applyFilter();
}

/** About two screens of tiles (at least 300 px wide, at least about 90 px high). */
function firstScreens() {
  const cols = Math.max(1, Math.floor(($("overview").clientWidth || 1200) / 310));
  return cols * Math.ceil(2 * (window.innerHeight || 1000) / 90);
}

function applyFilter() {
  let shown = 0;
  const visible = new Set();
  for (const n of state.nodes.values()) if (matches(n)) { visible.add(n.node_id); shown++; }
  for (const e of $("overview").querySelectorAll("[data-node-id]")) e.classList.toggle("nomatch", !visible.has(e.dataset.nodeId));
  for (const art of $("overview").querySelectorAll("article.tile")) {
    const ids = state.group === "domain" ? (state.domainByKey.get(art.dataset.domain) || {nodes: []}).nodes : null;
    const any = ids ? ids.some(id => visible.has(id)) : art.querySelector("[data-node-id]:not(.nomatch)") !== null;
    art.hidden = !any;
  }
  $("filter-status").textContent = state.filter.kind === "all" ? `${state.nodes.size} hosts` : `${shown} of ${state.nodes.size} hosts match`;
}

function renderDetails(scroll = false) {
  const box = $("details");
  const node = state.host && state.nodes.get(state.host);
  const main = document.querySelector("main");
  if (main.classList.contains("has-host") !== Boolean(node)) {
    main.classList.toggle("has-host", Boolean(node));
    if (state.doc) renderOverview(true);  // the overview's width changed: redraw the open pictures to fit
  }
  if (!node || !state.complete) {
    box.replaceChildren(el("p", {class: "empty"}, node ? "Loading the host's details…"
      : "Select a host or a device to see its topology, matrix, holders and metrics."));
    return;
  }
  box.replaceChildren(hostPanel(node, ctx));
  if (state.device) {
    const [backend, i] = state.device.split(":");
    for (const r of box.querySelectorAll(`rect.chip[data-device="${CSS.escape(state.device)}"]`)) r.classList.add("selected");
    const rows = box.querySelectorAll("table.devices");
    const descs = descsOf(node);
    const k = descs.findIndex(d => d.backend === backend);
    const row = rows[k] && rows[k].tBodies[0].rows[Number(i)];
    if (row) { row.classList.add("selected"); if (scroll) row.scrollIntoView({block: "nearest"}); }
  } else if (scroll) box.scrollTop = 0;
}

function renderSummary() {
  const s = state.doc.summary || {};
  $("summary").textContent = `${s.nodes || 0} nodes · ${s.domains || 0} domains · ${s.devices || 0} accelerators ` +
    `(${s.devices_free || 0} free, ${s.devices_held || 0} held, ${s.devices_missing || 0} missing) · ${s.degraded || 0} degraded · ` +
    `${s.placement_groups || 0} placement groups · ${s.holders || 0} holders`;
  const link = $("ray-link");
  if (state.doc.ray_dashboard) { link.href = state.doc.ray_dashboard; link.hidden = false; } else link.hidden = true;
  const dash = state.doc.dashboard || {};
  const when = state.doc.gathered_at ? new Date(state.doc.gathered_at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "never";
  $("status").textContent = `Inventory of ${when} (update ${dash.generation || 0}; refreshes every ${dash.refresh_s || 3} s)` +
    (dash.error ? " · last refresh failed: " + dash.error : "");
  const alert = $("alert");
  alert.hidden = !dash.error;
  alert.textContent = !dash.error ? "" : (state.doc.gathered_at ? `The cluster cannot be read now; showing the inventory of ${when}. `
    : "No Ray cluster could be read, so nothing below describes one. ") + dash.error + ` (tried again every ${dash.refresh_s || 3} s)`;
}

function render(doc, complete) {
  const first = state.doc === null;
  const upgrade = complete && !state.complete && (state.openAll || state.open.size > 0 || state.partial);  // placeholders to draw
  state.complete = complete;
  index(doc);
  renderSummary();
  document.querySelector("main").classList.toggle("has-host", Boolean(state.host && state.nodes.get(state.host)));
  renderOverview(first || upgrade);
  renderDetails(false);
  if (complete) {  // the panels below the overview wait for the whole document
    $("pgs").replaceChildren(pgPanel(doc, ctx));
    $("holders").replaceChildren(holderPanel(doc, ctx));
    $("degraded").replaceChildren(degradedPanel(doc, ctx));
    $("metrics").replaceChildren(metricsPanel(doc));
  }
  document.body.dataset.generation = String((doc.dashboard || {}).generation || 0);
  if (first) performance.mark("interactive");
  if (complete && document.body.dataset.state !== "ready") {
    performance.mark("complete");
    document.body.dataset.state = "ready";
  }
}

async function fetchDoc(view) {
  // The overview is the response index.html preloads (a fetch of the same URL and mode takes it over).
  const r = await fetch(view ? "api/cluster?view=" + view : "api/cluster", view ? {} : {cache: "no-store", credentials: "same-origin"});
  if (!r.ok) throw new Error("HTTP " + r.status);
  const text = await r.text();
  performance.mark("fetched " + (view || "full"));
  const doc = JSON.parse(text);
  performance.mark("parsed " + (view || "full"));
  return doc;
}

function setFilter(text) {
  state.q = text;
  try {
    state.filter = parseFilter(text);
    $("filter-error").textContent = "";
    $("filter").removeAttribute("aria-invalid");
  } catch (e) {
    if (!(e instanceof SelectorError)) throw e;
    state.filter = {kind: "all"};
    $("filter-error").textContent = "Invalid label selector: " + e.message;
    $("filter").setAttribute("aria-invalid", "true");
  }
  saveHash();
  if (state.doc) applyFilter();
}

async function poll() {
  let wait = 3000;
  try {
    if (state.doc === null) render(await fetchDoc("overview"), false);
    const doc = await fetchDoc(null);
    wait = Math.max(500, ((doc.dashboard || {}).refresh_s || 3) * 1000);
    render(doc, true);
  } catch (e) {
    $("status").textContent = "Cannot read the cluster from the dashboard server (" + e.message + "); retrying.";
  } finally {
    setTimeout(poll, wait);
  }
}

function init() {
  loadHash();
  $("filter").value = state.q;
  $("sort").value = state.sort;
  $("filter").addEventListener("input", ev => setFilter(ev.target.value));
  $("group").addEventListener("change", ev => { state.group = ev.target.value; saveHash(); if (state.doc) renderOverview(true); });
  $("sort").addEventListener("change", ev => { state.sort = ev.target.value; saveHash(); if (state.doc) renderOverview(true); });
  $("expand").addEventListener("click", () => { state.openAll = true; saveHash(); renderOverview(true); });
  $("close-host").addEventListener("click", () => { state.host = state.device = null; saveHash(); renderDetails(); });
  $("collapse").addEventListener("click", () => { state.openAll = false; state.open.clear(); saveHash(); renderOverview(true); });
  setFilter(state.q);
  poll();
}

init();
