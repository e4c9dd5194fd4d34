// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/child_watch.hpp
/// Watching a child process end from an Asio executor: a pidfd (no SIGCHLD
/// handler, no polling loop), or a waitpid timer where pidfd_open is missing.

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>

namespace fiber::detail {

/// Watches one child process and calls `on_exit(status)` once, on the
/// executor, when it has been reaped (status -1 when someone else reaped it).
/// With `kill_group`, the child's process group gets SIGKILL once the child
/// has exited and before it is reaped: while the zombie leader exists no
/// other process can take its group id.
/// Uses a pidfd (Linux >= 5.3) watched by Asio; where pidfd_open is
/// missing, a timer polls waitpid(WNOHANG) (1 ms doubling to 100 ms). No
/// SIGCHLD handler is installed (it would fight the user's). Executor only;
/// create with start().
class child_watch : public std::enable_shared_from_this<child_watch> {
public:
  using handler = std::function<void(int status)>;

  static std::shared_ptr<child_watch> start(const asio::any_io_executor& ex, pid_t pid, handler h,
                                            bool kill_group = false) {
    auto w = std::shared_ptr<child_watch>(new child_watch(ex, pid, std::move(h)));
    w->kill_group_ = kill_group;
    w->arm();
    return w;
  }

  pid_t pid() const noexcept { return pid_; }
  bool done() const noexcept { return reaped_; }

  /// Signal the child if it has not been reaped (so the pid is still ours).
  void kill(int sig) noexcept {
    if (!reaped_) ::kill(pid_, sig);
  }

  /// Stop watching without calling the handler; if the child is still
  /// running, wait up to `grace` for it, then SIGKILL and reap it (bounded:
  /// used by destructors so no zombie or orphan is left).
  void detach_and_reap(std::chrono::milliseconds grace) noexcept {
    handler_ = nullptr;
    close();
    if (reaped_) return;
    auto deadline = std::chrono::steady_clock::now() + grace;
    int st = 0;
    for (auto step = std::chrono::milliseconds(1);; step = std::min(step * 2, std::chrono::milliseconds(50))) {
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(step);
    }
    reaped_ = true;
  }

  /// Stop watching (the handler is never called) and reap the child if it
  /// has exited; true when it is gone. Never blocks.
  bool reap_silently() noexcept {
    handler_ = nullptr;
    close();
    if (reaped_) return true;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) reaped_ = true;
    return reaped_;
  }

  /// Try to reap now; true (and the handler called) when the child is gone.
  bool check() {
    if (reaped_) return true;
    if (kill_group_) {
      siginfo_t si{};
      const int r = ::waitid(P_PID, id_t(pid_), &si, WEXITED | WNOHANG | WNOWAIT);
      if (r == 0 && si.si_pid == 0) return false; // still running
      if (r == 0) ::kill(-pid_, SIGKILL);         // exited, not reaped: the group is still its
      else if (errno == EINTR) return false;      // look again
    }
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) return false;
    reaped_ = true;
    close();
    if (auto h = std::exchange(handler_, nullptr)) h(r == pid_ ? st : -1);
    return true;
  }

private:
  child_watch(const asio::any_io_executor& ex, pid_t pid, handler h)
      : pid_(pid), handler_(std::move(h)), timer_(ex), ex_(ex) {}

  void arm() {
#ifdef SYS_pidfd_open
    // A pidfd becomes readable once the child has exited, also when it had
    // exited before this (a zombie): nothing to poll.
    if (int fd = int(::syscall(SYS_pidfd_open, pid_, 0)); fd >= 0) {
      pidfd_.emplace(ex_, fd);
      return wait_pidfd();
    }
#endif
    poll_later();
  }

  void wait_pidfd() {
    pidfd_->async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](std::error_code ec) {
      if (ec || self->reaped_ || !self->handler_) return;
      if (!self->check()) self->wait_pidfd(); // interrupted: look again
    });
  }

  // Without pidfd_open (Linux < 5.3): waitpid(WNOHANG), 1 ms doubling to 100 ms.
  void poll_later() {
    timer_.expires_after(step_);
    step_ = std::min(step_ * 2, std::chrono::milliseconds(100));
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->reaped_ || !self->handler_) return;
      if (!self->check()) self->poll_later();
    });
  }

  void close() noexcept {
    std::error_code ignored;
    timer_.cancel();
    if (pidfd_) pidfd_->close(ignored);
  }

  pid_t pid_;
  bool reaped_ = false, kill_group_ = false;
  handler handler_;
  asio::steady_timer timer_;
  asio::any_io_executor ex_;
  std::optional<asio::posix::stream_descriptor> pidfd_;
  std::chrono::milliseconds step_{1};
};

} // namespace fiber::detail
