// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/spawn.hpp
/// Starting a child process with posix_spawn: argv as a vector (no shell),
/// a clean signal mask and default dispositions, stdio wired to /dev/null,
/// pipes, files or the parent's, optionally in a process group of its own.

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/detail/sched.hpp>

#include <cerrno>
#include <fcntl.h>
#include <array>
#include <optional>
#include <signal.h>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace fiber::detail {

/// Where a child's stdout or stderr goes.
enum class stdio { null, pipe, inherit };

/// What to run. `argv[0]` is looked up on PATH (posix_spawnp).
struct spawn_request {
  std::vector<std::string> argv;
  std::optional<std::vector<std::string>> env; ///< full "K=V" environment; nullopt: inherit
  int stdin_fd = -1;                           ///< dup'ed to the child's stdin; -1: /dev/null
  bool inherit_stdin = false;                  ///< the parent's stdin instead (stdin_fd ignored)
  stdio out = stdio::pipe, err = stdio::pipe;
  /// Append stdout/stderr to this file (created 0600) instead of `out`/`err`.
  std::optional<std::string> out_file, err_file;
  bool new_process_group = false;
  /// Inherited under the same numbers (their close-on-exec flags cleared in the child); -1: none.
  std::array<int, 2> keep_fds{-1, -1};
};

struct spawned {
  pid_t pid = -1;
  unique_fd out, err; ///< read ends when stdio::pipe
};

/// Start a child. The child gets an empty signal mask and default
/// dispositions (the runtime may block or ignore signals in its threads).
/// Throws std::system_error (errno of the failed exec, e.g. ENOENT).
inline spawned spawn(const spawn_request& r) {
  if (r.argv.empty()) throw std::invalid_argument("fiber: spawn: empty argv");
  std::vector<char*> argv;
  for (auto& a : r.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (r.env) {
    for (auto& e : *r.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  struct cleanup {
    posix_spawn_file_actions_t* fa;
    posix_spawnattr_t* at;
    ~cleanup() {
      posix_spawn_file_actions_destroy(fa);
      posix_spawnattr_destroy(at);
    }
  } cleanup_{&fa, &at};

  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (r.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&at, 0);
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  detail::set_spawn_policy(at, flags);
  posix_spawnattr_setflags(&at, flags);

  if (r.inherit_stdin) {
  } else if (r.stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, r.stdin_fd, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }

  spawned s;
  unique_fd child_ends[2];
  auto wire = [&](stdio mode, const std::optional<std::string>& file, int target, unique_fd& parent_end,
                  unique_fd& child_end) {
    if (file) {
      posix_spawn_file_actions_addopen(&fa, target, file->c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    } else if (mode == stdio::null) {
      posix_spawn_file_actions_addopen(&fa, target, "/dev/null", O_WRONLY, 0);
    } else if (mode == stdio::pipe) {
      int p[2];
      // O_CLOEXEC: no other child (spawned by any thread) inherits our ends,
      // which would keep the pipe open and hide EOF.
      if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
      parent_end = unique_fd(p[0]);
      child_end = unique_fd(p[1]);
      posix_spawn_file_actions_adddup2(&fa, p[1], target); // dup2 clears CLOEXEC on the target
    }
  };
  wire(r.out, r.out_file, 1, s.out, child_ends[0]);
  wire(r.err, r.err_file, 2, s.err, child_ends[1]);
  for (int fd : r.keep_fds)
    if (fd > 2) posix_spawn_file_actions_adddup2(&fa, fd, fd); // glibc: clears FD_CLOEXEC

  int rc = ::posix_spawnp(&s.pid, argv[0], &fa, &at, argv.data(), r.env ? envp.data() : environ);
  if (rc != 0) throw std::system_error(rc, std::generic_category(), r.argv[0]);
  return s;
}

} // namespace fiber::detail
