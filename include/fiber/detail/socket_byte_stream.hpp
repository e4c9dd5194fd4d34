// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/socket_byte_stream.hpp
/// byte_stream over an Asio socket (what fiber dials): it runs on the
/// executor's own reactor, so a dialled link adds no thread to its process.
/// socket_stream() makes a link's stream over one.

#include <fiber/detail/byte_stream.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/stream_address.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/post.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <memory>
#include <cerrno>
#include <optional>
#include <utility>

namespace fiber::detail {

/// Owns a connected socket. The blocking calls (a direct writer, a lent
/// reader) use the descriptor with poll(2), beside the executor's reactor;
/// close() shuts the socket down, which wakes both. The descriptor itself
/// is closed only with this object, so no thread can meet a reused number.
class socket_byte_stream final : public byte_stream {
public:
  using socket_type = asio::generic::stream_protocol::socket;
  static constexpr std::size_t max_iov = 8;

  socket_byte_stream(asio::any_io_executor ex, socket_type s)
      : ex_(std::move(ex)), sock_(std::move(s)), fd_(sock_->native_handle()), protocol_(protocol_of(fd_)) {}
  ~socket_byte_stream() override {
    ops_->stopped = true;
    if ((!sock_ || parked_) && fd_ >= 0) ::close(fd_); // released by stop(), or out of the reactor
  }

private:
  // Completes on the executor; cancelled through `sig`.
  auto bind(asio::cancellation_signal& sig, io_done done) {
    ++ops_->pending;
    return asio::bind_cancellation_slot(
        sig.slot(),
        asio::bind_executor(ex_, [this, ops = ops_, d = std::move(done)](std::error_code ec, std::size_t n) mutable {
          --ops->pending;
          if (!ops->stopped) park_if_idle(); // else this stream may be gone
          d(ec, n);
        }));
  }

  static asio::generic::stream_protocol protocol_of(int fd) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    return {ss.ss_family, 0};
  }

  // While the read side is lent and nothing of the executor's is pending,
  // the socket is out of the reactor: Asio watches a socket for input as
  // long as it is registered, and would wake the executor's thread for
  // every frame the borrower reads.
  void park_if_idle() {
    if (!lent_ || parked_ || ops_->pending || !sock_) return;
    std::error_code ec;
    sock_->release(ec); // nothing pending: nothing cancelled
    parked_ = !ec;
  }
  std::error_code unpark() {
    if (!parked_) return {};
    std::error_code ec;
    sock_->assign(protocol_, fd_, ec);
    if (!ec) parked_ = false;
    return ec;
  }

public:
  void async_write_some(std::span<const nng_iov> iov, io_done done) override {
    if (!sock_) return fail(std::move(done));
    if (auto ec = unpark()) return fail(std::move(done), ec);
    const std::size_t k = buffers(iov, wbufs_); // Asio keeps the span, not the buffers: they are members
    sock_->async_write_some(std::span<const asio::const_buffer>(wbufs_.data(), k), bind(wsig_, std::move(done)));
  }
  void async_read_some(nng_iov iov, io_done done) override {
    if (!sock_) return fail(std::move(done));
    lent_ = false; // the executor reads: the read side is home
    if (auto ec = unpark()) return fail(std::move(done), ec);
    sock_->async_read_some(asio::buffer(iov.iov_buf, iov.iov_len), bind(rsig_, std::move(done)));
  }
  void reads_lent(bool lent) override {
    lent_ = lent;
    park_if_idle();
  }
  int native_handle() const noexcept override { return fd_; }
  void cancel_read() override { rsig_.emit(asio::cancellation_type::total); }
  void cancel_write() override { wsig_.emit(asio::cancellation_type::total); }

  std::error_code try_write_some(std::span<const nng_iov> iov, std::size_t& n) override { return send(iov, n, false); }
  std::error_code write_some(std::span<const nng_iov> iov, std::size_t& n) override { return send(iov, n, true); }
  std::error_code read_some(nng_iov iov, std::size_t& n) override {
    n = 0;
    for (;;) {
      const ssize_t r = ::recv(fd_, iov.iov_buf, iov.iov_len, MSG_DONTWAIT);
      if (r >= 0) {
        n = std::size_t(r);
        return {};
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (auto ec = wait(POLLIN)) return ec;
      } else if (errno != EINTR) {
        return {errno, std::system_category()};
      }
    }
  }

  void close() noexcept override { ::shutdown(fd_, SHUT_RDWR); }
  void stop() noexcept override {
    ops_->stopped = true;
    if (!sock_) return;
    std::error_code ec;
    if (!parked_) sock_->release(ec); // pending operations complete with operation_aborted
    parked_ = false;
    sock_.reset(); // no Asio object outlives this call: the io_context may go
  }
  std::string peer_address() const override { return socket_peer_address(fd_); }
  bool is_ipc() const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    return ::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family == AF_UNIX;
  }

private:
  static std::size_t buffers(std::span<const nng_iov> iov, std::array<asio::const_buffer, max_iov>& b) {
    std::size_t k = 0;
    for (const auto& v : iov)
      if (k < b.size()) b[k++] = asio::const_buffer(v.iov_buf, v.iov_len);
    return k;
  }

  void fail(io_done done, std::error_code ec = asio::error::bad_descriptor) {
    asio::post(ex_, [d = std::move(done), ec]() mutable { d(ec, 0); });
  }

  // sendmsg(2) without SIGPIPE; `block`: poll until there is room.
  std::error_code send(std::span<const nng_iov> iov, std::size_t& n, bool block) {
    n = 0;
    std::array<iovec, max_iov> v;
    std::size_t k = 0;
    for (const auto& x : iov)
      if (k < v.size()) v[k++] = {x.iov_buf, x.iov_len};
    msghdr h{};
    h.msg_iov = v.data();
    h.msg_iovlen = k;
    for (;;) {
      const ssize_t r = ::sendmsg(fd_, &h, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r >= 0) {
        n = std::size_t(r);
        return {};
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!block) return asio::error::would_block;
        if (auto ec = wait(POLLOUT)) return ec;
      } else if (errno != EINTR) {
        return {errno, std::system_category()};
      }
    }
  }

  // Until `events` or a hang-up (the operation that follows reports it).
  std::error_code wait(short events) {
    pollfd p{fd_, events, 0};
    while (::poll(&p, 1, -1) < 0)
      if (errno != EINTR) return {errno, std::system_category()};
    return {};
  }

  asio::any_io_executor ex_;
  std::optional<socket_type> sock_; // until stop()
  int fd_;
  asio::generic::stream_protocol protocol_;
  struct ops_state {
    std::size_t pending = 0;          // asynchronous operations in flight
    std::atomic<bool> stopped{false}; // their completions no longer touch this stream
  };
  std::shared_ptr<ops_state> ops_ = std::make_shared<ops_state>();
  bool lent_ = false, parked_ = false; // parked: out of the reactor (park_if_idle)
  asio::cancellation_signal rsig_, wsig_;
  std::array<asio::const_buffer, max_iov> wbufs_; // the write in flight
};

/// Sets what every TCP link socket of fiber's has, dialled or accepted:
/// TCP_NODELAY and SO_KEEPALIVE. Example: `set_tcp_link_options(fd);`
inline void set_tcp_link_options(int fd) noexcept {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
}

/// A link's stream over the connected socket `s`, on `ex`; with `tls`, a
/// TLS handshake runs before its first frame.
/// Example: `stream st = socket_stream(ex, adopt_socket(ex, fd), transport());`
inline stream socket_stream(asio::any_io_executor ex, socket_byte_stream::socket_type s, const transport_options& o,
                            std::optional<tls_start> tls = std::nullopt) {
  return stream(ex, std::make_unique<socket_byte_stream>(ex, std::move(s)), o, std::move(tls));
}

} // namespace fiber::detail
