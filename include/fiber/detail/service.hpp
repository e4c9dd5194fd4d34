// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/service.hpp
/// A service: something in this process that other processes send requests
/// to (a Queue broker, a Pipe relay, an object relay), and how it answers.

#include <fiber/detail/wire_status.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fiber::detail {

/// Answers one request: ok and the result, or a failure and its payload
/// (wire_status.hpp). Called exactly once.
using reply_fn = std::function<void(wire_status status, std::vector<std::byte> payload)>;

/// Something in this process that other processes send requests to: a
/// Queue broker, a Pipe relay, an object host. Runtime thread only.
class service {
public:
  virtual ~service() = default;
  /// Handle one request; call `reply` exactly once, now or later. `peer` is
  /// the link id of the caller (0: this process).
  virtual void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) = 0;
  /// A client link closed: drop whatever it held.
  virtual void peer_gone(std::uint64_t /*peer*/) {}
  /// The owner dropped its last handle (service_state.hpp): answer every
  /// waiting request with worker_lost(`why`), and every later one too.
  virtual void shutdown(const std::string& /*why*/) {}
  /// What it is in fiber::stats() ("queue", "lock", ...); empty: not listed there.
  virtual std::string_view kind() const noexcept { return {}; }
  /// What waits in it: items (a queue, a pipe) or callers (a lock, a barrier, an event).
  virtual std::uint64_t depth() const noexcept { return 0; }
};

/// Names a service (a Queue's or Pipe's broker, a Lock's, an Event's, an
/// object relay): the URL of the process it lives in and its id there.
struct service_ref {
  std::string url;
  std::uint64_t id = 0;
};

/// Completion of a request: exception (remote_error, worker_lost, ...) or payload.
using request_done = std::function<void(std::exception_ptr, std::vector<std::byte>)>;

/// The answer to a request made in this process: `done` runs later on
/// `ex` (never inside the service's handling), with the failure as an exception.
inline reply_fn answer_later(asio::any_io_executor ex, request_done done) {
  return [ex = std::move(ex), done = std::move(done)](wire_status st, std::vector<std::byte> p) mutable {
    asio::post(ex, [st, p = std::move(p), done = std::move(done)]() mutable {
      if (st == wire_status::ok) done(nullptr, std::move(p));
      else done(failure_of(st, p), {});
    });
  };
}

} // namespace fiber::detail
