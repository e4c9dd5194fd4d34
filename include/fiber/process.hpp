#pragma once
/// @file process.hpp
/// fiber::Process — multiprocessing.Process as a job-backed process: the
/// target runs in a worker started by the backend (a child process locally,
/// a Slurm job on a cluster).

#include <fiber/backend/from_env.hpp>
#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/link_drain.hpp>
#include <fiber/detail/supervisor.hpp>
#include <fiber/init.hpp>
#include <fiber/target.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fiber {
namespace detail {

struct process_state : std::enable_shared_from_this<process_state> {
  std::mutex m;
  std::condition_variable cv;
  std::string name;
  run_msg run;
  fiber::resources res;
  bool started = false, ended = false;
  std::optional<int> code;
  std::string refused;
  std::string start_error; // the backend could not start the job (job_exit::start_failed)
  backend::job job;
  std::int64_t peer_pid = -1;
  std::uint64_t worker_id = 0;
  std::shared_ptr<supervisor> sup;  // runtime thread only
  std::shared_ptr<peer_link> link;  // runtime thread only
  // Runtime thread only: the status the worker said it exits with, and a
  // "killed by signal" report held until the link ends (see on_exit).
  std::optional<std::int32_t> reported_exit;
  std::optional<backend::job_exit> held_exit;
  std::unique_ptr<asio::steady_timer> hold_timer;

  /// Runtime thread: start the job through a supervisor of its own.
  void launch(std::shared_ptr<backend::launcher> l) {
    std::weak_ptr<process_state> weak = shared_from_this();
    sup = std::make_shared<supervisor>(
        std::move(l), "fiber::Process " + name, "processes",
        supervisor::events{[weak](std::uint64_t, std::shared_ptr<peer_link> l) {
                             if (auto s = weak.lock()) s->on_connect(std::move(l));
                             else l->close("process object gone");
                           },
                           [weak](std::uint64_t, const backend::job_exit& ex) {
                             if (auto s = weak.lock()) s->on_exit(ex);
                           },
                           [weak](std::uint64_t, const std::string& reason) {
                             if (auto s = weak.lock()) {
                               std::lock_guard lk(s->m);
                               s->refused = reason;
                             }
                           }});
    worker_id = sup->launch({name}, res).at(0);
    std::lock_guard lk(m);
    job = *sup->job(worker_id);
  }

  void on_connect(std::shared_ptr<detail::peer_link> l) {
    link = l;
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
          if (self->held_exit) return self->finish_exit(*self->held_exit); // every frame is in
          // A live job that stopped answering is killed; the exit report follows.
          if (reason == "heartbeat missed") {
            log(log_level::warning, self->name, ": ", reason, ": killing it");
            self->sup->cancel(self->worker_id, 9);
          }
        });
    l->send(frame(frame_kind::run, run));
  }

  void on_exit(const backend::job_exit& ex) {
    // srun reports a step that exited with 128+n as killed by signal n. The
    // worker sends the status it exits with in that range (frame `exiting`)
    // before its link ends: hold such a report until the link has ended
    // (every frame read) or for at most link_drain_limit.
    if (ex.how == backend::job_exit::kind::signalled && link && !link->closed() && !reported_exit) {
      held_exit = ex;
      hold_timer = start_link_drain([weak = std::weak_ptr<process_state>(shared_from_this())] {
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
    if (link) link->close("exited");
    link.reset();
    std::lock_guard lk(m);
    ended = true;
    code = ex.exitcode();
    if (ex.start_failed) start_error = ex.reason;
    cv.notify_all();
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

} // namespace detail

/// A job-backed process running one target. Movable, not copyable.
///
/// `Backend` is a backend policy (backend::local, backend::slurm, or the
/// default backend::from_env, which reads FIBER_BACKEND). Member functions
/// may be called from any thread, but not concurrently on one object.
template <backend::policy Backend = backend::from_env>
class basic_process {
public:
  /// Arguments are serialized now (copied, as multiprocessing pickles them).
  /// A wrong argument count or type is a compile-time error.
  template <auto F, class... A>
  explicit basic_process(target_t<F>, A&&... args) : st_(std::make_shared<detail::process_state>()) {
    st_->name = "Process-" + std::to_string(detail::next_process_number());
    if constexpr (detail::check_target_args<F, A...>()) {
      writer w;
      using params = typename target_t<F>::args_tuple;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (w.write(std::tuple_element_t<I, params>(std::forward<A>(args))), ...);
      }(std::index_sequence_for<A...>{});
      st_->run = detail::run_msg{target_t<F>::id, w.release()};
    }
  }

  basic_process(basic_process&&) noexcept = default;
  basic_process& operator=(basic_process&& o) noexcept {
    if (this != &o) {
      reap();
      st_ = std::move(o.st_);
    }
    return *this;
  }
  basic_process(const basic_process&) = delete;
  basic_process& operator=(const basic_process&) = delete;

  /// A started process that was not joined is terminated and reaped.
  ~basic_process() { reap(); }

  /// Start the job. Throws std::logic_error if already started,
  /// fiber::backend_error if the backend cannot start it.
  void start() {
    {
      std::lock_guard lk(st_->m);
      if (st_->started) throw std::logic_error("fiber::Process::start: process already started");
      st_->started = true;
    }
    auto& rt = detail::runtime::instance();
    auto st = st_;
    try {
      rt.sync([&] { st->launch(rt.template launcher<Backend>()); });
    } catch (...) {
      std::lock_guard lk(st_->m);
      st_->started = false;
      throw;
    }
    std::lock_guard lk(detail::children_mutex());
    auto& c = detail::children();
    std::erase_if(c, [](auto& w) { return w.expired(); });
    c.push_back(st_);
  }

  /// Wait until the process ends. Throws fiber::handshake_error if its
  /// binary was refused by the master, fiber::backend_error if the backend
  /// could not start it after start() returned (e.g. Docker: no such image).
  void join() {
    std::unique_lock lk(st_->m);
    require_started("join");
    st_->cv.wait(lk, [&] { return st_->ended; });
    if (!st_->refused.empty()) throw handshake_error(st_->refused);
    if (!st_->start_error.empty()) throw backend_error(st_->start_error);
  }

  /// Wait at most `timeout`; true if the process has ended.
  template <class Rep, class Period>
  bool join(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lk(st_->m);
    require_started("join");
    if (!st_->cv.wait_for(lk, timeout, [&] { return st_->ended; })) return false;
    if (!st_->refused.empty()) throw handshake_error(st_->refused);
    if (!st_->start_error.empty()) throw backend_error(st_->start_error);
    return true;
  }

  bool is_alive() const {
    std::lock_guard lk(st_->m);
    return st_->started && !st_->ended;
  }

  /// nullopt while running (or not started); the exit status; -N if killed by signal N
  /// (also on backends whose report cannot tell exit status 128+N from signal N,
  /// as srun's cannot: the worker reports its status before it exits).
  std::optional<int> exitcode() const {
    std::lock_guard lk(st_->m);
    return st_->code;
  }

  /// SIGTERM locally; other backends cancel the job and report -15.
  void terminate() { signal(15); }
  /// SIGKILL locally; other backends cancel the job and report -9.
  void kill() { signal(9); }

  /// OS process id once known (local: at start; cluster: when it connects).
  std::optional<std::int64_t> pid() const {
    std::lock_guard lk(st_->m);
    if (st_->job.pid > 0) return st_->job.pid;
    if (st_->peer_pid > 0) return st_->peer_pid;
    return std::nullopt;
  }

  const std::string& name() const noexcept { return st_->name; }
  /// Set before start(); the worker's name in logs and current_process().
  void set_name(std::string n) { st_->name = std::move(n); }
  /// Resources requested of the backend; set before start().
  void set_resources(const fiber::resources& r) { st_->res = r; }

private:
  void require_started(const char* what) const {
    if (!st_->started) throw std::logic_error(std::string("fiber::Process::") + what + ": process not started");
  }

  void signal(int sig) {
    {
      std::lock_guard lk(st_->m);
      if (!st_->started || st_->ended) return;
    }
    auto st = st_;
    detail::runtime::instance().sync([&] {
      if (!st->ended && st->sup) st->sup->cancel(st->worker_id, sig);
    });
  }

  void reap() {
    if (!st_) return;
    {
      std::lock_guard lk(st_->m);
      if (!st_->started || st_->ended) return;
    }
    terminate();
    if (!join_quietly(std::chrono::seconds(2))) {
      kill();
      join_quietly(std::chrono::seconds(30));
    }
  }
  bool join_quietly(std::chrono::seconds t) {
    std::unique_lock lk(st_->m);
    return st_->cv.wait_for(lk, t, [&] { return st_->ended; });
  }

  std::shared_ptr<detail::process_state> st_;

  template <backend::policy>
  friend class basic_process;
};

/// The default Process: backend chosen by FIBER_BACKEND.
using Process = basic_process<>;

/// Live Processes started by this process (multiprocessing.active_children):
/// their names and pids.
inline std::vector<process_info> active_children() {
  std::vector<process_info> out;
  std::lock_guard lk(detail::children_mutex());
  for (auto& w : detail::children())
    if (auto s = w.lock()) {
      std::lock_guard l2(s->m);
      if (s->started && !s->ended) out.push_back({s->name, s->job.pid > 0 ? s->job.pid : s->peer_pid, true});
    }
  return out;
}

} // namespace fiber
