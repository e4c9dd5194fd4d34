// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/metrics_families.hpp
/// A runtime_stats snapshot as Prometheus metric families (prometheus-cpp's
/// MetricFamily), the names and labels docs/observability.md lists.

#include <fiber/detail/stats_sources.hpp>

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

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
  out.reserve(11); // the references below stay valid
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
  }
  return out;
}

} // namespace fiber::detail
