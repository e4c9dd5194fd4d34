// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/reaper.hpp
/// A watchdog child that cleans up a backend's jobs when the master dies
/// without doing it itself (SIGKILL, a crash): it reads a pipe whose only
/// writer is the master, and acts on EOF.
///
/// The child (a program given by the backend: `sh`, `awk`) runs in a process
/// group of its own (a terminal's Ctrl-C to the master does not stop it)
/// with its stdin the pipe's read end and no output. The master may send it
/// lines (note()); "done" says that the master cleaned up itself, and the
/// child exits without acting. The write end is non-blocking: a note never
/// blocks the runtime thread (one that does not fit is dropped).

#include <fiber/backend/detail/spawn.hpp>
#include <fiber/backend/detail/unique_fd.hpp>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
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

  /// Starts `argv` with the pipe as its stdin. Returns false (nothing
  /// started) when it cannot be started.
  bool arm(std::vector<std::string> argv) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
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
    ::fcntl(write_end_.get(), F_SETFL, ::fcntl(write_end_.get(), F_GETFL) | O_NONBLOCK);
    return true;
  }

  bool armed() const noexcept { return bool(write_end_); }

  /// Send `line` (no newline in it) to the watchdog. Never blocks; returns
  /// false when it was not armed or the line did not fit in the pipe.
  bool note(const std::string& line) noexcept {
    if (!write_end_) return false;
    std::string s = line + "\n";
    ssize_t n;
    do n = ::write(write_end_.get(), s.data(), s.size());
    while (n < 0 && errno == EINTR);
    return n == ssize_t(s.size()); // a pipe write of < PIPE_BUF bytes is all or nothing
  }

  /// The master cleaned up itself: the watchdog exits without acting (waits
  /// up to 1 s for it, so no zombie is left; should "done" not fit in the
  /// pipe, it acts on what was already cleaned up). Idempotent.
  void disarm() noexcept {
    if (write_end_) {
      static constexpr char done[] = "done\n";
      (void)!::write(write_end_.get(), done, sizeof done - 1);
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
  /// ends (its pipe's write end is kept open until then).
  void leave_armed() noexcept {
    (void)write_end_.release();
    pid_ = -1;
  }

  /// The watchdog's pid (-1: none).
  pid_t pid() const noexcept { return pid_; }

private:
  unique_fd write_end_;
  pid_t pid_ = -1;
};

} // namespace fiber::detail
