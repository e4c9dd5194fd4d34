// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/process_state.hpp
/// A Process's state and its job's events (start, connect, exit reports),
/// the registry of this process's children, and what happens to them when
/// the program exits.

#include <fiber/backend/launcher.hpp>
#include <fiber/detail/link_drain.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/runtime_host.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/detail/supervisor.hpp>
#include <fiber/detail/worker.hpp>
#include <fiber/log.hpp>

#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fiber::detail {

/// One Process's state, shared by its handle, the runtime thread (the job's
/// events) and the registry of children. Fields under `m` unless noted.
struct process_state : stats_source, std::enable_shared_from_this<process_state> {
  mutable std::mutex m;
  std::condition_variable cv;
  std::string name;
  bool daemon = false; // terminated, not joined, when the program exits
  run_msg run;
  fiber::resources res;
  bool started = false, ended = false;
  std::optional<int> code;
  std::string refused;
  std::string start_error; // the backend could not start the job (job_exit::start_failed)
  backend::job job;
  std::int64_t peer_pid = -1;
  std::uint64_t worker_id = 0;
  std::shared_ptr<supervisor> sup;   // runtime thread only
  std::shared_ptr<worker_link> link; // runtime thread only
  std::string host;                  // runtime thread only: its host, once connected
  link_traffic traffic;              // runtime thread only: its link's, once ended
  // Runtime thread only: the status the worker said it exits with, and a
  // "killed by signal" report held until the link ends (see on_exit).
  std::optional<std::int32_t> reported_exit;
  std::optional<backend::job_exit> held_exit;
  std::unique_ptr<asio::steady_timer> hold_timer;
  std::map<std::uint64_t, std::function<void()>> watchers; // called once it has ended
  std::uint64_t next_watcher = 1;

  /// Calls `ended_cb` once the process has ended (now, on this thread, if it
  /// has); returns what withdraws it. Any thread.
  std::function<void()> watch(std::function<void()> ended_cb) {
    std::unique_lock lk(m);
    if (ended) {
      lk.unlock();
      ended_cb();
      return [] {};
    }
    auto id = next_watcher++;
    watchers.emplace(id, std::move(ended_cb));
    return [weak = weak_from_this(), id] {
      if (auto s = weak.lock()) {
        std::lock_guard lk(s->m);
        s->watchers.erase(id);
      }
    };
  }

  /// Runtime thread: start the job through a supervisor of its own.
  void launch(std::shared_ptr<backend::launcher> l) {
    sup = std::make_shared<supervisor>(runtime_host::instance(), std::move(l), "fiber::Process " + name, "processes",
                                       supervisor::forward_to(shared_from_this()));
    sup->reserve(1);
    worker_id = sup->launch({name}, res).at(0);
    stats_sources::instance().add(std::static_pointer_cast<const stats_source>(shared_from_this()));
    std::lock_guard lk(m);
    job = *sup->job(worker_id);
  }

  /// Runtime thread. This Process's part of fiber::stats().
  void add_to(runtime_stats& out) const override {
    process_stats p;
    p.backend = std::string(sup->launcher().name());
    p.worker.name = name;
    p.worker.host = host;
    add_link_traffic(p.worker, link ? link->traffic() : traffic);
    std::lock_guard lk(m);
    p.exitcode = code;
    p.worker.state = ended ? worker_state::exited : link ? worker_state::busy : worker_state::starting;
    out.processes.push_back(std::move(p));
  }

  void on_refused(const std::string& reason) {
    std::lock_guard lk(m);
    refused = reason;
  }

  void on_connect(std::uint64_t, std::shared_ptr<detail::worker_link> l) {
    link = l;
    host = l->peer().host;
    {
      std::lock_guard lk(m);
      peer_pid = l->peer().pid;
    }
    std::weak_ptr<process_state> weak = shared_from_this();
    l->start(
        [weak](frame_kind k, std::span<const std::byte> body, message&) {
          if (k != frame_kind::exiting) return;
          auto self = weak.lock();
          if (!self) return;
          try {
            reader r(body);
            self->reported_exit = r.read<std::int32_t>();
          } catch (const std::exception&) {
            log(log_level::warning, self->name, ": dropping a malformed exit report");
          }
        },
        [weak](const std::string& reason) {
          auto self = weak.lock();
          if (!self || self->ended) return;
          self->sup->link_lost(self->worker_id, reason);
          if (self->held_exit) return self->finish_exit(*self->held_exit); // every frame is in
          // A live job that stopped answering is killed; the exit report follows.
          if (reason == "heartbeat missed") {
            log(log_level::warning, self->name, ": ", reason, ": killing it");
            self->sup->cancel(self->worker_id, 9);
          }
        });
    l->send(frame(frame_kind::run, run));
  }

  void on_exit(std::uint64_t, const backend::job_exit& ex) {
    // srun reports a step that exited with 128+n as killed by signal n. The
    // worker sends the status it exits with in that range (frame `exiting`)
    // before its link ends: hold such a report until the link has ended
    // (every frame read) or for at most link_drain_limit.
    if (ex.how == backend::job_exit::kind::signalled && link && !link->closed() && !reported_exit) {
      held_exit = ex;
      hold_timer = start_link_drain(runtime::instance().executor(),
                                    [weak = std::weak_ptr<process_state>(shared_from_this())] {
                                      auto self = weak.lock();
                                      if (self && self->held_exit && !self->ended) self->finish_exit(*self->held_exit);
                                    });
      return;
    }
    finish_exit(ex);
  }

  void finish_exit(backend::job_exit ex) {
    held_exit.reset();
    hold_timer.reset();
    if (ex.how == backend::job_exit::kind::signalled && reported_exit && *reported_exit == 128 + ex.code)
      ex = {backend::job_exit::kind::exited, *reported_exit, ex.reason};
    if (link) {
      link->close("exited");
      traffic = link->traffic();
    }
    link.reset();
    std::map<std::uint64_t, std::function<void()>> to_call;
    {
      std::lock_guard lk(m);
      ended = true;
      code = ex.exitcode();
      if (ex.start_failed) start_error = ex.reason;
      to_call.swap(watchers);
    }
    cv.notify_all();
    for (auto& [id, f] : to_call) f();
  }

  /// Blocks at most `limit` for the end; true once ended.
  bool wait_end(std::chrono::milliseconds limit) {
    std::unique_lock lk(m);
    return cv.wait_for(lk, limit, [&] { return ended; });
  }
  void wait_end() {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return ended; });
  }
};

inline int next_process_number() {
  static std::atomic<int> counter{1};
  return counter++;
}

inline std::mutex& children_mutex() {
  static std::mutex m;
  return m;
}
inline std::vector<std::weak_ptr<process_state>>& children() {
  static std::vector<std::weak_ptr<process_state>> c;
  return c;
}

/// At program exit (std::exit, or main returning): non-daemon children still
/// running are joined, daemon children terminated (SIGTERM, then SIGKILL
/// after 2 s), as Python's multiprocessing does. Registered by fiber::init.
inline void end_children_at_exit() {
  static std::atomic<bool> done{false}; // both exit paths of a worker may call it
  if (done.exchange(true)) return;
  std::vector<std::shared_ptr<process_state>> live;
  {
    std::lock_guard lk(children_mutex());
    for (auto& w : children())
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  auto& rt = runtime::instance();
  auto signal = [&rt](const std::shared_ptr<process_state>& s, int sig) {
    rt.sync([&] {
      if (!s->ended && s->sup) s->sup->cancel(s->worker_id, sig);
    });
  };
  for (auto& s : live) {
    bool daemon;
    {
      std::lock_guard lk(s->m);
      if (!s->started || s->ended) continue;
      daemon = s->daemon;
    }
    if (!daemon) {
      s->wait_end();
      continue;
    }
    signal(s, 15);
    if (!s->wait_end(std::chrono::seconds(2))) {
      signal(s, 9);
      s->wait_end(std::chrono::seconds(30));
    }
  }
}

/// Once per program, after the runtime and the registry of children exist
/// (so this runs before their destructors): end_children_at_exit at exit, in
/// a master (std::atexit) and in a worker (its target's end, std::exit).
inline void arm_children_at_exit() {
  static const bool armed = [] {
    (void)runtime::instance();
    (void)children_mutex();
    (void)children();
    std::atexit(end_children_at_exit);
    children_exit_hook() = end_children_at_exit;
    return true;
  }();
  (void)armed;
}

} // namespace fiber::detail
