// The accel dashboard: polls /v1/cluster and draws nodes, devices, links, domains, live
// readings, and which placement groups and actors hold which devices. No framework, no CDN;
// every value from the server goes into the page as text (never as HTML).
"use strict";

const POLL_MS = 5000;
const PALETTE = ["#2f6db5", "#b5482f", "#2f8f5b", "#8a3fb5", "#b58a2f", "#2f9fb5", "#b52f7a", "#5b6b2f"];
let previous = new Map(); // link key -> {t, tx, rx} for rates
let timer = null;

// Styles go through the CSSOM (allowed by the page's Content-Security-Policy), never as an
// inline style attribute (blocked by it).
function applyStyle(e, text) {
  for (const decl of String(text).split(";")) {
    const i = decl.indexOf(":");
    if (i > 0) e.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
  }
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") applyStyle(e, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") applyStyle(e, v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function fmtBytes(n) {
  if (n === undefined || n === null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + u[i];
}

function fmt(v, unit, digits) {
  return v === undefined || v === null ? "–" : Number(v).toFixed(digits) + " " + unit;
}

function token() { return sessionStorage.getItem("accel-token") || ""; }

async function fetchJson(path) {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401) {
    const e = new Error("this agent needs a bearer token");
    e.unauthorized = true;
    throw e;
  }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// Device id -> [{pg, color, label}] from placement groups and actors.
function holdings(doc) {
  const held = new Map();
  const colors = new Map();
  (doc.placement_groups || []).forEach((pg, i) => colors.set(pg.id, PALETTE[i % PALETTE.length]));
  for (const pg of doc.placement_groups || []) {
    const name = pg.name || pg.id.slice(0, 8);
    for (const b of pg.bundles || []) {
      for (const dev of b.devices || []) {
        const key = b.node + "/" + dev;
        const actors = (doc.actors || []).filter(a => a.placement_group_id === pg.id && a.bundle_index === b.index && a.state !== "DEAD");
        const who = actors.map(a => a.class_name).join(", ");
        if (!held.has(key)) held.set(key, []);
        held.get(key).push({ color: colors.get(pg.id), label: "PG " + name + " #" + b.index + (who ? " · " + who : "") });
      }
    }
  }
  return held;
}

function readingFor(node, acc) {
  const devs = (node.readings && node.readings.devices) || [];
  const part = acc.partition ? acc.partition.index : undefined;
  return devs.find(d => d.pci === acc.pci && (d.partition === undefined || d.partition === part));
}

function deviceCard(node, acc, held) {
  const r = readingFor(node, acc) || {};
  const h = held.get(node.name + "/" + acc.id) || [];
  const card = el("div", { class: "device" + (h.length ? " held" : ""), "data-device": acc.id, style: h.length ? "--pg:" + h[0].color : "" },
    el("div", { class: "name" }, "#" + acc.index + " " + (acc.sku || acc.product)),
    el("div", { class: "muted" }, acc.pci || "", acc.partition ? " · " + acc.partition.mode + " " + acc.partition.index : ""));
  const util = r.utilization_ratio;
  card.append(el("div", { class: "bar", title: "utilisation" }, el("div", { style: "width:" + Math.round((util || 0) * 100) + "%" })));
  const kv = el("dl", { class: "kv" });
  const add = (k, v) => kv.append(el("dt", {}, k), el("dd", {}, v));
  add("util", util === undefined ? "–" : Math.round(util * 100) + " %");
  add("memory", r.memory_total_bytes ? fmtBytes(r.memory_used_bytes) + " / " + fmtBytes(r.memory_total_bytes) : fmtBytes(acc.memory_bytes));
  add("power", fmt(r.power_watts, "W", 1));
  add("temp", fmt(r.temperature_celsius, "°C", 0));
  if (r.clock_hz && r.clock_hz.sm) add("clock", fmt(r.clock_hz.sm / 1e6, "MHz", 0));
  const ecc = r.errors ? r.errors.ecc_uncorrected_total : undefined;
  if (ecc !== undefined) add("ECC ue", String(ecc));
  card.append(kv);
  for (const x of h) card.append(el("div", { class: "pg", style: "--pg:" + x.color }, x.label));
  // Health as discovery judged it (fail closed): an unhealthy or unknown device is never placed.
  const health = acc.health;
  if (health && health.state !== "healthy") {
    card.classList.add("sick");
    card.append(el("div", { class: "health", "data-health": health.state, title: (health.reasons || []).join("; ") },
      health.state + ((health.reasons || []).length ? ": " + health.reasons[0] : "")));
  }
  return card;
}

function topology(node, held) {
  const accs = (node.machine.accelerators || []);
  const size = 260, cx = size / 2, cy = size / 2, rad = size / 2 - 34;
  const pos = new Map();
  accs.forEach((a, i) => {
    const t = (2 * Math.PI * i) / Math.max(accs.length, 1) - Math.PI / 2;
    pos.set(a.id, [cx + rad * Math.cos(t), cy + rad * Math.sin(t)]);
  });
  const s = svg("svg", { class: "topology", width: size, height: size, viewBox: "0 0 " + size + " " + size, role: "img" });
  s.append(svg("title", {}, "Scale-up links of " + node.name));
  for (const l of node.machine.links || []) {
    const a = pos.get(l.a), b = pos.get(l.b);
    if (!a || !b) continue;
    s.append(svg("line", { class: "edge", x1: a[0], y1: a[1], x2: b[0], y2: b[1], "stroke-width": Math.min(1 + Math.log2(1 + (l.count || 1)), 6) },
      svg("title", {}, l.a + " — " + l.b + ": " + l.kind + " ×" + l.count)));
  }
  if (accs.length <= 16) {
    for (const a of accs) {
      const [x, y] = pos.get(a.id);
      const h = held.get(node.name + "/" + a.id) || [];
      s.append(svg("circle", { cx: x, cy: y, r: 13, class: h.length ? "held" : "", style: h.length ? "--pg:" + h[0].color : "" }, svg("title", {}, a.id)));
      s.append(svg("text", { x: x, y: y + 4, "text-anchor": "middle" }, String(a.index)));
    }
  }
  return s;
}

function linkTable(node, now) {
  const links = (node.readings && node.readings.links) || [];
  const t = el("table", { class: "links" },
    el("tr", {}, el("th", {}, "device"), el("th", {}, "link"), el("th", {}, "peer"), el("th", {}, "tx total"), el("th", {}, "rx total"), el("th", {}, "tx rate"), el("th", {}, "rx rate"), el("th", {}, "errors")));
  const byPci = new Map((node.machine.accelerators || []).map(a => [a.pci, a]));
  for (const l of links) {
    const key = node.name + "/" + l.pci + "/" + l.link;
    const prev = previous.get(key);
    const at = node.readings_at || now;
    let txr = "–", rxr = "–";
    if (prev && at > prev.t && l.tx_bytes_total !== undefined) txr = fmtBytes(Math.max(0, (l.tx_bytes_total - prev.tx) / (at - prev.t))) + "/s";
    if (prev && at > prev.t && l.rx_bytes_total !== undefined) rxr = fmtBytes(Math.max(0, (l.rx_bytes_total - prev.rx) / (at - prev.t))) + "/s";
    if (!prev || at > prev.t) previous.set(key, { t: at, tx: l.tx_bytes_total, rx: l.rx_bytes_total });
    const acc = byPci.get(l.pci);
    t.append(el("tr", {}, el("td", {}, acc ? "#" + acc.index : l.pci), el("td", {}, String(l.link)), el("td", {}, l.peer_pci || "switch"),
      el("td", {}, fmtBytes(l.tx_bytes_total)), el("td", {}, fmtBytes(l.rx_bytes_total)), el("td", {}, txr), el("td", {}, rxr),
      el("td", {}, l.errors_total === undefined ? "–" : String(l.errors_total))));
  }
  return links.length ? t : el("p", { class: "muted" }, "No per-link counters from this node's vendor.");
}

function nodeSection(node, held, now) {
  const m = node.machine;
  const accs = m.accelerators || [];
  const kinds = [...new Set((m.links || []).map(l => l.kind + " ×" + l.count))].join(", ");
  const sec = el("div", { class: "node", "data-node": node.name },
    el("h3", {}, node.name + (node.alive === false ? " (dead)" : "")),
    el("div", { class: "meta" }, (m.host && m.host.product_name ? m.host.product_name + " · " : "") + accs.length + " accelerators · " +
      (m.links || []).length + " links" + (kinds ? " (" + kinds + ")" : "") + " · " + (m.numa_nodes || []).length + " NUMA nodes"));
  const domains = (m.domains || []).map(d => d.kind + " " + d.name + " (" + (d.accelerators || []).length + ")");
  if (domains.length) sec.append(el("div", { class: "meta domains" }, "Domains: " + domains.join(" · ")));
  const row = el("div", { class: "row" }, topology(node, held));
  const grid = el("div", { class: "devices" });
  for (const a of accs) grid.append(deviceCard(node, a, held));
  row.append(grid);
  sec.append(row, el("h3", { style: "margin-top:.8em" }, "Scale-up links"), linkTable(node, now));
  return sec;
}

function pgTable(doc) {
  const pgs = doc.placement_groups || [];
  if (!pgs.length) return el("p", { class: "muted" }, "No placement groups.");
  const t = el("table", { id: "pg-table" }, el("tr", {}, el("th", {}, "placement group"), el("th", {}, "state"), el("th", {}, "bundle"), el("th", {}, "node"), el("th", {}, "devices"), el("th", {}, "actors")));
  for (const pg of pgs) {
    for (const b of pg.bundles || []) {
      const actors = (doc.actors || []).filter(a => a.placement_group_id === pg.id && a.bundle_index === b.index).map(a => a.class_name + " (" + a.state + ")");
      t.append(el("tr", { "data-pg": pg.id }, el("td", {}, pg.name || pg.id), el("td", {}, pg.state || ""), el("td", {}, String(b.index)),
        el("td", {}, b.node || "–"), el("td", {}, (b.devices || []).join(", ") || "–"), el("td", {}, actors.join(", ") || "–")));
    }
  }
  return t;
}

function render(doc) {
  const now = Date.now() / 1000;
  const held = holdings(doc);
  const nodes = doc.nodes || [];
  const total = nodes.reduce((n, x) => n + ((x.machine && x.machine.accelerators) || []).length, 0);
  document.getElementById("summary").textContent = nodes.length + " node" + (nodes.length === 1 ? "" : "s") + " · " + total + " accelerators · " + (doc.placement_groups || []).length + " placement groups";
  document.getElementById("pgs").replaceChildren(pgTable(doc));
  document.getElementById("nodes").replaceChildren(...nodes.filter(n => n.machine).map(n => nodeSection(n, held, now)));
  const warnings = (doc.warnings || []).concat(...nodes.map(n => ((n.machine && n.machine.warnings) || []).map(w => n.name + ": " + w.source + ": " + w.message)));
  document.getElementById("warnings").replaceChildren(...warnings.map(w => el("li", {}, w)));
  // The view's age is the agent's: it measures the document's own time by its clock (age_s,
  // stale), so a browser with a wrong clock or a sidecar that stopped cannot pass as live.
  const st = document.getElementById("status");
  const age = typeof doc.age_s === "number" ? Math.round(doc.age_s) + " s old" : "age unknown";
  st.className = doc.stale === false ? "status" : "status stale";
  st.textContent = (doc.stale === false ? "updated, " + age : "stale, " + age) + (doc.source ? " · source " + doc.source : "");
  document.body.dataset.ready = "1";
}

async function poll() {
  try {
    render(await fetchJson("/v1/cluster"));
    document.getElementById("login").hidden = true;
  } catch (e) {
    const st = document.getElementById("status");
    st.className = "status error";
    st.textContent = e.message;
    if (e.unauthorized) document.getElementById("login").hidden = false;
  }
  timer = setTimeout(poll, POLL_MS);
}

document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault();
  sessionStorage.setItem("accel-token", document.getElementById("token").value.trim());
  clearTimeout(timer);
  poll();
});
poll();
