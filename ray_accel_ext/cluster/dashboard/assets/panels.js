// The side panel of one host and the cluster-wide panels: placement groups, holders, degraded
// nodes with the doctor's advice, and the project's metrics.
import {el, table, short, kindName, descsOf, sparkline, nodeStatus, fabricName} from "./util.js";
import {hostPicture, matrix, deviceTable} from "./host.js";

function badge(status) {
  const text = {ok: "✓ OK", degraded: "⚠ DEGRADED", changed: "△ CHANGED"}[status] || status;
  return el("span", {class: "badge status-" + status}, text);
}

function advice(node) {
  if (!(node.advice || []).length) return null;
  return el("section", {class: "advice", "aria-label": "Why " + node.hostname + " is degraded"},
    el("h4", {}, "Why it is degraded, and what to do"),
    el("ul", {}, node.advice.map(a => el("li", {class: "sev-" + a.severity},
      el("strong", {}, a.severity + ": "), a.message, el("br"), el("span", {class: "fix"}, "Fix: " + a.fix)))));
}

/** Devices of ``node`` that left the bus, by Ray resource name: Ray still counts them free. */
function missingBy(node) {
  const out = {};
  for (const d of descsOf(node)) {
    const gone = ((node.devices || {})[d.backend] || []).filter(r => r && r.state === "missing").length;
    if (gone && d.resource_name) out[d.resource_name] = (out[d.resource_name] || 0) + gone * (d.resource_quantity / d.devices.length || 1);
  }
  return out;
}

function occupancy(node) {
  const gone = missingBy(node);
  const rows = Object.entries(node.occupancy || {}).map(([res, o]) => [res, String(o.total), String(o.reserved), String(o.used),
    String(gone[res] || 0), String(Math.max(0, o.free - (gone[res] || 0)))]);
  return rows.length ? table("Accelerators of this node: reserved by placement groups, used by tasks and actors outside them, " +
    "missing (left the bus; Ray still counts them), free",
    ["Resource", "Total", "Reserved", "Used", "Missing", "Free"], rows, {class: "occupancy"}) : null;
}

/** The selected device: its state, who holds it (with Ray's pages) and its metrics. */
function deviceCard(node, ctx) {
  const sel = ctx.selectedDevice();
  if (!sel) return null;
  const [backend, i] = sel.split(":");
  const desc = descsOf(node).find(d => d.backend === backend);
  const dev = desc && desc.devices[Number(i)];
  if (!dev) return null;
  const row = ((node.devices || {})[backend] || [])[dev.index] || {state: "free", holders: []};
  const hist = row.history || {};
  return el("section", {class: "device-card", "aria-label": "selected device"},
    el("h4", {}, `${desc.sku.product || desc.sku.name} ${dev.index} · `, el("span", {class: "badge state-" + row.state}, row.state)),
    el("p", {}, row.holders.length ? ["Held by ", row.holders.map(h => [ctx.holderLink(h), " "])] : "Not held by any task or actor."),
    row.state === "missing" ? el("p", {class: "meta"}, "No metrics: the device left the bus (the last values Ray exported are not shown).") :
    typeof row.utilization === "number" ? el("p", {class: "metric"}, `utilisation ${Math.round(row.utilization)}% `,
      sparkline(hist.utilization, {width: 160, max: 100, label: "utilisation"}), ` memory ${Math.round(100 * row.memory_used / (row.memory_total || 1))}% `,
      sparkline(hist.memory_used, {width: 160, max: row.memory_total || null, label: "memory used"})) : null);
}

/** The side panel for one host (and the selected device on it). */
export function hostPanel(node, ctx) {
  const box = el("div", {class: "host-panel", "data-node-id": node.node_id});
  const domain = ctx.domainOf(node);
  box.append(el("h3", {}, node.hostname, " ", badge(nodeStatus(node)), node.is_head ? el("span", {class: "badge info"}, "head") : null));
  const meta = [el("code", {}, short(node.node_id, 16)), " · ", node.address || "–", " · ",
    el("a", {href: "#", onclick: ev => { ev.preventDefault(); ctx.openDomain(domain); }}, `${kindName(domain.kind)} ${domain.id}`)];
  const ray = ctx.rayUrl(node.ray_dashboard);
  if (ray) meta.push(" · ", el("a", {href: ray, target: "_blank", rel: "noopener noreferrer"}, "node in Ray's dashboard"));
  box.append(el("p", {class: "meta"}, meta));
  box.append(...[deviceCard(node, ctx), advice(node), occupancy(node)].filter(Boolean));
  const mine = (node.holders || []).map(id => ctx.holder(id)).filter(Boolean);
  if (mine.length) {
    box.append(el("h4", {}, "Held by"));
    box.append(el("ul", {class: "holders"}, mine.map(h => el("li", {}, ctx.holderLink(h.id), " · ",
      Object.entries(h.resources).map(([k, v]) => `${k} ${v}`).join(", "),
      h.devices.length ? " · devices " + h.devices.map(d => d[1]).join(", ") : " · devices not reported",
      h.placement_group_id ? " · in placement group " + ctx.pgName(h.placement_group_id) : ""))));
  }
  box.append(el("h4", {}, "Topology"));
  box.append(el("div", {class: "picture-scroll"}, hostPicture(node, ctx, ctx.panelWidth())));
  for (const d of descsOf(node)) {
    if ((d.links || []).length > 16) box.append(el("p", {class: "meta"}, `${d.links.length} ${d.links[0].kind} links between the ${d.devices.length} devices: see the matrix below and the domain picture.`));
  }
  for (const desc of descsOf(node)) {
    box.append(deviceTable(node, desc, ctx));
    if (desc.devices.length > 1 || (desc.nics || []).length) box.append(matrix(node, desc));
  }
  box.append(el("details", {}, el("summary", {}, `Labels (${Object.keys(node.labels).length})`),
    el("dl", {class: "labels"}, Object.entries(node.labels).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]))));
  if (!descsOf(node).length) box.append(el("p", {class: "empty"}, node.inventory ? "No accelerators on this node." : "Not probed yet."));
  return box;
}

export function pgPanel(doc, ctx) {
  const rows = (doc.placement_groups || []).map(p => [p.name || short(p.id), p.state, p.strategy, String(p.bundles.length),
    p.domains.length ? p.domains.map(k => el("a", {href: "#", class: "domain-link", onclick: ev => { ev.preventDefault(); ctx.openKey(k); }}, k)) : "not placed",
    p.topology_strategy ? Object.entries(p.topology_strategy).map(([k, v]) => k + "=" + v).join(", ") : "–"]);
  return rows.length ? table("Placement groups and the domains their bundles occupy",
    ["Name", "State", "Strategy", "Bundles", "Domains", "Topology strategy"], rows, {class: "pgs"}) : el("p", {class: "empty"}, "None.");
}

export function holderPanel(doc, ctx) {
  const src = (doc.sources || {}).holders || {};
  const notes = Object.entries(src).filter(([, v]) => v !== "ok").map(([k, v]) => el("p", {class: "meta"}, `${k.replace(/_/g, " ")}: ${v}`));
  const rows = (doc.holders || []).map(h => [ctx.holderLink(h.id), h.kind, ctx.nodeName(h.node_id),
    Object.entries(h.resources).map(([k, v]) => `${k} ${v}`).join(", "),
    h.devices.length ? h.devices.map(d => d[1]).join(", ") : "not reported",
    h.placement_group_id ? ctx.pgName(h.placement_group_id) : "–", h.job_id || "–"]);
  return el("div", {}, notes, rows.length ? table("Tasks and actors holding accelerators, and the devices Ray gave them",
    ["Holder", "Kind", "Node", "Resources", "Devices", "Placement group", "Job"], rows, {class: "holders-table"}) :
    el("p", {class: "empty"}, "No task or actor holds an accelerator."));
}

export function degradedPanel(doc, ctx) {
  const bad = (doc.nodes || []).filter(n => n.degraded);
  if (!(doc.nodes || []).length) return el("p", {class: "empty"}, "No nodes read.");
  if (!bad.length) return el("p", {class: "empty"}, "None: every node discovered its accelerators fully.");
  return table("Nodes that came up degraded or changed after start: the reason in plain words and the fix",
    ["Host", "Node", "Reason", "Fix"], bad.flatMap(n => (n.advice.length ? n.advice : [{message: "degraded", fix: "–"}]).map(a => [
      el("a", {href: "#", onclick: ev => { ev.preventDefault(); ctx.onHost(n.node_id); }}, n.hostname),
      el("code", {}, short(n.node_id)), a.message, a.fix])), {class: "degraded"});
}

export function metricsPanel(doc) {
  const pm = doc.project_metrics || {};
  const names = {rayaccel_placements: "Domain placements by outcome (count)", rayaccel_nodes: "Nodes by discovery result",
    rayaccel_reserved_domains: "Domains held by reservations, by level", rayaccel_placement_wait_seconds_sum: "Placement wait, total seconds",
    rayaccel_placement_wait_seconds_count: "Placement waits, by outcome"};
  const rows = [];
  for (const [metric, byLabel] of Object.entries(pm)) {
    for (const [label, points] of Object.entries(byLabel)) {
      const last = points.length ? points[points.length - 1][1] : null;
      rows.push([names[metric] || metric, label, last === null ? "–" : String(last), sparkline(points, {width: 140, label: `${metric} ${label}`})]);
    }
  }
  const m = (doc.sources || {}).metrics || {};
  const errs = Object.keys(m.errors || {}).length;
  const note = el("p", {class: "meta"}, `Scraped ${m.nodes_scraped || 0} nodes' Ray metrics` + (errs ? `; ${errs} did not answer` : "") +
    ". Per-device utilisation and memory appear on the chips and in each host's device table where Ray exports them (GPUs: ray_node_gpus_utilization, ray_node_gram_used; TPUs: ray_tpu_tensorcore_utilization, ray_tpu_memory_used).");
  return el("div", {}, note, rows.length ? table("The project's placement and discovery metrics", ["Metric", "Label", "Now", "History"], rows, {class: "project-metrics"}) :
    el("p", {class: "empty"}, "No placement or discovery metrics exported yet."));
}

export function domainMeta(domain, nodes, ctx) {
  const total = domain.expected_hosts || nodes.length;
  const bits = [`${nodes.length}${domain.expected_hosts ? " of " + domain.expected_hosts : ""} ${total === 1 ? "host" : "hosts"}${domain.complete === false ? " (incomplete)" : ""}`];
  if (domain.product) bits.push(domain.product);
  if (domain.topology) bits.push("topology " + domain.topology);
  const desc = nodes.map(n => descsOf(n)[0]).find(Boolean);
  if (desc) bits.push(fabricName(desc.interconnect));
  const pgs = ctx.pgsOf(ctx.key(domain));
  bits.push(pgs.length ? "placement groups: " + pgs.map(p => p.name || short(p.id)).join(", ") : "no placement group");
  return bits.join(" · ");
}
