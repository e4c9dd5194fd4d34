// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/reaper.hpp
/// A watchdog child that cleans up a backend's jobs when the master dies
/// without doing it itself (SIGKILL, a crash): it reads a socket whose only
/// other end is the master's, and acts on EOF.
///
/// The child (a program given by the backend: `sh`, `awk`) runs in a process
/// group of its own (a terminal's Ctrl-C to the master does not stop it)
/// with its stdin the socket and no output. Detached, it is not
/// even this process's child (a shell starts it in the background and exits):
/// the master's children stay its workers and commands only. The master may send it
/// lines (note()); "done" says that the master cleaned up itself, and the
/// child exits without acting. Writes never block the runtime thread (a note
/// that does not fit is dropped) and never raise SIGPIPE (a watchdog that
/// died only loses its notes).

#include <fiber/backend/detail/spawn.hpp>
#include <fiber/backend/detail/unique_fd.hpp>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fiber::detail {

/// A running watchdog (see the file comment). Not copyable; destroying it
/// without disarm() leaves it armed: it acts when this process ends.
class reaper {
public:
  reaper() = default;
  reaper(const reaper&) = delete;
  reaper& operator=(const reaper&) = delete;
  ~reaper() { disarm(); }

  /// Starts `argv` with the socket as its stdin; `detached`: through
  /// `/bin/sh`, which starts it in the background and exits (waited for
  /// here: a fork, ~1 ms). Returns false (nothing started) when it cannot be
  /// started.
  bool arm(std::vector<std::string> argv, bool detached = false) {
    // A background command's stdin is /dev/null before its redirections: keep the socket on fd 3.
    if (detached) argv.insert(argv.begin(), {"/bin/sh", "-c", "exec 3<&0; \"$@\" <&3 3<&- & exit 0", "fiber-reaper"});
    int p[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return false;
    unique_fd rd(p[0]);
    write_end_ = unique_fd(p[1]);
    spawn_request r;
    r.argv = std::move(argv);
    r.stdin_fd = rd.get();
    r.out = r.err = stdio::null;
    r.new_process_group = true;
    try {
      pid_ = spawn(r).pid;
    } catch (const std::exception&) {
      write_end_.reset();
      return false;
    }
    if (detached) {
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    return true;
  }

  bool armed() const noexcept { return bool(write_end_); }

  /// Send `line` (no newline in it) to the watchdog. Never blocks; returns
  /// false when it was not armed or the line did not fit in the socket.
  bool note(const std::string& line) noexcept {
    if (!write_end_) return false;
    return send_all(line + "\n");
  }

  /// The master cleaned up itself: the watchdog exits without acting (waits
  /// up to 1 s for it, so no zombie is left; should "done" not fit in the
  /// socket, it acts on what was already cleaned up). Idempotent.
  void disarm() noexcept {
    if (write_end_) {
      (void)send_all("done\n");
      write_end_.reset();
    }
    if (pid_ > 0) {
      int st = 0;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (::waitpid(pid_, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2)); // it exits at once: a few ms
      pid_ = -1;
    }
  }

  /// Cleaning up failed: leave the watchdog armed, to act when this process
  /// ends (its end of the socket is kept open until then).
  void leave_armed() noexcept {
    (void)write_end_.release();
    pid_ = -1;
  }

  /// The watchdog's pid (-1: none, or detached).
  pid_t pid() const noexcept { return pid_; }

private:
  bool send_all(const std::string& s) noexcept {
    ssize_t n;
    do n = ::send(write_end_.get(), s.data(), s.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == ssize_t(s.size()); // a short line fits the socket's buffer whole, or not at all
  }

  unique_fd write_end_;
  pid_t pid_ = -1;
};

} // namespace fiber::detail
