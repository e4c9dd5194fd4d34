// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/metrics_families.hpp
/// A runtime_stats snapshot as Prometheus metric families (prometheus-cpp's
/// MetricFamily), the names and labels docs/observability.md lists.

#include <fiber/detail/stats_sources.hpp>

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// The families of `s`, in a fixed order; a family with no sample (no Pool)
/// is still listed, so that its HELP and TYPE are there from the first scrape.
inline std::vector<prometheus::MetricFamily> metrics_families(const runtime_stats& s) {
  using prometheus::ClientMetric;
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.reserve(32); // the references below stay valid
  const auto family = [&](const char* name, const char* help, MetricType type) -> prometheus::MetricFamily& {
    return out.emplace_back(prometheus::MetricFamily{name, help, type, {}});
  };
  const auto sample = [](prometheus::MetricFamily& f, std::vector<ClientMetric::Label> labels, double v) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter) m.counter.value = v;
    else m.gauge.value = v;
    f.metric.push_back(std::move(m));
  };

  auto& tasks = family("fiber_tasks_total", "Tasks of a Pool that reached an end, by status (done, failed).",
                       MetricType::Counter);
  auto& submitted = family("fiber_tasks_submitted_total", "Tasks handed to a Pool.", MetricType::Counter);
  auto& reruns = family("fiber_task_reruns_total",
                        "Tasks sent again because their worker was lost, by the loss's cause.", MetricType::Counter);
  auto& failures = family("fiber_task_failures_total", "Tasks that can never finish, by cause.", MetricType::Counter);
  auto& in_flight = family("fiber_tasks_in_flight", "Tasks of a Pool now queued or running (held by a worker).",
                           MetricType::Gauge);
  auto& chunks = family("fiber_chunks", "Chunks of a Pool now queued (the queue depth) or running.", MetricType::Gauge);
  auto& workers = family("fiber_workers", "Workers of a Pool by state.", MetricType::Gauge);
  auto& hosts = family("fiber_host_workers", "Connected workers of a Pool per host.", MetricType::Gauge);
  auto& processes = family("fiber_pool_processes", "Workers a Pool keeps (its size after resize).", MetricType::Gauge);
  auto& started = family("fiber_workers_started_total", "Workers a Pool launched.", MetricType::Counter);
  auto& lost = family("fiber_workers_lost_total", "Workers whose job ended without being asked to.",
                      MetricType::Counter);
  auto& chunk_sizes = family("fiber_chunk_size_tasks", "Chunks submitted to a Pool, by their size in tasks.",
                             MetricType::Histogram);
  auto& bytes = family("fiber_link_bytes_total",
                       "Bytes the master moved over the links of a group's workers (framing included), by direction.",
                       MetricType::Counter);
  auto& rtt = family("fiber_link_round_trip_seconds",
                     "Heartbeat round trips of a group's worker links now, the median and the largest (stat).",
                     MetricType::Gauge);
  auto& m_objects = family("fiber_manager_objects", "Live remote objects of a RemoteManager.", MetricType::Gauge);
  auto& m_calls = family("fiber_manager_calls_total", "Calls and constructions a RemoteManager sent.",
                         MetricType::Counter);
  auto& m_waiting = family("fiber_manager_calls_waiting", "Calls of a RemoteManager sent, their reply not yet in.",
                           MetricType::Gauge);
  auto& m_procs = family("fiber_manager_processes", "Processes of a RemoteManager by state.", MetricType::Gauge);
  auto& m_lost = family("fiber_manager_processes_lost_total",
                        "Processes of a RemoteManager whose job ended without being asked to.", MetricType::Counter);
  auto& procs = family("fiber_processes", "fiber::Process objects of this process by state.", MetricType::Gauge);
  auto& depth = family("fiber_service_depth",
                       "What waits in a service: items (queue, pipe) or callers (lock, semaphore, barrier, event).",
                       MetricType::Gauge);
  auto& jobs = family("fiber_backend_jobs", "Jobs of a backend not yet ended, by the backend's own state.",
                      MetricType::Gauge);
  auto& os_objects = family("fiber_object_store_objects", "Objects the object store holds in this process.",
                            MetricType::Gauge);
  auto& os_bytes = family("fiber_object_store_bytes", "Bytes the object store holds in this process.",
                          MetricType::Gauge);
  auto& os_bound = family("fiber_object_store_bound_bytes", "The object store's bound (object_store_mb).",
                          MetricType::Gauge);
  auto& os_fetched = family("fiber_object_store_fetched_bytes_total", "Bytes fetched from other hosts' stores.",
                            MetricType::Counter);

  // Traffic and round trips of a group's workers.
  const auto links = [&](const char* kind, const std::string& group, std::uint64_t sent, std::uint64_t received,
                         const std::vector<worker_stats>& ws) {
    const ClientMetric::Label g{"group", group}, k{"kind", kind};
    sample(bytes, {g, k, {"direction", "sent"}}, double(sent));
    sample(bytes, {g, k, {"direction", "received"}}, double(received));
    std::vector<double> r;
    for (const auto& w : ws)
      if (w.round_trip_seconds > 0) r.push_back(w.round_trip_seconds);
    if (r.empty()) return;
    std::sort(r.begin(), r.end());
    sample(rtt, {g, k, {"stat", "median"}}, r[r.size() / 2]);
    sample(rtt, {g, k, {"stat", "max"}}, r.back());
  };

  for (const auto& p : s.pools) {
    const ClientMetric::Label pool{"pool", p.name};
    sample(tasks, {pool, {"status", "done"}}, double(p.tasks.done));
    sample(tasks, {pool, {"status", "failed"}}, double(p.tasks.failed));
    sample(submitted, {pool}, double(p.tasks.submitted));
    for (const auto& [cause, n] : p.tasks.rerun_by_cause) sample(reruns, {pool, {"cause", cause}}, double(n));
    for (const auto& [cause, n] : p.tasks.failed_by_cause) sample(failures, {pool, {"cause", cause}}, double(n));
    sample(in_flight, {pool, {"state", "queued"}}, double(p.tasks.queued));
    sample(in_flight, {pool, {"state", "running"}}, double(p.tasks.running));
    sample(chunks, {pool, {"state", "queued"}}, double(p.chunks_queued));
    sample(chunks, {pool, {"state", "running"}}, double(p.chunks_running));
    for (const auto& [state, n] : p.workers_by_state)
      sample(workers, {pool, {"state", std::string(to_string(state))}}, double(n));
    for (const auto& [host, n] : p.workers_by_host) sample(hosts, {pool, {"host", host}}, double(n));
    sample(processes, {pool, {"backend", p.backend}}, double(p.processes));
    sample(started, {pool}, double(p.workers_started));
    sample(lost, {pool}, double(p.workers_lost));
    ClientMetric h;
    h.label = {pool};
    std::uint64_t count = 0;
    for (const auto& [bound, n] : p.chunk_sizes) {
      count += n;
      h.histogram.bucket.push_back({count, double(bound)});
    }
    h.histogram.bucket.push_back({count, std::numeric_limits<double>::infinity()});
    h.histogram.sample_count = count;
    h.histogram.sample_sum = double(p.tasks.submitted);
    chunk_sizes.metric.push_back(std::move(h));
    links("pool", p.name, p.bytes_sent, p.bytes_received, p.workers);
  }
  for (const auto& m : s.managers) {
    const ClientMetric::Label mgr{"manager", m.name};
    sample(m_objects, {mgr}, double(m.objects));
    sample(m_calls, {mgr}, double(m.calls));
    sample(m_waiting, {mgr}, double(m.calls_waiting));
    for (const auto& [state, n] : m.workers_by_state)
      sample(m_procs, {mgr, {"state", std::string(to_string(state))}}, double(n));
    sample(m_lost, {mgr}, double(m.workers_lost));
    links("manager", m.name, m.bytes_sent, m.bytes_received, m.workers);
  }
  std::map<worker_state, unsigned> by_state;
  for (const auto& p : s.processes) ++by_state[p.worker.state];
  for (const auto& [state, n] : by_state) sample(procs, {{"state", std::string(to_string(state))}}, double(n));
  for (const auto& v : s.services) sample(depth, {{"kind", v.kind}, {"service", v.name}}, double(v.depth));
  for (const auto& b : s.backends)
    for (const auto& [state, n] : b.jobs_by_state) sample(jobs, {{"backend", b.name}, {"state", state}}, double(n));
  sample(os_objects, {}, double(s.object_store.objects));
  sample(os_bytes, {}, double(s.object_store.bytes));
  sample(os_bound, {}, double(s.object_store.bound_bytes));
  sample(os_fetched, {}, double(s.object_store.fetched_bytes));
  return out;
}

} // namespace fiber::detail
