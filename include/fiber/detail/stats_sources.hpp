// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/stats_sources.hpp
/// The snapshot types of fiber/stats.hpp and the registry of what fills them
/// (each Pool's scheduler), apart from the runtime so that the scheduler can
/// report without including it. Runtime thread only.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fiber {

/// A worker's state in a snapshot: `starting` (launched, not connected),
/// `idle` (connected, holds no task), `busy` (holds at least one task),
/// `retiring` (asked to exit: resize, maxtasksperchild, close), `lost` (its
/// link or job ended; its tasks are being handed back to the queue).
enum class worker_state { starting, idle, busy, retiring, lost };

/// The name of `s`: "starting", "idle", "busy", "retiring" or "lost".
/// Example: `fiber::to_string(fiber::worker_state::busy) == "busy"`.
inline std::string_view to_string(worker_state s) noexcept {
  switch (s) {
  case worker_state::starting: return "starting";
  case worker_state::idle: return "idle";
  case worker_state::busy: return "busy";
  case worker_state::retiring: return "retiring";
  case worker_state::lost: return "lost";
  }
  return "unknown";
}

/// One worker of a group in a snapshot.
struct worker_stats {
  std::string name; ///< e.g. "pool-1-w3"
  std::string host; ///< its host name as it reported it; empty while starting
  worker_state state = worker_state::starting;
  std::uint64_t tasks_sent = 0; ///< tasks sent to it since it started
  std::uint64_t tasks_held = 0; ///< tasks it holds now (running or sent ahead)
};

/// Task counts of one Pool since it was made. Tasks, not chunks: a chunk of
/// 8 tasks counts 8. At any snapshot `submitted == done + failed + queued +
/// running`. A rerun is a task sent again because its worker was lost (it
/// was running there or sent ahead); a task may be rerun several times.
struct task_stats {
  std::uint64_t submitted = 0; ///< handed to the Pool by map, apply, imap, ...
  std::uint64_t done = 0;      ///< its result reached the call (a user exception counts: the task ran)
  std::uint64_t failed = 0;    ///< can never finish: worker_lost past max_retries, terminate, no worker can start
  std::uint64_t queued = 0;    ///< waiting for a worker
  std::uint64_t running = 0;   ///< held by a worker (running, or sent ahead in its credit window)
  std::uint64_t rerun = 0;     ///< sent again after their worker was lost (total over causes)
  std::map<std::string, std::uint64_t> rerun_by_cause;  ///< cause (see loss_cause()) → reruns
  std::map<std::string, std::uint64_t> failed_by_cause; ///< cause → failed tasks
};

/// One Pool in a snapshot.
struct pool_stats {
  std::string name;                  ///< the Pool's name (pool_options::name, else "pool-N")
  std::string backend;               ///< the backend its workers run on ("local", "slurm", ...)
  unsigned processes = 0;            ///< the number of workers it keeps (after resize)
  std::uint64_t chunks_queued = 0;   ///< chunks waiting for a worker (the queue depth)
  std::uint64_t chunks_running = 0;  ///< chunks held by workers
  std::uint64_t workers_lost = 0;    ///< workers whose job ended without being asked to (not retired)
  std::uint64_t workers_started = 0; ///< workers launched since the Pool was made
  task_stats tasks;
  std::map<worker_state, unsigned> workers_by_state; ///< every state, 0 included
  std::map<std::string, unsigned> workers_by_host;   ///< connected workers per host
  std::vector<worker_stats> workers;                 ///< one per worker not yet ended, by launch order
};

/// A snapshot of this process's runtime (fiber::stats()).
struct runtime_stats {
  std::vector<pool_stats> pools; ///< the live Pools of this process, oldest first
};

/// The cause under which a lost worker's tasks are counted, from the words
/// of its loss: "oom_killed", "node_lost", "heartbeat_missed", "killed"
/// (a signal), "exited" (its job ended otherwise) or "link_lost".
/// Example: `fiber::loss_cause("job ended: OOMKilled: ...") == "oom_killed"`.
inline std::string loss_cause(std::string_view reason) {
  const auto has = [&](std::string_view s) { return reason.find(s) != std::string_view::npos; };
  if (has("OOMKilled") || has("OUT_OF_MEMORY") || has("out of memory")) return "oom_killed";
  if (has("NODE_FAIL") || has("node lost") || has("NodeLost") || has("Evicted")) return "node_lost";
  if (has("heartbeat")) return "heartbeat_missed";
  if (has("signal")) return "killed";
  if (has("job ended")) return "exited";
  return "link_lost";
}

} // namespace fiber

namespace fiber::detail {

/// Something that adds itself to a snapshot: a Pool's scheduler.
class stats_source {
public:
  virtual ~stats_source() = default;
  /// Runtime thread. Adds this source's part to `out`.
  virtual void add_to(runtime_stats& out) const = 0;
};

/// The live sources of this process, oldest first. Runtime thread only;
/// sources are held weakly and dropped once gone.
class stats_sources {
public:
  static stats_sources& instance() {
    static stats_sources s;
    return s;
  }

  void add(std::weak_ptr<const stats_source> s) { sources_.push_back(std::move(s)); }

  /// Every live source's part, in the order they were added.
  runtime_stats collect() {
    runtime_stats out;
    std::erase_if(sources_, [](const auto& w) { return w.expired(); });
    for (auto& w : sources_)
      if (auto s = w.lock()) s->add_to(out);
    return out;
  }

private:
  std::vector<std::weak_ptr<const stats_source>> sources_;
};

} // namespace fiber::detail
