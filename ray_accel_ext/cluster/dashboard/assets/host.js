// One host like lstopo: NUMA nodes, host bridges, PCIe switches, the devices and NICs behind
// them, and the fabric links; then the `nvidia-smi topo -m` matrix and the device table.
import {el, svg, tip, table, cpulist, fabricName, deviceNoun, descsOf, bytes, pct, sparkline, stateWord} from "./util.js";
import {chip} from "./domain.js";

const S = 26, NIC_W = 44, GAP = 8, PAD = 8, HEAD = 16;

/** Where each device and NIC sits: NUMA node, host bridge, PCIe switch (probe data, else the description). */
function places(desc, pcie) {
  const p = pcie && pcie[desc.backend];
  const devs = desc.devices.map((d, i) => ({kind: "dev", desc, dev: d, numa: d.numa_node,
    root: p ? p.devices[i].root : null, sw: p ? p.devices[i].switch : d.pcie_switch}));
  const nics = (desc.nics || []).map((n, j) => {
    let sw = p ? p.nics[j].switch : null;
    if (!p) { const near = devs.find(x => (x.dev.nics || []).some(q => q.nic === n.name && q.path === "PIX")); sw = near ? near.sw : null; }
    return {kind: "nic", nic: n, numa: n.numa_node, root: p ? p.nics[j].root : null, sw};
  });
  return devs.concat(nics);
}

function itemW(it) { return it.kind === "dev" ? S : NIC_W; }

function measureRow(items) {
  return {w: items.reduce((a, it) => a + itemW(it) + GAP, -GAP), h: S + 12};
}

/** A titled box holding rows of children (each {w, h, draw(x, y)}), wrapped at maxW. */
function boxOf(cls, label, kids, maxW) {
  const rows = [[]];
  let rw = 0;
  for (const k of kids) {
    if (rw + k.w > maxW && rows[rows.length - 1].length) { rows.push([]); rw = 0; }
    rows[rows.length - 1].push(k);
    rw += k.w + GAP;
  }
  const w = Math.max(80, label.length * 6.3, ...rows.map(r => r.reduce((a, k) => a + k.w + GAP, -GAP))) + 2 * PAD;
  const h = rows.reduce((a, r) => a + Math.max(0, ...r.map(k => k.h)) + GAP, -GAP) + 2 * PAD + HEAD;
  return {w, h, draw(x, y, parent) {
    parent.append(svg("rect", {class: cls, x, y, width: w, height: h, rx: 5}, tip(label)));
    parent.append(svg("text", {class: cls + "-label", x: x + PAD, y: y + 12}, label));
    let cy = y + PAD + HEAD;
    for (const r of rows) {
      let cx = x + PAD;
      for (const k of r) { k.draw(cx, cy, parent); cx += k.w + GAP; }
      cy += Math.max(0, ...r.map(k => k.h)) + GAP;
    }
  }};
}

function leafRow(items, node, ctx, centers) {
  const m = measureRow(items);
  return {w: m.w, h: m.h, draw(x, y, parent) {
    let cx = x;
    for (const it of items) {
      if (it.kind === "dev") {
        parent.append(chip(node, it.desc, it.dev, cx, y, ctx));
        centers[it.desc.backend + ":" + it.dev.index] = [cx + S / 2, y + S / 2];
      } else {
        parent.append(svg("rect", {class: "nic", x: cx, y, width: NIC_W, height: S, rx: 3, "data-nic": it.nic.name,
          "data-node-id": node.node_id}, tip(`${it.nic.name} (${it.nic.kind}${it.nic.rate_gbps ? ", " + it.nic.rate_gbps + " Gb/s" : ""}) ${it.nic.pci_address || ""}`)));
        parent.append(svg("text", {class: "nic-label", x: cx + 3, y: y + S / 2 + 4}, it.nic.name.slice(0, 7)));
        parent.append(svg("text", {class: "item-label", x: cx, y: y + S + 10}, it.nic.kind));
      }
      cx += itemW(it) + GAP;
    }
  }};
}

function groupBy(items, key) {
  const m = new Map();
  for (const it of items) { const k = key(it) ?? null; if (!m.has(k)) m.set(k, []); m.get(k).push(it); }
  return [...m.entries()].sort((a, b) => String(a[0]).localeCompare(String(b[0])));
}

/** The lstopo-like picture of a node (an <svg class="host-picture">). */
export function hostPicture(node, ctx, maxW = 860) {
  const descs = descsOf(node);
  const items = descs.flatMap(d => places(d, node.pcie));
  const centers = {};
  const numas = groupBy(items, it => it.numa).map(([numa, its]) => {
    const cpus = new Set(its.filter(i => i.kind === "dev").flatMap(i => i.dev.cpus || []));
    const bridges = groupBy(its, it => it.root).map(([root, ins]) => {
      const sws = groupBy(ins, it => it.sw).map(([sw, leaf]) =>
        sw === null ? leafRow(leaf, node, ctx, centers) : boxOf("switch", "PCIe switch " + sw, [leafRow(leaf, node, ctx, centers)], maxW));
      return root === null ? boxOf("bridge", "PCIe (host bridge not recorded)", sws, maxW - 40) : boxOf("bridge", "Host bridge " + root, sws, maxW - 40);
    });
    const label = (numa === null ? "NUMA node unknown" : "NUMA node " + numa) + (cpus.size ? " · CPUs " + cpulist([...cpus].sort((a, b) => a - b)) : "");
    return boxOf("numa", label, bridges, maxW - 20);
  });
  const machine = boxOf("machine", `${node.hostname} · ${descs.map(d => d.devices.length + " × " + (d.sku.product || d.sku.name)).join(" + ") || "no accelerators"}`, numas, maxW);
  const root = svg("g", {});
  machine.draw(0, 0, root);
  const links = svg("g", {class: "host-links"});
  for (const d of descs) {
    if ((d.links || []).length > 16) continue;  // all-to-all NVLink and tori read better in the matrix and the domain picture
    for (const l of d.links || []) {
      const a = centers[d.backend + ":" + l.a], b = centers[d.backend + ":" + l.b];
      if (!a || !b) continue;
      const mx = (a[0] + b[0]) / 2, my = Math.min(a[1], b[1]) - 14 - Math.abs(a[0] - b[0]) / 8;
      links.append(svg("path", {class: "link kind-" + l.kind.replace(/[^a-z0-9-]/gi, ""), d: `M${a[0]},${a[1] - S / 2} Q${mx.toFixed(1)},${my.toFixed(1)} ${b[0]},${b[1] - S / 2}`,
        "data-link": `${d.backend}:${l.a}-${l.b}`, "data-node-id": node.node_id}, tip(`${fabricName(l.kind)}${l.lanes > 1 ? " ×" + l.lanes : ""}: ${l.a} – ${l.b}`)));
    }
  }
  root.append(links);
  return svg("svg", {class: "host-picture", "data-node-id": node.node_id, width: machine.w + 2, height: machine.h + 2,
    viewBox: `-1 -1 ${machine.w + 2} ${machine.h + 2}`, role: "img", "aria-label": "topology of " + node.hostname}, root);
}

function fabricCell(desc, a, b) {
  const l = (desc.links || []).find(x => (x.a === a && x.b === b) || (x.a === b && x.b === a));
  if (!l) return null;
  if (l.kind.startsWith("nvlink")) return "NV" + l.lanes;
  return fabricName(l.kind).replace("NeuronLink", "NL").replace(/ v\d$/, "") + (l.lanes > 1 ? l.lanes : "");
}

/** The path class from the probe's matrix, else the description's nearest NICs, else SYS across NUMA nodes. */
function nicCell(desc, p, i, j) {
  if (p && p.device_nic[i] && p.device_nic[i][j]) return p.device_nic[i][j];
  const dev = desc.devices[i], nic = desc.nics[j];
  const near = (dev.nics || []).find(n => n.nic === nic.name);
  if (near) return near.path;
  if (dev.numa_node !== null && nic.numa_node !== null && dev.numa_node !== nic.numa_node) return "SYS";
  return "?";
}

/** `nvidia-smi topo -m`: every device and NIC against every other, then CPU and NUMA affinity. */
export function matrix(node, desc) {
  const p = node.pcie && node.pcie[desc.backend];
  const noun = deviceNoun(desc).toUpperCase();
  const devs = desc.devices, nics = desc.nics || [];
  const names = devs.map(d => noun + d.index).concat(nics.map((n, j) => "NIC" + j));
  const rows = [];
  devs.forEach((d, i) => {
    const cells = devs.map((_, k) => i === k ? "X" : fabricCell(desc, i, k) || (p && p.device_device[i][k]) || "?");
    nics.forEach((_, j) => cells.push(nicCell(desc, p, i, j)));
    rows.push([names[i], ...cells, cpulist(d.cpus), d.numa_node ?? "N/A"]);
  });
  nics.forEach((n, j) => {
    const cells = devs.map((_, i) => nicCell(desc, p, i, j));
    nics.forEach((_, k) => cells.push(j === k ? "X" : (p && p.nic_nic && p.nic_nic[j][k]) || "?"));
    rows.push([names[devs.length + j], ...cells, "", n.numa_node ?? "N/A"]);
  });
  const t = table(`Topology matrix of ${node.hostname} (${desc.backend}), as nvidia-smi topo -m prints it`, ["", ...names, "CPU Affinity", "NUMA Affinity"],
    rows.map(r => r.map(String)), {class: "matrix"});
  for (const td of t.querySelectorAll("td")) td.className = "m-" + td.textContent.replace(/[^A-Za-z?]/g, "");
  const legend = el("p", {class: "legend-text"},
    "X = self · SYS = across the NUMA interconnect · NODE = across host bridges within a NUMA node · PHB = through a host bridge · " +
    "PXB = through several PCIe switches · PIX = through one PCIe switch · NV# = NVLink, # bonded links · ? = not recorded. ",
    nics.length ? nics.map((n, j) => `NIC${j} = ${n.name}`).join(", ") : "");
  return el("div", {class: "matrix-wrap"}, t, legend);
}

/** The device table: what `ray-accel discover` prints, plus state, holders and metrics. */
export function deviceTable(node, desc, ctx) {
  const rows = (node.devices || {})[desc.backend] || [];
  const body = desc.devices.map(d => {
    const r = rows[d.index] || {state: "free", holders: []};
    const hist = r.history || {};
    return [
      deviceNoun(desc) + " " + d.index,
      el("code", {}, d.pci_address || d.id),
      d.numa_node ?? "–",
      el("code", {}, cpulist(d.cpus)),
      el("code", {}, d.pcie_switch || "–"),
      (d.nics || []).map(n => n.nic + " " + n.path).join(", ") || "–",
      d.coords ? d.coords.join(",") : "–",
      el("span", {class: "badge state-" + r.state}, stateWord(r.state)),
      r.holders.length ? r.holders.map(h => ctx.holderLink(h)) : "–",
      ...(r.state === "missing" ? ["–", "–"] : [
        el("span", {class: "metric"}, pct(r.utilization), " ", sparkline(hist.utilization, {max: 100, label: `utilisation of ${deviceNoun(desc)} ${d.index}`})),
        el("span", {class: "metric"}, r.memory_used !== undefined ? bytes(r.memory_used) + " / " + bytes(r.memory_total) : "–", " ",
          sparkline(hist.memory_used, {max: r.memory_total || null, label: `memory of ${deviceNoun(desc)} ${d.index}`}))]),
    ];
  });
  return table(`${desc.devices.length} × ${desc.sku.product || desc.sku.name} on ${node.hostname}: ${fabricName(desc.interconnect)}, ${desc.resource_name} ${desc.resource_quantity}`,
    ["Device", "PCI address", "NUMA", "CPU affinity", "PCIe switch", "Nearest NICs", "Coords", "State", "Held by", "Utilisation", "Memory"], body, {class: "devices"});
}
