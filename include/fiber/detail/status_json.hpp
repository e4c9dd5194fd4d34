// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/status_json.hpp
/// The status page's data (/status.json): a runtime_stats snapshot and the
/// user's metric families as JSON (nlohmann-json). Names and counts only.

#include <fiber/detail/stats_sources.hpp>

#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fiber::detail {

/// Who serves the page: the master's name, host and pid.
struct status_origin {
  std::string name;
  std::string host;
  std::int64_t pid = 0;
};

/// `s` and `user` (the user's registry, collected) as the page reads them;
/// `time_ms` is the snapshot's wall-clock time (ms since the epoch).
inline nlohmann::json status_json(const runtime_stats& s, const std::vector<prometheus::MetricFamily>& user,
                                  const status_origin& origin, std::int64_t time_ms) {
  using nlohmann::json;
  json pools = json::array();
  for (const auto& p : s.pools) {
    json by_state = json::object();
    for (const auto& [state, n] : p.workers_by_state) by_state[std::string(to_string(state))] = n;
    json workers = json::array();
    for (const auto& w : p.workers)
      workers.push_back({{"name", w.name},
                         {"host", w.host},
                         {"state", std::string(to_string(w.state))},
                         {"tasks_sent", w.tasks_sent},
                         {"tasks_held", w.tasks_held}});
    pools.push_back({{"name", p.name},
                     {"backend", p.backend},
                     {"processes", p.processes},
                     {"chunks_queued", p.chunks_queued},
                     {"chunks_running", p.chunks_running},
                     {"workers_started", p.workers_started},
                     {"workers_lost", p.workers_lost},
                     {"tasks",
                      {{"submitted", p.tasks.submitted},
                       {"done", p.tasks.done},
                       {"failed", p.tasks.failed},
                       {"queued", p.tasks.queued},
                       {"running", p.tasks.running},
                       {"rerun", p.tasks.rerun},
                       {"rerun_by_cause", p.tasks.rerun_by_cause},
                       {"failed_by_cause", p.tasks.failed_by_cause}}},
                     {"workers_by_state", by_state},
                     {"workers_by_host", p.workers_by_host},
                     {"workers", workers}});
  }
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
          {"series", series}};
}

} // namespace fiber::detail
