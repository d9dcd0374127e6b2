// DOM and SVG helpers. Every cluster-supplied string enters the page as a text node or an
// attribute value set through the DOM API, never as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(e, attrs, kids) {
  for (const k in attrs || {}) {
    const v = attrs[k];
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick" || k === "onkeydown" || k === "oninput" || k === "onchange") e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

export function el(tag, attrs, ...kids) {
  return fill(document.createElement(tag), attrs, kids);
}

export function svg(tag, attrs, ...kids) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, kids);
}

/** An SVG <title> (the tooltip and accessible name of its parent). */
export function tip(text) {
  return svg("title", {}, text);
}

export const FABRIC = {
  nvlink1: "NVLink 1", nvlink2: "NVLink 2", nvlink3: "NVLink 3", nvlink4: "NVLink 4", nvlink5: "NVLink 5", nvlink6: "NVLink 6",
  ici: "ICI", xgmi: "XGMI", pcie: "PCIe", "neuronlink-v2": "NeuronLink v2", "neuronlink-v3": "NeuronLink v3", "neuronlink-v4": "NeuronLink v4",
};
export const KIND = {"tpu-slice": "TPU slice", "nvlink-domain": "NVLink domain", ultraserver: "UltraServer", "xgmi-hive": "XGMI hive",
  host: "Host", rack: "Rack"};

export function fabricName(k) {
  return FABRIC[k] || String(k || "").toUpperCase();
}

export function kindName(k) {
  return KIND[k] || String(k || "");
}

export function deviceNoun(desc) {
  return {GPU: "GPU", TPU: "chip", neuron_cores: "device"}[desc.resource_name] || "device";
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (n >= 100 || i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

export function pct(v) {
  return v === null || v === undefined ? "–" : Math.round(v) + "%";
}

/** "0-55,112-167" from [0, 1, ..., 55, 112, ...] (the kernel's cpulist format). */
export function cpulist(cpus) {
  if (!cpus || !cpus.length) return "–";
  const out = [];
  let start = cpus[0], prev = cpus[0];
  for (const c of cpus.slice(1).concat([null])) {
    if (c === prev + 1) { prev = c; continue; }
    out.push(start === prev ? String(start) : start + "-" + prev);
    start = prev = c;
  }
  return out.join(",");
}

export function short(id, n = 12) {
  return String(id || "").slice(0, n);
}

/** A sparkline of [[t, v], ...] as an SVG polyline; max is the value at the top (default: the data's). */
export function sparkline(points, {width = 90, height = 22, max = null, label = ""} = {}) {
  const box = svg("svg", {class: "spark", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label});
  if (!points || points.length < 1) {
    box.append(svg("text", {x: 2, y: height - 6, class: "spark-none"}, "no data"));
    return box;
  }
  const t0 = points[0][0], t1 = points[points.length - 1][0] || t0 + 1;
  const top = max || Math.max(1e-9, ...points.map(p => p[1]));
  const xy = points.map(([t, v]) => [
    points.length === 1 ? width - 2 : 1 + (width - 3) * (t - t0) / Math.max(1e-9, t1 - t0),
    height - 2 - (height - 4) * Math.min(1, Math.max(0, v / top)),
  ]);
  box.append(svg("polyline", {points: xy.map(p => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "), class: "spark-line"}));
  const last = xy[xy.length - 1];
  box.append(svg("circle", {cx: last[0].toFixed(1), cy: last[1].toFixed(1), r: 1.8, class: "spark-dot"}));
  box.append(tip(label));
  return box;
}

/** A <table> with a caption, column headers and rows of cells (strings or nodes). */
export function table(caption, headers, rows, attrs = {}) {
  const t = el("table", attrs, el("caption", {}, caption));
  t.append(el("thead", {}, el("tr", {}, headers.map(h => el("th", {scope: "col"}, h)))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, r.map((c, i) => (i === 0 ? el("th", {scope: "row"}, c) : el("td", {}, c)))));
  t.append(body);
  return t;
}

export function stateWord(state) {
  return {free: "free", held: "held", missing: "missing", failed: "failed", degraded: "degraded"}[state] || String(state);
}

/** Node id -> {node, descs, status}: status is "degraded" when the node has reasons. */
export function nodeStatus(node) {
  if (node.health && node.health.status && node.health.status !== "ok") return node.health.status;
  return node.degraded ? "degraded" : "ok";
}

export function descsOf(node) {
  return (node.inventory && node.inventory.descriptions) || [];
}

export function held(node) {
  let h = 0, t = 0;
  for (const r of Object.values(node.occupancy || {})) { h += r.total - r.free; t += r.total; }
  return {held: h, total: t};
}

export function utilisation(node) {
  const vals = [];
  for (const rows of Object.values(node.devices || {})) for (const d of rows) if (typeof d.utilization === "number") vals.push(d.utilization);
  return vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : null;
}
