// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/environment.hpp
/// The environment a child process gets: the current one with a job's
/// variables applied; and this executable's own path.

#include <fiber/error.hpp>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

extern char** environ;

namespace fiber::detail {

/// The current environment with `overrides` applied ("K=V" strings).
inline std::vector<std::string> merged_environment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  std::set<std::string_view> replaced;
  for (auto& [k, v] : overrides) replaced.insert(k);
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!replaced.count(kv.substr(0, kv.find('=')))) out.emplace_back(kv);
  }
  for (auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

/// This executable's path (/proc/self/exe resolved). Throws backend_error.
inline std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw backend_error("cannot resolve /proc/self/exe: " + std::string(std::strerror(errno)));
  return std::string(buf, std::size_t(n));
}

} // namespace fiber::detail
