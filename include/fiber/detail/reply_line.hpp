// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/reply_line.hpp
/// A local manager process's reply line: a second socketpair made at launch
/// on which it writes the replies to calls marked `object_op::call_aside`,
/// read on the caller's io_context so that a reply wakes the caller alone.

#include <fiber/detail/frame.hpp>
#include <fiber/detail/frame_buffer.hpp>
#include <fiber/detail/frame_limit.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/service_wire.hpp>
#include <fiber/detail/wire_status.hpp>
#include <fiber/detail/worker_env.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>

namespace fiber::detail {

/// The executor a completion handler runs on, when a reply line can serve
/// it (an io_context's, possibly behind any_io_executor); empty otherwise.
/// Example: `auto caller = reply_line_executor(handler);`
template <class Handler>
asio::any_io_executor reply_line_executor(const Handler& h) {
  using E = asio::associated_executor_t<Handler, asio::any_io_executor>;
  if constexpr (std::is_same_v<E, asio::any_io_executor> || std::is_same_v<E, asio::io_context::executor_type>)
    return asio::get_associated_executor(h, asio::any_io_executor());
  else return (void)h, asio::any_io_executor();
}

/// The master's end of one manager process's reply line. While calls
/// answered on it are outstanding, it is registered with their caller's
/// io_context and read there, and each reply completes its call inline
/// (no hop through the runtime thread); with none outstanding it belongs to
/// no io_context, so that run() returns and the context may go. A call
/// made on another io_context meanwhile takes the link. Thread-safe.
class reply_line : public std::enable_shared_from_this<reply_line> {
public:
  /// A reply read from the line: call id, status, payload.
  using deliver_fn = std::function<void(std::uint64_t, wire_status, std::vector<std::byte>)>;
  /// The line failed (the process died, or sent bytes that do not decode).
  using broken_fn = std::function<void(const std::string& why)>;

  /// Takes `fd`, the master's end of the line.
  reply_line(int fd, deliver_fn deliver, broken_fn broken)
      : fd_(fd), deliver_(std::move(deliver)), broken_(std::move(broken)) {}
  reply_line(const reply_line&) = delete;
  reply_line& operator=(const reply_line&) = delete;
  ~reply_line() {
    if (!sock_ && fd_ >= 0) ::close(fd_);
  }

  /// The caller's thread, before it sends a call whose handler runs on
  /// `caller`: true when the reply may come on this line (the call is
  /// counted until its reply function runs, see reply_fn_for); false when
  /// `caller` is not an io_context this thread runs, or the line is read on
  /// another one.
  bool enter(const asio::any_io_executor& caller) {
    if (!caller) return false;
    const auto* ex = caller.target<asio::io_context::executor_type>();
    if (!ex || !ex->running_in_this_thread()) return false;
    auto& ctx = ex->context();
    std::lock_guard lk(m_);
    if (broken_now_ || (ctx_ && ctx_ != &ctx)) return false;
    if (!ctx_) {
      std::error_code ec;
      auto s = std::make_unique<asio::local::stream_protocol::socket>(ctx);
      s->assign(asio::local::stream_protocol(), fd_, ec);
      if (ec) return false;
      sock_ = std::move(s);
      ctx_ = &ctx;
    }
    ++outstanding_;
    if (!reading_) arm();
    return true;
  }

  /// The reply function of a call for which enter() returned true: on the
  /// thread reading this line, `done` runs inline; elsewhere (a failure, a
  /// reply that came on the link) it runs on `ex` as answer_later's does.
  reply_fn reply_fn_for(asio::any_io_executor ex, request_done done) {
    return [self = shared_from_this(), later = answer_later(std::move(ex), done),
            done](wire_status st, std::vector<std::byte> p) mutable {
      if (reading_now() == self.get()) {
        self->left(false);
        if (st == wire_status::ok) done(nullptr, std::move(p));
        else done(failure_of(st, p), {});
        return;
      }
      self->left(true);
      later(st, std::move(p));
    };
  }

private:
  static const reply_line*& reading_now() {
    static thread_local const reply_line* r = nullptr;
    return r;
  }

  // m_ held.
  void arm() {
    reading_ = true;
    if (buf_.size() - have_ < 65536) buf_.resize(std::max(buf_.size() * 2, have_ + 65536));
    sock_->async_read_some(asio::buffer(buf_.data() + have_, buf_.size() - have_),
                           [self = shared_from_this()](std::error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  // m_ held: the socket leaves its io_context; the descriptor stays.
  void unbind() {
    std::error_code ec;
    fd_ = sock_->release(ec);
    sock_.reset();
    ctx_ = nullptr;
    if (ec) fail_locked("releasing it failed: " + ec.message());
  }

  // m_ held.
  void fail_locked(const std::string& why) {
    if (broken_now_) return;
    broken_now_ = true;
    if (sock_) {
      sock_.reset(); // closes fd_
      fd_ = -1;
    }
    ctx_ = nullptr;
    why_ = why;
  }

  void left(bool elsewhere) {
    std::lock_guard lk(m_);
    --outstanding_;
    // A read pending with nothing left to read keeps run() from returning: end it there.
    if (elsewhere && outstanding_ == 0 && reading_ && ctx_)
      asio::post(ctx_->get_executor(), [self = shared_from_this()] {
        std::lock_guard lk(self->m_);
        if (self->outstanding_ == 0 && self->reading_ && self->sock_) self->sock_->cancel();
      });
  }

  void on_read(std::error_code ec, std::size_t n) {
    std::vector<reply_msg> replies;
    std::string broken;
    {
      std::lock_guard lk(m_);
      reading_ = false;
      if (ec == asio::error::operation_aborted) {
        if (outstanding_ > 0 && sock_) arm();
        else if (sock_) unbind();
        return;
      }
      if (ec || n == 0) {
        fail_locked(ec ? "reading it failed: " + ec.message() : "the manager process closed it");
      } else {
        have_ += n;
        try {
          cut(replies);
        } catch (const std::exception& e) {
          fail_locked(std::string("a reply does not decode: ") + e.what());
        }
      }
      if (broken_now_) broken = why_;
    }
    reading_now() = this;
    for (auto& r : replies) deliver_(r.request_id, r.status, std::move(r.payload));
    reading_now() = nullptr;
    if (!broken.empty()) {
      if (broken_) broken_(broken);
      return;
    }
    std::lock_guard lk(m_);
    if (broken_now_ || reading_ || !sock_) return;
    if (outstanding_ > 0) arm();
    else if (have_ == 0) unbind();
    else fail_locked("bytes of a reply no call waits for");
  }

  // m_ held: whole frames `[u32 length][frame]` out of buf_.
  void cut(std::vector<reply_msg>& out) {
    std::size_t at = 0;
    while (have_ - at >= frame_header_size) {
      std::uint32_t len = 0;
      for (std::size_t i = 0; i < frame_header_size; ++i) len |= std::uint32_t(buf_[at + i]) << (8 * i);
      if (!fits_in_frame(len > frame_overhead ? len - frame_overhead : 0))
        throw serialization_error("a frame of " + std::to_string(len) + " bytes");
      if (have_ - at - frame_header_size < len) break;
      out.push_back(decode_frame<reply_msg>(frame_kind::object_reply,
                                            std::span<const std::byte>(buf_.data() + at + frame_header_size, len)));
      at += frame_header_size + len;
    }
    std::memmove(buf_.data(), buf_.data() + at, have_ - at);
    have_ -= at;
  }

  std::mutex m_;
  int fd_ = -1; // the descriptor; sock_ owns it while bound
  std::unique_ptr<asio::local::stream_protocol::socket> sock_;
  asio::io_context* ctx_ = nullptr; // the io_context it is read on; null: none
  std::size_t outstanding_ = 0;     // calls entered whose reply function has not run
  bool reading_ = false, broken_now_ = false;
  std::string why_;
  std::vector<std::byte> buf_;
  std::size_t have_ = 0; // bytes of buf_ read, not yet cut into replies
  deliver_fn deliver_;
  broken_fn broken_;
};

/// A manager process's end of its reply line (FIBER_INTERNAL_REPLY_FD):
/// a blocking socket that the threads running methods write whole frames
/// to, one at a time. Never the runtime thread. Thread-safe.
class reply_line_writer {
public:
  static reply_line_writer& instance() {
    static auto* w = new reply_line_writer; // never destroyed: actor threads may write during exit
    return *w;
  }

  /// Writes `f` (a frame) whole; false, having written nothing, when this
  /// process has no line (the caller sends on the link instead). A line
  /// that fails is closed (the master reads the link's loss).
  bool send(std::span<const std::byte> f) {
    std::lock_guard lk(m_);
    if (fd_ < 0) return false;
    const frame_header h(std::uint32_t(f.size()));
    iovec iov[2] = {{const_cast<std::byte*>(h.bytes), frame_header_size}, {const_cast<std::byte*>(f.data()), f.size()}};
    std::size_t left = frame_header_size + f.size(), i = 0;
    while (left > 0) {
      msghdr mh{};
      mh.msg_iov = iov + i;
      mh.msg_iovlen = 2 - i;
      const auto r = ::sendmsg(fd_, &mh, MSG_NOSIGNAL);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) { // the master is gone, or a frame is half written: the line ends, the link decides
        ::close(fd_);
        fd_ = -1;
        return false;
      }
      left -= std::size_t(r);
      for (auto k = std::size_t(r); k > 0;) {
        const auto step = std::min(k, iov[i].iov_len);
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + step;
        iov[i].iov_len -= step;
        k -= step;
        if (iov[i].iov_len == 0) ++i;
      }
    }
    return true;
  }

private:
  reply_line_writer() {
    const int f = worker_environment().reply_fd;
    struct stat st {};
    if (f < 0 || ::fstat(f, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
    ::fcntl(f, F_SETFD, FD_CLOEXEC);
    ::fcntl(f, F_SETFL, ::fcntl(f, F_GETFL) & ~O_NONBLOCK);
    fd_ = f;
  }

  std::mutex m_;
  int fd_ = -1;
};

} // namespace fiber::detail
