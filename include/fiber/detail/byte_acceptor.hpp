// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/byte_acceptor.hpp
/// What a `listener` accepts connected byte streams with: one interface
/// over nng's stream listener (ipc://) and a socket on the executor's own
/// reactor (tcp://), as byte_stream is over their streams.

#include <fiber/detail/byte_stream.hpp>
#include <fiber/detail/owned_callback.hpp>

#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// What runs when an accept ends: `(ec, stream)`, on the acceptor's executor.
using accept_done = owned_callback<std::error_code, byte_stream_ptr>;

/// A bound, listening endpoint. At most one accept is in flight; its `done`
/// runs on the executor the acceptor was made with, never inside
/// async_accept. Errors are Asio's (`connection_aborted`: a client that
/// left before it was accepted). Not thread-safe: use it on its executor.
class byte_acceptor {
public:
  virtual ~byte_acceptor() = default;

  /// The port bound, for a tcp:// URL's ":0"; 0 where there is none.
  virtual int bound_port() const = 0;
  virtual void async_accept(accept_done done) = 0;
  /// Withdraws the accept in flight where that loses no connection (it
  /// completes with operation_aborted; a client stays in the backlog);
  /// otherwise it completes later, with the connection.
  virtual void cancel() noexcept = 0;
  /// Stops listening: the accept in flight completes with an error, and
  /// no other completion follows.
  virtual void close() noexcept = 0;
};

using byte_acceptor_ptr = std::unique_ptr<byte_acceptor>;

} // namespace fiber::detail
