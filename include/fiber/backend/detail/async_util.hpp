// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/async_util.hpp
/// Small pieces the HTTP-driven backends share: a move-only std::function
/// (Asio 1.22 has no any_completion_handler) and the glue that turns an Asio
/// completion handler into one, completing on the handler's own executor;
/// the text of an exception_ptr and the HTTP status of an API error in one;
/// capped exponential back-off with jitter; a call whose exception is logged
/// and skipped (odd API documents).

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

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

template <class Signature>
class unique_function;

/// std::function for move-only callables (completion handlers, lambdas that
/// own a handler). Empty when default-constructed or moved from.
template <class R, class... A>
class unique_function<R(A...)> {
  struct base {
    virtual ~base() = default;
    virtual R call(A&&... a) = 0;
  };
  template <class F>
  struct holder final : base {
    F f;
    explicit holder(F&& x) : f(std::move(x)) {}
    R call(A&&... a) override { return f(std::forward<A>(a)...); }
  };
  std::unique_ptr<base> p_;

public:
  unique_function() = default;
  unique_function(std::nullptr_t) noexcept {}
  template <class F>
    requires(!std::is_same_v<std::decay_t<F>, unique_function> && std::is_invocable_r_v<R, std::decay_t<F>&, A...>)
  unique_function(F&& f) : p_(std::make_unique<holder<std::decay_t<F>>>(std::decay_t<F>(std::forward<F>(f)))) {}
  unique_function(unique_function&&) noexcept = default;
  unique_function& operator=(unique_function&&) noexcept = default;

  explicit operator bool() const noexcept { return p_ != nullptr; }
  R operator()(A... a) { return p_->call(std::forward<A>(a)...); }
};

/// Wraps an Asio completion handler: calling the result posts `handler(args...)`
/// to the handler's associated executor (default `io_ex`), and keeps that
/// executor's work counted until then (as Asio's own operations do). Call it
/// at most once.
template <class... Args, class Handler, class IoExecutor>
unique_function<void(Args...)> bind_completion(Handler&& handler, const IoExecutor& io_ex) {
  auto work = asio::make_work_guard(asio::get_associated_executor(handler, io_ex));
  return [h = std::forward<Handler>(handler), work = std::move(work)](Args... args) mutable {
    auto ex = work.get_executor();
    asio::post(ex, [h = std::move(h), t = std::make_tuple(std::move(args)...)]() mutable {
      std::apply([&](auto&&... a) { std::move(h)(std::move(a)...); }, std::move(t));
    });
    work.reset();
  };
}

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
