// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/peer_link.hpp
/// An authenticated connection to another fiber process: framed sends and
/// receives on the runtime thread, heartbeats both ways, and a peer from which
/// no byte arrived for heartbeat_timeout_ms is closed.

#include <fiber/config.hpp>
#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/frame.hpp>
#include <fiber/detail/handshake_session.hpp>
#include <fiber/detail/heartbeat_period.hpp>
#include <fiber/detail/heartbeat_wire.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/worker_link.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// An authenticated connection. Runtime thread only. Sends are queued by the
/// transport (and coalesced into one write while one is in flight); receives
/// loop until close. A peer from which no byte arrived for
/// heartbeat_timeout_ms is closed: a long frame still arriving keeps it alive.
/// Both ends use the longer of their heartbeat periods (heartbeat_period.hpp),
/// the timeout stretched in proportion. A frame over the link's limit is dropped (logged); the link stays.
class peer_link final : public worker_link, public std::enable_shared_from_this<peer_link> {
public:

  peer_link(stream s, peer_identity peer)
      : stream_(std::move(s)),
        timer_(stream_.get_executor()),
        peer_(std::move(peer)),
        id_(next_link_id()),
        pings_(peer_.r == role::worker || peer_.r == role::relay) {}

  void start(message_handler on_message, close_handler on_close) override {
    on_message_ = std::move(on_message);
    on_close_ = std::move(on_close);
    base_interval_ = std::chrono::milliseconds(config_int("heartbeat_interval_ms"));
    base_timeout_ = std::chrono::milliseconds(config_int("heartbeat_timeout_ms"));
    interval_ = base_interval_;
    timeout_ = base_timeout_;
    counted_ = true;
    ++open_links();
    silent_since_ = last_send_ = clock::now();
    read();
    tick();
  }

  /// `on_sent` (optional) runs once the frame is written to the connection
  /// or could not be (link closed, or the frame is over max_message_size():
  /// callers check that first, see frame_limit.hpp).
  void send(std::vector<std::byte> f, std::function<void()> on_sent = {}) {
    send(std::move(f), shared_bytes{}, std::move(on_sent));
  }
  /// The frame `f` followed by `tail` (not copied).
  void send(std::vector<std::byte> f, shared_bytes tail, std::function<void()> on_sent = {}) override {
    if (closed_) {
      if (on_sent) on_sent();
      return;
    }
    last_send_ = clock::now();
    stream_.async_send(
        std::move(f), std::move(tail), [self = shared_from_this(), on_sent = std::move(on_sent)](std::error_code ec) {
          if (ec == asio::error::message_size) // refused before a byte was written
            log(log_level::warning, "dropped a frame to ", self->peer_.name, ": over max_message_size_mb");
          else if (ec) self->close("send failed: " + ec.message());
          if (on_sent) on_sent();
        });
  }

  /// Idempotent. The close handler runs once, after this returns.
  void close(const std::string& reason) override {
    if (closed_) return;
    closed_ = true;
    if (counted_) --open_links();
    timer_.cancel();
    stream_.close();
    if (auto h = std::move(on_close_)) asio::post(stream_.get_executor(), [h, reason] { h(reason); });
    on_message_ = nullptr;
  }

  bool closed() const noexcept override { return closed_; }

  /// Lends the link's read side to a thread that blocks on it (a worker's
  /// main thread waiting for work; see transport's lent_reader). `granted`
  /// runs on the executor. The bytes the borrower reads count for liveness;
  /// it hands the frames it does not handle to deliver(), and gives the
  /// reader back before it blocks elsewhere for long; while it is busy (not
  /// in recv), the heartbeat tick takes the read side back. Executor only.
  void lend_reader(std::function<void(lent_reader)> granted) {
    if (!closed_) stream_.lend_reader(std::move(granted));
  }
  /// Any thread: handle `m` (a whole frame) on the executor as if read there.
  void deliver(message m) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), m = std::move(m)]() mutable {
      if (!self->closed_) self->handle(m);
    });
  }

  /// For synchronous sends from other threads while the link has nothing
  /// queued (see transport's direct_writer); heartbeats go on as before.
  direct_writer direct() const override { return stream_.direct(); }
  bool is_ipc() const override { return stream_.is_ipc(); }
  /// The largest frame this link sends or accepts, in bytes.
  std::size_t max_message_size() const noexcept { return stream_.max_message_size(); }
  /// Sets that limit (bytes), e.g. once the master's configuration is
  /// applied. On the link's executor, before start().
  void set_max_message_size(std::size_t n) noexcept { stream_.set_max_message_size(n); }
  const peer_identity& peer() const noexcept override { return peer_; }
  link_traffic traffic() const override {
    const auto st = stream_.stats();
    return {st.bytes_sent, st.bytes_received, rtt_};
  }
  std::uint64_t id() const noexcept override { return id_; }
  asio::any_io_executor get_executor() { return stream_.get_executor(); }

private:
  void read() {
    stream_.async_recv([self = shared_from_this()](std::error_code ec, message m) {
      if (self->closed_) return;
      if (ec) return self->close(ec == asio::error::eof ? "connection closed" : "receive failed: " + ec.message());
      self->handle(m);
      if (!self->closed_) self->read();
    });
  }

  void handle(message& m) {
    try {
      auto [k, body] = unframe(m);
      if (k != frame_kind::heartbeat) {
        if (on_message_) on_message_(k, body, m);
      } else if (!body.empty()) {
        const auto h = decode_heartbeat(body);
        peer_period_ = std::chrono::milliseconds(h.period_ms);
        if (h.ping) echo_ = {h.ping, clock::now()};
        if (h.echo && h.echo == ping_sent_) { // ours: the round trip, less the time it waited at the peer
          const auto back = nanoseconds_of(clock::now());
          if (back > h.echo + h.held_ns) rtt_ = std::chrono::nanoseconds(back - h.echo - h.held_ns);
          ping_sent_ = 0;
        }
      }
    } catch (const std::exception& e) {
      log(log_level::warning, "dropping malformed frame from ", peer_.name, ": ", e.what());
    }
    buffer_cache::instance().give(std::move(m)); // unless the handler kept it
  }

  // The period both ends use: the longer of theirs, which each announces in
  // its heartbeats. A change is announced at once; after a shrink the old
  // timeout holds for as long again, until the peer has heard of it.
  bool update_period(clock::time_point now, std::chrono::milliseconds own) {
    const auto p = std::max(own, peer_period_);
    if (p == interval_) return false;
    if (p < interval_) grace_ = {now + timeout_, timeout_};
    interval_ = p;
    timeout_ = base_timeout_ * p.count() / base_interval_.count();
    return true;
  }

  void tick() {
    // On a grid of interval_ shared by every link of every process on the
    // host (the steady clock is the host's): one wakeup serves them all.
    const auto now = clock::now().time_since_epoch();
    timer_.expires_at(clock::time_point(now - now % interval_ + interval_));
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->closed_) return;
      auto now = clock::now();
      // A borrower busy elsewhere reads nothing: read here again, and count
      // silence from now on.
      if (self->stream_.take_back_reader()) self->silent_since_ = now;
      const auto own = heartbeat_period(open_links(), self->base_interval_);
      const bool changed = self->update_period(now, own);
      const auto timeout = now < self->grace_.first ? std::max(self->timeout_, self->grace_.second) : self->timeout_;
      if (now - std::max(self->silent_since_, self->stream_.last_received()) > timeout)
        return self->close("heartbeat missed");
      const bool ping = self->pings_ && now - self->last_ping_ >= ping_every * self->interval_;
      if (changed || ping || self->echo_ || now - self->last_send_ >= self->interval_ / 2) {
        note_announced_period(own);
        heartbeat_msg h{std::uint32_t(own.count())};
        if (ping) {
          h.ping = self->ping_sent_ = nanoseconds_of(now);
          self->last_ping_ = now;
        }
        if (self->echo_) {
          h.echo = self->echo_->first;
          h.held_ns = nanoseconds_of(now) - nanoseconds_of(self->echo_->second);
          self->echo_.reset();
        }
        self->send(heartbeat_frame(h));
      }
      self->tick();
    });
  }

  static std::uint64_t nanoseconds_of(clock::time_point t) noexcept {
    return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }
  // The master's side of a link to a worker or a relay pings in one heartbeat
  // of this many periods; the peer echoes it in its next heartbeat.
  static constexpr int ping_every = 16;

  stream stream_;
  asio::steady_timer timer_;
  peer_identity peer_;
  std::uint64_t id_ = 0;
  message_handler on_message_;
  close_handler on_close_;
  clock::duration interval_{}, timeout_{};
  std::chrono::milliseconds base_interval_{}, base_timeout_{}; // configured
  std::chrono::milliseconds peer_period_{0};                   // announced by the peer
  std::pair<clock::time_point, clock::duration> grace_{};      // the old timeout holds until
  bool counted_ = false;                                       // in open_links()
  clock::time_point silent_since_;                             // silence is counted from here at the earliest
  clock::time_point last_send_;
  bool pings_ = false;                                              // measures round trips (see ping_every)
  clock::time_point last_ping_{};                                   // when it last pinged
  std::uint64_t ping_sent_ = 0;                                     // the ping awaiting its echo; 0: none
  std::optional<std::pair<std::uint64_t, clock::time_point>> echo_; // a peer's ping to echo, and when it came
  std::chrono::nanoseconds rtt_{0};                                 // the last round trip measured
  bool closed_ = false;
};

} // namespace fiber::detail
