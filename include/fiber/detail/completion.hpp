// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/completion.hpp
/// A type-erased, move-only completion handler with Asio's outstanding-work
/// tracking: how the transport stores and completes its users' handlers.

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

/// How a stored handler is completed: `dispatch` when we are running on the
/// stream's executor after an nng completion hopped there; `post` from an
/// initiating function or close() (never call user code inline from those).
enum class via { dispatch, post };

/// A type-erased, move-only completion handler plus the outstanding work
/// that keeps both the I/O executor and the handler's executor alive while
/// the operation is pending.
template <class... Args>
class completion {
  struct base {
    virtual ~base() = default;
    virtual void invoke(via v, Args&&... args) = 0;
  };
  template <class Handler>
  struct model final : base {
    using hex_t = asio::associated_executor_t<Handler, asio::any_io_executor>;
    using work_t =
        std::decay_t<decltype(asio::prefer(std::declval<const hex_t&>(), asio::execution::outstanding_work.tracked))>;
    model(Handler&& h, const asio::any_io_executor& io)
        : io_work(asio::prefer(io, asio::execution::outstanding_work.tracked)),
          work(asio::prefer(asio::get_associated_executor(h, io), asio::execution::outstanding_work.tracked)),
          handler(std::move(h)) {}
    void invoke(via v, Args&&... args) override {
      auto io = std::move(io_work); // released once the handler is queued/run
      auto ex = std::move(work);
      auto f = [h = std::move(handler), ... a = std::move(args)]() mutable { std::move(h)(std::move(a)...); };
      if (v == via::post) asio::post(ex, std::move(f));
      else asio::dispatch(ex, std::move(f));
    }
    asio::any_io_executor io_work;
    work_t work;
    Handler handler;
  };

public:
  completion() = default;
  template <class Handler>
  completion(Handler&& h, const asio::any_io_executor& io)
      : slot_(asio::get_associated_cancellation_slot(h)),
        p_(std::make_unique<model<std::decay_t<Handler>>>(std::move(h), io)) {}

  explicit operator bool() const noexcept { return p_ != nullptr; }
  asio::cancellation_slot& slot() noexcept { return slot_; }

  void operator()(via v, Args... args) {
    if (slot_.is_connected()) slot_.clear(); // the op is over: drop its canceller
    auto p = std::move(p_);
    p->invoke(v, std::move(args)...);
  }

private:
  asio::cancellation_slot slot_;
  std::unique_ptr<base> p_;
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
