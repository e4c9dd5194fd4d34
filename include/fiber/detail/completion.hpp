// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/completion.hpp
/// How the transport stores and completes its users' handlers: a type-erased
/// async_op, and the glue of handles to their shared state.

#include <fiber/detail/async_op.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>

namespace fiber::detail {

/// A type-erased, move-only completion handler (an async_op) plus outstanding
/// work on the I/O executor, which keeps both executors alive while the
/// operation is pending.
template <class... Args>
class completion {
public:
  completion() = default;
  template <class Handler>
  completion(Handler&& h, const asio::any_io_executor& io)
      : io_work_(asio::prefer(io, asio::execution::outstanding_work.tracked)) {
    async_op<std::decay_t<Handler>> op(std::forward<Handler>(h), io);
    slot_ = op.slot();
    f_ = [op = std::move(op)](via v, Args... a) mutable { op.complete(v, std::move(a)...); };
  }

  explicit operator bool() const noexcept { return static_cast<bool>(f_); }
  /// The handler's cancellation slot; cleared just before the handler runs.
  asio::cancellation_slot& slot() noexcept { return slot_; }

  void operator()(via v, Args... args) {
    auto io = std::move(io_work_); // released once the handler is queued/run
    auto f = std::move(f_);
    f(v, std::move(args)...);
  }

private:
  asio::any_io_executor io_work_;
  asio::cancellation_slot slot_;
  unique_function<void(via, Args...)> f_;
};

/// Completes a handler with an error when there is no object to run on
/// (operation started on an empty/moved-from stream or listener).
template <class Handler, class... Args>
void post_error(Handler&& h, std::error_code ec, Args&&... args) {
  auto ex = asio::get_associated_executor(h);
  asio::post(ex,
             [h = std::move(h), ec, ... a = std::forward<Args>(args)]() mutable { std::move(h)(ec, std::move(a)...); });
}

/// Initiates an operation of a handle's shared state `core` for `token`,
/// completing with void(std::error_code, Results...): `start(*core, c)`
/// with the handler wrapped as a completion `c` on the core's executor; an
/// empty handle (null `core`) completes with bad_descriptor instead.
/// `start` is called at most once and may own the operation's arguments.
template <class... Results, class Token, class Core, class Start>
auto initiate_on_core(Token&& token, std::shared_ptr<Core> core, Start&& start) {
  return asio::async_initiate<Token, void(std::error_code, Results...)>(
      [core = std::move(core)](auto handler, std::decay_t<Start> start) {
        if (!core) return post_error(std::move(handler), asio::error::bad_descriptor, Results{}...);
        std::move(start)(*core, completion<std::error_code, Results...>(std::move(handler), core->executor()));
      },
      token, std::forward<Start>(start));
}

/// The handle side of a stream or listener: owns a reference to the shared
/// state `Core`, closes it when destroyed or assigned over, and is empty
/// when default-constructed or moved from. Move-only.
template <class Core>
class core_handle {
public:
  using executor_type = asio::any_io_executor;

  core_handle() noexcept = default;
  core_handle(core_handle&&) noexcept = default;
  core_handle& operator=(core_handle&& o) noexcept {
    if (this != &o) {
      close();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  ~core_handle() { close(); }

  executor_type get_executor() const noexcept { return core_ ? core_->executor() : executor_type{}; }

  /// Closes; pending operations complete with operation_aborted.
  void close() noexcept {
    if (core_) core_->close();
  }

protected:
  explicit core_handle(std::shared_ptr<Core> c) noexcept : core_(std::move(c)) {}
  std::shared_ptr<Core> core_;
};

} // namespace fiber::detail
