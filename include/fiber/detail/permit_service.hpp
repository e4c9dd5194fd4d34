// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/permit_service.hpp
/// The service behind fiber::Lock, RLock, Semaphore and BoundedSemaphore, and
/// the Conditions made on a Lock or RLock: permits, their holders, the
/// requests waiting for them, and what a holder known dead held.

#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/sync_wire.hpp>
#include <fiber/detail/waiter.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Which primitive a permit service is (part of a handle's bytes).
enum class permit_kind : std::uint8_t { lock = 0, rlock = 1, semaphore = 2, bounded = 3 };

inline const char* permit_name(permit_kind k) {
  switch (k) {
  case permit_kind::lock: return "fiber::Lock";
  case permit_kind::rlock: return "fiber::RLock";
  case permit_kind::semaphore: return "fiber::Semaphore";
  default: return "fiber::BoundedSemaphore";
  }
}

/// Permits with FIFO waiters. A Lock is one permit with an owner (any
/// process may release it, as in Python); an RLock one permit owned by a
/// (link, thread) with a depth; a Semaphore a count, whose permits are
/// counted per link as they are acquired and released. Conditions on a Lock
/// or RLock live here, so that a wait releases the lock, waits for a notify
/// and queues for the lock again in one step.
///
/// Holders are processes (runtime::process_of), not links: a holder whose
/// link is lost and comes back keeps what it holds. When a link closes
/// (service::peer_gone), its waiters are dropped; what its process holds is
/// released only once that process is known dead (runtime::when_dead): the
/// Lock or RLock it owned; the Semaphore permits it acquired and did not
/// release, but never beyond the initial value (a Semaphore used to signal,
/// released by one process and acquired by another, gets nothing back).
/// Such a process is fenced: its later release, cond_wait or notify is
/// answered `revoked` until it is granted again. An acquire or cond_wait
/// that failed with the caller's link is abandoned by the caller: what it
/// was granted, if anything, is given back. Runtime thread only.
class permit_service final : public service, public std::enable_shared_from_this<permit_service> {
public:
  permit_service(asio::any_io_executor ex, permit_kind k, std::uint64_t value)
      : ex_(std::move(ex)), kind_(k), value_(is_lock() ? 1 : value), initial_(value_) {}

  void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    if (op == sync_op::cancel) {
      cancel(peer, op_header::read_from(r).wait);
      return reply(wire_status::ok, {});
    }
    auto q = sync_header::read_from(r);
    if (op == sync_op::abandon) {
      if (!dead_) abandon(peer, q);
      return reply_wait(reply, wait_tag::done);
    }
    if (dead_) return reply_text(reply, wire_status::worker_lost, why_);
    if ((op == sync_op::release || op == sync_op::cond_wait || op == sync_op::notify) && fenced(peer, reply)) return;
    switch (op) {
    case sync_op::acquire:
      if (abandoned_.count({proc_of(peer), q.h.wait})) return reply_wait(reply, wait_tag::cancelled);
      return acquire(peer, q, std::move(reply));
    case sync_op::release: return release(peer, q, reply);
    case sync_op::get_value: return reply_wait(reply, wait_tag::done, std::uint64_t(value_));
    case sync_op::cond_wait:
      if (abandoned_.count({proc_of(peer), q.h.wait})) return reply_wait(reply, wait_tag::cancelled);
      return cond_wait(peer, q, r.read<std::uint64_t>(), std::move(reply));
    case sync_op::notify: {
      auto cond = r.read<std::uint64_t>();
      return notify(peer, q, cond, r.read<std::uint64_t>(), reply);
    }
    default:
      return reply_text(reply, wire_status::error,
                        std::string(permit_name(kind_)) + ": unknown operation " + std::to_string(op));
    }
  }

  void peer_gone(std::uint64_t peer) override {
    drop_waiters(acquirers_, peer);
    for (auto it = conds_.begin(); it != conds_.end();) {
      drop_waiters(it->second, peer);
      it = it->second.empty() ? conds_.erase(it) : std::next(it);
    }
    const auto proc = runtime::instance().process_of(peer);
    if (holds(proc) && watched_.insert(proc).second)
      runtime::instance().when_dead(proc, [weak = weak_from_this(), proc](const std::string& why) {
        if (auto self = weak.lock()) self->holder_dead(proc, why);
      });
    pump();
  }

  void shutdown(const std::string& why) override {
    dead_ = true;
    why_ = why;
    fail_all(acquirers_, wire_status::worker_lost, why);
    for (auto& [c, l] : conds_) fail_all(l, wire_status::worker_lost, why);
    conds_.clear();
  }

  std::string_view kind() const noexcept override {
    switch (kind_) {
    case permit_kind::lock: return "lock";
    case permit_kind::rlock: return "rlock";
    case permit_kind::semaphore: return "semaphore";
    case permit_kind::bounded: return "bounded_semaphore";
    }
    return "lock";
  }
  std::uint64_t depth() const noexcept override { return acquirers_.size(); }

private:
  // waiter::state
  enum : std::uint8_t { acquiring, in_cond, reacquire_done, reacquire_timeout, reacquire_cancelled };
  using holder = std::pair<std::uint64_t, std::uint64_t>; // (runtime::process_of, thread token)

  bool is_lock() const noexcept { return kind_ == permit_kind::lock || kind_ == permit_kind::rlock; }
  static std::uint64_t proc_of(std::uint64_t peer) { return runtime::instance().process_of(peer); }
  bool owns(std::uint64_t peer, std::uint64_t thread) const {
    return depth_ > 0 && owner_ == holder{proc_of(peer), thread};
  }
  bool holds(std::uint64_t proc) const {
    return proc != 0 && (is_lock() ? depth_ > 0 && owner_.first == proc : held_.count(proc) > 0);
  }

  // Process `proc`, which lost its link here, is known dead: what it holds
  // is released, and it is fenced.
  void holder_dead(std::uint64_t proc, const std::string& why) {
    watched_.erase(proc);
    auto& rt = runtime::instance();
    if (is_lock()) {
      if (depth_ > 0 && owner_.first == proc) {
        log(log_level::warning, permit_name(kind_), ": ", rt.process_description(proc),
            " ended while holding the lock (", why,
            "); it is released (Python's multiprocessing would leave it locked)");
        depth_ = 0;
        value_ = 1;
        revoked_.insert(proc);
      }
    } else if (auto it = held_.find(proc); it != held_.end()) {
      const auto back = std::min(it->second.size(), std::size_t(initial_ > value_ ? initial_ - value_ : 0));
      held_.erase(it);
      revoked_.insert(proc);
      if (back > 0) {
        log(log_level::warning, permit_name(kind_), ": ", rt.process_description(proc), " ended holding ", back,
            " permit(s) (", why, "); they are released");
        value_ += back;
      }
    }
    pump();
  }

  // A fenced process's call is answered `revoked`.
  bool fenced(std::uint64_t peer, const reply_fn& reply) const {
    const auto proc = proc_of(peer);
    if (proc == 0 || !revoked_.count(proc)) return false;
    reply_wait(reply, wait_tag::revoked,
               std::string(permit_name(kind_)) +
                   ": this process's hold was taken back while its link to the owner was lost (the owner judged it "
                   "dead) and may belong to another process now; nothing was released");
    return true;
  }

  // The caller's request `q.h.wait` failed with its link: if it still waits
  // it is withdrawn; if it was granted, the grant is given back; if it
  // arrives later (over the old link), it is refused.
  void abandon(std::uint64_t peer, const sync_header& q) {
    const auto proc = proc_of(peer);
    abandoned_.insert({proc, q.h.wait});
    auto mine = [&](const waiter& w) { return proc_of(w.peer) == proc && w.wait == q.h.wait; };
    std::erase_if(acquirers_, mine);
    for (auto it = conds_.begin(); it != conds_.end();) {
      std::erase_if(it->second, mine);
      it = it->second.empty() ? conds_.erase(it) : std::next(it);
    }
    if (is_lock()) {
      if (owns(peer, q.thread) && grant_wait_ == q.h.wait) {
        depth_ = reentered_ ? depth_ - 1 : 0;
        if (depth_ == 0) value_ = 1;
      }
    } else if (auto it = held_.find(proc); it != held_.end()) {
      if (auto g = std::find(it->second.begin(), it->second.end(), q.h.wait); g != it->second.end()) {
        it->second.erase(g);
        if (it->second.empty()) held_.erase(it);
        ++value_;
      }
    }
    pump();
  }

  void acquire(std::uint64_t peer, const sync_header& q, reply_fn reply) {
    if (kind_ == permit_kind::rlock && owns(peer, q.thread)) {
      ++depth_;
      grant_wait_ = q.h.wait;
      reentered_ = true;
      return reply_wait(reply, wait_tag::done);
    }
    if (acquirers_.empty() && value_ > 0) {
      take_permit(peer, q.thread, q.h.wait, 1);
      return reply_wait(reply, wait_tag::done);
    }
    if (q.h.timeout_ms == 0) return reply_wait(reply, wait_tag::timeout);
    acquirers_.push_back(waiter{peer, q.h.wait, q.thread, std::move(reply), nullptr, 1, acquiring});
    if (q.h.timeout_ms > 0) arm(acquirers_.back(), q.h.timeout_ms);
  }

  void release(std::uint64_t peer, const sync_header& q, const reply_fn& reply) {
    const std::string name = permit_name(kind_);
    switch (kind_) {
    case permit_kind::lock:
      if (depth_ == 0) return reply_wait(reply, wait_tag::misuse, name + "::release: the lock is not locked");
      depth_ = 0;
      value_ = 1;
      break;
    case permit_kind::rlock:
      if (!owns(peer, q.thread))
        return reply_wait(reply, wait_tag::misuse,
                          name + "::release: the lock is not held by this thread of this process");
      if (--depth_ == 0) value_ = 1;
      break;
    case permit_kind::bounded:
      if (value_ >= initial_)
        return reply_wait(reply, wait_tag::misuse, name + "::release: released more times than acquired");
      [[fallthrough]];
    case permit_kind::semaphore:
      ++value_;
      if (auto it = held_.find(proc_of(peer)); it != held_.end()) {
        it->second.pop_back();
        if (it->second.empty()) held_.erase(it);
      }
      break;
    }
    pump();
    reply_wait(reply, wait_tag::done);
  }

  // Releases the lock, waits in condition `cond` until notified, timed out
  // or cancelled, then queues for the lock again; the reply leaves once the
  // lock is held again, at the depth it had.
  void cond_wait(std::uint64_t peer, const sync_header& q, std::uint64_t cond, reply_fn reply) {
    if (!is_lock() || !owns(peer, q.thread))
      return reply_wait(reply, wait_tag::misuse,
                        std::string("fiber::Condition::wait: the lock is not held by this thread of this process"));
    waiter w{peer, q.h.wait, q.thread, std::move(reply), nullptr, depth_, in_cond};
    depth_ = 0;
    value_ = 1;
    if (q.h.timeout_ms == 0) {
      w.state = reacquire_timeout;
      acquirers_.push_back(std::move(w));
    } else {
      auto& l = conds_[cond];
      l.push_back(std::move(w));
      if (q.h.timeout_ms > 0) arm(l.back(), q.h.timeout_ms);
    }
    pump();
  }

  void notify(std::uint64_t peer, const sync_header& q, std::uint64_t cond, std::uint64_t n, const reply_fn& reply) {
    if (!is_lock() || !owns(peer, q.thread))
      return reply_wait(reply, wait_tag::misuse,
                        std::string("fiber::Condition::notify: the lock is not held by this thread of this process"));
    std::uint64_t woken = 0;
    if (auto it = conds_.find(cond); it != conds_.end()) {
      for (; woken < n && !it->second.empty(); ++woken) {
        auto w = std::move(it->second.front());
        it->second.pop_front();
        requeue(std::move(w), reacquire_done);
      }
      if (it->second.empty()) conds_.erase(it);
    }
    reply_wait(reply, wait_tag::done, woken);
  }

  // A waiter leaves its condition and queues for the lock; it is answered
  // `how` once it holds the lock again.
  void requeue(waiter w, std::uint8_t how) {
    w.timer.reset();
    w.state = how;
    acquirers_.push_back(std::move(w));
  }

  std::optional<waiter> take_from_conds(std::uint64_t peer, std::uint64_t wait) {
    for (auto it = conds_.begin(); it != conds_.end(); ++it)
      if (auto w = take_waiter(it->second, peer, wait)) {
        if (it->second.empty()) conds_.erase(it);
        return w;
      }
    return std::nullopt;
  }

  // A plain acquire gives up with `tag`; a condition wait stops waiting and
  // queues for the lock. A waiter already queueing for the lock again keeps
  // its outcome (it was notified or had timed out).
  void give_up(std::uint64_t peer, std::uint64_t wait, wait_tag tag, std::uint8_t cond_outcome) {
    auto it = std::find_if(acquirers_.begin(), acquirers_.end(),
                           [&](const waiter& w) { return w.peer == peer && w.wait == wait; });
    if (it != acquirers_.end()) {
      if (it->state != acquiring) return;
      auto w = std::move(*it);
      acquirers_.erase(it);
      return reply_wait(w.reply, tag);
    }
    if (auto w = take_from_conds(peer, wait)) {
      requeue(std::move(*w), cond_outcome);
      pump();
    }
  }

  void cancel(std::uint64_t peer, std::uint64_t wait) { give_up(peer, wait, wait_tag::cancelled, reacquire_cancelled); }

  void arm(waiter& w, std::int64_t ms) {
    arm_timeout(ex_, w, ms, [weak = weak_from_this()](std::uint64_t peer, std::uint64_t wait) {
      if (auto self = weak.lock()) self->give_up(peer, wait, wait_tag::timeout, reacquire_timeout);
    });
  }

  void take_permit(std::uint64_t peer, std::uint64_t thread, std::uint64_t wait, std::uint64_t depth) {
    --value_;
    const auto proc = proc_of(peer);
    revoked_.erase(proc);
    if (is_lock()) {
      owner_ = {proc, thread};
      depth_ = depth;
      grant_wait_ = wait;
      reentered_ = false;
    } else {
      held_[proc].push_back(wait);
    }
  }

  // Grants free permits to the waiters in order.
  void pump() {
    while (!acquirers_.empty() && value_ > 0) {
      auto w = std::move(acquirers_.front());
      acquirers_.pop_front();
      take_permit(w.peer, w.thread, w.wait, w.n);
      auto tag = w.state == reacquire_timeout     ? wait_tag::timeout
                 : w.state == reacquire_cancelled ? wait_tag::cancelled
                                                  : wait_tag::done;
      reply_wait(w.reply, tag);
    }
  }

  asio::any_io_executor ex_;
  permit_kind kind_;
  std::uint64_t value_;   // free permits (a lock: 1 when unlocked)
  std::uint64_t initial_; // what it was created with
  holder owner_{};        // lock kinds, while depth_ > 0
  std::uint64_t depth_ = 0;
  std::uint64_t grant_wait_ = 0; // lock kinds: the wait id of the request granted last
  bool reentered_ = false;       // ... and whether it re-entered an RLock (one level)
  std::map<std::uint64_t, std::vector<std::uint64_t>>
      held_;                        // semaphores: process → wait ids of its grants not released
  std::set<std::uint64_t> watched_; // processes whose death is awaited (when_dead)
  std::set<std::uint64_t> revoked_; // fenced processes
  std::set<std::pair<std::uint64_t, std::uint64_t>> abandoned_; // (process, wait id) of abandoned requests
  waiter_list acquirers_;                      // FIFO: acquires, and condition waiters queueing for the lock again
  std::map<std::uint64_t, waiter_list> conds_; // condition token → its waiters
  bool dead_ = false;
  std::string why_;
};

} // namespace fiber::detail
