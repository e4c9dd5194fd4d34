// SPDX-License-Identifier: BSL-1.0
#pragma once
// Helpers shared by fiber's tests: checking that no child outlives a test,
// polling with a deadline, and reading what an aborted operation reports.

#include <catch2/catch.hpp>

#include <fiber/config.hpp>

#include <asio/error.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <dirent.h>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <string>
#include <system_error>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace fiber_test {

/// Sets configuration keys for one test and puts the old values back.
struct config_scope {
  std::vector<std::pair<std::string, std::string>> old;
  config_scope(std::initializer_list<std::pair<const char*, const char*>> kv) {
    for (auto& [k, v] : kv) {
      old.emplace_back(k, fiber::detail::config_string(k));
      fiber::set_config(k, v);
    }
  }
  ~config_scope() {
    for (auto& [k, v] : old) fiber::set_config(k, v);
  }
  config_scope(const config_scope&) = delete;
  config_scope& operator=(const config_scope&) = delete;
};

/// 0, 1, ..., n - 1: the inputs of many maps.
inline std::vector<int> iota(int n) {
  std::vector<int> v(std::size_t(n), 0);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

inline bool process_exists(std::int64_t pid) { return ::kill(pid_t(pid), 0) == 0 || errno == EPERM; }

/// Children of this process, as the kernel lists them (zombies included).
inline std::vector<int> children() {
  std::vector<int> out;
  std::ifstream in("/proc/self/task/" + std::to_string(::getpid()) + "/children");
  // children of every thread: the runtime thread spawns them
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/children");
    int pid;
    while (f >> pid) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

/// Wait (bounded) until pid no longer exists. Exit is asynchronous to the
/// kernel's bookkeeping, so this polls /proc with a deadline, not a sleep.
inline bool process_gone(std::int64_t pid, std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (process_exists(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1)); // a poll that leaves the cores to fiber's threads
  }
  return true;
}

/// Polls `cond` until it holds or `limit` passes (a deadline, not a sleep).
template <class F>
bool eventually(F cond, std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1)); // a poll that leaves the cores to fiber's threads
  }
  return true;
}

/// The next item of a fiber::Queue within 60 s: a child that never answers
/// fails the test instead of hanging it.
template <class Q>
auto next(Q& q) {
  auto v = q.get(std::chrono::seconds(60));
  REQUIRE(v);
  return std::move(*v);
}

/// Whether `e` is the operation_aborted error a cancelled async_* operation
/// completes with.
inline bool is_aborted(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& s) {
    return s.code() == asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

inline void require_no_children(std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!children().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  INFO("children still alive: " << children().size());
  REQUIRE(children().empty());
}

} // namespace fiber_test
