// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/status_page.hpp
/// The live status page served at / next to /metrics: one self-contained
/// HTML file (no CDN, no font, no framework) polling /status.json each second.

#include <string_view>

namespace fiber::detail {

/// The page. Its elements for tests: #status (ok | stale); per Pool a
/// section[data-pool] with .workers-up, .tasks-done, .tasks-rate,
/// .tasks-failed and .tasks-rerun; per RemoteManager a section[data-manager]
/// with .workers-up, .objects and .calls; #losses (a row per loss).
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
.st-retiring{color:#888} .st-lost{color:#c22} .st-exited{color:#888} svg{background:#fafbfc;border:1px solid #eef}
.muted{color:#889} details summary{cursor:pointer;color:#446}
</style></head><body>
<header><b>fiber</b><span id="origin"></span><span id="status">connecting</span></header>
<main><div id="pools"></div><div id="managers"></div>
<section><h2>Recent losses</h2><table id="losses"><tr><th>time</th><th>group</th><th>worker</th><th>host</th><th>cause</th><th>tasks / objects</th><th>reason</th></tr></table>
<div id="no-losses" class="muted">no worker lost</div></section>
<section id="processes-box" hidden><h2>Processes</h2><table id="processes"></table></section>
<section><h2>Backends, services and object store</h2><div id="backends" class="kv"></div><div id="store" class="kv"></div><table id="services"></table></section>
<section><h2>Your series</h2><div id="series" class="muted">none registered (fiber::metrics_registry())</div></section>
</main>
<script>
"use strict";
const hist = {}, series = {};
const states = ["starting", "idle", "busy", "retiring", "lost"];
const el = (t, a, ...k) => { const e = document.createElement(t); Object.assign(e, a || {}); e.append(...k); return e; };
const kv = (label, value, cls) => el("div", {}, el("span", {className: cls || "", textContent: value}), label);
const row = (cells, th) => el("tr", {}, ...cells.map(c => c instanceof Node ? c : el(th ? "th" : "td", {textContent: c})));
const bytes = n => n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : n < 1073741824 ?
  `${(n / 1048576).toFixed(1)} MiB` : `${(n / 1073741824).toFixed(2)} GiB`;
const count = (n, one, many) => `${n} ${n === 1 ? one : many || one + "s"}`;
const ms = s => s > 0 ? `${(s * 1000).toFixed(2)} ms` : "–";
const causes = m => Object.entries(m).map(([c, n]) => `${c} ${n}`).join(", ") || "none";
function rtt(ws) {
  const r = ws.map(w => w.round_trip_seconds).filter(x => x > 0).sort((a, b) => a - b);
  return r.length ? `${ms(r[r.length >> 1])} / ${ms(r[r.length - 1])}` : "–";
}
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
// Workers per host and state, then the list (folded).
function workers(sec, ws, cols, cells) {
  const hosts = {};
  for (const w of ws) { const r = hosts[w.host || "(starting)"] ||= {}; r[w.state] = (r[w.state] || 0) + 1; }
  const t = el("table", {}, el("tr", {}, el("th", {textContent: "host"}), ...states.map(x => el("th", {className: "st-" + x, textContent: x}))));
  for (const [host, r] of Object.entries(hosts).sort())
    t.append(el("tr", {}, el("td", {textContent: host}), ...states.map(x => el("td", {className: "st-" + x, textContent: r[x] || ""}))));
  const list = el("table", {}, row(["name", "host", "state", ...cols, "sent", "received", "round trip"], true));
  for (const w of ws.slice(0, 500))
    list.append(el("tr", {}, el("td", {textContent: w.name}), el("td", {textContent: w.host}),
      el("td", {className: "st-" + w.state, textContent: w.state}), ...cells(w).map(c => el("td", {textContent: c})),
      el("td", {textContent: bytes(w.bytes_sent)}), el("td", {textContent: bytes(w.bytes_received)}),
      el("td", {textContent: ms(w.round_trip_seconds)})));
  sec.append(t, el("details", {}, el("summary", {textContent: count(ws.length, "worker")}), list));
}
function render(s) {
  document.getElementById("origin").textContent = `${s.process.name} on ${s.process.host}, pid ${s.process.pid}`;
  const pools = document.getElementById("pools"), losses = [];
  pools.replaceChildren();
  for (const p of s.pools) {
    const h = hist[p.name] || (hist[p.name] = []);
    h.push({t: s.time_ms, done: p.tasks.done}); while (h.length > 11) h.shift();
    const span = (h[h.length - 1].t - h[0].t) / 1000;
    const rate = span > 0 ? (h[h.length - 1].done - h[0].done) / span : 0;
    const up = p.workers.filter(w => w.state !== "starting" && w.state !== "lost").length;
    const sec = el("section", {}, el("h2", {textContent: `${p.name} (${p.backend}, ${count(p.processes, "process", "processes")})`}));
    sec.dataset.pool = p.name;
    sec.append(el("div", {className: "kv"},
      kv("workers up", up, "workers-up"), kv("tasks done", p.tasks.done, "tasks-done"),
      kv("tasks/s", rate.toFixed(1), "tasks-rate"), kv("submitted", p.tasks.submitted),
      kv("queued", p.tasks.queued), kv("running", p.tasks.running), kv("failed", p.tasks.failed, "tasks-failed"),
      kv("reruns", p.tasks.rerun, "tasks-rerun"), kv("chunks queued", p.chunks_queued),
      kv("workers started", p.workers_started), kv("workers lost", p.workers_lost),
      kv("sent", bytes(p.bytes_sent)), kv("received", bytes(p.bytes_received)),
      kv("round trip median / max", rtt(p.workers))),
      el("div", {className: "muted", textContent: `reruns by cause: ${causes(p.tasks.rerun_by_cause)}; failed by cause: ${
        causes(p.tasks.failed_by_cause)}; chunks by size: ${
        Object.entries(p.chunk_sizes).map(([b, n]) => `≤ ${b} tasks: ${n}`).join(", ") || "none"}`}));
    workers(sec, p.workers, ["tasks sent", "held"], w => [w.tasks_sent, w.tasks_held]);
    pools.append(sec);
    for (const l of p.recent_losses) losses.push([p.name, l]);
  }
  if (!s.pools.length) pools.append(el("section", {className: "muted", textContent: "no Pool in this process yet"}));
  const managers = document.getElementById("managers");
  managers.replaceChildren();
  for (const m of s.managers) {
    const sec = el("section", {}, el("h2", {textContent: `${m.name} (RemoteManager, ${m.backend}, ${count(m.processes, "process", "processes")})`}));
    sec.dataset.manager = m.name;
    sec.append(el("div", {className: "kv"}, kv("processes up", m.workers.filter(w => w.state === "idle" || w.state === "busy").length, "workers-up"),
      kv("objects", m.objects, "objects"), kv("calls", m.calls, "calls"), kv("calls waiting", m.calls_waiting),
      kv("processes lost", m.workers_lost), kv("sent", bytes(m.bytes_sent)), kv("received", bytes(m.bytes_received)),
      kv("round trip median / max", rtt(m.workers))));
    workers(sec, m.workers, ["objects", "calls", "waiting"], w => [w.objects, w.tasks_sent, w.tasks_held]);
    managers.append(sec);
    for (const l of m.recent_losses) losses.push([m.name, l]);
  }
  losses.sort((a, b) => b[1].time - a[1].time);
  const lt = document.getElementById("losses");
  while (lt.rows.length > 1) lt.deleteRow(1);
  for (const [g, l] of losses.slice(0, 50))
    lt.append(row([new Date(l.time * 1000).toLocaleTimeString(), g, l.worker, l.host, l.cause, l.tasks, l.reason]));
  document.getElementById("no-losses").hidden = losses.length > 0;
  const pt = document.getElementById("processes");
  document.getElementById("processes-box").hidden = !s.processes.length;
  pt.replaceChildren(row(["name", "backend", "host", "state", "exit code", "sent", "received", "round trip"], true));
  for (const p of s.processes)
    pt.append(row([p.name, p.backend, p.host, p.state === "busy" ? "running" : p.state, p.exitcode ?? "",
                   bytes(p.bytes_sent), bytes(p.bytes_received), ms(p.round_trip_seconds)]));
  document.getElementById("backends").replaceChildren(...s.backends.map(b =>
    kv(`${b.name} jobs`, Object.entries(b.jobs_by_state).map(([st, n]) => `${n} ${st}`).join(", ") || "no live job")));
  const o = s.object_store;
  document.getElementById("store").replaceChildren(kv("objects stored", o.objects), kv("bytes stored", bytes(o.bytes)),
    kv("bound", o.bound_bytes ? bytes(o.bound_bytes) : "not used"), kv("fetched from other hosts", bytes(o.fetched_bytes)));
  const st = document.getElementById("services");
  st.replaceChildren(row(["service", "kind", "waiting (items or callers)"], true));
  for (const v of s.services) st.append(row([v.name, v.kind, v.depth]));
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
