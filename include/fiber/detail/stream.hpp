// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/stream.hpp
/// fiber's connection: a message-framed, full-duplex byte stream driven
/// by Asio (`stream`), plus the two handles other threads use on it: a
/// synchronous `direct_writer` and a borrowed `lent_reader`.

#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/stream_state.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// What direct_writer and lent_reader share: a copyable reference to a
/// stream's state, handed out only by stream.
class stream_state_ref {
public:
  explicit operator bool() const noexcept { return core_ != nullptr; }

protected:
  stream_state_ref() noexcept = default;
  explicit stream_state_ref(std::shared_ptr<stream_state> c) noexcept : core_(std::move(c)) {}
  std::shared_ptr<stream_state> core_;
};

/// The write side of a stream for threads other than its executor's: a
/// frame is written from the calling thread, without a hop through the
/// executor, while the stream has nothing else to write
/// (stream_state::try_send_direct). Copyable; keeps the stream's state
/// alive, not its connection.
class direct_writer : public stream_state_ref {
public:
  direct_writer() noexcept = default;
  /// True once `m`, then `tail`, are written as one frame. False, having done nothing,
  /// while the stream is writing or has messages queued, once it is closed,
  /// and for an empty writer; false too if the write failed (the stream is
  /// then closed, as when an async_send fails).
  bool try_send(std::span<const std::byte> m, std::span<const std::byte> tail = {}) const {
    return core_ && core_->try_send_direct(m, tail);
  }
  /// Writes `m` as one frame and waits at most `limit` until it is written:
  /// at once while the stream has nothing else to write (as try_send), else
  /// queued on the executor behind what it is writing. True once written;
  /// false if the stream is closed, the write failed, or `limit` passed (the
  /// frame may still leave). Blocks: never on the stream's executor.
  bool send(message m, std::chrono::milliseconds limit) const {
    if (!core_) return false;
    if (core_->try_send_direct(m)) return true;
    auto written = std::make_shared<blocking_result<bool>>();
    asio::post(core_->executor(), [core = core_, m = std::move(m), written]() mutable {
      core->start_send(std::move(m), {},
                       completion<std::error_code>([written](std::error_code ec) { written->set_value(!ec); },
                                                   core->executor()));
    });
    return written->wait_for(limit) && written->get();
  }

private:
  friend class stream;
  explicit direct_writer(std::shared_ptr<stream_state> c) noexcept : stream_state_ref(std::move(c)) {}
};

/// The read side of a stream, lent to one thread that blocks on it (a
/// worker's main thread waiting for work): frames then reach that thread
/// straight from the kernel (or nng's poller), without a hop through the
/// executor. Lent with stream::lend_reader, on the executor;
/// meanwhile async_recv waits. Copyable (all copies are one borrower: use
/// them from one thread at a time); keeps the stream's state alive.
class lent_reader : public stream_state_ref {
public:
  lent_reader() noexcept = default;
  /// Blocks for the next frame. Errors: asio::error::already_started when
  /// the executor took the read side back (stream::take_back_reader) while
  /// this thread was not in recv: ask for it again; otherwise the stream's
  /// error (eof, message_size, ...): call give_back(ec), the stream closes.
  std::error_code recv(message& m) const { return core_->recv_lent(m); }
  /// Returns the read side: async_recv is served again (buffered frames
  /// first). With an error, the stream is closed with it. No-op once taken back.
  void give_back(std::error_code ec = {}) const { core_->give_back(ec); }

  /// For a borrower that reads the socket itself, asynchronously on its own
  /// io_context (reply_line.hpp), instead of recv: the socket's descriptor
  /// to watch (-1: not a socket; such a borrower cannot), the region its
  /// next read goes to, `received(n)` once `n` > 0 bytes landed there, and
  /// next() for each whole frame then: its error is asio::error::would_block
  /// while more bytes are needed, else as recv's. One borrower thread at a
  /// time; the executor cannot take the read side back from such a borrower.
  int native_handle() const noexcept { return core_->native_handle(); }
  nng_iov region() const { return core_->lent_region(); }
  void received(std::size_t n) const { core_->lent_commit(n); }
  std::error_code next(message& m) const { return core_->lent_next(m); }

private:
  friend class stream;
  explicit lent_reader(std::shared_ptr<stream_state> c) noexcept : stream_state_ref(std::move(c)) {}
};

/// One connected byte stream carrying length-prefixed messages. Move-only;
/// destroying it closes the connection (pending operations complete with
/// operation_aborted). Not thread-safe: use it on its executor.
class stream : public core_handle<stream_state> {
public:
  /// An empty stream (is_open() == false); operations fail with bad_descriptor.
  stream() noexcept = default;
  /// Frames `s`, whose completions run on `ex`. With `tls`, the TLS 1.3
  /// handshake runs first (tls_handshake.hpp): frames sent meanwhile wait,
  /// and every frame is then encrypted under its keys; a failed handshake
  /// fails the stream's operations with its error (tls_category()).
  stream(executor_type ex, byte_stream_ptr s, const transport_options& opt, std::optional<tls_start> tls = std::nullopt)
      : core_handle(std::make_shared<stream_state>(std::move(ex), std::move(s), opt, std::move(tls))) {
    core_->start();
  }

  /// Queues `m`; completes with void(std::error_code) once it is written.
  /// Messages queued while a write is in flight leave together in one
  /// write (batching); a lone message is written immediately.
  /// Messages above max_message_size fail with asio::error::message_size.
  template <asio::completion_token_for<void(std::error_code)> Token>
  auto async_send(message m, Token&& token) {
    return async_send(std::move(m), shared_bytes{}, std::forward<Token>(token));
  }

  /// As above, for the frame `m` followed by `tail` (not copied: `tail.owner`
  /// is held until the frame is written or has failed).
  template <asio::completion_token_for<void(std::error_code)> Token>
  auto async_send(message m, shared_bytes tail, Token&& token) {
    return initiate_on_core(std::forward<Token>(token), core_,
                            [m = std::move(m), tail = std::move(tail)](stream_state& c, auto done) mutable {
                              c.start_send(std::move(m), std::move(tail), std::move(done));
                            });
  }

  /// Completes with void(std::error_code, message): the next whole message.
  /// Errors: eof / connection_reset (peer gone), message_size (oversized
  /// frame; the stream is closed), operation_aborted (close() or cancelled).
  template <asio::completion_token_for<void(std::error_code, message)> Token>
  auto async_recv(Token&& token) {
    return initiate_on_core<message>(std::forward<Token>(token), core_,
                                     [](stream_state& c, auto done) { c.start_recv(std::move(done)); });
  }

  /// A writer other threads may use for synchronous sends (see direct_writer).
  direct_writer direct() const noexcept { return direct_writer(core_); }
  /// Lends the read side (see lent_reader): once whole buffered frames have
  /// gone to pending async_recv operations and no read is in flight (one
  /// is cancelled, bytes it got are kept) and a TLS handshake is done,
  /// `granted(reader)` runs on the executor. Never runs if the stream closes
  /// first. Executor only.
  void lend_reader(std::function<void(lent_reader)> granted) {
    if (!core_) return;
    core_->lend([core = core_, granted = std::move(granted)] { granted(lent_reader(core)); });
  }
  /// Takes the read side back if it is lent and its borrower is not blocked
  /// in recv; true if it did. Executor only.
  bool take_back_reader() { return core_ && core_->take_back(); }
  /// False after close(), after the peer went away, or for an empty stream.
  bool is_open() const noexcept { return core_ && core_->is_open(); }
  /// Best effort, for logs ("tcp://1.2.3.4:5678", "ipc:///run/x.ipc (pid 42)").
  std::string peer_address() const { return core_ ? core_->peer_address() : std::string(); }
  /// Changes the limit for frames whose length header has not been parsed
  /// yet, in both directions (e.g. a small bound until the peer has
  /// authenticated). A frame already being read into its own buffer keeps
  /// the limit it was checked against.
  void set_max_message_size(std::size_t n) noexcept {
    if (core_) core_->set_max_message_size(n);
  }
  /// When bytes last arrived (a frame still in progress counts; also bytes
  /// a lent_reader read), or when the stream was made. Any thread.
  std::chrono::steady_clock::time_point last_received() const noexcept {
    return core_ ? core_->last_received() : std::chrono::steady_clock::time_point{};
  }
  /// From now on every frame sent carries a tag under `send` and every frame
  /// received must carry one under `recv`, counted from here (frame_mac.hpp):
  /// a frame that fails closes the stream with frame_mac_errc::bad_tag and
  /// logs one rate-limited line. Messages queued before the call go
  /// without. Call once, on the executor, before the read side is lent.
  /// No-op on a TLS stream, whose frames are all encrypted and tagged.
  void enable_mac(const session_key& send, const session_key& recv) {
    if (core_) core_->enable_mac(send, recv);
  }
  /// Whether the stream runs (or is starting) TLS.
  bool is_tls() const noexcept { return core_ && core_->is_tls(); }
  /// The TLS channel binding (tls_handshake.hpp), all zero before the TLS
  /// handshake is done and on a stream without TLS. Executor only.
  channel_binding binding() const noexcept { return core_ && core_->binding() ? *core_->binding() : channel_binding{}; }
  /// Whether the peer is on an ipc:// socket (a local process).
  bool is_ipc() const { return core_ && core_->is_ipc(); }
  /// The current frame limit (set_max_message_size), in bytes; 0 for an empty stream.
  std::size_t max_message_size() const noexcept { return core_ ? core_->max_message_size() : 0; }
  /// Counters since the stream was created (zero for an empty stream).
  stream_stats stats() const noexcept { return core_ ? core_->stats() : stream_stats{}; }
};

} // namespace fiber::detail
