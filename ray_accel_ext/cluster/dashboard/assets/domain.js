// Fabric domains as pictures: a TPU slice as its chip grid in slice coordinates with host
// boundaries, an NVLink domain as its trays in rank order around the NVLink switch, an
// UltraServer as its hosts and NeuronLink, anything else (a host, a rack) as its hosts.
// Elements the tests count: g.host[data-node-id], rect.chip[data-device], .link[data-link],
// g.group[data-pg] (placement groups), rect.absent (hosts or chips the domain lacks).
import {svg, tip, fabricName, deviceNoun, descsOf, pct} from "./util.js";

const S = 26;   // chip size
const G = 6;    // gap between chips
const PAD = 10; // host box padding

let WORKER_KEY = "";

/** The label keys come with the document (labels.py owns them). */
export function setLabelKeys(keys) {
  WORKER_KEY = keys.fabric_worker;
}

function worker(node) {
  const w = Object.prototype.hasOwnProperty.call(node.labels, WORKER_KEY) ? node.labels[WORKER_KEY] : null;
  return /^\d+$/.test(w || "") ? Number(w) : null;
}

/** The family the picture draws: most devices, ties by backend name (NodeInventory.primary's rule). */
export function primary(node) {
  const d = descsOf(node);
  return d.length ? [...d].sort((a, b) => b.devices.length - a.devices.length || (a.backend < b.backend ? -1 : a.backend > b.backend ? 1 : 0))[0] : null;
}

function deviceRow(node, desc, index) {
  return ((node.devices || {})[desc.backend] || [])[index] || {state: "free", holders: []};
}

/** One device: rect.chip plus its label, utilisation bar and tooltip. */
export function chip(node, desc, dev, x, y, ctx) {
  const row = deviceRow(node, desc, dev.index);
  const words = [`${deviceNoun(desc)} ${dev.index} of ${node.hostname}`, row.state];
  if (row.fault) words.push("fault: " + row.fault);
  if (row.holders.length) words.push("held by " + row.holders.map(h => ctx.holderName(h)).join(", "));
  if (typeof row.utilization === "number" && row.state !== "missing") words.push("utilisation " + pct(row.utilization));
  const g = svg("g", {class: "chip-g", tabindex: 0, role: "button", "aria-label": words.join(", "),
    onclick: ev => { ev.stopPropagation(); ctx.onDevice(node.node_id, desc.backend, dev.index); },
    onkeydown: ev => { if (ev.key === "Enter") ctx.onDevice(node.node_id, desc.backend, dev.index); }});
  g.append(svg("rect", {class: "chip state-" + row.state, x, y, width: S, height: S, rx: 3,
    "data-node-id": node.node_id, "data-device": desc.backend + ":" + dev.index}, tip(words.join(" · "))));
  if (typeof row.utilization === "number" && row.state !== "missing") {
    const h = Math.max(1, (S - 4) * Math.min(100, row.utilization) / 100);
    g.append(svg("rect", {class: "util", x: x + S - 5, y: y + S - 2 - h, width: 3, height: h}));
  }
  g.append(svg("text", {class: "chip-label", x: x + (S - 4) / 2, y: y + S / 2 + 4}, row.state === "missing" || row.state === "failed" ? "✕" : String(dev.index)));
  return g;
}

/** A fabric link between two chip centres: straight when neighbours, an arc otherwise. */
function link(node, desc, l, pa, pb, arcUp = true) {
  const [x1, y1] = pa, [x2, y2] = pb;
  const near = Math.abs(x1 - x2) + Math.abs(y1 - y2) <= S + G + 1;
  let d;
  if (near) d = `M${x1},${y1} L${x2},${y2}`;
  else {
    const mx = (x1 + x2) / 2, my = (y1 + y2) / 2, dist = Math.hypot(x2 - x1, y2 - y1);
    const bend = Math.min(40, 6 + dist / 5) * (arcUp ? -1 : 1);
    const nx = (y2 - y1) / dist, ny = (x1 - x2) / dist;
    d = `M${x1},${y1} Q${(mx + nx * bend).toFixed(1)},${(my + ny * bend).toFixed(1)} ${x2},${y2}`;
  }
  return svg("path", {class: "link kind-" + l.kind.replace(/[^a-z0-9-]/gi, ""), d, "data-node-id": node.node_id,
    "data-link": `${desc.backend}:${l.a}-${l.b}`}, tip(`${fabricName(l.kind)}${l.lanes > 1 ? " ×" + l.lanes : ""}: ${l.a} – ${l.b}`));
}

/** Chip positions of a host drawn on its own: by coordinates when every device has them, else in rows. */
function localLayout(desc, extra = 0) {
  const devs = desc.devices;
  if (devs.length && devs.every(d => d.coords && d.coords.length >= 2)) {
    const xs = devs.map(d => d.coords[0]), ys = devs.map(d => d.coords[1]);
    const x0 = Math.min(...xs), y0 = Math.min(...ys);
    return devs.map(d => [(d.coords[0] - x0) * (S + G), (d.coords[1] - y0) * (S + G)]);
  }
  const n = devs.length + extra;
  const per = n > 8 ? Math.ceil(n / 2) : 8;
  return Array.from({length: n}, (_, i) => [(i % per) * (S + G), Math.floor(i / per) * (S + G + 14)]);
}

/** GPUs in MIG mode: [parent GPU id, its instances] in the order discovery lists them. */
function migGpus(desc) {
  const by = new Map();
  for (const p of desc.partitions || []) { if (!by.has(p.device)) by.set(p.device, []); by.get(p.device).push(p); }
  return [...by.entries()];
}

/** A GPU in MIG mode: its box with one bar per instance, as tall as its compute slices (of 7). */
function migChip(node, desc, parent, parts, x, y) {
  const rows = (node.devices || {})[desc.backend] || [];
  const failed = rows.some(r => r.parent === parent && r.state === "failed");
  const words = [`MIG GPU of ${node.hostname}`, failed ? "failed" : "in MIG mode", parts.map(p => p.profile).join(" + ")];
  const g = svg("g", {class: "mig-gpu"});
  g.append(svg("rect", {class: "chip mig state-" + (failed ? "failed" : "free"), x, y, width: S, height: S, rx: 3,
    "data-node-id": node.node_id, "data-mig-gpu": parent}, tip(words.join(" · "))));
  const unit = (S - 4) / 7;
  let used = 0;
  for (const p of parts) {
    const h = Math.max(2, unit * (p.slices || 1) - 1);
    const row = rows.find(r => r.partition === p.id) || {};
    const by = (row.holders || []).length ? ` · held by ${row.holders.join(", ")}` : "";
    g.append(svg("rect", {class: "mig-instance state-" + (row.state || "free"), x: x + 2, y: y + 2 + used, width: S - 4,
      height: h, "data-partition": p.id}, tip(`${p.profile} ${p.id}${by}`)));
    used += unit * (p.slices || 1);
  }
  return g;
}

/** A host as a box of its chips and links at (x, y); returns {g, w, h, centers}. */
export function hostBlock(node, x, y, ctx, {title = null} = {}) {
  const g = svg("g", {class: "host", "data-node-id": node.node_id});
  const desc = primary(node);
  const migs = desc ? migGpus(desc) : [];
  const pos = desc ? localLayout(desc, migs.length) : [];
  const w = Math.max(90, ...pos.map(p => p[0] + S)) + 2 * PAD;
  const h = Math.max(S, ...pos.map(p => p[1] + S)) + 2 * PAD + 16;
  g.append(svg("rect", {class: "host-box status-" + ctx.status(node), x, y, width: w, height: h, rx: 6,
    onclick: () => ctx.onHost(node.node_id)}, tip(node.hostname)));
  const label = title || node.hostname, room = w - 2 * PAD;  // names are never cut: a long one is squeezed to fit
  const fit = label.length * 6.5 > room ? {textLength: room, lengthAdjust: "spacingAndGlyphs"} : {};
  g.append(svg("text", {class: "host-label", x: x + PAD, y: y + 13, ...fit, onclick: () => ctx.onHost(node.node_id)}, label));
  const centers = {};
  if (desc) {
    const ox = x + PAD, oy = y + PAD + 16;
    desc.devices.forEach((d, i) => { centers[d.index] = [ox + pos[i][0] + S / 2, oy + pos[i][1] + S / 2]; });
    for (const l of desc.links || []) if (centers[l.a] && centers[l.b]) g.append(link(node, desc, l, centers[l.a], centers[l.b]));
    desc.devices.forEach((d, i) => g.append(chip(node, desc, d, ox + pos[i][0], oy + pos[i][1], ctx)));
    const n = desc.devices.length;
    migs.forEach(([parent, parts], j) => g.append(migChip(node, desc, parent, parts, ox + pos[n + j][0], oy + pos[n + j][1])));
    for (const other of descsOf(node)) {
      if (other !== desc) g.append(svg("text", {class: "host-note", x: x + PAD, y: y + h - 3}, `+ ${other.devices.length} ${other.backend}`));
    }
  } else {
    g.append(svg("text", {class: "host-note", x: x + PAD, y: y + 34}, node.inventory ? "no accelerators" : "not probed"));
  }
  return {g, w, h, centers};
}

function absent(x, y, w, h, text) {
  return svg("rect", {class: "absent", x, y, width: w, height: h, rx: 4}, tip(text));
}

/** Outline of each placement group over the host boxes it has bundles on. */
function groups(domainKey, nodes, boxes, ctx) {
  const out = [];
  ctx.pgsOf(domainKey).forEach((pg, k) => {
    const on = new Set(pg.bundles.map(b => b.node_id).filter(Boolean));
    const g = svg("g", {class: "group pg-" + (k % 6), "data-pg": pg.id},
      tip(`placement group ${pg.name || pg.id} (${pg.state}, ${pg.bundles.length} bundles)`));
    for (const n of nodes) {
      const b = boxes[n.node_id];
      if (b && on.has(n.node_id)) g.append(svg("rect", {class: "group-box", x: b.x - 3 - k * 2, y: b.y - 3 - k * 2, width: b.w + 6 + k * 4, height: b.h + 6 + k * 4, rx: 8}));
    }
    out.push(g);
  });
  return out;
}

function dims(text) {
  const m = /^(\d+)x(\d+)(?:x(\d+))?$/.exec(text || "");
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] || 1)] : null;
}

function tpuSlice(domain, nodes, ctx) {
  const descs = nodes.map(primary);
  const shape = dims(domain.topology || (descs.find(d => d && d.fabric) || {fabric: {}}).fabric.topology);
  if (!shape || descs.some(d => !d || !d.devices.every(v => v.coords && v.coords.length >= 2))) return null;
  const [X, Y, Z] = shape;
  // A host's extent in chips along x and y: hosts are set apart by a gap, and by a lane above each
  // row of hosts that holds their worker labels.
  const extent = k => Math.max(1, ...descs.map(d => { const v = d.devices.map(c => c.coords[k]); return Math.max(...v) - Math.min(...v) + 1; }));
  const hx = extent(0), hy = extent(1), GAP = 10, LANE = 18;
  const C = S + 12, panelW = X * C + Math.ceil(X / hx) * GAP + 30;
  const root = svg("g", {});
  const taken = new Set();
  const boxes = {};
  const pos = (c) => [20 + (c[2] || 0) * panelW + c[0] * C + Math.floor(c[0] / hx) * GAP, 40 + c[1] * C + (Math.floor(c[1] / hy) + 1) * LANE];
  for (let z = 0; z < Z; z++) {
    if (Z > 1) root.append(svg("text", {class: "axis", x: 20 + z * panelW, y: 30}, `z = ${z}`));
  }
  root.append(svg("text", {class: "axis", x: 20, y: 14}, `${domain.topology || X + "x" + Y} grid · chip ids per host`,
    tip("the slice's chips at their slice coordinates, each host's box labelled by its worker number; a chip's number is its index on its host (TPU_VISIBLE_CHIPS)")));
  nodes.forEach((node, i) => {
    const desc = descs[i];
    const g = svg("g", {class: "host", "data-node-id": node.node_id});
    const byZ = {};
    for (const d of desc.devices) (byZ[d.coords[2] || 0] = byZ[d.coords[2] || 0] || []).push(d);
    for (const [z, devs] of Object.entries(byZ)) {
      const ps = devs.map(d => pos([d.coords[0], d.coords[1], Number(z)]));
      const x0 = Math.min(...ps.map(p => p[0])) - 5, y0 = Math.min(...ps.map(p => p[1])) - 5;
      const x1 = Math.max(...ps.map(p => p[0])) + S + 5, y1 = Math.max(...ps.map(p => p[1])) + S + 5;
      boxes[node.node_id] = boxes[node.node_id] || {x: x0, y: y0, w: x1 - x0, h: y1 - y0};
      g.append(svg("rect", {class: "host-box slice status-" + ctx.status(node), x: x0, y: y0, width: x1 - x0, height: y1 - y0, rx: 6,
        onclick: () => ctx.onHost(node.node_id)}, tip(`${node.hostname} (worker ${worker(node)})`)));
      g.append(svg("text", {class: "host-tag", x: x0 + 2, y: y0 - 6}, `worker ${worker(node) ?? "?"}`));
    }
    const centers = {};
    for (const d of desc.devices) {
      const [px, py] = pos(d.coords);
      centers[d.index] = [px + S / 2, py + S / 2];
      taken.add(d.coords.slice(0, 3).concat([0, 0]).slice(0, 3).join(","));
    }
    for (const l of desc.links || []) if (centers[l.a] && centers[l.b]) g.append(link(node, desc, l, centers[l.a], centers[l.b]));
    for (const d of desc.devices) { const [px, py] = pos(d.coords); g.append(chip(node, desc, d, px, py, ctx)); }
    root.append(g);
  });
  for (let z = 0; z < Z; z++) for (let y = 0; y < Y; y++) for (let x = 0; x < X; x++) {
    if (!taken.has([x, y, z].join(","))) { const [px, py] = pos([x, y, z]); root.append(absent(px, py, S, S, `chip (${x},${y}${Z > 1 ? "," + z : ""}): its host is not in the cluster`)); }
  }
  groups(ctx.key(domain), nodes, boxes, ctx).forEach(g => root.append(g));
  return {root, w: 20 + Z * panelW, h: 40 + Y * C + Math.ceil(Y / hy) * LANE + 10};
}

/** Hosts by rank: labelled ranks in place, hosts without one (or a duplicate) in the lowest free slots,
 * so an 18-tray domain with an unlabelled tray is still 18 slots. */
function rankedHosts(domain, nodes) {
  const ranked = new Map(), spare = [];
  for (const n of nodes) {
    const w = worker(n);
    if (w === null || ranked.has(w)) spare.push(n); else ranked.set(w, n);
  }
  const total = Math.max(domain.expected_hosts || 0, nodes.length, ...[...ranked.keys()].map(k => k + 1));
  let free = 0;
  for (const n of spare) {
    while (ranked.has(free)) free++;
    ranked.set(free, n);
  }
  return {ranked, total, unranked: new Set(spare.map(n => n.node_id))};
}

function rankTitle(order, r, node) {
  return order.unranked.has(node.node_id) ? `${node.hostname} (no rank label)` : `#${r} ${node.hostname}`;
}

function nvlinkDomain(domain, nodes, ctx) {
  const order = rankedHosts(domain, nodes), {ranked, total} = order;
  const blocks = {};
  let trayW = 0, trayH = 0;
  for (const n of nodes) { const b = hostBlock(n, 0, 0, ctx); trayW = Math.max(trayW, b.w); trayH = Math.max(trayH, b.h); }
  const perRow = Math.max(1, Math.min(total, Math.floor((ctx.pictureWidth() - 40) / (trayW + 10))));
  const rows = Math.ceil(total / perRow);
  const rowH = trayH + 30;
  const root = svg("g", {});
  const desc = nodes.map(primary).find(Boolean);
  const width = 40 + perRow * (trayW + 10);
  root.append(svg("text", {class: "spine-label", x: 20, y: 14},
    `NVLink switch (${desc ? fabricName(desc.interconnect) : "NVLink"}): ${nodes.length} of ${total} trays in the cluster, in rank order`));
  root.append(svg("rect", {class: "spine", x: 8, y: 22, width: 8, height: rows * rowH, rx: 3}));
  for (let row = 0; row < rows; row++) {
    const by = 22 + row * rowH;
    root.append(svg("rect", {class: "spine", x: 8, y: by, width: width - 12, height: 6, rx: 3}));
  }
  for (let r = 0; r < total; r++) {
    const row = Math.floor(r / perRow), col = r % perRow;
    const x = 28 + col * (trayW + 10), y = 22 + row * rowH + 18;
    const n = ranked.get(r);
    if (!n) { root.append(absent(x, y, trayW, trayH, `tray rank ${r}: not in the cluster`)); continue; }
    const b = hostBlock(n, x, y, ctx, {title: rankTitle(order, r, n)});
    blocks[n.node_id] = {x, y, w: b.w, h: b.h};
    for (const c of Object.values(b.centers)) {
      root.append(svg("line", {class: "fabric-link", x1: c[0], y1: c[1] - S / 2, x2: c[0], y2: 22 + row * rowH + 6}));
    }
    root.append(b.g);
  }
  groups(ctx.key(domain), nodes, blocks, ctx).forEach(g => root.append(g));
  return {root, w: width, h: 22 + rows * rowH + 8};
}

function hostsFlow(domain, nodes, ctx, {ranked = false, bar = null} = {}) {
  const root = svg("g", {});
  const blocks = {};
  let x = 20, y = 24, rowH = 0;
  const maxW = Math.max(400, ctx.pictureWidth());
  const order = ranked ? rankedHosts(domain, nodes) : null;
  const slots = ranked ? [...Array(order.total).keys()].map(r => order.ranked.get(r) || r) : nodes;
  let last = null;
  for (const [r, slot] of slots.entries()) {
    const b = typeof slot === "number" ? null : hostBlock(slot, 0, 0, ctx);
    const w = b ? b.w : 120, h = b ? b.h : 80;
    if (x + w > maxW && x > 20) { x = 20; y += rowH + (bar ? 34 : 14); rowH = 0; }
    if (!b) root.append(absent(x, y, w, h, `host rank ${slot}: not in the cluster`));
    else {
      const placed = hostBlock(slot, x, y, ctx, {title: ranked ? rankTitle(order, r, slot) : null});
      blocks[slot.node_id] = {x, y, w, h};
      if (bar && last) root.append(svg("line", {class: "fabric-link wide", x1: last.x + last.w, y1: last.y + last.h / 2, x2: x, y2: y + h / 2}, tip(bar)));
      root.append(placed.g);
      last = {x, y, w, h};
    }
    x += w + (bar ? 30 : 12);
    rowH = Math.max(rowH, h);
  }
  if (bar) root.append(svg("text", {class: "axis", x: 20, y: 14}, bar));
  groups(ctx.key(domain), nodes, blocks, ctx).forEach(g => root.append(g));
  return {root, w: Math.min(maxW, Math.max(...Object.values(blocks).map(b => b.x + b.w), 200)) + 20, h: y + rowH + 10};
}

/** The full picture of one domain (an <svg class="domain-picture">). */
export function domainPicture(domain, nodes, ctx) {
  let drawn = null;
  if (domain.kind === "tpu-slice") drawn = tpuSlice(domain, nodes, ctx);
  if (!drawn && domain.kind === "nvlink-domain") drawn = nvlinkDomain(domain, nodes, ctx);
  if (!drawn && domain.kind === "ultraserver") {
    const desc = nodes.map(primary).find(Boolean);
    drawn = hostsFlow(domain, nodes, ctx, {ranked: true, bar: `${desc ? fabricName(desc.interconnect) : "NeuronLink"} between the UltraServer's hosts (z axis)`});
  }
  if (!drawn) drawn = hostsFlow(domain, nodes, ctx, {ranked: domain.level === "fabric" && (domain.expected_hosts || 0) > 1});
  const scale = Math.max(1, Math.min(1.7, 640 / drawn.w));  // small domains drawn larger
  const box = svg("svg", {class: "domain-picture", "data-domain": ctx.key(domain), width: Math.round(drawn.w * scale), height: Math.round(drawn.h * scale),
    viewBox: `0 0 ${drawn.w} ${drawn.h}`, role: "group", "aria-label": `picture of ${domain.kind} ${domain.id}`});
  box.append(drawn.root);
  return box;
}

/** The collapsed tile's picture: one square per host in rank order, absent ranks dashed. */
export function miniPicture(domain, nodes, ctx) {
  const {ranked, total} = rankedHosts(domain, nodes);
  const n = Math.max(total, nodes.length);
  const per = n <= 12 ? n : Math.ceil(n / Math.ceil(n / 12)), q = 14;  // at most 12 a row: a tile is ~250 px wide
  const rows = Math.ceil(n / per);
  const box = svg("svg", {class: "mini", width: per * (q + 3) + 2, height: rows * (q + 3) + 2, role: "img",
    "aria-label": `${nodes.length} hosts`});
  const order = domain.level === "fabric" ? [...Array(n).keys()].map(r => ranked.get(r) || null) : nodes;
  order.forEach((node, i) => {
    const x = 1 + (i % per) * (q + 3), y = 1 + Math.floor(i / per) * (q + 3);
    if (!node) { box.append(svg("rect", {class: "absent", x, y, width: q, height: q, rx: 2}, tip(`rank ${i}: not in the cluster`))); return; }
    box.append(svg("rect", {class: "host occ-" + ctx.occupancy(node), x, y, width: q, height: q, rx: 2, "data-node-id": node.node_id},
      tip(`${node.hostname}: ${ctx.occupancy(node)}`)));
  });
  box.addEventListener("click", ev => {  // one listener per tile, not one per host
    const host = ev.target.closest("rect.host");
    if (host) { ev.stopPropagation(); ctx.onHost(host.dataset.nodeId); }
  });
  return box;
}
