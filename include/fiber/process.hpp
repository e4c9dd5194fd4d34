// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file process.hpp
/// fiber::Process — multiprocessing.Process as a job-backed process: the
/// target runs in a worker started by the backend (a child process locally,
/// a Slurm job on a cluster).

#include <fiber/backend/from_env.hpp>
#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/async_op.hpp>
#include <fiber/detail/process_state.hpp>
#include <fiber/init.hpp>
#include <fiber/target.hpp>
#include <fiber/wait.hpp>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fiber {

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
      }
      (std::index_sequence_for<A...>{});
      st_->run = detail::run_msg{target_t<F>::id, w.release()};
    }
  }

  /// Takes over `o`'s process; `o` is left empty (as if closed).
  basic_process(basic_process&&) noexcept = default;
  /// Terminates and reaps the process this one held if it was started and
  /// still runs (as the destructor does), then takes over `o`'s.
  basic_process& operator=(basic_process&& o) noexcept {
    if (this == &o) return *this;
    reap(); // as the destructor does
    st_ = std::move(o.st_);
    closed_name_ = std::move(o.closed_name_);
    return *this;
  }
  basic_process(const basic_process&) = delete;
  basic_process& operator=(const basic_process&) = delete;

  /// A started process that was not joined is terminated and reaped.
  ~basic_process() { reap(); }

  /// Start the job. Throws std::logic_error if already started,
  /// fiber::backend_error if the backend cannot start it.
  void start() {
    check_open("start");
    {
      std::lock_guard lk(st_->m);
      if (st_->started) throw std::logic_error("fiber::Process::start: process already started");
      st_->started = true;
    }
    auto& rt = detail::runtime::instance();
    detail::arm_children_at_exit();
    auto st = st_;
    try {
      auto launcher = rt.template prepared_launcher<Backend>();
      rt.sync([&] { st->launch(launcher); });
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
    check_open("join");
    std::unique_lock lk(st_->m);
    require_started("join");
    st_->cv.wait(lk, [&] { return st_->ended; });
    if (!st_->refused.empty()) throw handshake_error(st_->refused);
    if (!st_->start_error.empty()) throw backend_error(st_->start_error);
  }

  /// Wait at most `timeout`; true if the process has ended.
  template <class Rep, class Period>
  bool join(std::chrono::duration<Rep, Period> timeout) {
    check_open("join");
    std::unique_lock lk(st_->m);
    require_started("join");
    if (!st_->cv.wait_for(lk, timeout, [&] { return st_->ended; })) return false;
    if (!st_->refused.empty()) throw handshake_error(st_->refused);
    if (!st_->start_error.empty()) throw backend_error(st_->start_error);
    return true;
  }

  /// True between start() and the process's end. Throws std::logic_error after close().
  bool is_alive() const {
    check_open("is_alive");
    std::lock_guard lk(st_->m);
    return st_->started && !st_->ended;
  }

  /// nullopt while running (or not started); the exit status; -N if killed by signal N
  /// (also on backends whose report cannot tell exit status 128+N from signal N,
  /// as srun's cannot: the worker reports its status before it exits).
  std::optional<int> exitcode() const {
    check_open("exitcode");
    std::lock_guard lk(st_->m);
    return st_->code;
  }

  /// SIGTERM locally; other backends cancel the job and report -15.
  void terminate() { signal(15); }
  /// SIGKILL locally; other backends cancel the job and report -9.
  void kill() { signal(9); }

  /// OS process id once known (local: at start; cluster: when it connects).
  std::optional<std::int64_t> pid() const {
    check_open("pid");
    std::lock_guard lk(st_->m);
    if (st_->job.pid > 0) return st_->job.pid;
    if (st_->peer_pid > 0) return st_->peer_pid;
    return std::nullopt;
  }

  /// The process's name: "Process-N" unless set_name() changed it; still valid after close().
  const std::string& name() const noexcept { return st_ ? st_->name : closed_name_; }
  /// Set before start(); the worker's name in logs and current_process().
  void set_name(std::string n) {
    check_open("set_name");
    st_->name = std::move(n);
  }
  /// Resources requested of the backend; set before start().
  void set_resources(const fiber::resources& r) {
    check_open("set_resources");
    st_->res = r;
  }

  /// A daemon process is terminated (SIGTERM, then SIGKILL after 2 s) when
  /// this program exits; a non-daemon one is joined first. Set before
  /// start(); throws std::logic_error after it.
  ///
  /// ```cpp
  /// fiber::Process p{fiber::target<&serve>};
  /// p.set_daemon(true);
  /// p.start(); // main may return: p is terminated, not waited for
  /// ```
  void set_daemon(bool d) {
    check_open("set_daemon");
    std::lock_guard lk(st_->m);
    if (st_->started) throw std::logic_error("fiber::Process::set_daemon: set it before start()");
    st_->daemon = d;
  }
  /// Whether the process is a daemon (set_daemon).
  bool daemon() const {
    check_open("daemon");
    std::lock_guard lk(st_->m);
    return st_->daemon;
  }

  /// Something fiber::wait can wait on together with Connections: ready once
  /// the process has ended (multiprocessing's `sentinel`). Refers to this
  /// Process, which must outlive it.
  fiber::waitable sentinel() { return fiber::waitable(*this); }

  /// Releases what the handle holds once the process has ended; afterwards
  /// any call but name() and the destructor throws std::logic_error.
  /// Throws std::logic_error while the process runs.
  void close() {
    if (!st_) return;
    {
      std::lock_guard lk(st_->m);
      if (st_->started && !st_->ended)
        throw std::logic_error("fiber::Process::close: the process is still running; join() it first");
    }
    closed_name_ = st_->name;
    st_.reset();
  }

  /// Waits asynchronously for the process to end.
  ///
  /// Completion signature: `void(std::exception_ptr)`: null once it has ended
  /// (read exitcode()), fiber::handshake_error or fiber::backend_error as for
  /// join(). The handler runs on the handler's associated executor (the
  /// runtime's, where fiber's threads live, if none). Throws
  /// std::logic_error at once if not started. Not cancellable: the handler
  /// runs when the process ends (terminate() it to end the wait). The
  /// Process must outlive the operation.
  ///
  /// ```cpp
  /// co_await p.async_join(asio::use_awaitable);
  /// std::cout << *p.exitcode() << '\n';
  /// ```
  template <asio::completion_token_for<void(std::exception_ptr)> Token>
  auto async_join(Token&& token) {
    require_started("async_join");
    return asio::async_initiate<Token, void(std::exception_ptr)>(
        [st = st_](auto handler) {
          auto op = std::make_shared<detail::async_op<decltype(handler)>>(std::move(handler),
                                                                          detail::runtime::instance().executor());
          (void)st->watch([st, op] {
            std::exception_ptr e;
            {
              std::lock_guard lk(st->m);
              if (!st->refused.empty()) e = std::make_exception_ptr(handshake_error(st->refused));
              else if (!st->start_error.empty()) e = std::make_exception_ptr(backend_error(st->start_error));
            }
            op->complete(detail::via::post, std::move(e));
          });
        },
        token);
  }

  /// For fiber::wait: calls `ready` once the process has ended.
  friend std::function<void()> fiber_watch(basic_process& p, std::function<void()> ready) {
    p.require_started("sentinel");
    return p.st_->watch(std::move(ready));
  }
  /// For fiber::wait: calls `done` with whether the process has ended.
  friend void fiber_probe(basic_process& p, std::function<void(bool)> done) { done(!p.is_alive()); }

private:
  void check_open(const char* what) const {
    if (!st_) throw std::logic_error(std::string("fiber::Process::") + what + ": " + closed_name_ + " was closed");
  }
  void require_started(const char* what) const {
    check_open(what);
    if (!st_->started) throw std::logic_error(std::string("fiber::Process::") + what + ": process not started");
  }

  void signal(int sig) {
    check_open("terminate/kill");
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
  std::string closed_name_; // name() after close()

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
