// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/worker_env.hpp
/// The FIBER_INTERNAL_* variables a backend starts a worker with: read once,
/// before user code runs, and removed from the environment, so that nothing a
/// target starts inherits them (a fiber program it runs is a master of its own).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

extern char** environ;

namespace fiber::detail {

/// What a worker was started with; all empty in a master.
struct worker_env {
  std::string master;          ///< URL to dial (FIBER_INTERNAL_MASTER); empty: not a worker
  std::string secret;          ///< the run's secret, when it came in the environment (cluster jobs)
  std::string secret_file;     ///< where it is read: /proc/PID/fd/N of a memfd (jobs on the master's machine)
  std::uint64_t worker_id = 0; ///< FIBER_INTERNAL_WORKER_ID: the master's number for this worker
  std::string name, run_dir;
  std::string parent_name, parent_pid, parent_host; ///< for fiber::parent_process()
  std::string worker_nonce;                         ///< one-time nonce for the first proof (local workers)
  std::string master_aliases; ///< the master's other URLs (space-separated), reached through `master` instead
  std::string relay;          ///< the run's relay on this host (abstract://, the `relay` key; relay.hpp); empty: none
  std::string registry_salt;  ///< tests: pretend to be another build
  int link_fd = -1;           ///< the inherited socket to the master (local jobs; inherited_link.hpp); -1: none
  int reply_fd = -1;          ///< a manager process's inherited reply line (reply_line.hpp); -1: none
  bool pdeathsig = false;     ///< die with the parent (local workers)

  bool is_worker() const noexcept { return !master.empty(); }
};

/// [begin, end) of the environment block the kernel gave this process
/// (/proc/self/stat fields 50 and 51); {0, 0} when unknown.
inline std::pair<std::uintptr_t, std::uintptr_t> initial_environment_block() {
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return {0, 0};
  char buf[2048];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')'); // the name may hold spaces and parentheses
  std::uintptr_t v[52] = {};
  for (int field = 2; p && field < 51;) { // after ')' comes field 3
    p = std::strchr(p + 1, ' ');
    if (!p) break;
    ++field;
    v[field] = std::uintptr_t(std::strtoull(p + 1, nullptr, 10));
  }
  return {v[50], v[51]};
}

/// Reads every FIBER_INTERNAL_* variable and removes it from the
/// environment. Values that authenticate (the secret, the nonce) are also
/// overwritten where the kernel keeps the initial environment, which
/// /proc/<pid>/environ shows to other processes.
inline worker_env take_worker_environment() {
  worker_env w;
  struct field {
    std::string_view name;
    std::string* to;
    bool wipe;
  };
  std::string pdeath, link_fd, reply_fd, worker_id;
  const field fields[] = {{"MASTER", &w.master, false},
                          {"SECRET", &w.secret, true},
                          {"SECRET_FILE", &w.secret_file, false},
                          {"WORKER_ID", &worker_id, false},
                          {"WORKER_NAME", &w.name, false},
                          {"RUN_DIR", &w.run_dir, false},
                          {"PARENT_NAME", &w.parent_name, false},
                          {"PARENT_PID", &w.parent_pid, false},
                          {"PARENT_HOST", &w.parent_host, false},
                          {"WORKER_NONCE", &w.worker_nonce, true},
                          {"MASTER_ALIASES", &w.master_aliases, false},
                          {"RELAY", &w.relay, false},
                          {"REGISTRY_SALT", &w.registry_salt, false},
                          {"LINK_FD", &link_fd, false},
                          {"REPLY_FD", &reply_fd, false},
                          {"PDEATHSIG", &pdeath, false}};
  constexpr std::string_view prefix = "FIBER_INTERNAL_";
  std::vector<std::string> names;
  std::pair<std::uintptr_t, std::uintptr_t> block{0, 0};
  bool block_read = false;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (!kv.starts_with(prefix) || eq == std::string_view::npos) continue;
    names.emplace_back(kv.substr(0, eq));
    for (const auto& f : fields) {
      if (kv.substr(prefix.size(), eq - prefix.size()) != f.name) continue;
      *f.to = std::string(kv.substr(eq + 1));
      if (!f.wipe) break;
      if (!block_read) block = initial_environment_block(), block_read = true;
      const auto at = reinterpret_cast<std::uintptr_t>(*e);
      if (at >= block.first && at + kv.size() < block.second) std::memset(*e + eq + 1, 0, kv.size() - eq - 1);
      break;
    }
  }
  for (const auto& n : names) ::unsetenv(n.c_str());
  w.pdeathsig = !pdeath.empty();
  auto fd_of = [](const std::string& v) {
    char* end = nullptr;
    const long fd = v.empty() ? -1 : std::strtol(v.c_str(), &end, 10);
    return !v.empty() && !*end && fd >= 3 && fd <= 1 << 24 ? int(fd) : -1;
  };
  w.worker_id = std::strtoull(worker_id.c_str(), nullptr, 10);
  w.link_fd = fd_of(link_fd);
  w.reply_fd = fd_of(reply_fd);
  return w;
}

/// This process's worker environment, taken on first use. Any thread.
inline const worker_env& worker_environment() {
  static const worker_env w = take_worker_environment();
  return w;
}

/// Takes the worker environment before the program's own static
/// initializers run (constructors of priority 101 run before default ones).
[[gnu::constructor(101)]] inline void take_worker_environment_early() { (void)worker_environment(); }

} // namespace fiber::detail
