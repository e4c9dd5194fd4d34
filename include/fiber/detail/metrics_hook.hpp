// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/metrics_hook.hpp
/// How fiber::init starts the metrics endpoint without depending on it: the
/// starter fiber/metrics.hpp registers, called when metrics_address is set.

#include <fiber/config.hpp>
#include <fiber/error.hpp>

#include <atomic>

namespace fiber::detail {

/// The starter; null unless a file of the program includes fiber/metrics.hpp.
inline std::atomic<void (*)()>& metrics_starter() {
  static std::atomic<void (*)()> f{nullptr};
  return f;
}

/// In the master, from fiber::init: starts the endpoint when metrics_address
/// is set. Throws fiber::config_error when it is set and no starter is linked.
inline void start_metrics_if_configured() {
  auto address = config_get("metrics_address");
  if (!address || address->empty()) return;
  auto start = metrics_starter().load();
  if (!start)
    throw config_error("fiber: metrics_address is set, but this program has no metrics endpoint: include "
                       "<fiber/metrics.hpp> in one of its files and link the CMake target fiber::metrics");
  start();
}

} // namespace fiber::detail
