// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/take_once.hpp
/// The first of several threads to stop a Pool or a RemoteManager takes its
/// core; the others get nothing and return.

#include <memory>
#include <mutex>
#include <utility>

namespace fiber::detail {

/// Under `m`: the first call raises `stopped` and returns `core`; later calls
/// return null. `take_once(m_, stopped_, core_)`.
template <class Core>
std::shared_ptr<Core> take_once(std::mutex& m, bool& stopped, const std::shared_ptr<Core>& core) {
  std::lock_guard lk(m);
  if (std::exchange(stopped, true)) return nullptr;
  return core;
}

} // namespace fiber::detail
