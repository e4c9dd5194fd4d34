// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/unique_function.hpp
/// std::function for move-only callables: how fiber stores a completion
/// handler or a callback that owns one (Asio 1.22 has no any_completion_handler).

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace fiber::detail {

template <class Signature>
class unique_function;

/// std::function for move-only callables (completion handlers, lambdas that
/// own a handler). Empty when default-constructed or moved from. Not
/// thread-safe; call it from one thread at a time.
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

} // namespace fiber::detail
