// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/fd_budget.hpp
/// Checking, before jobs start, that this process may open the file
/// descriptors their links will need (RLIMIT_NOFILE), raising the soft limit if it can.

#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <cstddef>
#include <dirent.h>
#include <string>
#include <sys/resource.h>

namespace fiber::detail {

/// Before starting jobs that cost about `fds` more file descriptors in this
/// process: if RLIMIT_NOFILE's soft limit is too low, raise it (up to the
/// hard limit); if even that is too low, throw backend_error naming `who`
/// — before anything has started.
inline void reserve_fds(std::size_t fds, const std::string& who) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  std::size_t open = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (auto* e = ::readdir(d)) open += e->d_name[0] != '.';
    ::closedir(d);
  }
  const std::size_t need = open + fds + 32; // headroom: logs, files, transient pipes
  if (lim.rlim_cur == RLIM_INFINITY || need <= lim.rlim_cur) return;
  if (lim.rlim_max == RLIM_INFINITY || need <= lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? rlim_t(need) : lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      log(log_level::info, "raised RLIMIT_NOFILE from ", lim.rlim_cur, " to ", raised.rlim_cur, " for ", who);
      return;
    }
  }
  throw backend_error(who + ": needs about " + std::to_string(need) + " file descriptors in this process (" +
                      std::to_string(open) + " open), but RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur) +
                      " (hard limit " +
                      (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
                      "); raise it (ulimit -n) or start fewer workers");
}

} // namespace fiber::detail
