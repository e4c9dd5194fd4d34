// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/blocking_result.hpp
/// The one blocking wait: an outcome handed from fiber's runtime thread to
/// the threads that wait for it, the exception moved in under the lock.

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <utility>
#include <variant>

namespace fiber::detail {

/// One outcome (a value of `R`, or an exception) that one thread sets and
/// others wait for. Thread-safe. The exception is moved in (set it after
/// the catch block that caught it has ended), so the setting thread keeps
/// no reference to it: the waiter alone reads it and drops it. take() is
/// the form for exceptions; get() reads a value again, and rethrows a
/// stored exception only to readers that outlive every other owner (see
/// docs/ARCHITECTURE.md, "One rule for exceptions").
/// Share it through a std::shared_ptr when the setter may outlive the waiter;
/// a waiter may own it alone when the setter is done with it once set.
template <class R = std::monostate>
class blocking_result {
public:
  /// Stores the outcome (`e` if set, else `v`) and wakes every waiter. The
  /// first outcome stored counts; later ones are ignored. Any thread.
  void set(std::exception_ptr e, R v = R{}) {
    if (e) set_exception(std::move(e));
    else set_value(std::move(v));
  }
  /// Stores a value, as set().
  void set_value(R v) {
    store([&] { v_.emplace(std::move(v)); });
  }
  /// Stores an exception, as set().
  void set_exception(std::exception_ptr e) {
    store([&] { e_ = std::move(e); });
  }
  /// Whether an outcome is stored; never blocks.
  bool ready() const {
    std::lock_guard lk(m_);
    return done_;
  }
  /// Whether it is ready with an exception; never blocks.
  bool failed() const {
    std::lock_guard lk(m_);
    return done_ && e_;
  }
  /// Blocks until ready.
  void wait() const {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return done_; });
  }
  /// Blocks at most `timeout`; whether it is ready.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    std::unique_lock lk(m_);
    return cv_.wait_for(lk, timeout, [&] { return done_; });
  }
  /// Waits, then moves the value out or rethrows the exception, which is
  /// taken out under the lock: one reader, once.
  R take() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return done_; });
    if (auto e = std::exchange(e_, nullptr)) {
      lk.unlock();
      std::rethrow_exception(std::move(e));
    }
    return std::move(*v_);
  }
  /// Waits, then returns a copy of the value or rethrows the exception: may
  /// be called again, from any thread.
  R get() const {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return done_; });
    if (e_) {
      auto e = e_;
      lk.unlock();
      std::rethrow_exception(std::move(e));
    }
    return *v_;
  }

private:
  // Notifies under the lock: a waiter may destroy *this as soon as it wakes.
  template <class F>
  void store(F&& f) {
    std::lock_guard lk(m_);
    if (done_) return;
    f();
    done_ = true;
    cv_.notify_all();
  }

  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr e_;
  std::optional<R> v_;
};

} // namespace fiber::detail
