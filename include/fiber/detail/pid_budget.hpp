// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pid_budget.hpp
/// Checking, before workers start on this host, that the kernel will let
/// their threads exist (kernel.pid_max, kernel.threads-max, the cgroup's
/// pids.max, RLIMIT_NPROC), so that a run too big for them fails at once.

#include <fiber/error.hpp>

#include <cstddef>
#include <dirent.h>
#include <fstream>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace fiber::detail {

/// One kernel limit on the threads (tasks) that may exist, and how many it
/// counts now.
struct pid_limit {
  std::string name; ///< what to raise, e.g. "kernel.pid_max"
  long long limit;  ///< tasks it allows
  long long used;   ///< tasks it counts now
};

namespace pid_budget_detail {

inline std::optional<long long> read_number(const std::string& path) {
  std::ifstream f(path);
  long long v;
  if (f >> v) return v;
  return std::nullopt;
}

// Threads that exist on the host: /proc/loadavg's "running/total".
inline long long host_tasks() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c, rt;
  if (!(f >> a >> b >> c >> rt)) return 0;
  const auto slash = rt.find('/');
  return slash == std::string::npos ? 0 : std::atoll(rt.c_str() + slash + 1);
}

// Threads of the processes of user `uid` (each /proc/<pid>/task has one
// directory a thread, so its link count is threads + 2).
inline long long user_tasks(uid_t uid) {
  long long n = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    struct stat st {
    }, task{};
    if (::stat(dir.c_str(), &st) == 0 && st.st_uid == uid && ::stat((dir + "/task").c_str(), &task) == 0)
      n += task.st_nlink > 2 ? static_cast<long long>(task.st_nlink) - 2 : 1;
  }
  ::closedir(d);
  return n;
}

// The pids controller's limits on this process's cgroup and its ancestors
// (cgroup v1 "pids" hierarchy, or v2's, wherever it is mounted).
inline void cgroup_limits(std::vector<pid_limit>& out) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::vector<std::string> roots;
    if (controllers.empty()) roots = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}; // v2
    else if (controllers == "pids" || controllers.find("pids,") == 0 || controllers.find(",pids") != std::string::npos)
      roots = {"/sys/fs/cgroup/pids", "/sys/fs/cgroup/" + controllers};
    for (const auto& root : roots) {
      for (std::string p = path;;) {
        const std::string dir = root + (p == "/" ? "" : p);
        std::ifstream max(dir + "/pids.max");
        std::string v;
        if (max >> v && v != "max")
          if (auto cur = read_number(dir + "/pids.current"))
            out.push_back({"pids.max of cgroup " + dir, std::atoll(v.c_str()), *cur});
        if (p == "/" || p.empty()) break;
        const auto up = p.rfind('/');
        p = up == 0 || up == std::string::npos ? "/" : p.substr(0, up);
      }
    }
  }
}

} // namespace pid_budget_detail

/// The limits on new threads that apply to this process and its children,
/// each with what it counts now; RLIMIT_NPROC only where the kernel applies
/// it (not to root), and counted (a walk of /proc) only when it is below the
/// host's threads plus `need`: else no count of the user's can reach it.
/// A few small reads of /proc and /sys. Example: `for (auto& l : pid_limits(100)) ...`.
inline std::vector<pid_limit> pid_limits(long long need = 0) {
  using namespace pid_budget_detail;
  std::vector<pid_limit> out;
  const long long host = host_tasks();
  if (auto v = read_number("/proc/sys/kernel/pid_max")) out.push_back({"kernel.pid_max", *v, host});
  if (auto v = read_number("/proc/sys/kernel/threads-max")) out.push_back({"kernel.threads-max", *v, host});
  cgroup_limits(out);
  rlimit lim{};
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      static_cast<long long>(lim.rlim_cur) < host + need)
    out.push_back({"RLIMIT_NPROC (ulimit -u)", static_cast<long long>(lim.rlim_cur), user_tasks(::getuid())});
  return out;
}

/// Threads a worker holds when idle: fiber's two (the main thread, waiting
/// for work, and the runtime's, whose reactor carries the worker's dialled
/// link). A worker that listens (hosts a Queue, a Manager) starts nng's
/// threads as well; those are not counted. Example: `worker_threads() * n`.
constexpr std::size_t worker_threads() noexcept { return 2; }

/// Before starting `workers` workers on this host: throws backend_error
/// naming `who`, the first limit their threads (worker_threads() each, and
/// headroom) would pass, and how to raise it — before anything has started.
/// Example: `reserve_threads(64, "fiber::Pool pool-1")`.
inline void reserve_threads(std::size_t workers, const std::string& who) {
  if (workers == 0) return;
  const std::size_t each = worker_threads();
  const long long need = static_cast<long long>(workers * each) + 64; // headroom: the master's own, tools
  for (const auto& l : pid_limits(need))
    if (l.used + need > l.limit)
      throw backend_error(who + ": needs about " + std::to_string(need) + " more threads (" + std::to_string(each) +
                          " a worker), but " + l.name + " is " + std::to_string(l.limit) + " with " +
                          std::to_string(l.used) + " in use; raise it or start fewer workers");
}

} // namespace fiber::detail
