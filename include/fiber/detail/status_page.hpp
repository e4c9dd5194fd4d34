// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/status_page.hpp
/// The live status page served at / next to /metrics: one self-contained
/// HTML file (no CDN, no font, no framework) polling /status.json each second.

#include <string_view>

namespace fiber::detail {

/// The page. Its elements for tests: #status (ok | stale), per Pool a
/// section[data-pool] with .workers-up, .tasks-done and .tasks-rate.
inline constexpr std::string_view status_page_html = R"fiberhtml(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>fiber</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:baseline}
header b{font-size:17px} #status.stale{color:#f6a} main{padding:12px 16px;max-width:1200px}
section{background:#fff;border:1px solid #dde;border-radius:6px;margin:0 0 12px;padding:10px 14px}
h2{font-size:15px;margin:0 0 8px} .kv{display:flex;flex-wrap:wrap;gap:6px 22px}
.kv div span{display:block;font-size:20px;font-weight:600} .kv div{color:#667;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin-top:8px} td,th{padding:2px 10px 2px 0;text-align:left}
th{color:#667;font-weight:500} .st-busy{color:#07a} .st-idle{color:#393} .st-starting{color:#a70}
.st-retiring{color:#888} .st-lost{color:#c22} svg{background:#fafbfc;border:1px solid #eef}
.muted{color:#889} details summary{cursor:pointer;color:#446}
</style></head><body>
<header><b>fiber</b><span id="origin"></span><span id="status">connecting</span></header>
<main><div id="pools"></div>
<section><h2>Recent failures and reruns</h2><table id="events"><tr><th>time</th><th>pool</th><th>what</th><th>cause</th><th>tasks</th></tr></table>
<div id="no-events" class="muted">none seen since this page opened</div></section>
<section><h2>Your series</h2><div id="series" class="muted">none registered (fiber::metrics_registry())</div></section>
</main>
<script>
"use strict";
const hist = {}, prev = {}, series = {};
const el = (t, a, ...k) => { const e = document.createElement(t); Object.assign(e, a || {}); e.append(...k); return e; };
const kv = (label, value, cls) => el("div", {}, el("span", {className: cls || "", textContent: value}), label);
function plot(points) {
  const w = 320, h = 70, n = points.length; if (n < 2) return el("span", {className: "muted", textContent: "…"});
  let lo = Math.min(...points), hi = Math.max(...points); if (hi === lo) { hi += 1; lo -= 1; }
  const d = points.map((v, i) => `${(i / (n - 1) * w).toFixed(1)},${(h - (v - lo) / (hi - lo) * h).toFixed(1)}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  pl.setAttribute("points", d); pl.setAttribute("fill", "none"); pl.setAttribute("stroke", "#07a"); pl.setAttribute("stroke-width", "1.5");
  svg.append(pl); return svg;
}
function event(time, pool, what, cause, n) {
  document.getElementById("no-events").hidden = true;
  const t = document.getElementById("events");
  t.rows[0].after(el("tr", {}, el("td", {textContent: time}), el("td", {textContent: pool}), el("td", {textContent: what}),
                     el("td", {textContent: cause}), el("td", {textContent: n})));
  while (t.rows.length > 51) t.deleteRow(t.rows.length - 1);
}
function render(s) {
  document.getElementById("origin").textContent = `${s.process.name} on ${s.process.host}, pid ${s.process.pid}`;
  const now = new Date(s.time_ms).toLocaleTimeString(), pools = document.getElementById("pools");
  pools.replaceChildren();
  for (const p of s.pools) {
    const before = prev[p.name], h = hist[p.name] || (hist[p.name] = []);
    h.push({t: s.time_ms, done: p.tasks.done}); while (h.length > 11) h.shift();
    const span = (h[h.length - 1].t - h[0].t) / 1000;
    const rate = span > 0 ? (h[h.length - 1].done - h[0].done) / span : 0;
    if (before) for (const [k, what] of [["rerun_by_cause", "rerun"], ["failed_by_cause", "failed"]])
      for (const [cause, n] of Object.entries(p.tasks[k])) {
        const d = n - (before.tasks[k][cause] || 0); if (d > 0) event(now, p.name, what, cause, d);
      }
    prev[p.name] = p;
    const up = p.workers.filter(w => w.state !== "starting" && w.state !== "lost").length;
    const sec = el("section", {}, el("h2", {textContent: `${p.name} (${p.backend}, ${p.processes} processes)`}));
    sec.dataset.pool = p.name;
    sec.append(el("div", {className: "kv"},
      kv("workers up", up, "workers-up"), kv("tasks done", p.tasks.done, "tasks-done"),
      kv("tasks/s", rate.toFixed(1), "tasks-rate"), kv("submitted", p.tasks.submitted),
      kv("queued", p.tasks.queued), kv("running", p.tasks.running), kv("failed", p.tasks.failed),
      kv("reruns", p.tasks.rerun), kv("chunks queued", p.chunks_queued),
      kv("workers started", p.workers_started), kv("workers lost", p.workers_lost)));
    const states = ["starting", "idle", "busy", "retiring", "lost"], hosts = {};
    for (const w of p.workers) { const r = hosts[w.host || "(starting)"] ||= {}; r[w.state] = (r[w.state] || 0) + 1; }
    const t = el("table", {}, el("tr", {}, el("th", {textContent: "host"}), ...states.map(x => el("th", {className: "st-" + x, textContent: x}))));
    for (const [host, r] of Object.entries(hosts).sort())
      t.append(el("tr", {}, el("td", {textContent: host}), ...states.map(x => el("td", {className: "st-" + x, textContent: r[x] || ""}))));
    sec.append(t);
    const list = el("table", {}, el("tr", {}, ...["worker", "host", "state", "tasks sent", "held"].map(x => el("th", {textContent: x}))));
    for (const w of p.workers.slice(0, 500))
      list.append(el("tr", {}, el("td", {textContent: w.name}), el("td", {textContent: w.host}),
        el("td", {className: "st-" + w.state, textContent: w.state}), el("td", {textContent: w.tasks_sent}), el("td", {textContent: w.tasks_held})));
    sec.append(el("details", {}, el("summary", {textContent: `${p.workers.length} workers`}), list));
    pools.append(sec);
  }
  if (!s.pools.length) pools.append(el("section", {className: "muted", textContent: "no Pool in this process yet"}));
  const box = document.getElementById("series");
  if (s.series.length) { box.className = ""; box.replaceChildren(); }
  for (const x of s.series) {
    const pts = series[x.name] || (series[x.name] = []); pts.push(x.value); while (pts.length > 300) pts.shift();
    box.append(el("div", {}, el("div", {textContent: `${x.name} = ${x.value}`, title: x.help}), plot(pts)));
  }
}
async function poll() {
  const st = document.getElementById("status");
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    if (!r.ok) throw new Error(r.status);
    render(await r.json()); st.textContent = "ok"; st.className = "";
  } catch (e) { st.textContent = "stale"; st.className = "stale"; }
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
)fiberhtml";

} // namespace fiber::detail
