// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/reply_line.hpp
/// A manager process's reply line: a second socketpair made at launch (a
/// local job), or a second connection it dials (one that dials its master
/// over TCP), on which it writes the replies to calls marked
/// `object_op::call_aside`, read on the caller's io_context so that a reply
/// wakes the caller alone.

#include <fiber/detail/frame.hpp>
#include <fiber/detail/frame_buffer.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/service_wire.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/wire_status.hpp>
#include <fiber/detail/worker_env.hpp>
#include <fiber/detail/worker_link.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/post.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <system_error>
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

/// The master's end of one manager process's reply line: the read side of
/// its stream, lent for good (a socketpair made at launch, or a connection
/// the process dialled and authenticated as its link's line: frames checked
/// as the link's are). While calls answered on it are outstanding, a
/// descriptor of its socket is registered with their caller's io_context
/// and read there, and each reply completes its call inline (no hop through
/// the runtime thread); with none outstanding it belongs to no io_context,
/// so that run() returns and the context may go. A call made on another
/// io_context meanwhile takes the link. Thread-safe.
class reply_line : public std::enable_shared_from_this<reply_line> {
public:
  /// A reply read from the line: call id, status, payload.
  using deliver_fn = std::function<void(std::uint64_t, wire_status, std::vector<std::byte>)>;
  /// The line failed (the process died, or sent bytes that do not decode or fail their tag).
  using broken_fn = std::function<void(const std::string& why)>;

  /// Reads through `r`, the line's stream's read side (a socket's); keeps a
  /// descriptor of its own to watch it. Throws std::system_error if it
  /// cannot have one.
  reply_line(lent_reader r, deliver_fn deliver, broken_fn broken)
      : r_(std::move(r)), deliver_(std::move(deliver)), broken_(std::move(broken)) {
    fd_ = r_.native_handle() < 0 ? -1 : ::fcntl(r_.native_handle(), F_DUPFD_CLOEXEC, 0);
    if (fd_ < 0) throw std::system_error(errno ? errno : EBADF, std::system_category(), "fiber: a reply line");
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    family_ = ss.ss_family;
  }
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
      auto s = std::make_unique<socket_type>(ctx);
      s->assign(asio::generic::stream_protocol(family_, 0), fd_, ec);
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
  using socket_type = asio::generic::stream_protocol::socket;

  static const reply_line*& reading_now() {
    static thread_local const reply_line* r = nullptr;
    return r;
  }

  // m_ held.
  void arm() {
    reading_ = true;
    const nng_iov room = r_.region();
    sock_->async_read_some(asio::buffer(room.iov_buf, room.iov_len),
                           [self = shared_from_this()](std::error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  // m_ held: the socket leaves its io_context; the descriptor stays.
  void unbind() {
    std::error_code ec;
    fd_ = sock_->release(ec);
    sock_.reset();
    ctx_ = nullptr;
    if (ec) fail_locked("releasing it failed: " + ec.message(), ec);
  }

  // m_ held.
  void fail_locked(const std::string& why, std::error_code ec) {
    if (broken_now_) return;
    broken_now_ = true;
    if (sock_) {
      sock_.reset(); // closes fd_
      fd_ = -1;
    }
    ctx_ = nullptr;
    why_ = why;
    r_.give_back(ec); // the stream closes
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
        fail_locked(ec ? "reading it failed: " + ec.message() : "the manager process closed it",
                    ec ? ec : asio::error::eof);
      } else {
        r_.received(n);
        take(replies);
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
    else unbind(); // bytes of a reply begun stay with the stream's read side
  }

  // m_ held: the whole frames read.
  void take(std::vector<reply_msg>& out) {
    for (;;) {
      message m;
      const auto ec = r_.next(m);
      if (ec == asio::error::would_block) return;
      if (ec) return fail_locked("a frame failed: " + ec.message(), ec);
      try {
        out.push_back(decode_frame<reply_msg>(frame_kind::object_reply, m));
      } catch (const std::exception& e) {
        return fail_locked(std::string("a reply does not decode: ") + e.what(),
                           std::make_error_code(std::errc::bad_message));
      }
    }
  }

  lent_reader r_;
  std::mutex m_;
  int fd_ = -1; // a descriptor of the line's socket, this line's own; sock_ owns it while bound
  int family_ = AF_UNIX;
  std::unique_ptr<socket_type> sock_;
  asio::io_context* ctx_ = nullptr; // the io_context it is read on; null: none
  std::size_t outstanding_ = 0;     // calls entered whose reply function has not run
  bool reading_ = false, broken_now_ = false;
  std::string why_;
  deliver_fn deliver_;
  broken_fn broken_;
};

/// A manager process's end of its reply line: the inherited socket
/// (FIBER_INTERNAL_REPLY_FD), blocking, or the connection it dialled
/// (adopt), which seals each frame as its link does. The threads running
/// methods write whole frames to it, one at a time; never the runtime
/// thread. Thread-safe.
class reply_line_writer {
public:
  static reply_line_writer& instance() {
    static auto* w = new reply_line_writer; // never destroyed: actor threads may write during exit
    return *w;
  }

  /// Runtime thread: from now on frames go on `l`, a connection this
  /// process dialled and its master authenticated as its link's reply
  /// line; kept open here. Its first frame, a reply to call 0, tells the
  /// master so: it marks no call for the line before. Ignored when the
  /// process inherited a line.
  void adopt(std::shared_ptr<worker_link> l) {
    {
      std::lock_guard lk(m_);
      if (fd_ >= 0 || dialled_) return;
      dialled_ = l->direct();
      dialled_link_ = l;
    }
    l->send(frame(frame_kind::object_reply, reply_msg{0, wire_status::ok, {}}));
  }
  /// Whether the process inherited a line or has one dialled. Any thread.
  bool has_line() {
    std::lock_guard lk(m_);
    return fd_ >= 0 || bool(dialled_);
  }

  /// Writes `f` (a frame) whole; false, having written nothing, when this
  /// process has no line (the caller sends on the link instead). A line
  /// that fails is closed (the master reads the link's loss).
  bool send(std::span<const std::byte> f) {
    std::lock_guard lk(m_);
    if (dialled_) return dialled_.try_send(f); // nothing else writes on it: false only once it failed
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
  direct_writer dialled_;
  std::shared_ptr<worker_link> dialled_link_; // keeps dialled_'s connection open
};

} // namespace fiber::detail
