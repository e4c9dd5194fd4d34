// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/worker_link.hpp
/// What an owner of workers (Pool, RemoteManager, Process) and the service
/// host need of a link: framed sends, its frames, its end. peer_link is the
/// real one; tests bring fakes (tests/fake_link.hpp).

#include <fiber/detail/bytes.hpp>
#include <fiber/detail/frame.hpp>
#include <fiber/detail/handshake_session.hpp>
#include <fiber/detail/stream.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

using clock = std::chrono::steady_clock;

/// A number for a new link, unique in this process (worker_link::id). Any thread.
inline std::uint64_t next_link_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}

/// What a link moved and how long its round trip takes (fiber::stats()).
struct link_traffic {
  std::uint64_t bytes_sent = 0;           ///< written to its connection, framing included
  std::uint64_t bytes_received = 0;       ///< read from its connection
  std::chrono::nanoseconds round_trip{0}; ///< the last heartbeat round trip measured; 0: none yet
};

/// A link to one worker. Used on its executor only (the runtime thread).
class worker_link {
public:
  /// (kind, body, frame): `body` lies in `frame`, which the handler may move
  /// out to keep the bytes without a copy (a vector's move keeps its buffer).
  using message_handler = std::function<void(frame_kind, std::span<const std::byte>, message&)>;
  using close_handler = std::function<void(const std::string& reason)>;

  virtual ~worker_link() = default;

  /// Starts reading: each frame to `on_message`, the end once to `on_close`.
  virtual void start(message_handler on_message, close_handler on_close) = 0;
  /// Queues frame `f` followed by `tail` (not copied); `on_sent` (optional)
  /// runs once it is written or cannot be.
  virtual void send(std::vector<std::byte> f, shared_bytes tail, std::function<void()> on_sent) = 0;
  /// Closes (idempotent); the close handler runs once, after this returns.
  virtual void close(const std::string& reason) = 0;
  virtual bool closed() const noexcept = 0;
  /// Who is at the other end, as its handshake said.
  virtual const peer_identity& peer() const noexcept = 0;
  /// This link's number, unique in this process (services name their
  /// clients by it: service::handle's `peer`).
  virtual std::uint64_t id() const noexcept = 0;
  /// Its counters; a link that keeps none (a worker behind a relay, a fake) reports zeros.
  virtual link_traffic traffic() const { return {}; }
  /// For sends from other threads (see direct_writer); empty where a link
  /// has none (a worker behind a relay, a fake).
  virtual direct_writer direct() const { return {}; }
  /// Whether it runs over a Unix domain socket (a local process, or a relay on its host).
  virtual bool is_ipc() const { return false; }

  /// Queues frame `f`.
  void send(std::vector<std::byte> f) { send(std::move(f), shared_bytes{}, {}); }
  /// Queues frame `f` followed by `tail`.
  void send(std::vector<std::byte> f, shared_bytes tail) { send(std::move(f), std::move(tail), {}); }
};

} // namespace fiber::detail
