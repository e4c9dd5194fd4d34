// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/stats_sources.hpp
/// The snapshot types of fiber/stats.hpp and the registry of what fills them
/// (each Pool's scheduler, RemoteManager and Process), apart from the
/// runtime so that they can report without including it. Runtime thread only.

#include <fiber/detail/worker_link.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fiber {

/// A worker's state in a snapshot: `starting` (launched, not connected),
/// `idle` (connected, holds no task), `busy` (holds at least one task),
/// `retiring` (asked to exit: resize, maxtasksperchild, close), `lost` (its
/// link or job ended; its tasks are being handed back to the queue),
/// `exited` (a Process whose job ended; Pools and RemoteManagers drop
/// ended workers from their snapshot).
enum class worker_state { starting, idle, busy, retiring, lost, exited };

/// The name of `s`: "starting", "idle", "busy", "retiring", "lost" or "exited".
/// Example: `fiber::to_string(fiber::worker_state::busy) == "busy"`.
inline std::string_view to_string(worker_state s) noexcept {
  switch (s) {
  case worker_state::starting: return "starting";
  case worker_state::idle: return "idle";
  case worker_state::busy: return "busy";
  case worker_state::retiring: return "retiring";
  case worker_state::lost: return "lost";
  case worker_state::exited: return "exited";
  }
  return "unknown";
}

/// One worker of a group in a snapshot: a Pool's worker, a RemoteManager's
/// process, a Process.
struct worker_stats {
  std::string name; ///< e.g. "pool-1-w3"
  std::string host; ///< its host name as it reported it; empty while starting
  worker_state state = worker_state::starting;
  std::uint64_t tasks_sent = 0;     ///< tasks sent to it since it started (a manager process: calls)
  std::uint64_t tasks_held = 0;     ///< tasks it holds now, running or sent ahead (a manager process: calls waiting)
  std::uint64_t objects = 0;        ///< remote objects it holds (a manager process; else 0)
  std::uint64_t bytes_sent = 0;     ///< bytes the master wrote to its link, framing included
  std::uint64_t bytes_received = 0; ///< bytes the master read from its link
  /// The last round trip of its link's heartbeats, in seconds (the master
  /// pings each worker link every 16 heartbeat periods); 0: none measured
  /// yet, or a worker behind a relay (the relay's own link is measured).
  double round_trip_seconds = 0;
};

/// A worker of a group that ended without being asked to (its group's
/// `workers_lost`), as the group saw it.
struct loss_event {
  double time = 0;         ///< when, in seconds since the Unix epoch
  std::string worker;      ///< its name
  std::string host;        ///< its host; empty if it never connected
  std::string cause;       ///< loss_cause() of the reason
  std::string reason;      ///< the backend's or the link's words
  std::uint64_t tasks = 0; ///< tasks (Pool) or objects (RemoteManager) it held, rerun or failed
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
  std::uint64_t bytes_sent = 0;      ///< over its workers' links since the Pool was made (see worker_stats)
  std::uint64_t bytes_received = 0;  ///< over its workers' links since the Pool was made
  task_stats tasks;
  /// Chunks submitted, by size: a key is a bucket's upper bound (a power of
  /// two, in tasks), its value the chunks of more than key/2 and at most key tasks.
  std::map<std::uint64_t, std::uint64_t> chunk_sizes;
  std::map<worker_state, unsigned> workers_by_state; ///< every state, 0 included
  std::map<std::string, unsigned> workers_by_host;   ///< connected workers per host
  std::vector<worker_stats> workers;                 ///< one per worker not yet ended, by launch order
  std::vector<loss_event> recent_losses;             ///< its last 32 workers lost, oldest first
};

/// One RemoteManager in a snapshot. Its processes are workers whose state is
/// idle (no call waiting) or busy (calls waiting), and whose tasks are calls.
struct manager_stats {
  std::string name;                                  ///< "manager-N" (manager_options::name)
  std::string backend;                               ///< the backend its processes run on
  unsigned processes = 0;                            ///< the number of processes it keeps
  std::uint64_t objects = 0;                         ///< live remote objects
  std::uint64_t calls = 0;                           ///< calls and constructions sent since it was made
  std::uint64_t calls_waiting = 0;                   ///< sent, their reply not yet in
  std::uint64_t workers_lost = 0;                    ///< processes whose job ended without being asked to
  std::uint64_t workers_started = 0;                 ///< processes launched since it was made
  std::uint64_t bytes_sent = 0;                      ///< over its processes' links since it was made
  std::uint64_t bytes_received = 0;                  ///< over its processes' links since it was made
  std::map<worker_state, unsigned> workers_by_state; ///< every state, 0 included
  std::map<std::string, unsigned> workers_by_host;   ///< connected processes per host
  std::vector<worker_stats> workers;                 ///< one per process not yet ended, by launch order
  std::vector<loss_event> recent_losses;             ///< its last 32 processes lost, oldest first
};

/// One fiber::Process in a snapshot, from its start until its handle is
/// destroyed. Its worker's state is starting, busy (running) or exited.
struct process_stats {
  std::string backend;         ///< the backend it runs on
  worker_stats worker;         ///< the process itself (name, host, state, bytes, round trip)
  std::optional<int> exitcode; ///< once ended: Process::exitcode()'s value
};

/// The object store's use in this process (fiber/object_store.hpp).
struct object_store_stats {
  std::uint64_t objects = 0;       ///< objects held here: put by this process, or copies fetched to this host
  std::uint64_t bytes = 0;         ///< their bytes, counted against object_store_mb
  std::uint64_t bound_bytes = 0;   ///< object_store_mb in bytes; 0: the store is not used in this process
  std::uint64_t fetched_bytes = 0; ///< bytes fetched from other hosts since the process started
};

/// One service of this process's (a Queue, a Pipe's end, a lock, a shared
/// value...): what waits in it.
struct service_stats {
  std::string kind;        ///< "queue", "lock", ... (the service's kind)
  std::string name;        ///< its name, e.g. "queue-3"
  std::uint64_t depth = 0; ///< items held (a queue) or callers waiting (a lock, a barrier)
};

/// A backend this process has launched jobs on (backend::launcher::job_states).
struct backend_stats {
  std::string name;                              ///< "local", "slurm", "docker", "kubernetes", a plug-in's
  std::map<std::string, unsigned> jobs_by_state; ///< its jobs not yet ended, by the backend's own state names
};

/// A snapshot of this process's runtime (fiber::stats()).
struct runtime_stats {
  std::vector<pool_stats> pools;        ///< the live Pools of this process, oldest first
  std::vector<manager_stats> managers;  ///< the live RemoteManagers, oldest first
  std::vector<process_stats> processes; ///< the Processes started here whose handle lives, oldest first
  std::vector<service_stats> services;  ///< the services this process serves
  std::vector<backend_stats> backends;  ///< the backends this process launched jobs on, by name
  object_store_stats object_store;      ///< zeros where the object store is not used
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

/// The last `capacity` losses of a group (loss_event), oldest first.
/// Runtime thread only, as its group.
class loss_log {
public:
  static constexpr std::size_t capacity = 32;
  /// Records a loss now.
  void add(std::string worker, std::string host, const std::string& reason, std::uint64_t tasks) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    if (events_.size() == capacity) events_.erase(events_.begin());
    events_.push_back({std::chrono::duration<double>(now).count(), std::move(worker), std::move(host),
                       loss_cause(reason), reason, tasks});
  }
  const std::vector<loss_event>& events() const noexcept { return events_; }

private:
  std::vector<loss_event> events_;
};

/// A snapshot's worker fields that come from its link (bytes, round trip).
inline void add_link_traffic(worker_stats& w, const link_traffic& t) {
  w.bytes_sent = t.bytes_sent;
  w.bytes_received = t.bytes_received;
  w.round_trip_seconds = std::chrono::duration<double>(t.round_trip).count();
}

/// Every worker state, each counted 0: the start of a workers_by_state map.
inline std::map<worker_state, unsigned> no_workers_by_state() {
  return {{worker_state::starting, 0}, {worker_state::idle, 0}, {worker_state::busy, 0},
          {worker_state::retiring, 0}, {worker_state::lost, 0}, {worker_state::exited, 0}};
}

/// The bucket of a chunk of `tasks` tasks in pool_stats::chunk_sizes.
inline std::uint64_t chunk_size_bucket(std::uint64_t tasks) noexcept {
  return std::bit_ceil(std::max<std::uint64_t>(tasks, 1));
}

/// The object store's part of a snapshot, set once it is first used (the
/// runtime does not include the object store). Any thread.
inline std::atomic<object_store_stats (*)()>& object_store_probe() {
  static std::atomic<object_store_stats (*)()> probe{nullptr};
  return probe;
}

/// Something that adds itself to a snapshot: a Pool's scheduler, a
/// RemoteManager's relay, a Process. (The runtime adds its services and the
/// object store's use.)
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

  /// Adds `s`. Sources gone are dropped whenever the list would grow, so a
  /// program that starts many Processes and never takes a snapshot keeps
  /// at most about twice its live sources (a weak reference keeps the
  /// memory of a std::make_shared object).
  void add(std::weak_ptr<const stats_source> s) {
    if (sources_.size() == sources_.capacity()) std::erase_if(sources_, [](const auto& w) { return w.expired(); });
    sources_.push_back(std::move(s));
  }

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
