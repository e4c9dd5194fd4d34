#pragma once
/// @file transport.hpp
/// fiber's transport: 1:1, full-duplex, message-framed connections over nng's
/// byte-stream API (`ipc://`, `tcp://`, `tls+tcp://`), bridged into Asio.
///
/// Why byte streams and not nng's SP sockets: fiber needs one addressable
/// connection per peer (master<->worker, broker<->client). SP protocols only
/// give that through PAIR1's deprecated polyamorous mode, so fiber frames
/// messages itself on nng streams.
///
/// Wire format: every message is a frame `u32 little-endian payload length`
/// followed by the payload. A frame longer than `max_message_size` fails the
/// receive with `asio::error::message_size` and closes the stream before any
/// payload buffer is allocated.
///
/// Asio bridge: every async operation uses `asio::async_initiate`, so any
/// completion token works (callbacks, use_awaitable, use_future, deferred,
/// parallel groups). nng completes its aios on its own threads; those
/// callbacks never touch stream state: they post the result to the stream's
/// executor, where all state lives (no mutex). From there the user's handler
/// is dispatched to its associated executor, with outstanding work tracked on
/// both executors while an operation is pending (as Asio's own sockets do).
/// nng's file descriptors are never polled.
///
/// Threading: like asio::ip::tcp::socket, a stream/listener is not
/// thread-safe. Call its member functions (and destroy it) on its executor,
/// i.e. from one thread at a time or through a strand. One exception:
/// `stream::direct()` hands out a `direct_writer`, which any thread may use to
/// write a whole frame synchronously while the stream has nothing else to
/// write (a worker's main thread sends its results without waking the
/// executor's thread, nng's callback thread and then itself again).
///
/// Lifetime: close()/destruction waits for nng's callbacks of that object
/// (nng_aio_stop), so an io_context may be destroyed right after its streams
/// and listeners. Destroy it only once no async_connect is pending (as with
/// any Asio operation, a pending connect keeps io_context::run() busy).
///
/// Batching and buffering: messages queued while a write is in flight leave
/// together in the next nng_stream_send (headers and small payloads copied
/// into one buffer, large payloads gathered in place); a lone message is
/// written at once. Reads fill a 64 KiB buffer, so many small frames cost
/// one nng_stream_recv and a buffered frame completes async_recv without
/// touching nng. See stream_core for the details.
///
/// Per-operation cancellation (the handler's associated cancellation slot):
///  - async_recv / async_accept: a pending operation completes with
///    operation_aborted; no side effect (all cancellation types). The nng read
///    or accept underneath is deliberately NOT cancelled: it keeps filling the
///    stream's buffer (bounded) for the next async_recv. Cancelling an nng
///    stream read could drop a partial frame, and nng's TLS stream treats a
///    cancelled read as fatal to the connection.
///  - async_send still queued: completes with operation_aborted, no side
///    effect. Already being written: only `terminal` cancellation acts; it
///    nng_aio_cancel()s the write and, since a partial frame may be on the
///    wire, closes the stream (the batch it was part of fails too).
///  - async_connect: nng_aio_cancel() on the dial.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <arpa/inet.h>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

namespace fiber::detail {

// ---------------------------------------------------------------- errors

class nng_error_category final : public std::error_category {
public:
  const char* name() const noexcept override { return "nng"; }
  std::string message(int rv) const override {
    // nng_strerror formats unknown codes into a static buffer (not
    // thread-safe); only hand it the codes it knows by name.
    if ((rv > 0 && rv <= NNG_ECONNSHUT) || rv == NNG_EINTERNAL) return nng_strerror(rv);
    return "nng error " + std::to_string(rv);
  }
};

/// The category of nng errors that have no closer Asio/POSIX equivalent.
inline const std::error_category& nng_category() noexcept {
  static const nng_error_category cat;
  return cat;
}

/// Maps an nng return value to an error code callers can test portably:
///   NNG_ECANCELED  -> asio::error::operation_aborted
///   NNG_ETIMEDOUT  -> asio::error::timed_out
///   NNG_ECONNSHUT  -> asio::error::eof               (peer closed)
///   NNG_ECLOSED    -> asio::error::eof               (stream closed under
///                     the operation; a stream closed by its own close()
///                     reports operation_aborted instead, see stream)
///   NNG_ECONNRESET -> asio::error::connection_reset
///   NNG_ECONNABORTED/ECONNREFUSED/EADDRINUSE/EMSGSIZE -> the asio equivalent
///   NNG_ESYSERR|e  -> {e, std::system_category()}
///   others         -> {rv, nng_category()}
inline std::error_code make_nng_error(int rv) noexcept {
  switch (rv) {
  case 0: return {};
  case NNG_ECANCELED: return asio::error::operation_aborted;
  case NNG_ETIMEDOUT: return asio::error::timed_out;
  case NNG_ECONNSHUT:
  case NNG_ECLOSED: return asio::error::eof;
  case NNG_ECONNRESET: return asio::error::connection_reset;
  case NNG_ECONNABORTED: return asio::error::connection_aborted;
  case NNG_ECONNREFUSED: return asio::error::connection_refused;
  case NNG_EADDRINUSE: return asio::error::address_in_use;
  case NNG_EMSGSIZE: return asio::error::message_size;
  default: break;
  }
  if (rv & NNG_ESYSERR) return {rv & ~NNG_ESYSERR, std::system_category()};
  return {rv, nng_category()};
}

// ---------------------------------------------------------------- basics

using message = std::vector<std::byte>;

/// Bytes a frame refers to without a copy of its own: `bytes` stays valid
/// while `owner` lives (e.g. a Pool chunk's arguments, kept for reruns, or a
/// received frame that results point into).
struct shared_bytes {
  std::shared_ptr<const void> owner;
  std::span<const std::byte> bytes;
};

/// Transport limits and TLS material (from fiber's config).
struct transport_options {
  /// Frames above this fail with asio::error::message_size; the connection
  /// is closed. Also enforced on send. At most 4 GiB - 1 (u32 header).
  std::size_t max_message_size = 256u << 20;
  /// Used only for tls+tcp:// URLs. Server: cert+key required; with a CA it
  /// requires and verifies client certificates. Client: with a CA the server
  /// is verified (against tls_server_name, else the URL host); without one
  /// the channel is encrypted but unauthenticated (fiber authenticates peers
  /// with its own HMAC handshake). Client cert+key are presented if given.
  /// key may be empty when cert holds both.
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  std::string tls_server_name;
};

inline constexpr std::size_t frame_header_size = 4;

struct nng_free {
  void operator()(nng_aio* p) const noexcept { nng_aio_free(p); }
  void operator()(nng_stream* p) const noexcept { nng_stream_free(p); }
  void operator()(nng_stream_listener* p) const noexcept { nng_stream_listener_free(p); }
  void operator()(nng_stream_dialer* p) const noexcept { nng_stream_dialer_free(p); }
  void operator()(nng_tls_config* p) const noexcept { nng_tls_config_free(p); }
};
using aio_ptr = std::unique_ptr<nng_aio, nng_free>;
using stream_ptr = std::unique_ptr<nng_stream, nng_free>;
using listener_ptr = std::unique_ptr<nng_stream_listener, nng_free>;
using dialer_ptr = std::unique_ptr<nng_stream_dialer, nng_free>;
using tls_config_ptr = std::unique_ptr<nng_tls_config, nng_free>;

/// Allocates an aio whose callback is `cb(arg)`, with no timeout (fiber
/// times out through Asio cancellation, not nng timeouts).
inline aio_ptr make_aio(void (*cb)(void*), void* arg) {
  nng_aio* a = nullptr;
  if (int rv = nng_aio_alloc(&a, cb, arg)) throw std::system_error(make_nng_error(rv), "nng_aio_alloc");
  nng_aio_set_timeout(a, NNG_DURATION_INFINITE);
  return aio_ptr(a);
}

/// Allocates `a` on first use: an aio without a callback, which nng
/// completes on its own thread and nng_aio_wait() then returns — no hop
/// through nng's callback thread. Returns nng's error, 0 once allocated.
inline int lazy_sync_aio(aio_ptr& a) {
  if (a) return 0;
  nng_aio* p = nullptr;
  if (int rv = nng_aio_alloc(&p, nullptr, nullptr)) return rv;
  nng_aio_set_timeout(p, NNG_DURATION_INFINITE);
  a.reset(p);
  return 0;
}

// ---------------------------------------------------------------- completion

/// How a stored handler is completed: `dispatch` when we are running on the
/// stream's executor after an nng completion hopped there; `post` from an
/// initiating function or close() (never call user code inline from those).
enum class via { dispatch, post };

/// A type-erased, move-only completion handler plus the outstanding work
/// that keeps both the I/O executor and the handler's executor alive while
/// the operation is pending.
template <class... Args>
class completion {
  struct base {
    virtual ~base() = default;
    virtual void invoke(via v, Args&&... args) = 0;
  };
  template <class Handler>
  struct model final : base {
    using hex_t = asio::associated_executor_t<Handler, asio::any_io_executor>;
    using work_t = std::decay_t<decltype(asio::prefer(
        std::declval<const hex_t&>(), asio::execution::outstanding_work.tracked))>;
    model(Handler&& h, const asio::any_io_executor& io)
        : io_work(asio::prefer(io, asio::execution::outstanding_work.tracked)),
          work(asio::prefer(asio::get_associated_executor(h, io),
                            asio::execution::outstanding_work.tracked)),
          handler(std::move(h)) {}
    void invoke(via v, Args&&... args) override {
      auto io = std::move(io_work); // released once the handler is queued/run
      auto ex = std::move(work);
      auto f = [h = std::move(handler), ... a = std::move(args)]() mutable {
        std::move(h)(std::move(a)...);
      };
      if (v == via::post)
        asio::post(ex, std::move(f));
      else
        asio::dispatch(ex, std::move(f));
    }
    asio::any_io_executor io_work;
    work_t work;
    Handler handler;
  };

public:
  completion() = default;
  template <class Handler>
  completion(Handler&& h, const asio::any_io_executor& io)
      : slot_(asio::get_associated_cancellation_slot(h)),
        p_(std::make_unique<model<std::decay_t<Handler>>>(std::move(h), io)) {}

  explicit operator bool() const noexcept { return p_ != nullptr; }
  asio::cancellation_slot& slot() noexcept { return slot_; }

  void operator()(via v, Args... args) {
    if (slot_.is_connected()) slot_.clear(); // the op is over: drop its canceller
    auto p = std::move(p_);
    p->invoke(v, std::move(args)...);
  }

private:
  asio::cancellation_slot slot_;
  std::unique_ptr<base> p_;
};

/// Completes a handler with an error when there is no object to run on
/// (operation started on an empty/moved-from stream or listener).
template <class Handler, class... Args>
void post_error(Handler&& h, std::error_code ec, Args&&... args) {
  auto ex = asio::get_associated_executor(h);
  asio::post(ex, [h = std::move(h), ec, ... a = std::forward<Args>(args)]() mutable {
    std::move(h)(ec, std::move(a)...);
  });
}

// ---------------------------------------------------------------- TLS

inline bool is_tls_url(const std::string& url) { return url.rfind("tls+", 0) == 0; }

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory),
                                  "fiber: cannot read TLS file " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Builds an nng TLS config from fiber's options. Throws std::system_error.
inline tls_config_ptr make_tls_config(nng_tls_mode mode, const transport_options& o) {
  auto check = [](int rv, const std::string& what) {
    if (rv) throw std::system_error(make_nng_error(rv), "fiber: TLS " + what);
  };
  nng_tls_config* raw = nullptr;
  check(nng_tls_config_alloc(&raw, mode), "config (is nng built with TLS?)");
  tls_config_ptr cfg(raw);
  const bool server = mode == NNG_TLS_MODE_SERVER;
  if (server && o.tls_cert_file.empty())
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "fiber: a tls+tcp listener needs tls_cert_file and tls_key_file");
  if (!o.tls_cert_file.empty()) {
    const std::string cert = read_text_file(o.tls_cert_file);
    const std::string key = o.tls_key_file.empty() ? cert : read_text_file(o.tls_key_file);
    check(nng_tls_config_own_cert(cfg.get(), cert.c_str(), key.c_str(), nullptr),
          "certificate/key " + o.tls_cert_file + " " + o.tls_key_file);
  }
  if (!o.tls_ca_file.empty()) {
    check(nng_tls_config_ca_file(cfg.get(), o.tls_ca_file.c_str()), "CA file " + o.tls_ca_file);
    check(nng_tls_config_auth_mode(cfg.get(), NNG_TLS_AUTH_MODE_REQUIRED), "auth mode");
  } else {
    check(nng_tls_config_auth_mode(cfg.get(), NNG_TLS_AUTH_MODE_NONE), "auth mode");
  }
  if (!server && !o.tls_server_name.empty())
    check(nng_tls_config_server_name(cfg.get(), o.tls_server_name.c_str()), "server name");
  return cfg;
}

// ---------------------------------------------------------------- stream

/// Counters of one stream (for tests, benchmarks and logs).
struct stream_stats {
  std::uint64_t messages_sent = 0;     ///< messages fully written
  std::uint64_t nng_sends = 0;         ///< nng_stream_send calls (batches + continuations)
  std::uint64_t messages_received = 0; ///< messages delivered to async_recv
  std::uint64_t nng_recvs = 0;         ///< nng_stream_recv calls
};

class stream;
class listener;

/// Recycles the storage of large byte buffers (received frames, results)
/// within a process. glibc returns large blocks to the kernel when they are
/// freed (munmap, or a heap trim), so every fresh 1 MiB frame costs 256
/// page faults and the zeroing of 256 pages — more than copying it. A few
/// buffers (at most max_buffers, max_bytes in all) are kept instead; take()
/// hands out the smallest that fits. Thread-safe.
class buffer_cache {
public:
  static constexpr std::size_t min_capacity = 64 * 1024; ///< smaller ones: malloc does well
  static constexpr std::size_t max_buffers = 4;
  static constexpr std::size_t max_bytes = 16u << 20;

  /// An empty cache (tests); fiber itself uses instance().
  buffer_cache() = default;

  /// Never destroyed: usable from any thread until the process ends.
  static buffer_cache& instance() {
    static buffer_cache* c = new buffer_cache;
    return *c;
  }

  /// An empty message with capacity for at least `n` bytes.
  message take(std::size_t n) {
    message m;
    if (n >= min_capacity) {
      std::lock_guard lk(m_);
      std::size_t best = bufs_.size();
      for (std::size_t i = 0; i < bufs_.size(); ++i) {
        const std::size_t c = bufs_[i].capacity();
        if (c >= n && c / 4 <= n && (best == bufs_.size() || c < bufs_[best].capacity())) best = i;
      }
      if (best != bufs_.size()) {
        m = std::move(bufs_[best]);
        bufs_.erase(bufs_.begin() + std::ptrdiff_t(best));
        bytes_ -= m.capacity();
        return m;
      }
    }
    // Rounded up, so that buffers for sizes a few bytes apart (a frame and
    // the results in it) can stand in for each other.
    m.reserve(n < min_capacity ? n : (n + min_capacity - 1) / min_capacity * min_capacity);
    return m;
  }

  /// Keeps `m`'s storage for a later take() if it is large and there is
  /// room; otherwise it is freed as usual.
  void give(message&& m) {
    const std::size_t c = m.capacity();
    if (c < min_capacity || c > max_bytes) return;
    message keep = std::move(m);
    keep.clear();
    std::lock_guard lk(m_);
    if (bufs_.size() < max_buffers && bytes_ + c <= max_bytes) {
      bytes_ += c;
      bufs_.push_back(std::move(keep));
    } else if (!bufs_.empty() && bufs_.front().capacity() < c) {
      bytes_ += c - bufs_.front().capacity(); // replace the oldest
      bufs_.front() = std::move(keep);
    }
  }

private:
  std::mutex m_;
  std::vector<message> bufs_;
  std::size_t bytes_ = 0;
};

/// `m` shared read-only; its storage goes back to `cache` (which must outlive
/// every copy) when the last owner lets go.
inline std::shared_ptr<const message> share_recycled(message&& m, buffer_cache& cache = buffer_cache::instance()) {
  return std::shared_ptr<const message>(new message(std::move(m)), [&cache](const message* p) {
    cache.give(std::move(*const_cast<message*>(p)));
    delete p;
  });
}

/// A stream's state. Shared so that completions posted from nng threads
/// (which hold a reference while an nng operation is in flight) stay valid
/// after the `stream` handle moved or died. Touched only on `ex`.
class stream_core : public std::enable_shared_from_this<stream_core> {
public:
  static constexpr std::size_t read_buffer_size = 64 * 1024; // one recv fills up to this
  static constexpr std::size_t copy_threshold = 16 * 1024;   // smaller payloads are coalesced
  static constexpr std::size_t coalesce_limit = 256 * 1024;  // copied bytes per write
  static constexpr std::size_t max_iov = 8;                  // iov entries per write
  static constexpr std::size_t inline_write_limit = 64 * 1024; // batches up to this are written inline

  stream_core(asio::any_io_executor ex, stream_ptr s, const transport_options& opt)
      : ex_(std::move(ex)), s_(std::move(s)),
        max_(std::min<std::size_t>(opt.max_message_size, UINT32_MAX)),
        saio_(make_aio(&stream_core::on_send_cb, this)),
        raio_(make_aio(&stream_core::on_recv_cb, this)) {
    coalesce_.reserve(coalesce_limit); // never reallocated: iov entries point into it
    bool verified = false; // only TLS streams know this option
    tls_ = nng_stream_get_bool(s_.get(), NNG_OPT_TLS_VERIFIED, &verified) == 0;
  }

  // ---- send
  void start_send(message m, shared_bytes tail, completion<std::error_code> done) {
    if (dead_) return done(via::post, dead_);
    if (m.size() + tail.bytes.size() > max_) return done(via::post, asio::error::message_size);
    const auto id = ++next_id_;
    install_canceller(done.slot(), id, true);
    sendq_.push_back({id, std::move(m), std::move(tail), std::move(done)});
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
    {
      std::lock_guard lk(wire_mu_);
      if (exec_busy_ || direct_busy_ || wire_dead_) return false;
      direct_busy_ = true;
    }
    int rv = lazy_sync_aio(daio_);
    std::size_t written = 0, calls = 0;
    const auto n = static_cast<std::uint32_t>(m.size() + tail.size());
    std::byte hdr[frame_header_size] = {std::byte(n), std::byte(n >> 8), std::byte(n >> 16), std::byte(n >> 24)};
    const std::span<const std::byte> parts[3] = {{hdr, frame_header_size}, m, tail};
    const std::size_t total = frame_header_size + n;
    while (rv == 0 && written < total) { // nng may write part of the iov: go on from there
      nng_iov iov[3];
      unsigned k = 0;
      std::size_t skip = written;
      for (auto p : parts) {
        if (skip >= p.size()) {
          skip -= p.size();
          continue;
        }
        iov[k++] = {const_cast<std::byte*>(p.data()) + skip, p.size() - skip};
        skip = 0;
      }
      if ((rv = nng_aio_set_iov(daio_.get(), k, iov)) != 0) break;
      ++calls;
      nng_stream_send(s_.get(), daio_.get());
      nng_aio_wait(daio_.get());
      if ((rv = nng_aio_result(daio_.get())) == 0) written += nng_aio_count(daio_.get());
    }
    bool kick;
    {
      std::lock_guard lk(wire_mu_);
      direct_busy_ = false;
      direct_nng_sends_ += calls;
      if (rv == 0) ++direct_sent_;
      else wire_dead_ = true; // maybe a partial frame on the wire
      kick = exec_busy_;
    }
    if (rv != 0) {
      nng_stream_close(s_.get()); // thread-safe; the executor's operations end with errors
      asio::post(ex_, [self = shared_from_this(), rv] { self->shutdown(make_nng_error(rv), via::dispatch); });
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

  /// Starts the read pump (called once the core is owned by a shared_ptr).
  void start() { read_more(); }

  void close() {
    closed_ = true; // buffered frames are not delivered after a local close
    shutdown(asio::error::operation_aborted, via::post);
    // Wait until nng's callbacks for this stream have run (they only post):
    // afterwards nothing can post to the executor, so the io_context may be
    // destroyed right after the stream.
    nng_aio_stop(saio_.get());
    nng_aio_stop(raio_.get());
  }
  bool is_open() const noexcept { return !dead_; }
  void set_max_message_size(std::size_t n) noexcept { max_ = std::min<std::size_t>(n, UINT32_MAX); }

  std::string peer_address() const {
    nng_sockaddr sa{};
    if (nng_stream_get_addr(s_.get(), NNG_OPT_REMADDR, &sa) != 0) return {};
    char buf[INET6_ADDRSTRLEN] = {};
    std::uint64_t pid = 0;
    switch (sa.s_family) {
    case NNG_AF_IPC: // both ends see the socket path: the peer's pid tells them apart
      if (nng_stream_get_uint64(s_.get(), NNG_OPT_IPC_PEER_PID, &pid) == 0)
        return std::string("ipc://") + sa.s_ipc.sa_path + " (pid " + std::to_string(pid) + ")";
      return std::string("ipc://") + sa.s_ipc.sa_path;
    case NNG_AF_INET:
      inet_ntop(AF_INET, &sa.s_in.sa_addr, buf, sizeof buf);
      return "tcp://" + std::string(buf) + ":" + std::to_string(ntohs(sa.s_in.sa_port));
    case NNG_AF_INET6:
      inet_ntop(AF_INET6, sa.s_in6.sa_addr, buf, sizeof buf);
      return "tcp://[" + std::string(buf) + "]:" + std::to_string(ntohs(sa.s_in6.sa_port));
    default: return {};
    }
  }

  const asio::any_io_executor& executor() const noexcept { return ex_; }
  stream_stats stats() const {
    stream_stats s = stats_;
    std::lock_guard lk(wire_mu_);
    s.messages_sent += direct_sent_;
    s.nng_sends += direct_nng_sends_;
    std::lock_guard lk2(lend_mu_);
    s.messages_received += lent_received_;
    return s;
  }

private:
  struct send_op {
    std::uint64_t id;
    message msg;
    shared_bytes tail; // sent right after msg, in the same frame
    completion<std::error_code> done;
  };
  struct recv_op {
    std::uint64_t id;
    completion<std::error_code, message> done;
  };

  /// Lives in the handler's cancellation slot. Cancellation may be emitted
  /// from any thread, so it only posts the request to the executor.
  struct canceller {
    canceller(std::weak_ptr<stream_core> c, std::uint64_t i, bool s) : core(std::move(c)), id(i), send(s) {}
    std::weak_ptr<stream_core> core;
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
      for (auto& op : inflight_)
        if (op.id == id && (type & asio::cancellation_type::terminal) != asio::cancellation_type::none) {
          // The batch may be between two partial writes (no nng op to
          // cancel): the flag makes on_send stop instead of resubmitting.
          cancel_write_ = true;
          if (writing_) nng_aio_cancel(saio_.get()); // on_send: ECANCELED, closes the stream
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
  // nng's stream (in-flight nng operations finish promptly with ECLOSED).
  void mark_dead(std::error_code ec) {
    if (dead_) return;
    dead_ = ec;
    {
      std::lock_guard lk(wire_mu_);
      wire_dead_ = true;
    }
    nng_stream_close(s_.get());
  }

  // Tells direct writers whether the executor owns the write side (a write
  // in flight or messages queued). Called after every change of either.
  void publish_busy() {
    std::lock_guard lk(wire_mu_);
    exec_busy_ = writing_ || !sendq_.empty();
  }

  // A direct write has ended while messages were queued behind it, or a
  // scheduled write is due: start it unless the wire is busy.
  void kick() {
    bool direct_busy;
    {
      std::lock_guard lk(wire_mu_);
      direct_busy = direct_busy_;
    }
    if (!writing_ && !sendq_.empty() && !dead_ && !direct_busy) start_write();
    publish_busy();
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
  // in the next single nng_stream_send. Headers and payloads below
  // copy_threshold are coalesced into one buffer; larger payloads (a
  // message and its tail each) are referenced in place (gather iov), so big
  // messages are never copied.
  void start_write() {
    cancel_write_ = false;
    inline_tried_ = false;
    inflight_.clear();
    iov_.clear();
    iov_pos_ = 0;
    coalesce_.clear();
    std::size_t seg = 0; // start of the current coalesced segment
    auto close_segment = [&] {
      if (coalesce_.size() > seg) iov_.push_back({coalesce_.data() + seg, coalesce_.size() - seg});
      seg = coalesce_.size();
    };
    while (!sendq_.empty()) {
      auto& op = sendq_.front();
      const std::span<const std::byte> parts[2] = {op.msg, op.tail.bytes};
      std::size_t add = frame_header_size, iovs = 2; // header segment ... closing segment
      for (auto p : parts) {
        if (p.size() < copy_threshold) add += p.size();
        else iovs += 2; // the part, and the segment after it
      }
      if (!inflight_.empty() && (coalesce_.size() + add > coalesce_limit || iov_.size() + iovs > max_iov))
        break;
      const auto n = static_cast<std::uint32_t>(parts[0].size() + parts[1].size());
      const std::byte hdr[4] = {std::byte(n), std::byte(n >> 8), std::byte(n >> 16), std::byte(n >> 24)};
      coalesce_.insert(coalesce_.end(), hdr, hdr + 4);
      for (auto p : parts) {
        if (p.size() < copy_threshold) {
          coalesce_.insert(coalesce_.end(), p.begin(), p.end());
        } else {
          close_segment();
          iov_.push_back({const_cast<std::byte*>(p.data()), p.size()});
        }
      }
      inflight_.push_back(std::move(sendq_.front()));
      sendq_.pop_front();
    }
    close_segment();
    submit_write();
  }

  void submit_write() {
    writing_ = true;
    if (try_inline_write()) return;
    if (int rv = nng_aio_set_iov(saio_.get(), unsigned(iov_.size() - iov_pos_), iov_.data() + iov_pos_)) {
      // Fail through the normal completion path, never inline.
      asio::post(ex_, [self = shared_from_this(), rv] { self->on_send(rv, 0); });
      return;
    }
    skeep_ = shared_from_this();
    ++stats_.nng_sends;
    nng_stream_send(s_.get(), saio_.get());
  }

  // A small batch is written here, with a callback-less aio: nng's ipc and
  // tcp streams write at once when the socket has room (a send completes
  // once some bytes are written), so the completion needs no hop through
  // nng's callback thread and back to the executor. If the socket has no
  // room at all, the send is still pending when nng_stream_send returns: it
  // is cancelled (nothing was written, or the poller wrote some bytes first
  // and completed it: both under nng's lock) and the batch goes the asynchronous
  // way. No timeout: one would wake nng's expire thread on every write.
  // Not for TLS (its engine completes on nng's threads anyway).
  bool try_inline_write() {
    if (tls_ || inline_tried_ || iov_pos_ != 0) return false;
    inline_tried_ = true;
    std::size_t bytes = 0;
    for (auto& v : iov_) bytes += v.iov_len;
    if (bytes > inline_write_limit || lazy_sync_aio(xaio_) != 0) return false;
    if (nng_aio_set_iov(xaio_.get(), unsigned(iov_.size()), iov_.data()) != 0) return false;
    ++stats_.nng_sends;
    nng_stream_send(s_.get(), xaio_.get());
    nng_aio_cancel(xaio_.get()); // no effect if it completed; pending: there was no room
    nng_aio_wait(xaio_.get());
    const int rv = nng_aio_result(xaio_.get());
    const std::size_t n = nng_aio_count(xaio_.get());
    if (rv == NNG_ECANCELED && n == 0) return false; // wait asynchronously
    on_send(rv, n, via::post); // handlers never run inside this call
    return true;
  }

  // nng thread: only hand the result over to the executor. Moving the keep
  // into the posted function guarantees this thread never drops the last
  // reference (the destructor stops aios, which must not run on nng's
  // threads).
  static void on_send_cb(void* arg) {
    auto* self = static_cast<stream_core*>(arg);
    const int rv = nng_aio_result(self->saio_.get());
    const std::size_t n = nng_aio_count(self->saio_.get());
    auto ex = self->ex_;
    asio::post(ex, [keep = std::move(self->skeep_), rv, n] { keep->on_send(rv, n); });
  }

  void on_send(int rv, std::size_t n, via v = via::dispatch) {
    writing_ = false;
    if (rv == 0) {
      while (n > 0) { // nng may write part of the iov: advance and go on
        auto& v = iov_[iov_pos_];
        const std::size_t k = std::min(n, v.iov_len);
        v.iov_buf = static_cast<char*>(v.iov_buf) + k;
        v.iov_len -= k;
        n -= k;
        if (v.iov_len == 0) ++iov_pos_;
      }
      if (iov_pos_ == iov_.size()) { // whole batch written
        auto done = std::move(inflight_);
        inflight_.clear();
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
      rv = NNG_ECANCELED;
    }
    // A failed or cancelled write may have left a partial frame: the stream
    // cannot be used any more.
    mark_dead(make_nng_error(rv)); // first: handlers run below must see a dead stream
    const std::error_code ec = dead_;
    auto done = std::move(inflight_);
    inflight_.clear();
    for (auto& op : done) op.done(v, ec);
    shutdown(ec, v); // then what was queued behind, in order
  }

  // ---- read path: reads land in a 64 KiB buffer, so several small frames
  // arriving together cost one nng_stream_recv and a buffered frame completes
  // an async_recv without touching nng. One read is kept in flight while the
  // buffer has room, even with no async_recv waiting: nng's TLS handshake
  // only progresses while both ends have an operation pending, and a dead
  // peer is noticed early. Memory stays bounded by the buffer: a frame that
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
    if (reading_ || lent_) return;
    if (lend_to_ && !dead_) return finish_lend();
    if (dead_) return;
    if (big_) {
      if (big_fill_ < big_->size()) start_read();
    } else if (rend_ - rpos_ < read_buffer_size) {
      start_read(); // else: the buffer is full until a receiver consumes
    }
  }

  // Extracts the next whole frame if buffered. While a read is in flight the
  // region [rend_, end) belongs to nng: only consume, never move data.
  bool next_frame(message& m, via v) {
    if (closed_) return false;
    switch (parse_frame(m)) {
    case parsed::frame: return true;
    case parsed::too_big: shutdown(asio::error::message_size, v); return false;
    default: return false;
    }
  }

  enum class parsed { frame, more, too_big };
  // The read side's buffer: whoever holds it (the executor, or a thread it
  // was lent to) calls this.
  parsed parse_frame(message& m) {
    if (big_) {
      if (big_fill_ < big_->size()) return parsed::more;
      m = std::move(*big_);
      big_.reset();
      return parsed::frame;
    }
    const std::size_t avail = rend_ - rpos_;
    if (avail < frame_header_size) return parsed::more;
    const std::byte* p = rbuf_.get() + rpos_;
    const std::size_t len = std::size_t(p[0]) | std::size_t(p[1]) << 8 | std::size_t(p[2]) << 16 |
                            std::size_t(p[3]) << 24;
    if (len > max_) return parsed::too_big; // refuse before allocating anything
    if (avail - frame_header_size >= len) {
      m.assign(p + frame_header_size, p + frame_header_size + len);
      rpos_ += frame_header_size + len;
      return parsed::frame;
    }
    if (frame_header_size + len > read_buffer_size && !reading_) {
      big_.emplace(buffer_cache::instance().take(len)); // bounded by max_ above
      big_->resize(len);
      big_fill_ = avail - frame_header_size;
      std::memcpy(big_->data(), p + frame_header_size, big_fill_);
      rpos_ = rend_ = 0;
    }
    return parsed::more;
  }

  // Where the next read lands: the rest of a big frame, or the buffer's free tail.
  nng_iov read_iov() {
    if (big_) {
      read_big_ = true;
      return {big_->data() + big_fill_, big_->size() - big_fill_};
    }
    if (!rbuf_) rbuf_ = std::make_unique<std::byte[]>(read_buffer_size);
    if (rpos_ == rend_) {
      rpos_ = rend_ = 0;
    } else if (read_buffer_size - rend_ < read_buffer_size / 4) { // tail short: move the rest down
      std::memmove(rbuf_.get(), rbuf_.get() + rpos_, rend_ - rpos_);
      rend_ -= rpos_;
      rpos_ = 0;
    }
    read_big_ = false;
    return {rbuf_.get() + rend_, read_buffer_size - rend_};
  }

  void start_read() {
    nng_iov iov = read_iov();
    nng_aio_set_iov(raio_.get(), 1, &iov); // n <= 4 cannot fail
    reading_ = true;
    rkeep_ = shared_from_this();
    ++stats_.nng_recvs;
    nng_stream_recv(s_.get(), raio_.get());
  }

  static void on_recv_cb(void* arg) {
    auto* self = static_cast<stream_core*>(arg);
    const int rv = nng_aio_result(self->raio_.get());
    const std::size_t n = nng_aio_count(self->raio_.get());
    auto ex = self->ex_;
    asio::post(ex, [keep = std::move(self->rkeep_), rv, n] { keep->on_recv(rv, n); });
  }

  void on_recv(int rv, std::size_t n) {
    reading_ = false;
    if (rv == 0 && n > 0)
      (read_big_ ? big_fill_ : rend_) += n;
    else if (!(rv == NNG_ECANCELED && lend_to_)) // cancelled to lend the read side: no error
      shutdown(rv == 0 ? std::error_code(asio::error::eof) : make_nng_error(rv), via::dispatch);
    pump_recv(via::dispatch);
  }

public:
  // ---- lending the read side: the executor lends it; the borrower reads
  // with its own callback-less aio (nng completes it on the poller thread
  // and wakes the borrower: no hop through nng's callback thread and the
  // executor). lent_ is the executor's view; lend_state_ (under lend_mu_) is
  // shared with the borrower, who may be reading or not.
  enum class lend_state { home, lent_idle, lent_reading };

  void lend(std::function<void()> granted) {
    // dead: the close path reports it. TLS: with nng 1.5.2, TLS links whose
    // receive was cancelled for a lend went silent now and then (test_security's
    // TLS Pool): their read side stays with the executor.
    if (dead_ || lent_ || tls_) return;
    lend_to_ = std::move(granted);
    if (reading_) nng_aio_cancel(raio_.get()); // on_recv → pump_recv → finish_lend
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
    for (;;) {
      auto p = parse_frame(m);
      if (p == parsed::frame) break;
      if (p == parsed::too_big) {
        ec = asio::error::message_size;
        break;
      }
      if (int rv = lazy_sync_aio(draio_)) {
        ec = make_nng_error(rv);
        break;
      }
      nng_iov iov = read_iov();
      nng_aio_set_iov(draio_.get(), 1, &iov);
      nng_stream_recv(s_.get(), draio_.get());
      nng_aio_wait(draio_.get());
      const int rv = nng_aio_result(draio_.get());
      const std::size_t n = nng_aio_count(draio_.get());
      if (rv != 0 || n == 0) {
        ec = rv == 0 ? std::error_code(asio::error::eof) : make_nng_error(rv);
        break;
      }
      (read_big_ ? big_fill_ : rend_) += n;
    }
    std::lock_guard lk(lend_mu_);
    lend_state_ = lend_state::lent_idle;
    if (!ec) ++lent_received_;
    return ec;
  }

  /// Borrower: hands the read side back (with the error that ended it, if any).
  void give_back(std::error_code ec) {
    {
      std::lock_guard lk(lend_mu_);
      if (lend_state_ == lend_state::home) return; // taken back already
      lend_state_ = lend_state::home;
    }
    asio::post(ex_, [self = shared_from_this(), ec] {
      self->lent_ = false;
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
    pump_recv(via::dispatch);
    return true;
  }

private:

  asio::any_io_executor ex_;
  stream_ptr s_; // declared before the aios: freed after they are stopped
  std::atomic<std::size_t> max_;
  aio_ptr saio_, raio_;
  aio_ptr daio_; // direct writes: used only by the thread holding direct_busy_
  aio_ptr xaio_; // inline writes (executor)
  bool tls_ = false, inline_tried_ = false, write_scheduled_ = false;
  // Shared with direct writers (any thread), under wire_mu_: who owns the
  // write side. Only one of exec_busy_ / direct_busy_ is set when a write starts.
  mutable std::mutex wire_mu_;
  bool exec_busy_ = false, direct_busy_ = false, wire_dead_ = false;
  std::uint64_t direct_sent_ = 0, direct_nng_sends_ = 0;
  std::shared_ptr<stream_core> skeep_, rkeep_; // self-references while nng ops are in flight
  std::error_code dead_;
  bool closed_ = false;
  std::uint64_t next_id_ = 0;
  stream_stats stats_;

  std::deque<send_op> sendq_;
  std::vector<send_op> inflight_;
  std::vector<nng_iov> iov_;
  std::size_t iov_pos_ = 0;
  std::vector<std::byte> coalesce_;
  bool writing_ = false, cancel_write_ = false;

  std::deque<recv_op> recvq_;
  std::unique_ptr<std::byte[]> rbuf_;
  std::size_t rpos_ = 0, rend_ = 0;
  std::optional<message> big_;
  std::size_t big_fill_ = 0;
  bool reading_ = false, read_big_ = false, pumping_ = false;

  std::function<void()> lend_to_; // a lend in progress (executor)
  bool lent_ = false;             // executor's view: the borrower owns the read side
  aio_ptr draio_;                 // the borrower's reads
  mutable std::mutex lend_mu_;
  lend_state lend_state_ = lend_state::home;
  std::uint64_t lent_received_ = 0;
};

/// Writes whole frames on a stream from any thread, synchronously, while
/// the stream has nothing else to write (stream_core::try_send_direct).
/// Copyable; keeps the stream's state alive, not its connection.
class direct_writer {
public:
  direct_writer() noexcept = default;
  /// True once `m`, then `tail`, are written as one frame. False, having done nothing,
  /// while the stream is writing or has messages queued, once it is closed,
  /// and for an empty writer; false too if the write failed (the stream is
  /// then closed, as when an async_send fails).
  bool try_send(std::span<const std::byte> m, std::span<const std::byte> tail = {}) const {
    return core_ && core_->try_send_direct(m, tail);
  }
  explicit operator bool() const noexcept { return core_ != nullptr; }

private:
  friend class stream;
  explicit direct_writer(std::shared_ptr<stream_core> c) noexcept : core_(std::move(c)) {}
  std::shared_ptr<stream_core> core_;
};

/// The read side of a stream, lent to one thread that blocks on it (a
/// worker's main thread waiting for work): frames then reach that thread
/// straight from nng's poller, without the hops through nng's callback
/// thread and the executor. Lent with stream::lend_reader, on the executor;
/// meanwhile async_recv waits. Copyable (all copies are one borrower: use
/// them from one thread at a time); keeps the stream's state alive.
class lent_reader {
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
  explicit operator bool() const noexcept { return core_ != nullptr; }

private:
  friend class stream;
  explicit lent_reader(std::shared_ptr<stream_core> c) noexcept : core_(std::move(c)) {}
  std::shared_ptr<stream_core> core_;
};

/// One connected byte stream carrying length-prefixed messages. Move-only;
/// destroying it closes the connection (pending operations complete with
/// operation_aborted). Not thread-safe: use it on its executor.
class stream {
public:
  using executor_type = asio::any_io_executor;

  /// An empty stream (is_open() == false); operations fail with bad_descriptor.
  stream() noexcept = default;
  /// Takes ownership of `s` (also on exception).
  stream(executor_type ex, nng_stream* s, const transport_options& opt) {
    stream_ptr owned(s);
    core_ = std::make_shared<stream_core>(std::move(ex), std::move(owned), opt);
    core_->start();
  }
  stream(stream&&) noexcept = default;
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      close();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  ~stream() { close(); }

  executor_type get_executor() const noexcept { return core_ ? core_->executor() : executor_type{}; }

  /// Queues `m`; completes with void(std::error_code) once it is written.
  /// Messages queued while a write is in flight leave together in one
  /// nng_stream_send (batching); a lone message is written immediately.
  /// Messages above max_message_size fail with asio::error::message_size.
  template <asio::completion_token_for<void(std::error_code)> Token>
  auto async_send(message m, Token&& token) {
    return async_send(std::move(m), shared_bytes{}, std::forward<Token>(token));
  }

  /// As above, for the frame `m` followed by `tail` (not copied: `tail.owner`
  /// is held until the frame is written or has failed).
  template <asio::completion_token_for<void(std::error_code)> Token>
  auto async_send(message m, shared_bytes tail, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [core = core_](auto handler, message m, shared_bytes tail) {
          if (!core) return post_error(std::move(handler), asio::error::bad_descriptor);
          completion<std::error_code> c(std::move(handler), core->executor());
          core->start_send(std::move(m), std::move(tail), std::move(c));
        },
        token, std::move(m), std::move(tail));
  }

  /// Completes with void(std::error_code, message): the next whole message.
  /// Errors: eof / connection_reset (peer gone), message_size (oversized
  /// frame; the stream is closed), operation_aborted (close() or cancelled).
  template <asio::completion_token_for<void(std::error_code, message)> Token>
  auto async_recv(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, message)>(
        [core = core_](auto handler) {
          if (!core) return post_error(std::move(handler), asio::error::bad_descriptor, message{});
          completion<std::error_code, message> c(std::move(handler), core->executor());
          core->start_recv(std::move(c));
        },
        token);
  }

  /// Closes the connection; pending operations complete with operation_aborted.
  void close() noexcept {
    if (core_) core_->close();
  }
  /// A writer other threads may use for synchronous sends (see direct_writer).
  direct_writer direct() const noexcept { return direct_writer(core_); }
  /// Lends the read side (see lent_reader): once whole buffered frames have
  /// gone to pending async_recv operations and no nng read is in flight (one
  /// is cancelled; bytes it got are kept), `granted(reader)` runs on the
  /// executor. Never runs if the stream closes first, nor for a TLS
  /// stream (its read side stays with the executor). Executor only.
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
  /// Counters since the stream was created (zero for an empty stream).
  stream_stats stats() const noexcept { return core_ ? core_->stats() : stream_stats{}; }

private:
  std::shared_ptr<stream_core> core_;
};

// ---------------------------------------------------------------- listener

/// Replaces a tcp URL's port (e.g. ":0") with the one actually bound.
inline std::string with_port(const std::string& url, int port) {
  const auto colon = url.rfind(':');
  if (colon == std::string::npos || url.find(']', colon) != std::string::npos) return url;
  return url.substr(0, colon + 1) + std::to_string(port);
}

class listener_core : public std::enable_shared_from_this<listener_core> {
public:
  listener_core(asio::any_io_executor ex, const std::string& url, const transport_options& opt)
      : ex_(std::move(ex)), opt_(opt), url_(url) {
    auto fail = [&](int rv, const char* what) {
      throw std::system_error(make_nng_error(rv), "fiber: cannot " + std::string(what) + " " + url);
    };
    nng_stream_listener* l = nullptr;
    if (int rv = nng_stream_listener_alloc(&l, url.c_str())) fail(rv, "listen on");
    l_.reset(l);
    if (is_tls_url(url)) {
      auto cfg = make_tls_config(NNG_TLS_MODE_SERVER, opt);
      if (int rv = nng_stream_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg.get()))
        fail(rv, "set TLS config for"); // the listener holds its own reference
    }
    nng_stream_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true); // ENOTSUP on ipc: fine
    nng_stream_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true);
    if (int rv = nng_stream_listener_listen(l)) fail(rv, "listen on");
    int port = 0;
    if (nng_stream_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0) url_ = with_port(url, port);
    aio_ = make_aio(&listener_core::on_accept_cb, this);
  }

  const std::string& url() const noexcept { return url_; }
  const asio::any_io_executor& executor() const noexcept { return ex_; }

  void start_accept(completion<std::error_code, stream> done) {
    const auto id = ++next_id_;
    if (done.slot().is_connected()) done.slot().template emplace<canceller>(weak_from_this(), id);
    q_.push_back({id, std::move(done)});
    pump(via::post);
  }

  void close() {
    if (dead_) return;
    dead_ = asio::error::operation_aborted;
    nng_stream_listener_close(l_.get());
    nng_aio_stop(aio_.get()); // its callback has run: nothing posts after this
    ready_.clear();
    pump(via::post);
  }

private:
  struct accept_op {
    std::uint64_t id;
    completion<std::error_code, stream> done;
  };
  struct canceller {
    canceller(std::weak_ptr<listener_core> c, std::uint64_t i) : core(std::move(c)), id(i) {}
    std::weak_ptr<listener_core> core;
    std::uint64_t id;
    void operator()(asio::cancellation_type_t) const {
      if (auto c = core.lock()) {
        auto ex = c->ex_;
        asio::post(ex, [c = std::move(c), id = id] { c->cancel(id); });
      }
    }
  };

  // Like stream reads, an in-flight nng accept is not cancelled: a
  // connection it yields waits in ready_ for the next async_accept.
  void cancel(std::uint64_t id) {
    for (auto it = q_.begin(); it != q_.end(); ++it)
      if (it->id == id) {
        auto op = std::move(*it);
        q_.erase(it);
        return op.done(via::dispatch, asio::error::operation_aborted, stream{});
      }
  }

  void pump(via v) {
    if (pumping_) return;
    pumping_ = true;
    while (!q_.empty()) {
      if (!ready_.empty() || dead_ || err_) {
        auto op = std::move(q_.front());
        q_.pop_front();
        if (!ready_.empty()) {
          stream s(ex_, ready_.front().release(), opt_);
          ready_.pop_front();
          op.done(v, {}, std::move(s));
        } else {
          op.done(v, dead_ ? dead_ : std::exchange(err_, {}), stream{});
        }
      } else {
        if (!accepting_) {
          accepting_ = true;
          keep_ = shared_from_this();
          nng_stream_listener_accept(l_.get(), aio_.get());
        }
        break;
      }
    }
    pumping_ = false;
  }

  static void on_accept_cb(void* arg) {
    auto* self = static_cast<listener_core*>(arg);
    const int rv = nng_aio_result(self->aio_.get());
    auto* s = rv == 0 ? static_cast<nng_stream*>(nng_aio_get_output(self->aio_.get(), 0)) : nullptr;
    auto ex = self->ex_;
    asio::post(ex, [keep = std::move(self->keep_), rv, s] { keep->on_accept(rv, s); });
  }

  void on_accept(int rv, nng_stream* s) {
    accepting_ = false;
    stream_ptr owned(s);
    if (rv == 0 && !dead_) {
      ready_.push_back(std::move(owned));
    } else if (rv != 0 && !dead_ && rv != NNG_ECONNABORTED && rv != NNG_ECONNRESET) {
      // A client that vanished mid-accept is not an error; anything else
      // (e.g. out of file descriptors) fails one accept, as with Asio.
      err_ = make_nng_error(rv);
    }
    pump(via::dispatch);
  }

  asio::any_io_executor ex_;
  transport_options opt_;
  std::string url_;
  listener_ptr l_; // declared before the aio: freed after it is stopped
  aio_ptr aio_;
  std::shared_ptr<listener_core> keep_;
  std::deque<accept_op> q_;
  std::deque<stream_ptr> ready_;
  std::error_code dead_, err_;
  std::uint64_t next_id_ = 0;
  bool accepting_ = false, pumping_ = false;
};

/// Listens on ipc://path, tcp://host:port (port 0: any) or tls+tcp://...
/// Not thread-safe: use it on its executor.
class listener {
public:
  listener() noexcept = default;
  /// Binds now; throws std::system_error whose message names the URL.
  listener(asio::any_io_executor ex, const std::string& url, const transport_options& opt = {})
      : core_(std::make_shared<listener_core>(std::move(ex), url, opt)) {}
  listener(listener&&) noexcept = default;
  listener& operator=(listener&& o) noexcept {
    if (this != &o) {
      close();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  ~listener() { close(); }

  asio::any_io_executor get_executor() const noexcept {
    return core_ ? core_->executor() : asio::any_io_executor{};
  }
  /// The URL actually bound (a tcp port 0 is replaced by the real port).
  std::string url() const { return core_ ? core_->url() : std::string(); }

  /// Completes with void(std::error_code, stream).
  template <asio::completion_token_for<void(std::error_code, stream)> Token>
  auto async_accept(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, stream)>(
        [core = core_](auto handler) {
          if (!core) return post_error(std::move(handler), asio::error::bad_descriptor, stream{});
          completion<std::error_code, stream> c(std::move(handler), core->executor());
          core->start_accept(std::move(c));
        },
        token);
  }

  /// Stops listening; pending accepts complete with operation_aborted.
  void close() noexcept {
    if (core_) core_->close();
  }

private:
  std::shared_ptr<listener_core> core_;
};

// ---------------------------------------------------------------- connect

/// One dial in flight. The dialer is freed with it: established streams do
/// not depend on their dialer (a TLS stream holds its own config reference).
class connect_core : public std::enable_shared_from_this<connect_core> {
public:
  connect_core(asio::any_io_executor ex, const transport_options& opt, completion<std::error_code, stream> done)
      : ex_(std::move(ex)), opt_(opt), done_(std::move(done)) {}

  void start(const std::string& url) {
    nng_stream_dialer* d = nullptr;
    int rv = nng_stream_dialer_alloc(&d, url.c_str());
    if (rv == 0) {
      d_.reset(d);
      if (is_tls_url(url)) {
        try {
          auto cfg = make_tls_config(NNG_TLS_MODE_CLIENT, opt_);
          rv = nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg.get());
        } catch (const std::system_error& e) {
          return done_(via::post, e.code(), stream{});
        }
      }
      nng_stream_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true);
      nng_stream_dialer_set_bool(d, NNG_OPT_TCP_KEEPALIVE, true);
    }
    nng_aio* a = nullptr;
    if (rv == 0 && (rv = nng_aio_alloc(&a, &connect_core::on_dial_cb, this)) == 0) aio_.reset(a);
    if (rv) return done_(via::post, make_nng_error(rv), stream{});
    nng_aio_set_timeout(a, NNG_DURATION_INFINITE);
    if (done_.slot().is_connected()) done_.slot().template emplace<canceller>(weak_from_this());
    keep_ = shared_from_this();
    nng_stream_dialer_dial(d_.get(), aio_.get());
  }

private:
  struct canceller {
    explicit canceller(std::weak_ptr<connect_core> c) : core(std::move(c)) {}
    std::weak_ptr<connect_core> core;
    // nng_aio_cancel is thread-safe and a no-op once the dial finished.
    void operator()(asio::cancellation_type_t) const {
      if (auto c = core.lock()) nng_aio_cancel(c->aio_.get());
    }
  };

  static void on_dial_cb(void* arg) {
    auto* self = static_cast<connect_core*>(arg);
    const int rv = nng_aio_result(self->aio_.get());
    auto* s = rv == 0 ? static_cast<nng_stream*>(nng_aio_get_output(self->aio_.get(), 0)) : nullptr;
    auto ex = self->ex_;
    asio::post(ex, [keep = std::move(self->keep_), rv, s] { keep->on_dial(rv, s); });
  }

  void on_dial(int rv, nng_stream* s) {
    if (rv) return done_(via::dispatch, make_nng_error(rv), stream{});
    stream st(ex_, s, opt_);
    done_(via::dispatch, {}, std::move(st));
  }

  asio::any_io_executor ex_;
  transport_options opt_;
  completion<std::error_code, stream> done_;
  dialer_ptr d_;
  aio_ptr aio_;
  std::shared_ptr<connect_core> keep_;
};

/// Connects to `url`; completes with void(std::error_code, stream). The
/// stream runs on `ex`. Errors: connection_refused, or an nng/system error.
template <asio::completion_token_for<void(std::error_code, stream)> Token>
auto async_connect(asio::any_io_executor ex, const std::string& url, const transport_options& opt,
                   Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, stream)>(
      [](auto handler, asio::any_io_executor ex, std::string url, transport_options opt) {
        completion<std::error_code, stream> c(std::move(handler), ex);
        auto core = std::make_shared<connect_core>(ex, opt, std::move(c));
        core->start(url);
      },
      token, std::move(ex), url, opt);
}

} // namespace fiber::detail
