// goray dashboard: renders the views that /api/events streams (or, where
// EventSource is missing, that /api/view returns every two seconds).
"use strict";

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
// Reservations get colours from a categorical palette, in the order of
// their groups, so two reservations on screen never look alike: Tableau
// 10 without its red and pink (red means a dead host: --dead in app.css)
// and its grey (close to busy chips), with three more hues; beyond ten,
// hues spaced by the golden angle, skipping the reds.
// dashboard's TestReservationColours checks the distances.
const palette = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#6b4c9a", "#e377c2", "#ffbe7d"];
const hueAfterPalette = (i) => { const h = (i * 137.508) % 360; return h > 320 || h < 30 ? (h + 70) % 360 : h; };
let colourIndex = new Map();
const groupColour = (g) => {
  const i = colourIndex.get(g);
  if (i === undefined) return "#8a94a6";
  return i < palette.length ? palette[i] : `hsl(${hueAfterPalette(i)}, 60%, 45%)`;
};
const natural = new Intl.Collator(undefined, { numeric: true }).compare;
const fmtRes = (r, skipZero) => Object.keys(r || {}).sort().filter((k) => !skipZero || r[k] !== 0).map((k) => `${k}: ${fmtNum(k, r[k])}`).join(", ");
const fmtNum = (k, v) => (k === "memory" && v >= 1 << 30) ? (v / (1 << 30)).toFixed(0) + "GiB" : (+v.toFixed(2)).toString();
const ms = (seconds) => (seconds * 1e3).toFixed(1) + " ms";

function render(v) {
  const groups = new Map((v.reservations || []).map((r) => [r.group, r]));
  colourIndex = new Map([...groups.keys()].sort((a, b) => a - b).map((g, i) => [g, i]));
  $("problems").innerHTML = (v.problems || []).map((p) => `<div class="problem">${esc(p)}</div>`).join("");
  renderReservations(v.reservations || []);
  renderPending(v.pending || [], v.time);
  renderShapes(v.shapes || [], groups);
  renderNodes(v.nodes || []);
  renderWork(v.work || {}, v.counters);
  renderRuns(v.train || []);
  renderServe(v.serve || []);
  $("status").textContent = "updated " + new Date(v.time).toLocaleTimeString();
  $("status").classList.remove("down");
}

function renderReservations(rs) {
  $("reservations").innerHTML = rs.length === 0 ? `<p class="muted">No slice reservations.</p>` :
    `<h3>Reservations</h3>` + rs.map((r) =>
      `<div class="res" data-group="${r.group}"><i class="swatch" style="background:${groupColour(r.group)}"></i>` +
      `<b>${esc(r.name || "pg-" + r.group)}</b> (pg-${r.group}${r.subslice ? ", sub-slice " + esc(r.subslice) : ""}): ` +
      `${r.slices.length} slice${r.slices.length === 1 ? "" : "s"} — ${r.slices.map(esc).join(", ")}</div>`).join("");
}

function renderPending(ps, now) {
  const waited = (since) => Math.max(0, Math.round((new Date(now) - new Date(since)) / 1000)) + " s";
  $("pending").innerHTML = ps.length === 0 ? "" : `<h3>Waiting for slices</h3><table><tr><th>Name</th><th>Shape</th><th>Slices</th><th>Since</th><th>Waited</th></tr>` +
    ps.map((p) => `<tr data-pending="${esc(p.Name)}"><td>${esc(p.Name || "—")}</td><td>${esc(p.Generation)} ${esc(p.Topology)}</td><td>${p.NumSlices}</td>` +
      `<td>${new Date(p.Since).toLocaleTimeString()}</td><td class="waited">${waited(p.Since)}</td></tr>`).join("") + `</table>`;
}

function renderShapes(shapes, groups) {
  if (shapes.length === 0) { $("shapes").innerHTML = `<p class="muted">The cluster has no TPU slices.</p>`; return; }
  $("shapes").innerHTML = shapes.map((s) =>
    `<div class="shape"><h3>${esc(s.Generation)} ${esc(s.Topology)} <span>(${s.ChipsPerHost} chips per host) — ` +
    `${s.Total} slice${s.Total === 1 ? "" : "s"}: ${s.Free} free, ${s.Reserved} reserved, ${s.Total - s.Intact} broken</span></h3>` +
    `<div class="slices">${(s.slices || []).map((sl) => renderSlice(sl, groups)).join("")}</div></div>`).join("");
}

function sliceStateText(sl, groups) {
  switch (sl.state) {
    case "reserved": return "reserved by " + esc((groups.get(sl.group) || {}).name || sl.groupName || "pg-" + sl.group);
    case "broken": {
      const dead = sl.hosts.filter((h) => !h.Alive).map((h) => h.Node);
      return "broken: dead host " + dead.map(esc).join(", ");
    }
    case "partial": return "sub-slices reserved";
    default: return sl.state;
  }
}

function renderSlice(sl, groups) {
  const [nx, ny, nz] = sl.dims;
  let layers = "";
  for (let z = 0; z < nz; z++) {
    let cells = "";
    for (let y = 0; y < ny; y++) {
      for (let x = 0; x < nx; x++) {
        const c = sl.chips[x + y * nx + z * nx * ny];
        const host = sl.hosts[c.worker] || {};
        const style = c.state === "reserved" ? ` style="background:${groupColour(c.group)}"` : "";
        const m = c.metrics;
        const title = `${host.Node || "?"} (worker ${c.worker}), chip ${x},${y}${nz > 1 ? "," + z : ""}: ${c.state}` +
          (c.group ? " by " + ((groups.get(c.group) || {}).name || "pg-" + c.group) : "") +
          (m ? `; device ${m.device}` + (m.dutyCycle >= 0 ? `, duty cycle ${m.dutyCycle}%` : "") +
            (m.tensorCoreUtilization >= 0 ? `, tensor cores ${m.tensorCoreUtilization}%` : "") +
            (m.hbmUsed >= 0 && m.hbmTotal > 0 ? `, HBM ${(m.hbmUsed / 2 ** 30).toFixed(1)}/${(m.hbmTotal / 2 ** 30).toFixed(1)} GiB` : "") : "");
        // A chip's duty cycle is a bar along its bottom edge.
        const duty = m && m.dutyCycle >= 0 ? `<i class="duty" style="width:${Math.min(100, m.dutyCycle)}%"></i>` : "";
        cells += `<div class="chip ${c.state}" data-state="${c.state}" data-worker="${c.worker}"${m && m.dutyCycle >= 0 ? ` data-duty="${m.dutyCycle}"` : ""} title="${esc(title)}"${style}>${c.state === "dead" ? "" : c.worker}${duty}</div>`;
      }
    }
    layers += `<div>${nz > 1 ? `<div class="layer-label">z=${z}</div>` : ""}<div class="layer" style="grid-template-columns:repeat(${nx}, 22px)">${cells}</div></div>`;
  }
  return `<div class="slice ${sl.state}" data-slice="${esc(sl.name)}" data-state="${sl.state}">` +
    `<div class="title">${esc(sl.name)}</div><div class="state">${sliceStateText(sl, groups)}</div>` +
    `<div class="layers">${layers}</div></div>`;
}

function renderNodes(nodes) {
  nodes = [...nodes].sort((a, b) => natural(a.name, b.name));
  $("nodes").innerHTML = `<tr><th>Node</th><th>State</th><th>Used</th><th>Free</th><th>Tasks</th><th>Labels</th></tr>` +
    nodes.map((n) => `<tr class="${n.alive ? "" : "dead-row"}" data-node="${esc(n.name)}"><td>${esc(n.name)}</td><td>${n.alive ? "alive" : "dead"}</td>` +
      `<td>${esc(fmtRes(n.used, true)) || "—"}</td><td>${esc(fmtRes(n.free))}</td><td>${n.running}</td>` +
      `<td class="labels">${labels(n.name, n.labels || {})}${output(n.name, n.output || [])}</td></tr>`).join("");
}

// output folds a node's last lines of worker output away, like its labels.
function output(node, lines) {
  if (lines.length === 0) return "";
  const key = "output:" + node;
  return `<details class="output" data-labels="${esc(key)}"${openLabels.has(key) ? " open" : ""}><summary>${lines.length} line${lines.length === 1 ? "" : "s"} of output</summary><pre>${lines.map(esc).join("\n")}</pre></details>`;
}

// labels folds a node's labels away behind their count; the node's open
// state survives redraws through the open set.
const openLabels = new Set();
document.addEventListener("toggle", (e) => {
  const node = e.target.dataset && e.target.dataset.labels;
  if (node !== undefined) e.target.open ? openLabels.add(node) : openLabels.delete(node);
}, true);
function labels(node, ls) {
  const keys = Object.keys(ls).sort();
  if (keys.length === 0) return "";
  return `<details data-labels="${esc(node)}"${openLabels.has(node) ? " open" : ""}><summary>${keys.length} label${keys.length === 1 ? "" : "s"}</summary>${keys.map((k) => esc(k + "=" + ls[k])).join("<br>")}</details>`;
}

function renderWork(w, counters) {
  $("work-summary").className = "";
  $("work-summary").textContent = `${w.running || 0} tasks running, ${w.queued || 0} waiting (tasks, calls and actors).`;
  const tasks = w.tasks || [], actors = w.actors || [], pgs = w.placementGroups || [];
  // Names with running or queued work first, then those with counts only.
  const counted = new Map(((counters || {}).Work || []).map((c) => [c.Name, c]));
  const rows = tasks.map((t) => ({ name: t.name, running: t.running, queued: t.queued }));
  for (const name of [...counted.keys()].sort()) if (!rows.some((r) => r.name === name)) rows.push({ name, running: 0, queued: 0 });
  const count = (name, k) => counted.has(name) ? counted.get(name)[k] : "—";
  $("tasks").innerHTML = `<tr><th>Task</th><th>Running</th><th>Queued</th><th>Submitted</th><th>Finished</th><th>Failed</th></tr>` +
    rows.map((t) => `<tr data-task="${esc(t.name)}"><td>${esc(t.name)}</td><td>${t.running}</td><td>${t.queued}</td>` +
      `<td>${count(t.name, "Submitted")}</td><td>${count(t.name, "Finished")}</td><td>${count(t.name, "Failed")}</td></tr>`).join("");
  const failures = w.failures || [];
  $("failures").innerHTML = failures.length === 0 ? `<p class="muted">No failed tasks.</p>` :
    `<table><tr><th>Time</th><th>Task</th><th>Attempt</th><th>Node</th><th>Error</th></tr>` +
    failures.map((f) => `<tr class="failure" data-task="${esc(f.task)}"><td>${new Date(f.time).toLocaleTimeString()}</td><td>${esc(f.task)}</td>` +
      `<td>${f.attempt}</td><td>${esc(f.node || "—")}</td><td><b>${esc(f.code)}</b>: <span class="message">${esc(f.message)}</span></td></tr>`).join("") + `</table>`;
  $("actors").innerHTML = `<tr><th>Actor</th><th>Class</th><th>Node</th><th>State</th><th>Restarts</th></tr>` +
    actors.map((a) => `<tr><td>${esc(a.Name || a.ID)}</td><td>${esc(a.Class)}</td><td>${esc(a.Node)}</td><td>${esc(a.State)}</td><td>${a.Restarts}</td></tr>`).join("");
  $("pgs").innerHTML = `<tr><th>Group</th><th>State</th><th>Strategy</th><th>Bundles on</th></tr>` +
    pgs.map((g) => `<tr><td>${esc(g.name || "pg-" + g.id)}</td><td>${esc(g.state)}</td><td>${esc(g.strategy)}</td><td>${(g.bundles || []).map(esc).join(", ")}</td></tr>`).join("");
}

// chart draws one metric over iterations with labelled axes. A loss (a
// metric whose name contains "loss") whose values are all positive is
// drawn on a log scale, where its decline stays readable.
function chart(points, key) {
  const W = 560, H = 240, L = 56, R = 16, T = 24, B = 36;
  const pts = points.filter((p) => p.metrics && key in p.metrics && Number.isFinite(p.metrics[key]));
  if (pts.length === 0) return "";
  const xs = pts.map((p) => p.iteration), ys = pts.map((p) => p.metrics[key]);
  const log = /loss/i.test(key) && ys.every((y) => y > 0);
  const f = log ? Math.log10 : (y) => y;
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys.map(f)), Math.max(...ys.map(f))];
  if (log) { y0 = Math.floor(y0); y1 = Math.max(Math.ceil(y1), y0 + 1); }
  const sx = (x) => L + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - (y1 === y0 ? 0.5 : (f(y) - y0) / (y1 - y0)) * (H - T - B);
  const num = (v) => Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(1) : +v.toPrecision(3);
  // y ticks: each power of ten on a log scale, else five even steps.
  const yt = log ? Array.from({ length: y1 - y0 + 1 }, (_, k) => 10 ** (y0 + k))
    : Array.from({ length: 5 }, (_, k) => y0 + (y1 - y0) * k / 4);
  const xt = x1 === x0 ? [x0] : Array.from({ length: 5 }, (_, k) => Math.round(x0 + (x1 - x0) * k / 4));
  const d = pts.map((p, i) => `${i ? "L" : "M"}${sx(p.iteration).toFixed(1)},${sy(p.metrics[key]).toFixed(1)}`).join("");
  return `<svg class="chart" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(key)} over iterations${log ? ", log scale" : ""}">` +
    `<text x="${L}" y="16" font-size="13" font-weight="600">${esc(key)}: ${num(ys[ys.length - 1])}${log ? " (log scale)" : ""}</text>` +
    yt.map((y) => `<line x1="${L}" x2="${W - R}" y1="${sy(y).toFixed(1)}" y2="${sy(y).toFixed(1)}" stroke="#e3e8ef"/>` +
      `<text class="ytick" x="${L - 6}" y="${(sy(y) + 4).toFixed(1)}" font-size="11" text-anchor="end" fill="#4a5568">${num(y)}</text>`).join("") +
    xt.map((x) => `<text class="xtick" x="${sx(x).toFixed(1)}" y="${H - B + 16}" font-size="11" text-anchor="middle" fill="#4a5568">${x}</text>`).join("") +
    `<text x="${(L + W - R) / 2}" y="${H - 4}" font-size="11" text-anchor="middle" fill="#66758a">iteration</text>` +
    `<line x1="${L}" x2="${L}" y1="${T}" y2="${H - B}" stroke="#8a94a6"/><line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="#8a94a6"/>` +
    `<path d="${d}" fill="none" stroke="#2a6fdb" stroke-width="2"/></svg>`;
}

function renderRuns(runs) {
  $("runs").innerHTML = runs.length === 0 ? `<p class="muted">No training runs tracked.</p>` : runs.map((r) =>
    `<div class="card" data-run="${esc(r.name)}"><b>${esc(r.name)}</b> — ${r.done ? (r.error ? "failed: " + esc(r.error) : "finished") : "running"}, ` +
    `attempt ${r.attempt}, iteration ${r.iteration}, slices ${(r.slices || []).map(esc).join(", ") || "—"}` +
    `<div class="cols">${Object.keys(r.metrics || {}).sort().slice(0, 4).map((k) => chart(r.points || [], k)).join("")}</div>` +
    `<div>Checkpoints at iterations: ${(r.checkpoints || []).slice(-10).join(", ") || "none"}</div>` +
    ((r.profilers || []).length ? `<div class="profilers">Profilers (TensorBoard, Capture profile): ${r.profilers.map((a, i) => `<span title="rank ${i}">rank ${i} <code>${esc(a)}</code></span>`).join(", ")}</div>` : "") +
    ((r.restarts || []).length ? `<div>Restarts: ${r.restarts.map((x) => `attempt ${x.attempt} from iteration ${x.iteration}`).join("; ")}</div>` : "") +
    ((r.failures || []).length ? `<table><tr><th>Attempt</th><th>Rank</th><th>Host</th><th>Slice</th><th>Cause</th></tr>` +
      r.failures.map((f) => `<tr><td>${f.attempt}</td><td>${f.rank}</td><td>${esc(f.host)}</td><td>${esc(f.slice)}</td><td>${esc(f.cause)}</td></tr>`).join("") + `</table>` : "") +
    `</div>`).join("");
}

function renderServe(ds) {
  $("deployments").innerHTML = ds.length === 0 ? `<p class="muted">No serve deployments tracked.</p>` : ds.map((d) =>
    `<div class="card" data-deployment="${esc(d.name)}"><b>${esc(d.name)}</b> — ${esc(d.accelerator)} ${esc(d.topology)}, ` +
    `${d.ready}/${d.target} ready (min ${d.minReplicas}, max ${d.maxReplicas}), ${d.queued} queued, ` +
    `${d.requestsPerSecond.toFixed(1)} req/s, p50 ${ms(d.p50Seconds)}, p99 ${ms(d.p99Seconds)}, ${d.replicaFailures} replica failures` +
    (d.lastError ? `<div class="problem">${esc(d.lastError)}</div>` : "") +
    `<table><tr><th>Replica</th><th>State</th><th>Slices</th><th>Ongoing</th><th>Served</th></tr>` +
    (d.replicas || []).map((r) => `<tr><td>${esc(r.id)}</td><td>${esc(r.state)}${r.reason ? " (" + esc(r.reason) + ")" : ""}</td>` +
      `<td>${(r.slices || []).map(esc).join(", ") || "waiting"}</td><td>${r.ongoing}</td><td>${r.served}</td></tr>`).join("") + `</table></div>`).join("");
}

function down() {
  $("status").textContent = "disconnected; retrying…";
  $("status").classList.add("down");
}

if (window.EventSource) {
  const es = new EventSource("api/events");
  es.addEventListener("view", (e) => render(JSON.parse(e.data)));
  es.onerror = down;
} else {
  const poll = () => fetch("api/view").then((r) => r.json()).then(render, down).finally(() => setTimeout(poll, 2000));
  poll();
}
