// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/byte_stream.hpp
/// The connected byte stream under a framed `stream`: one interface (nng's
/// transport ops, as a class) over nng's streams and over Asio's sockets.

#include <fiber/detail/owned_callback.hpp>

#include <nng/nng.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// What runs when an asynchronous read or write of a byte_stream ends:
/// `(ec, bytes)`, on the stream's executor.
using io_done = owned_callback<std::error_code, std::size_t>;

/// A connected, full-duplex byte stream. At most one asynchronous read and
/// one asynchronous write are in flight; their `done` runs on the executor
/// the stream was made with, never inside the initiating call. A read of 0
/// bytes without an error means the peer closed. Errors are Asio's where one
/// exists (see nng_error.hpp). Members are for the executor unless they say
/// otherwise.
class byte_stream {
public:
  virtual ~byte_stream() = default;

  /// Writes a prefix of `iov` (at least one byte, unless it fails). The
  /// bytes must stay valid until `done`; the array itself may go at once.
  virtual void async_write_some(std::span<const nng_iov> iov, io_done done) = 0;
  /// Reads at most `iov.iov_len` bytes into `iov.iov_buf`.
  virtual void async_read_some(nng_iov iov, io_done done) = 0;
  /// A pending read or write completes with operation_aborted, having moved
  /// no byte, or as it would have. A cancelled write may have written part.
  virtual void cancel_read() = 0;
  virtual void cancel_write() = 0;
  /// Writes a prefix of `iov` now, without waiting: `n` bytes written, or
  /// asio::error::would_block when the stream had no room at all.
  virtual std::error_code try_write_some(std::span<const nng_iov> iov, std::size_t& n) = 0;
  /// Any thread that owns the write side while no asynchronous write is in
  /// flight: writes a prefix of `iov`, blocking until some room.
  virtual std::error_code write_some(std::span<const nng_iov> iov, std::size_t& n) = 0;
  /// Any thread that owns the read side while no asynchronous read is in
  /// flight: reads, blocking until bytes or an error arrive.
  virtual std::error_code read_some(nng_iov iov, std::size_t& n) = 0;
  /// Any thread: operations in flight end soon with an error, later ones at once.
  virtual void close() noexcept = 0;
  /// After close(): returns once no completion of this stream can still be
  /// posted but those already posted, so its io_context may go after it.
  virtual void stop() noexcept = 0;
  /// The peer, for logs ("tcp://10.0.0.2:5000", "ipc:///run/x (pid 42)"); may be empty.
  virtual std::string peer_address() const = 0;
  /// Whether the peer is a local process on an ipc:// (Unix domain) socket.
  virtual bool is_ipc() const = 0;
  /// The read side is lent to a thread that reads with read_some (true), or
  /// back (false). A stream may then stop watching for readable bytes.
  virtual void reads_lent(bool) {}
  /// The socket's descriptor, which a borrower of the read side may watch
  /// on its own reactor (a reply line); -1 where there is none (nng's streams).
  virtual int native_handle() const noexcept { return -1; }
};

using byte_stream_ptr = std::unique_ptr<byte_stream>;

} // namespace fiber::detail
