// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/relay_mux.hpp
/// The master's end of a host relay's link: each worker behind the relay
/// becomes a worker_link of its own, its frames carried in relay_data frames.

#include <fiber/detail/frame.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/relay_wire.hpp>
#include <fiber/detail/worker_link.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// A relay's link seen as the links of the workers behind it. A
/// relay_join makes a worker_link for that worker and hands it to
/// `on_join`; its sends travel as relay_data frames on the relay's link
/// (coalesced with the other workers' into one write), its frames arrive
/// from them; a relay_leave, or the relay's link ending, closes it, and
/// closing it tells the relay to close the worker's own link. Executor only
/// (the runtime thread). Lives while the relay's link is open or a worker
/// link of its is held.
class relay_mux : public std::enable_shared_from_this<relay_mux> {
public:
  using join_handler = std::function<void(std::shared_ptr<worker_link>)>;

  /// `link`: the relay's authenticated link, not started yet.
  relay_mux(asio::any_io_executor ex, std::shared_ptr<worker_link> link, join_handler on_join)
      : ex_(std::move(ex)), link_(std::move(link)), on_join_(std::move(on_join)) {}

  /// Starts reading the relay's link.
  void start() {
    link_->start([self = shared_from_this()](frame_kind k, std::span<const std::byte> body,
                                             message& m) { self->on_frame(k, body, m); },
                 [self = shared_from_this()](const std::string& reason) { self->relay_lost(reason); });
  }

  /// Workers behind the relay whose links are open.
  std::size_t workers() const noexcept { return slots_.size(); }
  const peer_identity& relay() const noexcept { return link_->peer(); }

private:
  class relayed_link final : public worker_link {
  public:
    relayed_link(std::shared_ptr<relay_mux> mux, std::uint32_t slot, peer_identity peer)
        : mux_(std::move(mux)), slot_(slot), peer_(std::move(peer)), id_(next_link_id()) {}

    void start(message_handler on_message, close_handler on_close) override {
      on_message_ = std::move(on_message);
      on_close_ = std::move(on_close);
      if (closed_ && on_close_) post_close(); // the relay lost it before its owner took it
    }
    void send(std::vector<std::byte> f, shared_bytes tail, std::function<void()> on_sent) override {
      if (closed_ || mux_->link_->closed()) {
        if (on_sent) on_sent();
        return;
      }
      mux_->link_->send(relay_data_head(slot_, f), std::move(tail), std::move(on_sent));
    }
    void close(const std::string& reason) override { end(reason, true); }
    bool closed() const noexcept override { return closed_; }
    const peer_identity& peer() const noexcept override { return peer_; }
    std::uint64_t id() const noexcept override { return id_; }

    void deliver(frame_kind k, std::span<const std::byte> body, message& m) {
      if (!closed_ && on_message_) on_message_(k, body, m);
    }
    // `tell`: ask the relay to close the worker's link (not when it told us).
    void end(const std::string& reason, bool tell) {
      if (closed_) return;
      closed_ = true;
      reason_ = reason;
      mux_->slots_.erase(slot_);
      if (tell && !mux_->link_->closed())
        mux_->link_->send(frame(frame_kind::relay_leave, relay_leave_msg{slot_, reason}));
      on_message_ = nullptr;
      if (on_close_) post_close();
    }

  private:
    void post_close() {
      asio::post(mux_->ex_, [h = std::move(on_close_), r = reason_] { h(r); });
    }

    std::shared_ptr<relay_mux> mux_;
    std::uint32_t slot_;
    peer_identity peer_;
    std::uint64_t id_;
    message_handler on_message_;
    close_handler on_close_;
    std::string reason_;
    bool closed_ = false;
  };

  void on_frame(frame_kind k, std::span<const std::byte> body, message& m) {
    const bool relay_frame = visit_relay_frame(
        k, body,
        [&](std::uint32_t slot, std::span<const std::byte> inner) {
          auto it = slots_.find(slot);
          if (it == slots_.end()) return; // closed here, and the relay has not heard yet
          auto [ik, ibody] = unframe(inner);
          auto keep = it->second; // the handler may close it
          keep->deliver(ik, ibody, m);
        },
        [&](relay_join_msg j) {
          if (slots_.count(j.slot))
            return log(log_level::warning, "relay ", relay().name, ": joined slot ", j.slot, " twice; ignored");
          j.peer.r = role::worker; // a relay carries workers only, whatever it says
          auto l = std::make_shared<relayed_link>(shared_from_this(), j.slot, std::move(j.peer));
          slots_.emplace(j.slot, l);
          on_join_(l);
        },
        [&](const relay_leave_msg& lv) {
          if (auto it = slots_.find(lv.slot); it != slots_.end()) {
            auto keep = it->second;
            keep->end(lv.reason, false);
          }
        });
    if (!relay_frame) log(log_level::warning, "relay ", relay().name, ": unexpected frame kind ", int(k), "; ignored");
  }

  void relay_lost(const std::string& reason) {
    if (!slots_.empty())
      log(log_level::warning, "relay ", relay().name, " lost with ", slots_.size(), " workers: ", reason);
    auto slots = std::move(slots_);
    slots_.clear();
    for (auto& [slot, l] : slots) l->end("relay " + relay().name + " lost: " + reason, false);
    on_join_ = nullptr;
  }

  asio::any_io_executor ex_;
  std::shared_ptr<worker_link> link_;
  join_handler on_join_;
  std::unordered_map<std::uint32_t, std::shared_ptr<relayed_link>> slots_;
};

/// Serves a host's relay that authenticated as `l` (not started): its
/// frames may carry a worker's whole frame and relay_overhead bytes more;
/// each worker that joins through it goes to `on_join`. Executor `ex` only.
inline void serve_relay(asio::any_io_executor ex, std::shared_ptr<peer_link> l, relay_mux::join_handler on_join) {
  log(log_level::info, "relay ", l->peer().name, " on ", l->peer().host, " connected");
  l->set_max_message_size(l->max_message_size() + relay_overhead);
  std::make_shared<relay_mux>(std::move(ex), std::move(l), std::move(on_join))->start();
}

} // namespace fiber::detail
