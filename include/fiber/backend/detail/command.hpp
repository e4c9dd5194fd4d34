// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/command.hpp
/// Running a command to completion and capturing what it printed (sbatch,
/// scancel, scontrol), bounded by a timeout; and an anonymous file for its stdin.

#include <fiber/backend/detail/shell_words.hpp>
#include <fiber/backend/detail/spawn.hpp>
#include <fiber/backend/detail/unique_fd.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace fiber::detail {

/// Outcome of a finished command.
struct command_result {
  int status = -1;        ///< waitpid status; -1 when unknown
  std::string out, err;   ///< captured stdout / stderr
  bool timed_out = false; ///< killed after the deadline
  bool ok() const noexcept { return !timed_out && status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  /// "exit 1", "signal 9", "timed out"
  std::string describe() const {
    if (timed_out) return "timed out";
    if (status < 0) return "status unknown";
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
  /// stderr (else stdout) trimmed: Slurm's own words.
  std::string message() const {
    auto m = trim(err);
    return m.empty() ? trim(out) : m;
  }
};

/// An anonymous, unlinked file holding `data`, positioned at 0 (a child's
/// stdin: no deadlock on large input, no SIGPIPE, no path on disk).
inline unique_fd memory_file(std::string_view data) {
  int fd = ::memfd_create("fiber-slurm", MFD_CLOEXEC);
  if (fd < 0) {
    std::FILE* f = std::tmpfile(); // old kernels: an unlinked file in /tmp
    if (!f) throw std::system_error(errno, std::generic_category(), "memfd_create");
    fd = ::fcntl(::fileno(f), F_DUPFD_CLOEXEC, 0);
    std::fclose(f);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "tmpfile");
  }
  unique_fd u(fd);
  for (std::size_t off = 0; off < data.size();) {
    auto n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "write");
    off += std::size_t(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return u;
}

/// Run a command to completion, blocking the caller at most about `timeout`
/// (then the child is SIGKILLed). For sbatch/scancel/scontrol: ~10 ms each
/// when the controller answers. Throws std::system_error if it cannot start.
inline command_result run(const spawn_request& r, std::chrono::milliseconds timeout) {
  auto c = spawn(r);
  command_result res;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  while (c.out || c.err) {
    pollfd fds[2];
    unique_fd* owners[2];
    std::string* bufs[2];
    nfds_t n = 0;
    for (auto [fd, buf] : {std::pair{&c.out, &res.out}, std::pair{&c.err, &res.err}}) {
      if (!*fd) continue;
      fds[n] = pollfd{fd->get(), POLLIN, 0};
      owners[n] = fd;
      bufs[n++] = buf;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (killed) break; // a grandchild still holds the pipe: stop reading
      ::kill(c.pid, SIGKILL);
      killed = res.timed_out = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      continue;
    }
    int pr = ::poll(fds, n, int(std::min<long long>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) break;
    for (nfds_t i = 0; pr > 0 && i < n; ++i) {
      if (!fds[i].revents) continue;
      char buf[4096];
      auto got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) bufs[i]->append(buf, std::size_t(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN)) owners[i]->reset();
    }
  }
  c.out.reset();
  c.err.reset();
  int st = 0;
  pid_t w;
  do w = ::waitpid(c.pid, &st, 0);
  while (w < 0 && errno == EINTR);
  res.status = w == c.pid ? st : -1;
  return res;
}

} // namespace fiber::detail
