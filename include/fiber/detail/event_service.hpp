// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/event_service.hpp
/// The service behind fiber::Event: a flag and the requests waiting for it
/// to be set.

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

/// An Event's flag. set() answers every waiter; a waiter's timeout and
/// cancellation are answered here; a vanished link's waiters are dropped.
/// Runtime thread only.
class event_service final : public service, public std::enable_shared_from_this<event_service> {
public:
  explicit event_service(asio::any_io_executor ex) : ex_(std::move(ex)) {}

  void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    if (op == sync_op::cancel) {
      if (auto w = take_waiter(waiters_, peer, op_header::read_from(r).wait)) reply_wait(w->reply, wait_tag::cancelled);
      return reply(wire_status::ok, {});
    }
    auto q = sync_header::read_from(r);
    if (dead_) return reply_text(reply, wire_status::worker_lost, why_);
    switch (op) {
    case sync_op::set:
      flag_ = true;
      answer_all(waiters_, wait_tag::done);
      return reply_wait(reply, wait_tag::done, std::uint8_t(1));
    case sync_op::clear: flag_ = false; [[fallthrough]];
    case sync_op::is_set: return reply_wait(reply, wait_tag::done, std::uint8_t(flag_));
    case sync_op::wait:
      if (flag_) return reply_wait(reply, wait_tag::done);
      if (q.h.timeout_ms == 0) return reply_wait(reply, wait_tag::timeout);
      waiters_.push_back(waiter{peer, q.h.wait, q.thread, std::move(reply), nullptr, 0, 0});
      if (q.h.timeout_ms > 0)
        arm_timeout(ex_, waiters_.back(), q.h.timeout_ms, [weak = weak_from_this()](std::uint64_t p, std::uint64_t w) {
          if (auto self = weak.lock())
            if (auto t = take_waiter(self->waiters_, p, w)) reply_wait(t->reply, wait_tag::timeout);
        });
      return;
    default: return reply_text(reply, wire_status::error, "fiber::Event: unknown operation " + std::to_string(op));
    }
  }

  std::string_view kind() const noexcept override { return "event"; }
  std::uint64_t depth() const noexcept override { return waiters_.size(); }
  void peer_gone(std::uint64_t peer) override { drop_waiters(waiters_, peer); }

  void shutdown(const std::string& why) override {
    dead_ = true;
    why_ = why;
    fail_all(waiters_, wire_status::worker_lost, why);
  }

private:
  asio::any_io_executor ex_;
  bool flag_ = false;
  waiter_list waiters_;
  bool dead_ = false;
  std::string why_;
};

} // namespace fiber::detail
