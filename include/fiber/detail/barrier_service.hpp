// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/barrier_service.hpp
/// The service behind fiber::Barrier: the parties that have arrived in this
/// cycle, and whether the barrier is broken.

#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/sync_wire.hpp>
#include <fiber/detail/waiter.hpp>

#include <asio/any_io_executor.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace fiber::detail {

/// Python's threading.Barrier at one place: the n-th arrival of a cycle gets
/// index n-1 and releases everyone (each with its own arrival index); the
/// next cycle starts at once. Breaking it (abort, a waiter's timeout or
/// cancellation, a waiting process's link closing) answers every waiter
/// `broken` (a cancelled one: `cancelled`) and every later wait too, until
/// reset. Runtime thread only.
class barrier_service final : public service, public std::enable_shared_from_this<barrier_service> {
public:
  barrier_service(asio::any_io_executor ex, std::uint64_t parties) : ex_(std::move(ex)), parties_(parties) {}

  void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    if (op == sync_op::cancel) {
      if (auto w = take_waiter(waiters_, peer, op_header::read_from(r).wait)) {
        reply_wait(w->reply, wait_tag::cancelled);
        break_it("a waiter was cancelled");
      }
      return reply(wire_status::ok, {});
    }
    auto q = sync_header::read_from(r);
    if (dead_) return reply_text(reply, wire_status::worker_lost, why_);
    switch (op) {
    case sync_op::barrier_wait: return wait(peer, q, std::move(reply));
    case sync_op::abort: break_it("aborted"); return reply_wait(reply, wait_tag::done);
    case sync_op::reset:
      break_it("reset while waiting");
      broken_.clear();
      return reply_wait(reply, wait_tag::done);
    case sync_op::barrier_state:
      return reply_wait(reply, wait_tag::done, parties_, std::uint64_t(waiters_.size()),
                        std::uint8_t(!broken_.empty()));
    default: return reply_text(reply, wire_status::error, "fiber::Barrier: unknown operation " + std::to_string(op));
    }
  }

  std::string_view kind() const noexcept override { return "barrier"; }
  std::uint64_t depth() const noexcept override { return waiters_.size(); }
  void peer_gone(std::uint64_t peer) override {
    if (drop_waiters(waiters_, peer) > 0)
      break_it("a waiting process ended: " + runtime::instance().peer_description(peer));
  }

  void shutdown(const std::string& why) override {
    dead_ = true;
    why_ = why;
    fail_all(waiters_, wire_status::worker_lost, why);
  }

private:
  void wait(std::uint64_t peer, const sync_header& q, reply_fn reply) {
    if (!broken_.empty()) return reply_wait(reply, wait_tag::broken, message());
    const std::uint64_t index = waiters_.size();
    if (index + 1 == parties_) {
      for (auto& w : std::exchange(waiters_, {})) reply_wait(w.reply, wait_tag::done, w.n);
      return reply_wait(reply, wait_tag::done, index);
    }
    waiters_.push_back(waiter{peer, q.h.wait, q.thread, std::move(reply), nullptr, index, 0});
    if (q.h.timeout_ms == 0) return break_it("a wait timed out");
    if (q.h.timeout_ms > 0)
      arm_timeout(ex_, waiters_.back(), q.h.timeout_ms, [weak = weak_from_this()](std::uint64_t p, std::uint64_t w) {
        auto self = weak.lock();
        if (!self) return;
        for (auto& x : self->waiters_)
          if (x.peer == p && x.wait == w) return self->break_it("a wait timed out");
      });
  }

  std::string message() const { return "fiber::Barrier::wait: the barrier is broken (" + broken_ + ")"; }

  // Broken from now until reset; everyone waiting hears it.
  void break_it(const std::string& why) {
    if (broken_.empty()) broken_ = why;
    answer_all(waiters_, wait_tag::broken, message());
  }

  asio::any_io_executor ex_;
  std::uint64_t parties_;
  waiter_list waiters_; // this cycle's arrivals (waiter::n: arrival index)
  std::string broken_;  // why it is broken; empty: it is not
  bool dead_ = false;
  std::string why_;
};

} // namespace fiber::detail
