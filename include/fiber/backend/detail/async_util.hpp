// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/async_util.hpp
/// Small pieces the HTTP-driven backends share: the text of an exception_ptr
/// and the HTTP status of an API error in one; capped exponential back-off
/// with jitter; a call whose exception is logged and skipped (odd API
/// documents). Their completions are detail/async_op.hpp's.

#include <fiber/detail/async_op.hpp>
#include <fiber/detail/unique_function.hpp>
#include <fiber/log.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <random>
#include <string_view>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace fiber::detail {

/// The message of the exception `e` holds, or `fallback` when `e` is null or
/// holds something that is not a std::exception.
inline std::string exception_text(std::exception_ptr e, const char* fallback) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
  }
  return fallback;
}

/// The HTTP status an API error `E` (with `long status() const`) in `e`
/// carries (0: the call got no answer), or -1 when `e` holds something else.
template <class E>
long error_status(std::exception_ptr e) noexcept {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const E& x) {
    return x.status();
  } catch (...) {
  }
  return -1;
}

/// Wait before retry number `attempt` (0 first): `first` doubling up to
/// `cap`, drawn uniformly from its upper half (so that many clients that
/// failed together do not retry together). Any thread.
inline std::chrono::milliseconds backoff_delay(int attempt, std::chrono::milliseconds first,
                                               std::chrono::milliseconds cap) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  auto d = first;
  for (int i = 0; i < attempt && d < cap; ++i) d *= 2;
  d = std::min(d, cap);
  std::uniform_int_distribution<long long> half(d.count() / 2, d.count());
  return std::chrono::milliseconds(half(rng));
}

/// Runs `f()`; an exception it throws is logged as a warning ("<what>:
/// <message>; skipped") instead of propagating. Returns whether `f` returned.
/// For handlers of documents an API server sent, which must never stop a
/// stream or the runtime thread.
template <class F>
bool skip_on_error(std::string_view what, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return true;
  } catch (const std::exception& e) {
    log(log_level::warning, what, ": ", e.what(), "; skipped");
  } catch (...) {
    log(log_level::warning, what, ": unknown error; skipped");
  }
  return false;
}

/// A handler that runs `f(*owner, args...)` while `owner` lives and
/// `stopping(*owner)` is false, and does nothing otherwise.
template <class T, class Stopping, class F>
auto guarded_by(std::weak_ptr<T> owner, Stopping stopping, F f) {
  return [w = std::move(owner), stopping, f = std::move(f)](auto&&... a) mutable {
    auto self = w.lock();
    if (!self || stopping(*self)) return;
    f(*self, std::forward<decltype(a)>(a)...);
  };
}

} // namespace fiber::detail
