// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/async_op.hpp
/// The one asynchronous operation under every async_* of fiber: a handler,
/// the outstanding work that keeps its executor alive, an optional
/// cancellation action, completed exactly once (Asio's detail/handler_work.hpp).

#include <fiber/detail/unique_function.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

#include <type_traits>
#include <utility>

namespace fiber::detail {

/// How an operation's handler is run: `dispatch` when the caller already
/// runs on an executor of fiber's (after a reply or an nng completion hopped
/// there); `post` from an initiating function or close(), which must never
/// run user code inline.
enum class via { dispatch, post };

/// One pending operation: `Handler`, outstanding work on its associated
/// executor (default `io`, the I/O object's), and its associated cancellation
/// slot. Move-only; not thread-safe (the owner serializes its calls).
///
/// Cancellation: `on_cancel(f)` (or `slot().emplace<C>(…)`) installs the
/// action the slot's signal runs; the slot is cleared on the handler's
/// executor just before the handler runs, where cancellation is emitted.
/// An op destroyed without completing releases its work; its handler is
/// never called.
template <class Handler, class IoExecutor = asio::any_io_executor>
class async_op {
public:
  /// The executor the handler runs on.
  using executor_type = asio::associated_executor_t<Handler, IoExecutor>;

  async_op(Handler h, const IoExecutor& io)
      : work_(asio::prefer(asio::get_associated_executor(h, io), asio::execution::outstanding_work.tracked)),
        slot_(asio::get_associated_cancellation_slot(h)),
        handler_(std::move(h)) {}

  /// The handler's executor (its work tracked), for the steps an operation
  /// runs there before it completes.
  const auto& get_executor() const noexcept { return work_; }

  /// Whether a cancellation action can be installed (the handler has a slot).
  bool cancellable() const noexcept { return slot_.is_connected(); }

  /// Cancellation of any type runs `f(asio::cancellation_type)`; replaces an
  /// earlier action. Nothing when the handler has no slot.
  template <class F>
  void on_cancel(F&& f) {
    if (!slot_.is_connected()) return;
    owns_slot_ = true;
    slot_.assign(std::forward<F>(f));
  }

  /// The handler's slot, for an action built in place; the op clears it.
  asio::cancellation_slot& slot() noexcept {
    owns_slot_ = slot_.is_connected();
    return slot_;
  }

  /// Runs `handler(args...)` on its executor (`v`: dispatch or post); the
  /// arguments are moved. Call once.
  template <class... Args>
  void complete(via v, Args... args) {
    auto ex = std::move(work_); // released once the handler is queued or has run
    auto f = [h = std::move(handler_), slot = owns_slot_ ? slot_ : asio::cancellation_slot(),
              ... a = std::move(args)]() mutable {
      if (slot.is_connected()) slot.clear(); // the op is over: drop its canceller
      std::move(h)(std::move(a)...);
    };
    if (v == via::post) asio::post(ex, std::move(f));
    else asio::dispatch(ex, std::move(f));
  }

private:
  using work_type = std::decay_t<decltype(asio::prefer(std::declval<const executor_type&>(),
                                                       asio::execution::outstanding_work.tracked))>;
  work_type work_;
  asio::cancellation_slot slot_;
  bool owns_slot_ = false;
  Handler handler_;
};

/// Wraps a completion handler as a callback: calling it posts
/// `handler(args...)` to the handler's associated executor (default `io`),
/// whose work is counted until then. Call it at most once. Cancellation
/// stays with the caller, who reads the slot before wrapping.
template <class... Args, class Handler, class IoExecutor>
unique_function<void(Args...)> bind_completion(Handler&& handler, const IoExecutor& io) {
  return [op = async_op<std::decay_t<Handler>, IoExecutor>(std::forward<Handler>(handler), io)](Args... args) mutable {
    op.complete(via::post, std::move(args)...);
  };
}

} // namespace fiber::detail
