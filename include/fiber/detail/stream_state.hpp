// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/stream_state.hpp
/// The state of one framed byte stream (after a TLS handshake, if it has
/// one) and its three ways of being driven: by its executor (async
/// send/recv), by any thread writing directly while the executor has
/// nothing to write, and by one thread it lent its reads to.

#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/byte_stream.hpp>
#include <fiber/detail/bytes.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/frame_buffer.hpp>
#include <fiber/detail/frame_check.hpp>
#include <fiber/detail/frame_mac.hpp>
#include <fiber/detail/log_limit.hpp>
#include <fiber/detail/log_writer.hpp>
#include <fiber/detail/tls_config.hpp>
#include <fiber/detail/tls_handshake.hpp>
#include <fiber/detail/trailing_seal.hpp>
#include <fiber/detail/write_batch.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fiber::detail {

/// Counters of one stream (for tests, benchmarks and logs).
struct stream_stats {
  std::uint64_t messages_sent = 0;     ///< messages fully written
  std::uint64_t write_calls = 0;       ///< byte stream writes (batches + continuations)
  std::uint64_t messages_received = 0; ///< messages delivered to async_recv
  std::uint64_t read_calls = 0;        ///< byte stream reads
  std::uint64_t bytes_sent = 0;        ///< bytes written to the byte stream (frame headers and tags included)
  std::uint64_t bytes_received = 0;    ///< bytes read from the byte stream
};

/// A stream's state. Shared so that completions of its byte stream (which
/// hold a reference while an operation is in flight) stay valid after the
/// `stream` handle moved or died. Touched only on `ex`.
class stream_state : public std::enable_shared_from_this<stream_state> {
public:
  static constexpr std::size_t read_buffer_size = frame_buffer::capacity;
  static constexpr std::size_t copy_threshold = write_batch::copy_threshold;
  static constexpr std::size_t inline_write_limit = 64 * 1024; // batches up to this are written inline

  /// With `tls`, frames wait until the TLS handshake started by start() is done.
  stream_state(asio::any_io_executor ex, byte_stream_ptr s, const transport_options& opt,
               std::optional<tls_start> tls = std::nullopt)
      : last_rx_(std::chrono::steady_clock::now()),
        ex_(std::move(ex)),
        s_(std::move(s)),
        max_(std::min<std::size_t>(opt.max_message_size, UINT32_MAX)),
        tls_start_(std::move(tls)),
        tls_pending_(tls_start_.has_value()) {
    exec_busy_ = tls_pending_; // no direct write before TLS is up
  }

  // ---- send
  void start_send(message m, shared_bytes tail, completion<std::error_code> done) {
    if (dead_) return done(via::post, dead_);
    if (m.size() + tail.bytes.size() > max_) return done(via::post, asio::error::message_size);
    const auto id = ++next_id_;
    install_canceller(done.slot(), id, true);
    sendq_.push_back({id, std::move(m), std::move(tail), std::move(done), seal_ != nullptr});
    bool direct_busy;
    {
      std::lock_guard lk(wire_mu_);
      exec_busy_ = true; // from now on no direct write starts
      direct_busy = direct_busy_;
    }
    // While a direct write owns the wire, the message waits: the direct
    // writer posts kick() when it is done.
    if (!writing_ && !direct_busy) schedule_write();
  }

  /// Any thread: writes `m` followed by `tail` as one frame now and returns
  /// true once it is written — if nothing is being written or queued on this
  /// stream and it is open. Otherwise returns false at once, having done
  /// nothing (use async_send). A failed write closes the stream and returns false.
  bool try_send_direct(std::span<const std::byte> m, std::span<const std::byte> tail = {}) {
    if (m.size() + tail.size() > max_.load(std::memory_order_relaxed)) return false;
    frame_mac* mac;
    bool encrypt;
    {
      std::lock_guard lk(wire_mu_);
      if (exec_busy_ || direct_busy_ || wire_dead_) return false;
      direct_busy_ = true;
      mac = seal_.get(); // set once, under wire_mu_; its sequence is the wire owner's
      encrypt = encrypt_;
    }
    std::error_code ec;
    std::size_t written = 0, calls = 0;
    std::byte tag[frame_tag_size];
    const std::size_t tag_size = mac ? frame_tag_size : 0;
    const frame_header hdr(static_cast<std::uint32_t>(m.size() + tail.size() + tag_size));
    std::span<const std::byte> parts[4] = {{hdr.bytes, frame_header_size}, m, tail, {tag, tag_size}};
    const std::size_t total = frame_header_size + m.size() + tail.size() + tag_size;
    trailing_seal trailing; // a big frame: sealed as it is written
    const bool big = mac && m.size() + tail.size() >= trailing_seal_threshold;
    std::byte* cipher = nullptr;
    if (encrypt) { // header and ciphertext in one buffer; the tag after them, as in clear
      std::byte* d = dbuf_.get(total - frame_tag_size);
      std::copy_n(hdr.bytes, frame_header_size, d);
      cipher = d + frame_header_size;
      parts[0] = {d, total - frame_tag_size};
      parts[1] = parts[2] = {};
    }
    if (big) trailing.begin(*mac, m, tail, cipher);
    else if (encrypt) mac->encrypt({m, tail}, cipher, tag);
    else if (mac) mac->seal({m, tail}, tag);
    // Bytes that may be written now: not a big frame's tag, nor what is not encrypted yet.
    std::size_t ready = big ? frame_header_size + trailing.ready() : total;
    while (!ec && written < total) { // a write may take part of the iov: go on from there
      nng_iov iov[4];
      unsigned k = 0;
      std::size_t skip = written, left = ready - written;
      for (auto p : parts) {
        if (skip >= p.size()) {
          skip -= p.size();
          continue;
        }
        const std::size_t len = std::min(p.size() - skip, left);
        if (len == 0) break;
        iov[k++] = {const_cast<std::byte*>(p.data()) + skip, len};
        left -= len;
        skip = 0;
      }
      ++calls;
      std::size_t n = 0;
      if (!(ec = s_->write_some({iov, k}, n))) written += n;
      if (!ec && trailing.active() && written > frame_header_size)
        ready = trailing.written(written - frame_header_size, tag) ? total : frame_header_size + trailing.ready();
    }
    bool kick;
    {
      std::lock_guard lk(wire_mu_);
      direct_busy_ = false;
      direct_write_calls_ += calls;
      direct_bytes_ += written;
      if (!ec) ++direct_sent_;
      else wire_dead_ = true; // maybe a partial frame on the wire
      kick = exec_busy_;
    }
    if (ec) {
      s_->close(); // thread-safe; the executor's operations end with errors
      asio::post(ex_, [self = shared_from_this(), ec] { self->shutdown(ec, via::dispatch); });
      return false;
    }
    if (kick) asio::post(ex_, [self = shared_from_this()] { self->kick(); });
    return true;
  }

  // ---- recv
  void start_recv(completion<std::error_code, message> done) {
    const auto id = ++next_id_;
    install_canceller(done.slot(), id, false);
    recvq_.push_back({id, std::move(done)});
    pump_recv(via::post);
  }

  /// From now on frames queued or written are sealed with `send` and frames
  /// read are checked with `recv` (see frame_mac). Executor only, once,
  /// while the read side is not lent. Throws fiber::error if mbedTLS fails.
  /// No-op on a TLS stream: its frames are encrypted from the start.
  void enable_mac(const session_key& send, const session_key& recv) {
    if (encrypt_) return;
    auto s = std::make_unique<frame_mac>(send);
    check_.enable(recv, false);
    std::lock_guard lk(wire_mu_);
    seal_ = std::move(s);
  }
  /// Whether the peer is a local process on an ipc:// socket.
  bool is_ipc() const { return s_->is_ipc(); }

  /// Whether frames go over TLS: encrypted under keys of its handshake,
  /// which `binding()` is the channel binding of once done.
  bool is_tls() const noexcept { return tls_pending_ || binding_.has_value(); }
  const std::optional<channel_binding>& binding() const noexcept { return binding_; }

  /// Starts the TLS handshake or the read pump (called once the core is
  /// owned by a shared_ptr).
  void start() {
    if (!tls_pending_) return read_more();
    auto done = [self = shared_from_this()](std::error_code ec, tls_handshake_result r) {
      self->on_tls(ec, std::move(r));
    };
    tls_op_ = std::make_shared<tls_handshake_core>(ex_, *s_, tls_start_->context,
                                                   tls_handshake_core::done_type(std::move(done), ex_));
    tls_op_->start(tls_start_->server_name);
  }

  void close() {
    closed_ = true; // buffered frames are not delivered after a local close
    shutdown(asio::error::operation_aborted, via::post);
    if (tls_op_) tls_op_->stop();
    // Afterwards nothing can post to the executor but what has, so the
    // io_context may be destroyed right after the stream.
    s_->stop();
  }
  bool is_open() const noexcept { return !dead_; }
  /// Any thread: when bytes last arrived (a frame in progress counts), or
  /// when the stream was made.
  std::chrono::steady_clock::time_point last_received() const noexcept {
    return last_rx_.load(std::memory_order_relaxed);
  }
  /// The largest frame accepted (either way), in bytes.
  std::size_t max_message_size() const noexcept { return max_.load(std::memory_order_relaxed); }
  void set_max_message_size(std::size_t n) noexcept { max_ = std::min<std::size_t>(n, UINT32_MAX); }

  std::string peer_address() const { return s_->peer_address(); }

  const asio::any_io_executor& executor() const noexcept { return ex_; }
  stream_stats stats() const {
    stream_stats s = stats_;
    std::lock_guard lk(wire_mu_);
    s.messages_sent += direct_sent_;
    s.write_calls += direct_write_calls_;
    s.bytes_sent += direct_bytes_;
    std::lock_guard lk2(lend_mu_);
    s.messages_received += lent_received_;
    s.bytes_received += lent_bytes_;
    return s;
  }

private:
  struct recv_op {
    std::uint64_t id;
    completion<std::error_code, message> done;
  };

  /// Lives in the handler's cancellation slot. Cancellation may be emitted
  /// from any thread, so it only posts the request to the executor.
  struct canceller {
    canceller(std::weak_ptr<stream_state> c, std::uint64_t i, bool s) : core(std::move(c)), id(i), send(s) {}
    std::weak_ptr<stream_state> core;
    std::uint64_t id;
    bool send;
    void operator()(asio::cancellation_type_t type) const {
      if (auto c = core.lock()) {
        auto ex = c->ex_;
        asio::post(ex, [c = std::move(c), id = id, send = send, type] { c->cancel(id, send, type); });
      }
    }
  };

  void install_canceller(asio::cancellation_slot& slot, std::uint64_t id, bool send) {
    if (slot.is_connected()) slot.template emplace<canceller>(weak_from_this(), id, send);
  }

  void cancel(std::uint64_t id, bool send, asio::cancellation_type_t type) {
    if (send) {
      for (auto it = sendq_.begin(); it != sendq_.end(); ++it)
        if (it->id == id) {
          auto op = std::move(*it);
          sendq_.erase(it);
          publish_busy();
          return op.done(via::dispatch, asio::error::operation_aborted);
        }
      if (batch_.contains(id) && (type & asio::cancellation_type::terminal) != asio::cancellation_type::none) {
        // The batch may be between two partial writes (no write to
        // cancel): the flag makes on_send stop instead of resubmitting.
        cancel_write_ = true;
        if (writing_) s_->cancel_write(); // on_send: operation_aborted, closes the stream
        return;
      }
    } else {
      for (auto it = recvq_.begin(); it != recvq_.end(); ++it)
        if (it->id == id) {
          auto op = std::move(*it);
          recvq_.erase(it);
          return op.done(via::dispatch, asio::error::operation_aborted, message{});
        }
    }
  }

  // The stream is unusable from now on: remember the first reason and close
  // the byte stream (operations in flight finish promptly with errors).
  void mark_dead(std::error_code ec) {
    if (dead_) return;
    dead_ = ec;
    {
      std::lock_guard lk(wire_mu_);
      wire_dead_ = true;
    }
    if (!end_after_log_) s_->close();
  }

  // Tells direct writers whether the executor owns the write side (a write
  // in flight or messages queued). Called after every change of either.
  void publish_busy() {
    std::lock_guard lk(wire_mu_);
    exec_busy_ = writing_ || !sendq_.empty() || tls_pending_;
  }

  // A direct write has ended while messages were queued behind it, or a
  // scheduled write is due: start it unless the wire is busy.
  void kick() {
    bool direct_busy;
    {
      std::lock_guard lk(wire_mu_);
      direct_busy = direct_busy_;
    }
    if (!writing_ && !sendq_.empty() && !dead_ && !direct_busy && !tls_pending_) start_write();
    publish_busy();
  }

  // The TLS handshake ended: from now on every frame is encrypted under
  // its keys, the first ones included (frame_mac); queued frames leave.
  void on_tls(std::error_code ec, tls_handshake_result r) {
    tls_op_.reset();
    if (dead_) return;
    if (ec) return shutdown(ec, via::dispatch);
    const bool client = tls_start_->context.side() == tls_context::role::client;
    tls_start_.reset();
    try {
      auto s = std::make_unique<frame_mac>(client ? r.client_to_server : r.server_to_client);
      check_.enable(client ? r.server_to_client : r.client_to_server, true);
      std::lock_guard lk(wire_mu_);
      seal_ = std::move(s);
      encrypt_ = true;
    } catch (const std::exception&) {
      return shutdown(make_error_code(tls_errc::protocol), via::dispatch);
    }
    binding_ = r.binding;
    tls_pending_ = false;
    if (!r.early.empty()) { // the peer's first frames came with its last handshake message
      const nng_iov room = rbuf_.next_read();
      if (room.iov_len < r.early.size()) return shutdown(make_error_code(tls_errc::trailing_bytes), via::dispatch);
      std::copy(r.early.begin(), r.early.end(), static_cast<std::byte*>(room.iov_buf));
      rbuf_.commit(r.early.size());
    }
    read_more();
    kick();
    pump_recv(via::dispatch);
  }
  // mark_dead, then fail queued sends; pending receives fail once buffered
  // whole frames are delivered. Idempotent.
  void shutdown(std::error_code ec, via v) {
    mark_dead(ec);
    lend_to_ = nullptr; // never granted now (it holds a reference to this core)
    auto q = std::move(sendq_);
    sendq_.clear();
    publish_busy();
    for (auto& op : q) op.done(v, ec);
    pump_recv(v);
  }

  // The write starts once the current handler returns: what it queues after
  // this message leaves in the same write.
  void schedule_write() {
    if (write_scheduled_) return;
    write_scheduled_ = true;
    asio::post(ex_, [self = shared_from_this()] {
      self->write_scheduled_ = false;
      self->kick();
    });
  }

  // ---- write path: everything queued while a write is in flight goes out
  // in the next single write (see write_batch).
  void start_write() {
    cancel_write_ = false;
    inline_tried_ = false;
    batch_.fill(sendq_, seal_.get(), encrypt_);
    submit_write();
  }

  void submit_write() {
    writing_ = true;
    if (try_inline_write()) return;
    ++stats_.write_calls;
    s_->async_write_some(batch_.pending(), io_done::bind<&stream_state::on_write>(shared_from_this()));
  }

  // A small batch is written here if the stream has room for some of it
  // (byte_stream::try_write_some): the completion needs no hop through
  // another thread and back to the executor. Without room, the batch goes
  // the asynchronous way.
  bool try_inline_write() {
    if (inline_tried_ || !batch_.untouched()) return false;
    inline_tried_ = true;
    if (batch_.bytes() > inline_write_limit) return false;
    ++stats_.write_calls;
    std::size_t n = 0;
    const auto ec = s_->try_write_some(batch_.pending(), n);
    if (ec == asio::error::would_block) return false; // wait asynchronously
    on_send(ec, n, via::post);                        // handlers never run inside this call
    return true;
  }

  void on_write(std::error_code ec, std::size_t n) { on_send(ec, n); }

  void on_send(std::error_code ec, std::size_t n, via v = via::dispatch) {
    writing_ = false;
    if (!ec) {
      stats_.bytes_sent += n;
      if (batch_.advance(n)) { // whole batch written (else: part of it, go on)
        auto done = batch_.take();
        stats_.messages_sent += done.size();
        if (!sendq_.empty() && !dead_) start_write(); // queue behind, then notify
        publish_busy();
        for (auto& op : done) {
          op.done(v, {});
          buffer_cache::instance().give(std::move(op.msg));
        }
        return;
      }
      if (!dead_ && !cancel_write_) return submit_write();
      ec = asio::error::operation_aborted;
    }
    // A failed or cancelled write may have left a partial frame: the stream
    // cannot be used any more.
    mark_dead(ec); // first: handlers run below must see a dead stream
    ec = dead_;
    for (auto& op : batch_.take()) op.done(v, ec);
    shutdown(ec, v); // then what was queued behind, in order
  }

  // ---- read path: reads land in a 64 KiB buffer, so several small frames
  // arriving together cost one read and a buffered frame completes an
  // async_recv without touching the byte stream. One read is kept in flight
  // while the buffer has room, even with no async_recv waiting: a dead peer
  // is noticed early. Memory stays bounded by the buffer: a frame that
  // does not fit is read straight into its own message, allocated only once
  // an async_recv waits for it.
  void pump_recv(via v) {
    if (pumping_) return; // re-entered from a handler run inline: the outer loop continues
    pumping_ = true;
    while (!recvq_.empty()) {
      message m;
      if (lent_ && !dead_) break; // the borrower owns the buffer
      if (!lent_ && next_frame(m, v)) {
        ++stats_.messages_received;
        auto op = std::move(recvq_.front());
        recvq_.pop_front();
        op.done(v, {}, std::move(m));
      } else if (dead_) {
        auto op = std::move(recvq_.front());
        recvq_.pop_front();
        op.done(v, dead_, message{});
      } else {
        break;
      }
    }
    pumping_ = false;
    read_more();
  }

  void read_more() {
    if (reading_ || lent_ || tls_pending_) return;
    if (lend_to_ && !dead_) return finish_lend();
    if (!dead_ && rbuf_.wants_read()) start_read();
  }

  // Extracts the next whole frame if buffered. While a read is in flight the
  // buffer's free region belongs to the read: only consume, never move data.
  bool next_frame(message& m, via v) {
    if (closed_ || tampered_) return false;
    switch (rbuf_.parse(m, max_ + check_.tag_size(), reading_)) {
    case frame_buffer::parsed::frame:
      if (authentic(m)) return true;
      shutdown(make_error_code(frame_mac_errc::bad_tag), v);
      return false;
    case frame_buffer::parsed::too_big: shutdown(asio::error::message_size, v); return false;
    default: return false;
    }
  }

  void start_read() {
    reading_ = true;
    ++stats_.read_calls;
    s_->async_read_some(rbuf_.next_read(), io_done::bind<&stream_state::on_recv>(shared_from_this()));
  }

  void on_recv(std::error_code ec, std::size_t n) {
    reading_ = false;
    if (!ec && n > 0) {
      stats_.bytes_received += n;
      landed(n);
    } else if (!(ec == asio::error::operation_aborted && lend_to_)) // cancelled to lend the read side: no error
      shutdown(ec ? ec : std::error_code(asio::error::eof), via::dispatch);
    pump_recv(via::dispatch);
  }

public:
  // ---- lending the read side: the executor lends it; the borrower reads
  // with blocking calls (byte_stream::read_some: woken by the kernel or
  // nng's poller, no hop through another thread and the executor). lent_ is
  // the executor's view; lend_state_ (under lend_mu_) is shared with the
  // borrower, who may be reading or not.
  enum class lend_state { home, lent_idle, lent_reading };

  void lend(std::function<void()> granted) {
    if (dead_ || lent_) return; // dead: the close path reports it
    lend_to_ = std::move(granted);
    // on_recv → pump_recv → finish_lend (after the TLS handshake, if any).
    if (reading_) s_->cancel_read();
    else pump_recv(via::dispatch);
  }

  // Called by read_more once buffered whole frames went to waiting receivers.
  void finish_lend() {
    auto granted = std::move(lend_to_);
    lend_to_ = nullptr;
    lent_ = true;
    {
      std::lock_guard lk(lend_mu_);
      lend_state_ = lend_state::lent_idle;
    }
    s_->reads_lent(true);
    granted();
  }

  /// Borrower: the next frame, or an error: already_started (taken back
  /// while the borrower was not reading: ask again), or the stream's error
  /// (hand it to give_back: the executor then closes the stream).
  std::error_code recv_lent(message& m) {
    {
      std::lock_guard lk(lend_mu_);
      if (lend_state_ != lend_state::lent_idle) return asio::error::already_started;
      lend_state_ = lend_state::lent_reading;
    }
    std::error_code ec;
    std::uint64_t read = 0;
    while ((ec = lent_buffered(m)) == asio::error::would_block) {
      std::size_t n = 0;
      ec = s_->read_some(rbuf_.next_read(), n);
      if (ec || n == 0) {
        if (!ec) ec = asio::error::eof;
        break;
      }
      landed(n);
      read += n;
    }
    std::lock_guard lk(lend_mu_);
    lend_state_ = lend_state::lent_idle;
    lent_bytes_ += read;
    if (!ec) ++lent_received_;
    return ec;
  }

  // A borrower that reads the socket itself, on its own reactor (a reply
  // line): it reads into lent_region(), commits with lent_commit, and takes
  // frames with lent_next. From its first lent_region() the executor can no
  // longer take the read side back.
  nng_iov lent_region() {
    {
      std::lock_guard lk(lend_mu_);
      if (lend_state_ == lend_state::lent_idle) lend_state_ = lend_state::lent_reading;
    }
    return rbuf_.next_read();
  }
  void lent_commit(std::size_t n) {
    landed(n);
    std::lock_guard lk(lend_mu_);
    lent_bytes_ += n;
  }
  /// The next whole frame read (checked, as recv_lent's), would_block when
  /// more bytes are needed, or the stream's error (for give_back).
  std::error_code lent_next(message& m) {
    const auto ec = lent_buffered(m);
    if (ec) return ec;
    std::lock_guard lk(lend_mu_);
    ++lent_received_;
    return {};
  }
  int native_handle() const noexcept { return s_->native_handle(); }

  /// Borrower: hands the read side back (with the error that ended it, if any).
  void give_back(std::error_code ec) {
    {
      std::lock_guard lk(lend_mu_);
      if (lend_state_ == lend_state::home) return; // taken back already
      lend_state_ = lend_state::home;
    }
    asio::post(ex_, [self = shared_from_this(), ec] {
      self->lent_ = false;
      self->s_->reads_lent(false);
      if (ec) self->shutdown(ec, via::dispatch);
      else self->pump_recv(via::dispatch);
    });
  }

  /// Executor: takes the read side back if the borrower is not reading (it
  /// is busy elsewhere). Buffered frames then go to waiting receivers.
  bool take_back() {
    if (!lent_) return false;
    {
      std::lock_guard lk(lend_mu_);
      if (lend_state_ != lend_state::lent_idle) return false;
      lend_state_ = lend_state::home;
    }
    lent_ = false;
    s_->reads_lent(false);
    pump_recv(via::dispatch);
    return true;
  }

private:
  // The borrower's next whole buffered frame, checked; would_block when
  // more bytes are needed, or the error that ends the stream.
  std::error_code lent_buffered(message& m) {
    if (tampered_) return make_error_code(frame_mac_errc::bad_tag);
    switch (rbuf_.parse(m, max_ + check_.tag_size(), false)) {
    case frame_buffer::parsed::frame: break;
    case frame_buffer::parsed::too_big: return asio::error::message_size;
    default: return asio::error::would_block;
    }
    if (!authentic(m)) return make_error_code(frame_mac_errc::bad_tag);
    return {};
  }

  // `n` bytes landed in rbuf_.next_read(): whoever holds the read side.
  void landed(std::size_t n) {
    rbuf_.commit(n);
    check_.follow(rbuf_);
    note_progress();
  }

  // With frame MACs on: checks `m`'s tag (decrypting it on TLS) and strips
  // it. Whoever holds the read side (the executor, or the borrower).
  bool authentic(message& m) {
    if (check_.check(m)) return true;
    tampered_ = true; // nothing after it is delivered
    if (refusal_log()(log_level::error, "fiber: a frame from ", peer_address(),
                      " failed its authentication tag (changed in transit?): link closed"))
      hold_open_until_logged();
    return false;
  }

  // The peer learns of the close from the connection's end, and a master
  // kills a worker whose link ended: the end waits, on a copy of the
  // socket, until the line saying why is written (mark_dead skips it).
  void hold_open_until_logged() {
    const int fd = s_->native_handle();
    const int copy = fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return;
    end_after_log_ = true;
    log_writer::instance().when_written([copy] {
      ::shutdown(copy, SHUT_RDWR);
      ::close(copy);
    });
  }

  // Bytes arrived: one relaxed store per completed read (liveness).
  void note_progress() noexcept { last_rx_.store(std::chrono::steady_clock::now(), std::memory_order_relaxed); }

  std::atomic<std::chrono::steady_clock::time_point> last_rx_;
  asio::any_io_executor ex_;
  byte_stream_ptr s_;
  std::atomic<std::size_t> max_;
  scratch_bytes dbuf_; // a direct encrypted frame's header and ciphertext (the thread holding direct_busy_)
  bool inline_tried_ = false, write_scheduled_ = false;
  std::optional<tls_start> tls_start_;         // until the TLS handshake is done
  std::shared_ptr<tls_handshake_core> tls_op_; // while it runs
  std::optional<channel_binding> binding_;     // after it
  bool tls_pending_;
  // Shared with direct writers (any thread), under wire_mu_: who owns the
  // write side. Only one of exec_busy_ / direct_busy_ is set when a write starts.
  mutable std::mutex wire_mu_;
  bool exec_busy_ = false, direct_busy_ = false, wire_dead_ = false;
  std::uint64_t direct_sent_ = 0, direct_write_calls_ = 0, direct_bytes_ = 0;
  std::error_code dead_;
  bool closed_ = false;
  std::uint64_t next_id_ = 0;
  stream_stats stats_;

  std::unique_ptr<frame_mac> seal_; // frame MACs: the write side's (set under wire_mu_)
  frame_check check_;               // and the read side's (its holder's)
  bool encrypt_ = false;            // they encrypt (TLS); set with seal_
  std::atomic<bool> tampered_{false};
  std::atomic<bool> end_after_log_{false}; // hold_open_until_logged ends the connection
  std::deque<send_op> sendq_;
  write_batch batch_;
  bool writing_ = false, cancel_write_ = false;

  std::deque<recv_op> recvq_;
  frame_buffer rbuf_;
  bool reading_ = false, pumping_ = false;

  std::function<void()> lend_to_; // a lend in progress (executor)
  bool lent_ = false;             // executor's view: the borrower owns the read side
  mutable std::mutex lend_mu_;
  lend_state lend_state_ = lend_state::home;
  std::uint64_t lent_received_ = 0, lent_bytes_ = 0;
};

/// Writes whole frames on a stream from any thread, synchronously, while

} // namespace fiber::detail
