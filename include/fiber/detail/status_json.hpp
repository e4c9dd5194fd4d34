// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/status_json.hpp
/// The status page's data (/status.json): a runtime_stats snapshot and the
/// user's metric families as JSON (nlohmann-json). Names and counts only.

#include <fiber/detail/stats_sources.hpp>

#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fiber::detail {

/// Who serves the page: the master's name, host and pid.
struct status_origin {
  std::string name;
  std::string host;
  std::int64_t pid = 0;
};

/// A group's workers as the page reads them.
inline nlohmann::json workers_json(const std::vector<worker_stats>& ws) {
  auto out = nlohmann::json::array();
  for (const auto& w : ws)
    out.push_back({{"name", w.name},
                   {"host", w.host},
                   {"state", std::string(to_string(w.state))},
                   {"tasks_sent", w.tasks_sent},
                   {"tasks_held", w.tasks_held},
                   {"objects", w.objects},
                   {"bytes_sent", w.bytes_sent},
                   {"bytes_received", w.bytes_received},
                   {"round_trip_seconds", w.round_trip_seconds}});
  return out;
}

/// A group's recent losses as the page reads them.
inline nlohmann::json losses_json(const std::vector<loss_event>& ls) {
  auto out = nlohmann::json::array();
  for (const auto& l : ls)
    out.push_back({{"time", l.time},
                   {"worker", l.worker},
                   {"host", l.host},
                   {"cause", l.cause},
                   {"reason", l.reason},
                   {"tasks", l.tasks}});
  return out;
}

/// A workers_by_state map with the states' names.
inline nlohmann::json states_json(const std::map<worker_state, unsigned>& m) {
  auto out = nlohmann::json::object();
  for (const auto& [state, n] : m) out[std::string(to_string(state))] = n;
  return out;
}

/// `s` and `user` (the user's registry, collected) as the page reads them;
/// `time_ms` is the snapshot's wall-clock time (ms since the epoch).
inline nlohmann::json status_json(const runtime_stats& s, const std::vector<prometheus::MetricFamily>& user,
                                  const status_origin& origin, std::int64_t time_ms) {
  using nlohmann::json;
  json pools = json::array();
  for (const auto& p : s.pools) {
    json sizes = json::object();
    for (const auto& [bound, n] : p.chunk_sizes) sizes[std::to_string(bound)] = n;
    pools.push_back({{"name", p.name},
                     {"backend", p.backend},
                     {"processes", p.processes},
                     {"chunks_queued", p.chunks_queued},
                     {"chunks_running", p.chunks_running},
                     {"workers_started", p.workers_started},
                     {"workers_lost", p.workers_lost},
                     {"bytes_sent", p.bytes_sent},
                     {"bytes_received", p.bytes_received},
                     {"chunk_sizes", sizes},
                     {"recent_losses", losses_json(p.recent_losses)},
                     {"tasks",
                      {{"submitted", p.tasks.submitted},
                       {"done", p.tasks.done},
                       {"failed", p.tasks.failed},
                       {"queued", p.tasks.queued},
                       {"running", p.tasks.running},
                       {"rerun", p.tasks.rerun},
                       {"rerun_by_cause", p.tasks.rerun_by_cause},
                       {"failed_by_cause", p.tasks.failed_by_cause}}},
                     {"workers_by_state", states_json(p.workers_by_state)},
                     {"workers_by_host", p.workers_by_host},
                     {"workers", workers_json(p.workers)}});
  }
  json managers = json::array();
  for (const auto& m : s.managers)
    managers.push_back({{"name", m.name},
                        {"backend", m.backend},
                        {"processes", m.processes},
                        {"objects", m.objects},
                        {"calls", m.calls},
                        {"calls_waiting", m.calls_waiting},
                        {"workers_started", m.workers_started},
                        {"workers_lost", m.workers_lost},
                        {"bytes_sent", m.bytes_sent},
                        {"bytes_received", m.bytes_received},
                        {"recent_losses", losses_json(m.recent_losses)},
                        {"workers_by_state", states_json(m.workers_by_state)},
                        {"workers_by_host", m.workers_by_host},
                        {"workers", workers_json(m.workers)}});
  json processes = json::array();
  for (const auto& p : s.processes) {
    auto w = workers_json({p.worker})[0];
    w["backend"] = p.backend;
    w["exitcode"] = p.exitcode ? json(*p.exitcode) : json(nullptr);
    processes.push_back(std::move(w));
  }
  json backends = json::array();
  for (const auto& b : s.backends) backends.push_back({{"name", b.name}, {"jobs_by_state", b.jobs_by_state}});
  json services = json::array();
  for (const auto& v : s.services) services.push_back({{"kind", v.kind}, {"name", v.name}, {"depth", v.depth}});
  json series = json::array();
  for (const auto& f : user) {
    for (const auto& m : f.metric) {
      double v = 0;
      switch (f.type) {
      case prometheus::MetricType::Counter: v = m.counter.value; break;
      case prometheus::MetricType::Gauge: v = m.gauge.value; break;
      case prometheus::MetricType::Untyped: v = m.untyped.value; break;
      default: continue; // summaries and histograms: /metrics only
      }
      std::string name = f.name;
      if (!m.label.empty()) {
        name += '{';
        for (std::size_t i = 0; i < m.label.size(); ++i)
          name += (i ? "," : "") + m.label[i].name + "=\"" + m.label[i].value + '"';
        name += '}';
      }
      series.push_back({{"name", name}, {"help", f.help}, {"value", v}});
    }
  }
  return {{"process", {{"name", origin.name}, {"host", origin.host}, {"pid", origin.pid}}},
          {"time_ms", time_ms},
          {"pools", pools},
          {"managers", managers},
          {"processes", processes},
          {"services", services},
          {"backends", backends},
          {"object_store",
           {{"objects", s.object_store.objects},
            {"bytes", s.object_store.bytes},
            {"bound_bytes", s.object_store.bound_bytes},
            {"fetched_bytes", s.object_store.fetched_bytes}}},
          {"series", series}};
}

} // namespace fiber::detail
