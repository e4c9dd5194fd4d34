// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file synchronize.hpp
/// Python's multiprocessing.synchronize across processes and machines:
/// fiber::Lock, RLock, Semaphore, BoundedSemaphore, Condition, Event, Barrier.
///
/// ```cpp
/// fiber::Lock lock;                                  // lives in this process
/// fiber::Process p{fiber::target<&worker>, lock};    // handles are serializable
/// { std::lock_guard g{lock}; ... }                    // Lock, RLock, Semaphore are Lockable
/// bool got = lock.acquire(std::chrono::milliseconds{50});   // false on timeout
/// co_await lock.async_acquire(asio::use_awaitable);  lock.release();
/// fiber::Condition cond{lock};  cond.wait_for([&] { return ready(); }, 1s);
/// fiber::Barrier bar{4};  std::size_t i = bar.wait();   // 0..3, in arrival order
/// ```
///
/// **Where they live.** Like Queue items: each object is a service on the
/// fiber runtime thread of the process that created it (constructed it, or
/// first used a default-constructed handle); other processes reach it through
/// their handle, which names it (creator's URL + id). A copy of a handle, or a
/// serialized copy passed to a Process or a Pool task, names the same object.
/// The creating process must outlive the object's users and keep a handle
/// while others use it: when its last handle there is destroyed, waiting
/// calls get fiber::worker_lost and later ones fiber::error; if it exits,
/// every other process gets fiber::worker_lost.
///
/// **Waiting.** Every wait happens at the service, first come first served;
/// a timeout is the service's, so a permit is never granted and then
/// dropped (while the link to the service's process is still being set up,
/// a timed acquire or wait returns false at its own timeout, its request
/// withdrawn unsent). Every blocking call has a timeout overload returning false on
/// timeout (Barrier: the timeout breaks it) and an `async_` form taking an
/// Asio completion token: its handler runs on its associated executor
/// (default: fiber's runtime executor); per-operation cancellation (any
/// type) withdraws the request: if the service granted it first, the
/// operation completes normally, otherwise with
/// std::system_error(asio::error::operation_aborted).
///
/// **Owners.** A holder is a (process, thread) pair: the thread that called
/// acquire, or that initiated async_acquire. Blocking calls are one round trip
/// to the owning process (~5 µs in it, ~45 µs from another on one machine).
///
/// **A holder that ends.** When a process holding a Lock, an RLock or
/// Semaphore permits is known dead (its job ended, or the run's master lost
/// it), what it held is released, the next waiter gets it, and the owner
/// logs a warning naming the lost holder. Python's multiprocessing leaves
/// such a lock locked forever. Semaphore permits are given back as many as
/// that process acquired and did not release, never beyond the initial
/// value (a Semaphore used to signal gets nothing back). A holder whose link
/// to the owner is lost but who lives keeps what it holds; one judged dead
/// wrongly is fenced (fiber::hold_revoked_error). A process that dies while
/// waiting on a Barrier breaks it.
///
/// **Errors.** std::logic_error: misuse Python refuses (releasing an
/// unlocked Lock, an RLock not held by the calling thread, a
/// BoundedSemaphore beyond its value, waiting on or notifying a Condition
/// whose lock the caller does not hold), and a blocking call on fiber's
/// runtime thread (e.g. in a completion handler running there; use the
/// async_ forms). fiber::broken_barrier_error from Barrier waits.
/// fiber::hold_revoked_error from release, Condition::wait and notify of a
/// process whose hold was taken back while it was cut off (nothing released).
/// fiber::worker_lost / fiber::error: the creating process is gone, or
/// dropped its last handle.
///
/// **Thread safety.** A handle may be used and copied from any thread
/// concurrently.

#include <fiber/detail/barrier_service.hpp>
#include <fiber/detail/event_service.hpp>
#include <fiber/detail/permit_service.hpp>
#include <fiber/detail/sync_client.hpp>
#include <fiber/log.hpp>
#include <fiber/serialize.hpp>

#include <asio/async_result.hpp>
#include <asio/dispatch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace fiber {

class Condition;

/// Base of Lock, RLock, Semaphore and BoundedSemaphore (Python's SemLock):
/// acquire, release, the Lockable interface, and the async forms. See the
/// file's documentation for where the object lives and what happens when a
/// holder ends.
class SemLock {
public:
  /// Blocks until a permit is free and takes it (returns true); with
  /// `blocking` false, takes one only if it is free now.
  bool acquire(bool blocking = true) { return acquire_ms(blocking ? -1 : 0); }
  /// Waits at most `timeout` for a permit; false if none came (nothing taken).
  template <class Rep, class Period>
  bool acquire(std::chrono::duration<Rep, Period> timeout) {
    return acquire_ms(detail::timeout_ms(timeout));
  }
  /// Gives a permit back. Throws std::logic_error: a Lock that is not
  /// locked (any process may release a locked Lock, as in Python), an RLock
  /// not held by the calling thread, a BoundedSemaphore at its initial value.
  void release() { (void)h_.call(name("::release").c_str(), detail::sync_op::release, -1); }

  /// Lockable: acquire().
  void lock() { acquire(); }
  /// Lockable: acquire(false).
  bool try_lock() { return acquire(false); }
  /// Lockable: release(), for std::lock_guard / std::unique_lock, which
  /// cannot take an exception: a failure is logged (level error) instead.
  void unlock() noexcept {
    try {
      release();
    } catch (const std::exception& e) {
      detail::log(log_level::error, name("::unlock"), ": ", e.what());
    }
  }

  /// Takes a permit asynchronously. Completion signature
  /// `void(std::exception_ptr)`; the holder is the thread that calls this.
  template <class Token>
  auto async_acquire(Token&& token) {
    return h_.async_plain(std::forward<Token>(token), detail::sync_op::acquire);
  }
  /// The same, waiting at most `timeout`. Completion signature
  /// `void(std::exception_ptr, bool acquired)`.
  template <class Rep, class Period, class Token>
  auto async_acquire(std::chrono::duration<Rep, Period> timeout, Token&& token) {
    return h_.async_timed(std::forward<Token>(token), detail::sync_op::acquire, detail::timeout_ms(timeout));
  }

  /// True if both handles name the same object.
  friend bool operator==(const SemLock& a, const SemLock& b) { return a.h_.same(b.h_); }

protected:
  /// A new object of kind `k` with `value` permits (locks: 1).
  SemLock(detail::permit_kind k, std::uint64_t value)
      : h_([k, value](asio::any_io_executor ex) { return std::make_shared<detail::permit_service>(ex, k, value); },
           std::string(detail::permit_name(k)) +
               ": the object is gone (its last handle in the creating process was destroyed)"),
        kind_(k) {}

  /// "fiber::Lock" (the kind's name) followed by `member`, for messages.
  std::string name(const char* member) const { return std::string(detail::permit_name(kind_)) + member; }
  /// acquire with a timeout in milliseconds (-1: forever, 0: now).

  bool acquire_ms(std::int64_t ms) { return h_.call_done(name("::acquire").c_str(), detail::sync_op::acquire, ms); }

  /// Serialization: the service's URL and id, and the kind (checked on reading).
  void save(writer& w) const {
    h_.write(w);
    w.write(std::uint8_t(kind_));
  }
  /// Reads what save wrote; serialization_error for another kind.
  void load(reader& r) {
    h_.read(r);
    if (r.read<std::uint8_t>() != std::uint8_t(kind_))
      throw serialization_error(name(": the bytes name another kind of lock or semaphore"));
  }

  detail::sync_handle h_;    ///< the service and the requests to it
  detail::permit_kind kind_; ///< Lock, RLock, Semaphore or BoundedSemaphore

  friend class Condition;
};

/// multiprocessing.Lock: one permit, not re-entrant (a second acquire by
/// its holder waits forever, or until its timeout). Any process may release
/// it while it is locked.
class Lock : public SemLock {
public:
  /// An unlocked lock; its service starts in this process on first use.
  Lock() : SemLock(detail::permit_kind::lock, 1) {}
  /// Serialization hooks (see the file's documentation).
  friend void fiber_serialize(writer& w, const Lock& l) { l.save(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Lock& l) { l.load(r); }
};

/// multiprocessing.RLock: re-entrant for its owner, a (process, thread)
/// pair; released when the owner has released it as often as it acquired
/// it. Releasing it from another thread or process throws std::logic_error.
class RLock : public SemLock {
public:
  /// An unlocked lock; its service starts in this process on first use.
  RLock() : SemLock(detail::permit_kind::rlock, 1) {}
  /// Serialization hooks (see the file's documentation).
  friend void fiber_serialize(writer& w, const RLock& l) { l.save(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, RLock& l) { l.load(r); }
};

/// multiprocessing.Semaphore: a count of permits; release adds one (any
/// process may release, also beyond the initial value).
class Semaphore : public SemLock {
public:
  /// `value` permits (Python's default: 1).
  explicit Semaphore(std::size_t value = 1) : SemLock(detail::permit_kind::semaphore, value) {}
  /// Free permits now (approximate: others acquire and release meanwhile).
  std::size_t get_value() const {
    return std::size_t(h_.call("fiber::Semaphore::get_value", detail::sync_op::get_value, 0).result<std::uint64_t>());
  }
  /// Serialization hooks (see the file's documentation).
  friend void fiber_serialize(writer& w, const Semaphore& s) { s.save(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Semaphore& s) { s.load(r); }

protected:
  /// For BoundedSemaphore.
  Semaphore(detail::permit_kind k, std::size_t value) : SemLock(k, value) {}
};

/// multiprocessing.BoundedSemaphore: a Semaphore whose release throws
/// std::logic_error when every permit is already free (released more times
/// than acquired).
class BoundedSemaphore : public Semaphore {
public:
  /// `value` permits, at most (Python's default: 1).
  explicit BoundedSemaphore(std::size_t value = 1) : Semaphore(detail::permit_kind::bounded, value) {}
  /// Serialization hooks (see the file's documentation).
  friend void fiber_serialize(writer& w, const BoundedSemaphore& s) { s.save(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, BoundedSemaphore& s) { s.load(r); }
};

/// multiprocessing.Condition on a Lock or an RLock. It lives in its lock's
/// service, so that wait releases the lock, waits for a notify (or its
/// timeout, or cancellation) and takes the lock again in one step at the
/// service: no notify is lost between the release and the wait. Every wait
/// returns holding the lock again (RLock: at the depth it had). The caller
/// must hold the lock to wait or notify (else std::logic_error). Copies,
/// and serialized copies, are the same condition.
class Condition {
public:
  /// On a new RLock, as Python's Condition().
  Condition() : Condition(RLock{}) {}
  /// On `lock` (a handle: this condition and the caller share the lock).
  explicit Condition(const Lock& lock) : lock_(lock) {}
  /// On `lock`.
  explicit Condition(const RLock& lock) : lock_(lock) {}

  /// The lock's acquire (see SemLock::acquire).
  bool acquire(bool blocking = true) { return lock_.acquire(blocking); }
  /// The lock's acquire with a timeout.
  template <class Rep, class Period>
  bool acquire(std::chrono::duration<Rep, Period> timeout) {
    return lock_.acquire(timeout);
  }
  /// The lock's release.
  void release() { lock_.release(); }
  /// Lockable: the lock's.
  void lock() { lock_.lock(); }
  /// Lockable: the lock's.
  bool try_lock() { return lock_.try_lock(); }
  /// Lockable: the lock's (noexcept; failures are logged).
  void unlock() noexcept { lock_.unlock(); }

  /// Releases the lock, waits until notified, takes the lock again.
  void wait() { (void)wait_ms("fiber::Condition::wait", -1); }
  /// The same, waiting at most `timeout` for a notify: false if none came
  /// (the lock is held again either way).
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) {
    return wait_ms("fiber::Condition::wait", detail::timeout_ms(timeout));
  }

  /// Waits until `pred()` holds (checked with the lock held: first, then
  /// after each wakeup); returns its last value.
  template <class Pred>
  auto wait_for(Pred pred) -> std::decay_t<std::invoke_result_t<Pred&>> {
    auto r = pred();
    while (!r) {
      wait();
      r = pred();
    }
    return r;
  }
  /// The same for at most `timeout` in all; returns pred()'s last value
  /// (false-like if the time ran out first).
  template <class Pred, class Rep, class Period>
  auto wait_for(Pred pred, std::chrono::duration<Rep, Period> timeout) -> std::decay_t<std::invoke_result_t<Pred&>> {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::nanoseconds>(timeout);
    auto r = pred();
    while (!r) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= left.zero()) break;
      wait(left);
      r = pred();
    }
    return r;
  }

  /// Wakes up to `n` waiters (the oldest first); each returns once it holds
  /// the lock again, after the caller releases it.
  void notify(std::size_t n = 1) { send_notify("fiber::Condition::notify", n); }
  /// Wakes every waiter.
  void notify_all() { send_notify("fiber::Condition::notify_all", detail::notify_all_n); }

  /// wait() asynchronously. Completion signature `void(std::exception_ptr)`,
  /// once the lock is held again; cancelled: operation_aborted, also once
  /// the lock is held again.
  template <class Token>
  auto async_wait(Token&& token) {
    return lock_.h_.async_plain(std::forward<Token>(token), detail::sync_op::cond_wait, token_);
  }
  /// wait(timeout) asynchronously. Completion signature
  /// `void(std::exception_ptr, bool notified)`.
  template <class Rep, class Period, class Token>
  auto async_wait(std::chrono::duration<Rep, Period> timeout, Token&& token) {
    return lock_.h_.async_timed(std::forward<Token>(token), detail::sync_op::cond_wait, detail::timeout_ms(timeout),
                                token_);
  }
  /// wait_for(pred) asynchronously: `pred` runs on the handler's associated
  /// executor (with the lock held, in the name of the calling thread).
  /// Completion signature `void(std::exception_ptr, bool)` (pred's last value).
  template <class Pred, class Token>
  auto async_wait_for(Pred pred, Token&& token) {
    return async_wait_for_impl(std::move(pred), std::nullopt, std::forward<Token>(token));
  }
  /// wait_for(pred, timeout) asynchronously; signature as above.
  template <class Pred, class Rep, class Period, class Token>
  auto async_wait_for(Pred pred, std::chrono::duration<Rep, Period> timeout, Token&& token) {
    return async_wait_for_impl(std::move(pred),
                               std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::nanoseconds>(timeout),
                               std::forward<Token>(token));
  }

  /// True if both handles name the same condition.
  friend bool operator==(const Condition& a, const Condition& b) { return a.token_ == b.token_ && a.lock_ == b.lock_; }
  /// Serialization hooks: the lock, and the condition's name in it.
  friend void fiber_serialize(writer& w, const Condition& c) { c.save(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Condition& c) { c.load(r); }

private:
  void save(writer& w) const {
    w.write(std::uint8_t(lock_.kind_));
    lock_.save(w);
    w.write(token_);
  }
  void load(reader& r) {
    auto k = r.read<std::uint8_t>();
    if (k == std::uint8_t(detail::permit_kind::lock)) lock_ = Lock{};
    else if (k != std::uint8_t(detail::permit_kind::rlock))
      throw serialization_error("fiber::Condition: its lock must be a Lock or an RLock");
    lock_.load(r);
    token_ = r.read<std::uint64_t>();
  }

  bool wait_ms(const char* what, std::int64_t ms) {
    return lock_.h_.call_done(what, detail::sync_op::cond_wait, ms, token_);
  }
  void send_notify(const char* what, std::uint64_t n) {
    (void)lock_.h_.call(what, detail::sync_op::notify, -1, token_, n);
  }

  template <class Pred, class Token>
  auto async_wait_for_impl(Pred pred, std::optional<std::chrono::steady_clock::time_point> deadline, Token&& token);

  SemLock lock_;
  std::uint64_t token_ = detail::random_token();
};

/// multiprocessing.Event: a flag that set() raises and clear() lowers;
/// wait() returns once it is raised.
class Event {
public:
  /// A cleared event; its service starts in this process on first use.
  Event()
      : h_([](asio::any_io_executor ex) { return std::make_shared<detail::event_service>(ex); },
           "fiber::Event: the event is gone (its last handle in the creating process was destroyed)") {}

  /// Raises the flag; wakes every waiter.
  void set() { (void)h_.call("fiber::Event::set", detail::sync_op::set, -1); }
  /// Lowers the flag.
  void clear() { (void)h_.call("fiber::Event::clear", detail::sync_op::clear, -1); }
  /// The flag now.
  bool is_set() const { return h_.call("fiber::Event::is_set", detail::sync_op::is_set, -1).result<std::uint8_t>(); }
  /// Blocks until the flag is raised; returns true.
  bool wait() { return wait_ms(-1); }
  /// wait() asynchronously. Completion signature `void(std::exception_ptr)`.
  template <class Token>
  auto async_wait(Token&& token) {
    return h_.async_plain(std::forward<Token>(token), detail::sync_op::wait);
  }

  /// Waits at most `timeout`; false if the flag was not raised by then.
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) {
    return wait_ms(detail::timeout_ms(timeout));
  }
  /// wait(timeout) asynchronously. Completion signature
  /// `void(std::exception_ptr, bool set)`.
  template <class Rep, class Period, class Token>
  auto async_wait(std::chrono::duration<Rep, Period> timeout, Token&& token) {
    return h_.async_timed(std::forward<Token>(token), detail::sync_op::wait, detail::timeout_ms(timeout));
  }

  /// True if both handles name the same event.
  friend bool operator==(const Event& a, const Event& b) { return a.h_.same(b.h_); }
  /// Serialization hooks: the service's URL and id.
  friend void fiber_serialize(writer& w, const Event& e) { e.h_.write(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Event& e) { e.h_.read(r); }

private:
  bool wait_ms(std::int64_t ms) { return h_.call_done("fiber::Event::wait", detail::sync_op::wait, ms); }
  detail::sync_handle h_;
};

/// multiprocessing.Barrier for `parties` parties: each wait returns once
/// `parties` waits have arrived, with its arrival index (0 first, parties-1
/// last); then the next cycle starts. Broken (fiber::broken_barrier_error in
/// every waiter, and at once in later waits until reset()) by abort(), by a
/// wait that times out or is cancelled, and by a waiting process that ends.
class Barrier {
public:
  /// `parties` > 0 (else std::invalid_argument).
  explicit Barrier(std::size_t parties)
      : h_([parties](asio::any_io_executor ex) { return std::make_shared<detail::barrier_service>(ex, parties); },
           "fiber::Barrier: the barrier is gone (its last handle in the creating process was destroyed)"),
        parties_(parties) {
    if (parties == 0) throw std::invalid_argument("fiber::Barrier: parties must be at least 1");
  }

  /// Waits for the other parties; returns this wait's arrival index.
  std::size_t wait() { return wait_ms(-1); }
  /// The same; if the others do not all arrive within `timeout`, the
  /// barrier breaks: fiber::broken_barrier_error here and in every waiter.
  template <class Rep, class Period>
  std::size_t wait(std::chrono::duration<Rep, Period> timeout) {
    return wait_ms(detail::timeout_ms(timeout));
  }
  /// wait() asynchronously. Completion signature
  /// `void(std::exception_ptr, std::size_t index)`. Cancelling it breaks the
  /// barrier (the others get broken_barrier_error, this one operation_aborted).
  template <class Token>
  auto async_wait(Token&& token) {
    return h_.async_call<void(std::exception_ptr, std::size_t)>(std::forward<Token>(token),
                                                                detail::sync_op::barrier_wait, -1, index_of);
  }
  /// wait(timeout) asynchronously; signature as above.
  template <class Rep, class Period, class Token>
  auto async_wait(std::chrono::duration<Rep, Period> timeout, Token&& token) {
    return h_.async_call<void(std::exception_ptr, std::size_t)>(std::forward<Token>(token),
                                                                detail::sync_op::barrier_wait,
                                                                detail::timeout_ms(timeout), index_of);
  }

  /// Breaks the barrier: current and later waits throw broken_barrier_error.
  void abort() { (void)h_.call("fiber::Barrier::abort", detail::sync_op::abort, -1); }
  /// Back to its initial state; waits in progress throw broken_barrier_error.
  void reset() { (void)h_.call("fiber::Barrier::reset", detail::sync_op::reset, -1); }
  /// The number of parties.
  std::size_t parties() const noexcept { return parties_; }
  /// Waits arrived in the current cycle (approximate).
  std::size_t n_waiting() const { return std::size_t(state().second); }
  /// True while broken.
  bool broken() const { return state().first; }

  /// True if both handles name the same barrier.
  friend bool operator==(const Barrier& a, const Barrier& b) { return a.h_.same(b.h_); }
  /// Serialization hooks: the service's URL and id, and the parties.
  friend void fiber_serialize(writer& w, const Barrier& b) {
    b.h_.write(w);
    w.write(std::uint64_t(b.parties_));
  }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Barrier& b) {
    b.h_.read(r);
    b.parties_ = std::size_t(r.read<std::uint64_t>());
  }

  /// An empty handle, to be assigned or deserialized into; any other use
  /// throws std::logic_error.
  Barrier() = default;

private:
  static std::tuple<std::size_t> index_of(const detail::wait_reply& r) {
    return {std::size_t(r.result<std::uint64_t>())};
  }
  std::size_t wait_ms(std::int64_t ms) {
    return std::get<0>(index_of(h_.call("fiber::Barrier::wait", detail::sync_op::barrier_wait, ms)));
  }
  std::pair<bool, std::uint64_t> state() const {
    auto rep = h_.call("fiber::Barrier::state", detail::sync_op::barrier_state, -1);
    reader r(rep.rest());
    (void)r.read<std::uint64_t>();
    auto waiting = r.read<std::uint64_t>();
    return {r.read<std::uint8_t>() != 0, waiting};
  }

  detail::sync_handle h_;
  std::size_t parties_ = 0;
};

template <class Pred, class Token>
auto Condition::async_wait_for_impl(Pred pred, std::optional<std::chrono::steady_clock::time_point> deadline,
                                    Token&& token) {
  const auto thread = detail::this_thread_token();
  return asio::async_initiate<Token, void(std::exception_ptr, bool)>(
      [ref = lock_.h_.ref(), cond = token_, thread, deadline](auto handler, Pred pred) {
        using op_type = detail::async_op<decltype(handler)>; // on fiber's runtime executor by default
        struct step_state {
          std::shared_ptr<op_type> op;
          Pred pred;
          detail::service_ref ref;
          std::uint64_t cond, thread;
          std::optional<std::chrono::steady_clock::time_point> deadline;

          // With the lock held: check pred, then wait again (or finish).
          static void step(std::shared_ptr<step_state> s) {
            bool r = false;
            std::exception_ptr e;
            try {
              r = static_cast<bool>(s->pred());
            } catch (...) {
              e = std::current_exception();
            }
            if (e) return s->op->complete(detail::via::dispatch, std::move(e), false);
            if (r) return s->op->complete(detail::via::dispatch, std::exception_ptr(), true);
            std::int64_t ms = -1;
            if (s->deadline) {
              const auto left = *s->deadline - std::chrono::steady_clock::now();
              if (left <= left.zero()) return s->op->complete(detail::via::dispatch, std::exception_ptr(), false);
              ms = detail::timeout_ms(left);
            }
            const auto wait = detail::next_wait_id();
            s->op->on_cancel(detail::withdraw(s->ref, 0, wait));
            detail::async_wait_request(s->ref, detail::sync_op::cond_wait,
                                       detail::sync_payload_as(s->thread, wait, ms, s->cond),
                                       [s](std::exception_ptr e, detail::wait_reply rep) {
                                         if (!e && rep.tag == detail::wait_tag::cancelled) e = detail::aborted();
                                         if (e) return s->op->complete(detail::via::dispatch, std::move(e), false);
                                         asio::dispatch(s->op->get_executor(), [s] { step(s); });
                                       });
          }
        };
        auto s = std::make_shared<step_state>(step_state{detail::make_broker_op(std::move(handler)), std::move(pred),
                                                         ref, cond, thread, deadline});
        asio::dispatch(s->op->get_executor(), [s] { step_state::step(s); });
      },
      token, std::move(pred));
}

} // namespace fiber
