// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/owned_callback.hpp
/// The completion a byte_stream's read or write and a byte_acceptor's
/// accept take: an owner kept alive and a function pointer, no allocation.

#include <memory>
#include <utility>

namespace fiber::detail {

/// What runs when an asynchronous operation ends: `fn(owner, args...)`,
/// `owner` kept alive until then and dropped after the call, on the thread
/// that made it. Move-only in use; one call at most.
template <class... Args>
struct owned_callback {
  std::shared_ptr<void> owner;
  void (*fn)(void* owner, Args...) = nullptr;

  void operator()(Args... args) {
    auto o = std::move(owner);
    fn(o.get(), std::forward<Args>(args)...);
  }

  /// The callback calling `(owner->*Member)(args...)`.
  /// Example: `io_done::bind<&stream_state::on_recv>(shared_from_this())`.
  template <auto Member, class T>
  static owned_callback bind(std::shared_ptr<T> owner) {
    return {std::move(owner),
            [](void* o, Args... args) { (static_cast<T*>(o)->*Member)(std::forward<Args>(args)...); }};
  }
};

} // namespace fiber::detail
