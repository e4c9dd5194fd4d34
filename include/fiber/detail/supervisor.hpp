// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/supervisor.hpp
/// One owner's job-backed workers from launch to end: launch (rolled back if
/// it fails), the wait for each to connect back, the start timeout, and the
/// budget of workers that end before they connect. Pool, RemoteManager and
/// Process all start their workers through it, on a worker_host.

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/fd_budget.hpp>
#include <fiber/detail/handshake.hpp>
#include <fiber/detail/inherited_link.hpp>
#include <fiber/detail/pid_budget.hpp>
#include <fiber/detail/worker_host.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace fiber::detail {

/// On its host's executor only. Create with std::make_shared (the host and
/// the launcher hold weak references to it). Events go to the owner, which
/// holds the supervisor; none runs after the supervisor is destroyed.
class supervisor : public std::enable_shared_from_this<supervisor> {
public:
  struct events {
    /// Worker `id` authenticated: its link, not started yet.
    std::function<void(std::uint64_t id, std::shared_ptr<worker_link>)> connected;
    /// Worker `id`'s job ended; called once for every launched worker.
    std::function<void(std::uint64_t id, const backend::job_exit&)> exited;
    /// Worker `id` runs another binary (refused at the handshake; its job ends too).
    std::function<void(std::uint64_t id, const std::string& reason)> refused;
  };

  /// Events forwarded to `owner`'s on_connect(id, link), on_exit(id, exit)
  /// and on_refused(reason) while it lives; a worker that connects after
  /// its owner is gone is told to shut down.
  template <class Owner>
  static events forward_to(const std::shared_ptr<Owner>& owner) {
    std::weak_ptr<Owner> weak = owner;
    return {[weak](std::uint64_t id, std::shared_ptr<worker_link> l) {
              if (auto s = weak.lock()) s->on_connect(id, std::move(l));
              else l->send(frame(frame_kind::shutdown));
            },
            [weak](std::uint64_t id, const backend::job_exit& ex) {
              if (auto s = weak.lock()) s->on_exit(id, ex);
            },
            [weak](std::uint64_t, const std::string& reason) {
              if (auto s = weak.lock()) s->on_refused(reason);
            }};
  }

  /// Workers of `host` (which outlives it) on launcher `l`. `owner` names the
  /// owner in messages ("fiber::Pool pool-1"); `workers` what its workers are
  /// called there ("workers", "manager processes").
  supervisor(worker_host& host, std::shared_ptr<backend::launcher> l, std::string owner, std::string workers, events ev)
      : host_(host),
        launcher_(std::move(l)),
        owner_(std::move(owner)),
        workers_noun_(std::move(workers)),
        ev_(std::move(ev)) {}

  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  backend::launcher& launcher() noexcept { return *launcher_; }
  backend::launcher_traits traits() const noexcept { return launcher_->traits(); }

  /// Before `workers` more workers start: makes sure the file descriptors
  /// they and the workers of this process not connected yet need may be
  /// opened (see reserve_fds: a link each, the launcher's fds_per_job, the
  /// job's end of an inherited link while it starts, and
  /// the connections still in their handshake, at most
  /// max_pending_handshakes), and, when they are this process's children,
  /// that the kernel lets their threads exist (see reserve_threads). Throws
  /// backend_error.
  void reserve(std::size_t workers) const {
    const std::string who = owner_ + " (" + std::string(launcher_->name()) + " backend" +
                            (workers == 1 ? std::string() : ", " + std::to_string(workers) + " " + workers_noun_) + ")";
    const auto traits = launcher_->traits();
    if (traits.dies_with_master) detail::reserve_threads(workers, who);
    // the job's end of an inherited link, until launch() returns; a reply
    // line: the job's end (inherited), the master's and its descriptor read
    // on the caller's io_context
    const auto per_worker = 1 + traits.fds_per_job + traits.inherits_link +
                            (reply_lines_ ? (traits.inherits_link ? 3 : 2) : 0);
    detail::reserve_fds((workers + host_.expected_workers()) * per_worker + max_pending_handshakes, who);
  }

  /// Starts one worker per name; returns their ids, in order. Each is
  /// expected at the listener; one that has not connected back after
  /// start_timeout_s is cancelled (its end is reported as usual). Throws
  /// backend_error (or what listening throws) with nothing left started or
  /// expected.
  std::vector<std::uint64_t> launch(const std::vector<std::string>& names, const fiber::resources& res) {
    check_config(); // a bad value set since fiber::init: before anything starts
    std::vector<backend::job_spec> specs;
    std::vector<backend::exit_handler> handlers;
    std::vector<std::uint64_t> ids;
    std::weak_ptr<supervisor> weak = shared_from_this();
    try {
      for (auto& name : names) {
        auto id = host_.new_worker_id();
        ids.push_back(id);
        workers_[id].name = name;
        specs.push_back(host_.worker_spec(*launcher_, id, name, res));
        if (reply_lines_ && specs.back().link_fd) { // a job of this machine that inherits its link
          auto [job_end, mine] = make_link_pair();
          workers_[id].reply_end = unique_fd(mine);
          specs.back().env.emplace_back("FIBER_INTERNAL_REPLY_FD", std::to_string(*job_end));
          specs.back().reply_fd = std::move(job_end);
        }
        handlers.push_back([weak, id](const backend::job_exit& ex) {
          if (auto s = weak.lock()) s->on_exit(id, ex);
        });
        host_.expect_worker(
            id,
            [weak, id](std::shared_ptr<worker_link> l) {
              if (auto s = weak.lock()) s->on_connect(id, std::move(l));
              else l->send(frame(frame_kind::shutdown));
            },
            [weak, id](const std::string& reason) {
              if (auto s = weak.lock()) s->ev_.refused(id, reason);
            });
      }
      auto jobs = launcher_->launch(specs, std::move(handlers));
      for (std::size_t i = 0; i < ids.size(); ++i) workers_[ids[i]].job = jobs.at(i);
    } catch (...) {
      for (auto id : ids) {
        host_.forget_worker(id);
        workers_.erase(id);
      }
      throw;
    }
    const auto timeout = std::chrono::seconds(config_int("start_timeout_s"));
    for (auto id : ids) {
      auto& w = workers_[id];
      w.start_timer = std::make_unique<asio::steady_timer>(host_.executor(), timeout);
      w.start_timer->async_wait([weak, id](std::error_code ec) {
        auto s = weak.lock();
        if (ec || !s) return;
        auto it = s->workers_.find(id);
        if (it == s->workers_.end() || it->second.connected) return;
        log(log_level::error, it->second.name, ": job never connected back; cancelling it");
        s->launcher_->cancel(it->second.job, 9);
      });
    }
    return ids;
  }

  /// The job of worker `id`, or nullptr once its end was reported.
  const backend::job* job(std::uint64_t id) const {
    auto it = workers_.find(id);
    return it == workers_.end() ? nullptr : &it->second.job;
  }

  /// Its OS pid: the backend's, else the one the worker reported.
  std::int64_t pid(std::uint64_t id, const worker_link* link) const {
    auto* j = job(id);
    return j && j->pid > 0 ? j->pid : link ? link->peer().pid : -1;
  }

  /// Asks the backend to stop worker `id` (SIGTERM 15, SIGKILL 9, or its
  /// equivalent); ignored once its end was reported.
  void cancel(std::uint64_t id, int signal) {
    if (auto* j = job(id)) launcher_->cancel(*j, signal);
  }
  void cancel_all(int signal) {
    for (auto& [id, w] : workers_) launcher_->cancel(w.job, signal);
  }

  /// Worker `id`'s link to this process closed: it ends itself (a worker
  /// whose master is gone or silent exits), which the liveness registry
  /// takes into account (runtime::when_dead).
  void link_lost(std::uint64_t id, const std::string& reason) { host_.worker_link_lost(id, reason); }

  /// Worker `id` is being retired: if it ends before connecting, that is
  /// not a failed start.
  void retire(std::uint64_t id) {
    if (auto it = workers_.find(id); it != workers_.end()) it->second.end_expected = true;
  }
  /// Workers that inherit their link (local jobs) get a reply line too:
  /// a second socketpair, the job's end in job_spec::reply_fd
  /// (reply_line.hpp). Before launch().
  void with_reply_lines() noexcept { reply_lines_ = true; }
  /// Worker `id`'s end of its reply line, which the caller owns from now
  /// on; -1 when it has none, or it was taken.
  int take_reply_line(std::uint64_t id) {
    auto it = workers_.find(id);
    return it == workers_.end() ? -1 : it->second.reply_end.release();
  }

  /// The owner is closing: workers that end from now on before connecting
  /// are not failed starts.
  void close() noexcept { closing_ = true; }

  /// Whether more workers ended before connecting, in a row, than a pool of
  /// `processes` may tolerate: max(3, 2 × processes).
  bool start_budget_exhausted(unsigned processes) const noexcept {
    return failed_starts_ > std::max(3u, 2 * processes);
  }
  /// The backend_error that ends the owner when the budget is exhausted.
  std::exception_ptr start_failure() const {
    return std::make_exception_ptr(backend_error(owner_ + " (" + std::string(launcher_->name()) + " backend): " +
                                                 workers_noun_ + " keep failing to start: " + last_failure_));
  }

private:
  struct worker {
    std::string name;
    backend::job job;
    bool connected = false;
    bool end_expected = false;
    std::unique_ptr<asio::steady_timer> start_timer;
    unique_fd reply_end; // this process's end of its reply line, until taken
  };

  void on_connect(std::uint64_t id, std::shared_ptr<worker_link> l) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return l->send(frame(frame_kind::shutdown));
    it->second.start_timer.reset();
    it->second.connected = true;
    failed_starts_ = 0;
    host_.worker_connected(id, l->peer());
    ev_.connected(id, std::move(l));
  }

  void on_exit(std::uint64_t id, const backend::job_exit& ex) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    host_.forget_worker(id);
    host_.worker_ended(id, "its job ended (exit code " + std::to_string(ex.exitcode()) +
                               (ex.reason.empty() ? "" : ", " + ex.reason) + ")");
    auto& w = it->second;
    if (!w.connected && !w.end_expected && !closing_) {
      ++failed_starts_;
      last_failure_ = w.name + " exited before connecting (exit code " + std::to_string(ex.exitcode()) +
                      (ex.reason.empty() ? "" : ", " + ex.reason) + ")";
      log(log_level::warning, last_failure_);
    }
    if (launcher_->traits().dies_with_master && w.job.pid > 0) host_.child_ended(w.job.pid);
    workers_.erase(it);
    ev_.exited(id, ex);
  }

  worker_host& host_;
  std::shared_ptr<backend::launcher> launcher_;
  std::string owner_, workers_noun_;
  events ev_;
  std::map<std::uint64_t, worker> workers_;
  unsigned failed_starts_ = 0;
  std::string last_failure_;
  bool closing_ = false;
  bool reply_lines_ = false;
};

} // namespace fiber::detail
