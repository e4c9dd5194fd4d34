// SPDX-License-Identifier: BSL-1.0
// Tests for fiber's nng-stream transport (include/fiber/detail/transport.hpp).

// Asio 1.22 enables co_await for clang only with libc++; clang 14 with
// libstdc++'s <coroutine> works, so opt in (before any Asio header).
#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT) && __has_include(<coroutine>)
#define ASIO_HAS_CO_AWAIT 1
#define ASIO_HAS_STD_COROUTINE 1
#endif
#include <fiber/detail/frame_check.hpp>
#include <fiber/detail/heartbeat_wire.hpp>
#include <fiber/detail/log_limit.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/transport.hpp>
#include <fiber/detail/write_batch.hpp>

#include <catch2/catch.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/experimental/parallel_group.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/experimental/as_tuple.hpp>
#if defined(__GNUC__) && !defined(__clang__)
// g++ 12 with -fsanitize=address warns inside Asio's use_future.hpp (a false
// positive in Asio's own code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fd = fiber::detail;
using fd::message;

// The largest single allocation through operator new since the last reset:
// proves that an oversized frame header is refused before allocating.
// (clang's static TSan runtime defines operator new itself: no tracking there.)
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FIBER_NO_ALLOC_TRACKING 1
#endif
#endif
static std::atomic<std::size_t> g_largest_alloc{0};
#ifndef FIBER_NO_ALLOC_TRACKING
static void* tracked_malloc(std::size_t n) noexcept {
  for (auto cur = g_largest_alloc.load(std::memory_order_relaxed);
       n > cur && !g_largest_alloc.compare_exchange_weak(cur, n, std::memory_order_relaxed);) {
  }
  return std::malloc(n ? n : 1);
}
void* operator new(std::size_t n) {
  if (void* p = tracked_malloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return tracked_malloc(n); }
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace {

// A private temp directory, removed at scope exit.
/// Sets the heartbeat keys for a test case; restores them after.
struct heartbeat_config {
  heartbeat_config(const char* interval_ms, const char* timeout_ms)
      : interval_(fd::config_string("heartbeat_interval_ms")), timeout_(fd::config_string("heartbeat_timeout_ms")) {
    fiber::set_config("heartbeat_timeout_ms", timeout_ms);
    fiber::set_config("heartbeat_interval_ms", interval_ms);
  }
  ~heartbeat_config() {
    fiber::set_config("heartbeat_interval_ms", interval_);
    fiber::set_config("heartbeat_timeout_ms", timeout_);
  }
  heartbeat_config(const heartbeat_config&) = delete;
  heartbeat_config& operator=(const heartbeat_config&) = delete;

private:
  std::string interval_, timeout_;
};

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    char tmpl[] = "/tmp/fiber_transport_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string ipc(const std::string& name) const { return "ipc://" + (path / name).string(); }
};

message make_msg(std::size_t n, unsigned seed = 0) {
  message m(n);
  for (std::size_t i = 0; i < n; ++i) m[i] = std::byte((i * 131 + seed) & 0xff);
  return m;
}
message str_msg(const std::string& s) {
  message m(s.size());
  std::memcpy(m.data(), s.data(), s.size());
  return m;
}
/// `a` followed by `b`: the message a frame of head `a` and tail `b` arrives as.
message joined(const message& a, const message& b) {
  message m = a;
  m.insert(m.end(), b.begin(), b.end());
  return m;
}
/// What a socket taking 1 MiB at a time gets of batch `b`, written to its end.
message write_in_pieces(fd::write_batch& b) {
  message wire;
  for (auto pending = b.pending(); !pending.empty(); pending = b.pending()) {
    const std::size_t n = std::min<std::size_t>(pending[0].iov_len, 1u << 20);
    const auto* p = static_cast<const std::byte*>(pending[0].iov_buf);
    wire.insert(wire.end(), p, p + n);
    if (b.advance(n)) break;
  }
  return wire;
}
std::string msg_str(const message& m) { return std::string(reinterpret_cast<const char*>(m.data()), m.size()); }

// Frames over trailing_seal_threshold from `client` to `server`: a head
// in place or coalesced, then a tail of `tail_size` in place; batched and
// direct, and a small frame after them (the sequence goes on).
asio::awaitable<void> check_big_frames(fd::stream& client, fd::stream& server, std::size_t tail_size) {
  const message head = make_msg(fd::trailing_seal_threshold / 2, 6), small = make_msg(10, 7);
  const auto tail = std::make_shared<const message>(make_msg(tail_size, 8));
  client.async_send(head, fd::shared_bytes{tail, *tail}, [](std::error_code ec) { CHECK_FALSE(ec); });
  client.async_send(small, [](std::error_code ec) { CHECK_FALSE(ec); });
  client.async_send(small, fd::shared_bytes{tail, *tail}, [](std::error_code ec) { CHECK_FALSE(ec); });
  auto m1 = co_await server.async_recv(asio::use_awaitable);
  auto m2 = co_await server.async_recv(asio::use_awaitable);
  auto m3 = co_await server.async_recv(asio::use_awaitable);
  CHECK(m1 == joined(head, *tail));
  CHECK(m2 == small);
  CHECK(m3 == joined(small, *tail));
  bool ok = false;
  std::thread writer([&, d = client.direct()] { ok = d.try_send(head, *tail); });
  auto got = co_await server.async_recv(asio::use_awaitable);
  writer.join();
  CHECK(ok);
  CHECK(got == joined(head, *tail));
  co_await client.async_send(small, asio::use_awaitable);
  auto last = co_await server.async_recv(asio::use_awaitable);
  CHECK(last == small);
}

// Note: no co_await inside Catch macros (g++ 12 coroutines mishandle the
// temporaries of such full-expressions); await into a local first.

// Runs a coroutine on ctx to completion (bounded in time); rethrows its exception.
template <class F>
void run_coro(asio::io_context& ctx, F&& f) {
  auto fut = asio::co_spawn(ctx, f(), asio::use_future);
  // Until the coroutine is done: a dialled stream's pending read is work too.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (fut.wait_for(0s) != std::future_status::ready && std::chrono::steady_clock::now() < deadline &&
         ctx.run_one_until(deadline)) {
  }
  REQUIRE(fut.wait_for(0s) == std::future_status::ready);
  fut.get();
}

// A connected pair (server side accepted from a listener on url).
struct pair {
  fd::stream server, client;
};
// g++ 12 bug: a prvalue class argument to a by-value coroutine parameter
// inside co_await is destroyed twice (`co_await f(T{})`): pass lvalues.
// Waits on the executor, `step` at a time, until `done()` or `turns` turns
// have passed (bounded: the caller's CHECK then reports what is missing).
template <class F>
asio::awaitable<void> poll_until(F done, std::chrono::milliseconds step, int turns) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (int i = 0; i < turns && !done(); ++i) {
    t.expires_after(step);
    co_await t.async_wait(asio::use_awaitable);
  }
}

asio::awaitable<pair> connect_pair(fd::listener& l, fd::transport_options copt) {
  auto ex = co_await asio::this_coro::executor;
  using namespace asio::experimental::awaitable_operators;
  auto [s, c] = co_await (l.async_accept(asio::use_awaitable) &&
                          fd::async_connect(ex, l.url(), copt, asio::use_awaitable));
  co_return pair{std::move(s), std::move(c)};
}

// Queues one frame of a message and a shared tail from `from` for each head
// size x tail size (one batch) and checks that `to` receives each whole, in
// order; then waits until every send completed (the direct writer needs the
// stream idle).
asio::awaitable<void> check_tailed_frames(fd::stream& from, fd::stream& to, const std::vector<std::size_t>& tails) {
  std::vector<std::pair<message, std::shared_ptr<const message>>> sent;
  for (std::size_t head : {0u, 10u, 70000u})
    for (std::size_t tail : tails)
      sent.emplace_back(make_msg(head, unsigned(head)), std::make_shared<const message>(make_msg(tail, 3)));
  std::size_t done = 0;
  for (auto& [h, t] : sent)
    from.async_send(h, fd::shared_bytes{t, *t}, [&](std::error_code ec) {
      CHECK_FALSE(ec);
      ++done;
    });
  for (auto& [h, t] : sent) {
    auto got = co_await to.async_recv(asio::use_awaitable);
    CHECK(got == joined(h, *t));
  }
  co_await poll_until([&] { return done >= sent.size(); }, 1ms, 5000);
  CHECK(done == sent.size());
}

// One frame of a head and a tail from `from`'s direct writer (another
// thread, which blocks until `to` reads it).
asio::awaitable<void> check_direct_frame(fd::stream& from, fd::stream& to) {
  const message h = make_msg(20, 1), t = make_msg(300000, 2);
  bool ok = false;
  std::thread writer([&, d = from.direct()] { ok = d.try_send(h, t); });
  auto got = co_await to.async_recv(asio::use_awaitable);
  writer.join();
  CHECK(ok);
  CHECK(got == joined(h, t));
}

const fd::transport_options no_options;

} // namespace

TEST_CASE("heartbeat frames: the period alone in 4 bytes; a ping or an echo in 28; anything else refused",
          "[transport]") {
  namespace fd = fiber::detail;
  const auto body = [](const std::vector<std::byte>& f) { return std::span<const std::byte>(f).subspan(1); };
  auto period = fd::heartbeat_frame({500});
  CHECK(period.size() == 1 + 4);
  CHECK_FALSE(fd::heartbeat_has_ping(body(period)));
  CHECK(fd::decode_heartbeat(body(period)).period_ms == 500);
  auto ping = fd::heartbeat_frame({500, 77, 0, 0});
  CHECK(ping.size() == 1 + 28);
  CHECK(fd::heartbeat_has_ping(body(ping)));
  auto h = fd::decode_heartbeat(body(fd::heartbeat_frame({250, 0, 77, 9})));
  CHECK((h.period_ms == 250 && h.ping == 0 && h.echo == 77 && h.held_ns == 9));
  CHECK(fd::decode_heartbeat({}).period_ms == 0); // an empty body: what older frames of this kind carried
  for (std::size_t cut : {1u, 5u, 27u})
    CHECK_THROWS_AS(fd::decode_heartbeat(body(ping).first(cut)), fiber::serialization_error);
  ping.push_back(std::byte{0});
  CHECK_THROWS_AS(fd::decode_heartbeat(body(ping)), fiber::serialization_error);
  // A long body with neither a ping nor an echo would re-encode to 4 bytes (found by fuzz_frame).
  auto empty_long = fd::heartbeat_frame({500, 1, 0, 0});
  std::fill(empty_long.begin() + 5, empty_long.begin() + 13, std::byte{0});
  CHECK_THROWS_AS(fd::decode_heartbeat(body(empty_long)), fiber::serialization_error);
}

TEST_CASE("peer_link: the master's side measures its worker link's round trip on the heartbeats; bytes both ways",
          "[transport][heartbeat]") {
  heartbeat_config hb("20", "2000");
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("rtt.ipc"));
  std::shared_ptr<fd::peer_link> master, worker; // master: accepted, its peer a worker; worker: dialled
  const auto start = [](std::shared_ptr<fd::peer_link>& link, fd::stream s, fd::peer_identity peer) {
    link = std::make_shared<fd::peer_link>(std::move(s), std::move(peer));
    link->start([](fd::frame_kind, std::span<const std::byte>, message&) {}, [](const std::string&) {});
  };
  l.async_accept([&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    fd::peer_identity worker_peer;
    worker_peer.r = fd::role::worker;
    start(master, std::move(s), worker_peer);
  });
  fd::async_connect(ctx.get_executor(), l.url(), {}, [&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    start(worker, std::move(s), fd::peer_identity{});
  });
  // The master pings at its first tick; the worker echoes at its next.
  const auto t0 = std::chrono::steady_clock::now();
  while ((!master || master->traffic().round_trip.count() == 0) && std::chrono::steady_clock::now() - t0 < 10s)
    ctx.run_for(10ms);
  REQUIRE(master);
  const auto m = master->traffic();
  CHECK(m.round_trip > 0ns);
  CHECK(m.round_trip < 2s);
  CHECK(m.bytes_sent > 0);
  CHECK(m.bytes_received > 0);
  CHECK(worker->traffic().round_trip == 0ns); // a worker's side does not ping
  CHECK(worker->traffic().bytes_received > 0);
  master->close("done");
  worker->close("done");
  ctx.run_for(50ms);
}

TEST_CASE("transport: error mapping", "[transport]") {
  CHECK(fd::make_nng_error(0) == std::error_code());
  CHECK(fd::make_nng_error(NNG_ECANCELED) == asio::error::operation_aborted);
  CHECK(fd::make_nng_error(NNG_ETIMEDOUT) == asio::error::timed_out);
  CHECK(fd::make_nng_error(NNG_ECONNSHUT) == asio::error::eof);
  CHECK(fd::make_nng_error(NNG_ECONNRESET) == asio::error::connection_reset);
  CHECK(fd::make_nng_error(NNG_ECONNREFUSED) == asio::error::connection_refused);
  auto e = fd::make_nng_error(NNG_EPEERAUTH);
  CHECK(e.category() == fd::nng_category());
  CHECK(std::string(e.category().name()) == "nng");
  CHECK(e.message() == nng_strerror(NNG_EPEERAUTH));
  CHECK(fd::make_nng_error(NNG_ESYSERR | ENOENT) == std::error_code(ENOENT, std::system_category()));
}

TEST_CASE("transport: ipc round trip with plain callbacks", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("rt.ipc"));
  CHECK(l.url() == dir.ipc("rt.ipc"));
  fd::stream server, client;
  std::string got;
  bool sent = false;
  l.async_accept([&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    server = std::move(s);
    server.async_recv([&](std::error_code ec, message m) {
      REQUIRE_FALSE(ec);
      m.push_back(std::byte('!'));
      server.async_send(std::move(m), [](std::error_code ec) { REQUIRE_FALSE(ec); });
    });
  });
  fd::async_connect(ctx.get_executor(), l.url(), {}, [&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    client = std::move(s);
    client.async_send(str_msg("hello"), [&](std::error_code ec) {
      REQUIRE_FALSE(ec);
      sent = true;
    });
    client.async_recv([&](std::error_code ec, message m) {
      REQUIRE_FALSE(ec);
      got = msg_str(m);
      ctx.stop(); // the streams stay open for the checks below
    });
  });
  ctx.run_for(30s);
  CHECK(sent);
  CHECK(got == "hello!");
  const std::string me = l.url() + " (pid " + std::to_string(::getpid()) + ")";
  CHECK(server.peer_address() == me);
  CHECK(client.peer_address() == me);
}

TEST_CASE("transport: tcp round trip with use_awaitable", "[transport]") {
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
  CHECK(l.url().rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(l.url() != "tcp://127.0.0.1:0");
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    CHECK(client.peer_address() == l.url());
    CHECK(server.peer_address().rfind("tcp://127.0.0.1:", 0) == 0);
    co_await client.async_send(str_msg("ping"), asio::use_awaitable);
    auto m = co_await server.async_recv(asio::use_awaitable);
    CHECK(msg_str(m) == "ping");
    co_await server.async_send(message{}, asio::use_awaitable); // empty message
    auto e = co_await client.async_recv(asio::use_awaitable);
    CHECK(e.empty());
  });
}

namespace {

// Message i of a sequence: its index (4 bytes LE) then i % 97 pattern bytes.
message seq_msg(std::uint32_t i) {
  message m = make_msg(4 + i % 97, i);
  std::memcpy(m.data(), &i, 4);
  return m;
}
std::uint32_t seq_index(const message& m) {
  std::uint32_t i = ~0u;
  if (m.size() >= 4) std::memcpy(&i, m.data(), 4);
  return i;
}

// Sends n sequence messages at once (all queued before the first completes)
// and checks every completion; `done` counts completions.
void send_burst(fd::stream& s, std::uint32_t n, std::size_t& done) {
  for (std::uint32_t i = 0; i < n; ++i)
    s.async_send(seq_msg(i), [&done](std::error_code ec) {
      REQUIRE_FALSE(ec);
      ++done;
    });
}

asio::awaitable<void> expect_burst(fd::stream& s, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    auto m = co_await s.async_recv(asio::use_awaitable);
    REQUIRE(seq_index(m) == i);
    REQUIRE(m == seq_msg(i));
  }
}

// A raw AF_UNIX client for ipc:// listeners (nng's ipc stream is a plain
// unix stream socket): lets tests write arbitrary, even malformed, bytes.
struct raw_unix_client {
  int fd = -1;
  explicit raw_unix_client(const std::string& ipc_url) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string path = ipc_url.substr(6);
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  }
  ~raw_unix_client() {
    if (fd >= 0) ::close(fd);
  }
  void write(const void* p, std::size_t n) { REQUIRE(::write(fd, p, n) == static_cast<ssize_t>(n)); }
  void write_header(std::uint32_t len) {
    const unsigned char h[4] = {static_cast<unsigned char>(len), static_cast<unsigned char>(len >> 8),
                                static_cast<unsigned char>(len >> 16), static_cast<unsigned char>(len >> 24)};
    write(h, 4);
  }
};

bool is_peer_gone(std::error_code ec) { return ec == asio::error::eof || ec == asio::error::connection_reset; }

} // namespace

TEST_CASE("transport: many small messages both ways at once keep order", "[transport]") {
  temp_dir dir;
  const std::string url = GENERATE(std::string("ipc"), std::string("tcp"));
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), url == "ipc" ? dir.ipc("many.ipc") : "tcp://127.0.0.1:0");
  constexpr std::uint32_t n = 20000;
  std::size_t sent_c = 0, sent_s = 0;
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    send_burst(client, n, sent_c);
    send_burst(server, n, sent_s);
    using namespace asio::experimental::awaitable_operators;
    co_await (expect_burst(server, n) && expect_burst(client, n));
    // A send completes on nng's thread, apart from the peer's receive.
    co_await poll_until([&] { return sent_c >= n && sent_s >= n; }, 1ms, 5000);
    CHECK(sent_c == n);
    CHECK(sent_s == n);
    // Batching: a burst leaves in far fewer nng sends than messages, and
    // buffered reads take far fewer nng recvs than messages.
    auto cs = client.stats(), ss = server.stats();
    INFO("client write_calls " << cs.write_calls << ", server read_calls " << ss.read_calls);
    CHECK(cs.messages_sent == n);
    CHECK(ss.messages_received == n);
    CHECK(cs.write_calls < n / 10);
    CHECK(ss.read_calls < n / 10);
  });
}

TEST_CASE("transport: a burst queued by one handler goes out in one nng send", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("batch.ipc"));
  std::size_t sent = 0;
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    send_burst(client, 100, sent); // the write starts once this handler yields: all 100 in it
    co_await expect_burst(server, 100);
    CHECK(client.stats().write_calls == 1);
    CHECK(server.stats().read_calls < 100);
  });
}

TEST_CASE("transport: small writes to a peer that does not read wait, in order", "[transport]") {
  // Each message is written inline (a batch of its own: the sender yields
  // between them) until the socket buffer is full; then a write finds no
  // room, is cancelled at once and waits asynchronously. Nothing is lost or
  // reordered.
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("full.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    auto ex = co_await asio::this_coro::executor;
    // 200 × 4 KiB: more than the socket and the reader's buffer hold. Small
    // messages are accepted whole until the socket refuses the next one
    // entirely (the case that is cancelled), rather than taking part of it.
    constexpr unsigned n = 200;
    std::size_t done = 0;
    for (unsigned i = 0; i < n; ++i) {
      client.async_send(make_msg(4096, i), [&](std::error_code ec) { done += !ec; });
      co_await asio::post(ex, asio::use_awaitable);
    }
    CHECK(done < n); // some are still waiting for room
    for (unsigned i = 0; i < n; ++i) {
      auto m = co_await server.async_recv(asio::use_awaitable);
      REQUIRE(m == make_msg(4096, i));
    }
    co_await poll_until([&] { return done >= n; }, 1ms, 1000);
    CHECK(done == n);
  });
}

TEST_CASE("transport: large messages round trip", "[transport]") {
  temp_dir dir;
  const std::string url = GENERATE(std::string("ipc"), std::string("tcp"));
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), url == "ipc" ? dir.ipc("big.ipc") : "tcp://127.0.0.1:0");
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    // Send and receive concurrently: 16 MiB does not fit in socket buffers,
    // and nothing is read until someone waits in async_recv.
    using namespace asio::experimental::awaitable_operators;
    const message big = make_msg(16u << 20, 7);
    auto m = co_await (client.async_send(big, asio::use_awaitable) && server.async_recv(asio::use_awaitable));
    REQUIRE(m.size() == big.size());
    CHECK(m == big);
    auto back = co_await (server.async_send(std::move(m), asio::use_awaitable) &&
                          client.async_recv(asio::use_awaitable));
    CHECK(back == big);

    // Large and small messages mixed in one batch (zero-copy iov entries
    // between coalesced segments), order kept.
    std::size_t done = 0;
    std::vector<message> want;
    for (unsigned i = 0; i < 12; ++i) want.push_back(i % 3 == 0 ? make_msg((1u << 20) + i, i) : seq_msg(i));
    for (auto& w : want)
      client.async_send(w, [&](std::error_code ec) {
        REQUIRE_FALSE(ec);
        ++done;
      });
    for (auto& w : want) {
      auto got = co_await server.async_recv(asio::use_awaitable);
      CHECK(got == w);
    }
    CHECK(done == want.size());
  });
}

TEST_CASE("transport: a frame of a message and a shared tail arrives as one message", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("tail.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    const std::vector<std::size_t> tails{0, 5, 100000};
    co_await check_tailed_frames(client, server, tails);
    co_await check_direct_frame(client, server);
  });
}

TEST_CASE("transport: frame MACs: sealed frames arrive whole; another key, a replay or a reordering fails",
          "[transport][mac]") {
  const fd::session_key k1{1}, k2{2}, k3{3};
  SECTION("frame_mac alone: only the next frame in order, unchanged, opens") {
    fd::frame_mac seal(k1), open(k1);
    const message a = make_msg(100, 1), b = make_msg(5000, 2);
    std::byte ta[fd::frame_tag_size], tb[fd::frame_tag_size];
    seal.seal({a}, ta);
    seal.seal({std::span<const std::byte>(b).first(10), std::span<const std::byte>(b).subspan(10)}, tb);
    fd::frame_mac reordered(k1);
    CHECK_FALSE(reordered.open(b, tb)); // b was sealed second
    fd::frame_mac other_key(k2);
    CHECK_FALSE(other_key.open(a, ta));
    message changed = a;
    changed[50] ^= std::byte{1};
    fd::frame_mac tampered(k1);
    CHECK_FALSE(tampered.open(changed, ta));
    CHECK(open.open(a, ta));
    CHECK_FALSE(open.open(a, ta)); // replayed: the sequence has moved on
  }
  SECTION("OpenSSL's libcrypto, where it loads, and mbedTLS give the same tags") {
    fd::frame_mac best(k1), portable(k1, fd::mac_engine::mbedtls);
    CHECK(portable.engine() == fd::mac_engine::mbedtls);
    if (!fd::libcrypto_api::get()) WARN("libcrypto not loadable: only mbedTLS is checked");
    for (std::size_t n : {0u, 1u, 64u, 1000u, 4095u, 4096u, 70000u}) {
      const message m = make_msg(n, unsigned(n));
      const auto half = std::span<const std::byte>(m).first(n / 2), rest = std::span<const std::byte>(m).subspan(n / 2);
      std::byte t1[fd::frame_tag_size], t2[fd::frame_tag_size];
      best.seal({half, rest}, t1);
      portable.seal({m}, t2);
      CHECK(std::memcmp(t1, t2, fd::frame_tag_size) == 0);
    }
  }
  SECTION("encrypted frames: both engines agree; only the next frame in order, unchanged, decrypts") {
    for (std::size_t n : {0u, 1u, 64u, 4095u, 4096u, 70000u}) {
      const message m = make_msg(n, unsigned(n) + 3);
      const auto half = std::span<const std::byte>(m).first(n / 2), rest = std::span<const std::byte>(m).subspan(n / 2);
      fd::frame_mac best(k1), portable(k1, fd::mac_engine::mbedtls);
      message c1(n), c2 = m;
      std::byte t1[fd::frame_tag_size], t2[fd::frame_tag_size];
      best.encrypt({half, rest}, c1.data(), t1);
      portable.encrypt({c2}, c2.data(), t2); // in place
      CHECK(c1 == c2);
      CHECK(std::memcmp(t1, t2, fd::frame_tag_size) == 0);
      if (n >= 64) CHECK(c1 != m);
      fd::frame_mac open_best(k1), open_portable(k1, fd::mac_engine::mbedtls);
      CHECK(open_best.decrypt(c1, t1));
      CHECK(c1 == m);
      CHECK(open_portable.decrypt(c2, t2));
      CHECK(c2 == m);
    }
    fd::frame_mac seal(k1);
    const message a = make_msg(5000, 7), b = make_msg(100, 8);
    message ca(a.size()), cb(b.size());
    std::byte ta[fd::frame_tag_size], tb[fd::frame_tag_size];
    seal.encrypt({a}, ca.data(), ta);
    seal.encrypt({b}, cb.data(), tb);
    for (fd::mac_engine e : {fd::mac_engine::best, fd::mac_engine::mbedtls}) {
      message x = cb;
      fd::frame_mac reordered(k1, e);
      CHECK_FALSE(reordered.decrypt(x, tb)); // b was encrypted second
      x = ca;
      x[4000] ^= std::byte{1};
      fd::frame_mac tampered(k1, e);
      CHECK_FALSE(tampered.decrypt(x, ta));
      x = ca;
      fd::frame_mac other_key(k2, e);
      CHECK_FALSE(other_key.decrypt(x, ta));
      fd::frame_mac open(k1, e);
      x = ca;
      CHECK(open.decrypt(x, ta));
      CHECK(x == a);
      x = ca;
      CHECK_FALSE(open.decrypt(x, ta)); // replayed: the sequence has moved on
    }
  }
  SECTION("checked piece by piece as its bytes arrive: the same verdict as checked whole") {
    for (fd::mac_engine e : {fd::mac_engine::best, fd::mac_engine::mbedtls})
      for (bool encrypted : {false, true})
        for (std::size_t n : {100u, 70000u}) {
          const message m = make_msg(n, unsigned(n) + 11);
          fd::frame_mac seal(k1, e);
          message wire = m;
          std::byte tag[fd::frame_tag_size];
          if (encrypted) seal.encrypt({m}, wire.data(), tag);
          else seal.seal({m}, tag);
          for (bool flip : {false, true}) {
            message x = wire;
            if (flip) x[n / 3] ^= std::byte{4}; // in the first piece, fed long before the tag
            fd::frame_mac open(k1, e);
            open.begin(encrypted, n);
            const std::size_t cut1 = n / 2, cut2 = n / 2 + 7;
            open.feed(std::span(x).first(cut1));
            open.feed(std::span(x).subspan(cut1, cut2 - cut1));
            open.feed(std::span(x).subspan(cut2));
            CHECK(open.finish(std::as_bytes(std::span(tag))) == !flip);
            if (!flip) CHECK(x == m);
          }
        }
    // One object that checks, then seals: its context is keyed for each in turn.
    fd::frame_mac both(k1), fresh(k1);
    const message a = make_msg(70000, 5);
    std::byte t1[fd::frame_tag_size], t2[fd::frame_tag_size];
    fresh.seal({a}, t1);
    CHECK(both.open(a, t1));
    fresh.seal({a}, t1);
    both.seal({a}, t2);
    CHECK(std::memcmp(t1, t2, fd::frame_tag_size) == 0);
  }
  SECTION("frame_check follows a big frame through the read buffer as reads land") {
    for (bool flip : {false, true}) {
      const message payload = make_msg(300000, 9);
      fd::frame_mac seal(k1);
      std::byte tag[fd::frame_tag_size];
      seal.seal({payload}, tag);
      message wire(fd::frame_header_size);
      const fd::frame_header hdr(std::uint32_t(payload.size() + fd::frame_tag_size));
      std::copy_n(hdr.bytes, fd::frame_header_size, wire.begin());
      wire.insert(wire.end(), payload.begin(), payload.end());
      wire.insert(wire.end(), tag, tag + fd::frame_tag_size);
      if (flip) wire[1000] ^= std::byte{1};
      fd::frame_buffer buf;
      fd::frame_check check;
      check.enable(k1, false);
      message m;
      std::size_t at = 0, reads = 0;
      while (buf.parse(m, 1u << 20, false) != fd::frame_buffer::parsed::frame) {
        const nng_iov room = buf.next_read();
        const std::size_t n = std::min({room.iov_len, wire.size() - at, std::size_t(50000)});
        std::memcpy(room.iov_buf, wire.data() + at, n);
        at += n;
        buf.commit(n);
        check.follow(buf);
        ++reads;
      }
      CHECK(reads > 3);
      CHECK(check.check(m) == !flip);
      if (!flip) CHECK(m == payload);
    }
  }
  SECTION("a big frame's tag is held back until its payload is written; then it is the tag seal gives") {
    // Tagging the payload before the first byte left held the writer (and
    // the wire) silent past a heartbeat timeout for 512 MiB.
    const message small = make_msg(10, 5), big = make_msg(fd::trailing_seal_threshold + 1000, 4);
    std::deque<fd::send_op> q;
    for (std::uint64_t id : {1u, 2u, 3u}) q.push_back({id, id == 2 ? big : small, {}, {}, true});
    fd::frame_mac mac(k1), whole(k1);
    fd::write_batch b;
    b.fill(q, &mac);
    CHECK(q.size() == 1); // the big frame ends its batch
    std::size_t offered = 0;
    for (auto& v : b.pending()) offered += v.iov_len;
    CHECK(offered == b.bytes() - fd::frame_tag_size);
    const message wire = write_in_pieces(b);
    CHECK(wire.size() == offered + fd::frame_tag_size);
    std::byte t_small[fd::frame_tag_size], t_big[fd::frame_tag_size];
    whole.seal({small}, t_small);
    whole.seal({big}, t_big);
    CHECK(std::memcmp(wire.data() + wire.size() - fd::frame_tag_size, t_big, fd::frame_tag_size) == 0);
    CHECK(std::memcmp(wire.data() + fd::frame_header_size + small.size(), t_small, fd::frame_tag_size) == 0);
  }
  SECTION("a big frame is encrypted a few MiB ahead of its write; the same ciphertext and tag as whole") {
    // Encrypting 512 MiB before the first byte left held the writer (and
    // the wire) silent past a heartbeat timeout, as tagging it did.
    const message small = make_msg(10, 5), big = make_msg(3 * fd::trailing_seal_threshold + 1000, 4);
    std::deque<fd::send_op> q;
    for (std::uint64_t id : {1u, 2u, 3u}) q.push_back({id, id == 2 ? big : small, {}, {}, true});
    fd::frame_mac mac(k1), whole(k1);
    fd::write_batch b;
    b.fill(q, &mac, true);
    CHECK(q.size() == 1); // the big frame ends its batch
    std::size_t offered = 0;
    for (auto& v : b.pending()) offered += v.iov_len;
    CHECK(offered < big.size() / 2); // before: all of it
    const message wire = write_in_pieces(b);
    REQUIRE(wire.size() == b.bytes());
    message c_small(small.size()), c_big(big.size());
    std::byte t_small[fd::frame_tag_size], t_big[fd::frame_tag_size];
    whole.encrypt({small}, c_small.data(), t_small);
    whole.encrypt({big}, c_big.data(), t_big);
    const auto* at = wire.data() + fd::frame_header_size;
    CHECK(std::memcmp(at, c_small.data(), c_small.size()) == 0);
    CHECK(std::memcmp(at + small.size(), t_small, fd::frame_tag_size) == 0);
    at += small.size() + fd::frame_tag_size + fd::frame_header_size;
    CHECK(std::memcmp(at, c_big.data(), c_big.size()) == 0);
    CHECK(std::memcmp(at + big.size(), t_big, fd::frame_tag_size) == 0);
  }
  SECTION("big frames, tagged as they are written, open on a stream: batched, tailed and direct") {
    asio::io_context ctx;
    fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, no_options);
      server.enable_mac(k1, k2);
      client.enable_mac(k2, k1);
      co_await check_big_frames(client, server, fd::trailing_seal_threshold);
    });
  }
  SECTION("on a stream: async, batched, tailed and direct frames both ways; a frame under another key closes it") {
    asio::io_context ctx;
    fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, no_options);
      co_await client.async_send(str_msg("before"), asio::use_awaitable); // no tag: sent before enabling
      auto first = co_await server.async_recv(asio::use_awaitable);
      CHECK(msg_str(first) == "before");
      server.enable_mac(k1, k2);
      client.enable_mac(k2, k1);
      const std::vector<std::size_t> tails{0, 100000};
      co_await check_tailed_frames(client, server, tails);
      co_await check_direct_frame(server, client);
      // A client that seals under another key: the server's next receive fails.
      auto [server2, client2] = co_await connect_pair(l, no_options);
      server2.enable_mac(k1, k2);
      client2.enable_mac(k3, k1);
      co_await client2.async_send(str_msg("forged"), asio::use_awaitable);
      auto [ec, m] = co_await server2.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
      CHECK(ec == fd::make_error_code(fd::frame_mac_errc::bad_tag));
      CHECK(m.empty());
      CHECK_FALSE(server2.is_open());
    });
  }
}

// A master kills a worker once its link ends, so the line saying why the
// worker refused a frame must be out first. Here stderr is a full pipe: the
// log writer thread holds that line until the test reads the pipe.
TEST_CASE("transport: a frame that fails its tag ends the connection only once the line saying why is written",
          "[transport][mac]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  const int saved = ::fcntl(2, F_DUPFD_CLOEXEC, 0);
  REQUIRE(saved >= 0);
  const std::string fill(std::size_t(::fcntl(p[1], F_GETPIPE_SZ)), 'x'); // fits whole: the pipe is then full
  REQUIRE(::write(p[1], fill.data(), fill.size()) == ssize_t(fill.size()));
  REQUIRE(::dup2(p[1], 2) == 2);
  ::close(p[1]);
  fd::refusal_log().reset(); // an earlier test's refusal must not leave the line out

  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
  std::optional<pair> ends;
  run_coro(ctx, [&]() -> asio::awaitable<void> { ends.emplace(co_await connect_pair(l, no_options)); });
  auto& [server, client] = *ends;
  server.enable_mac(fd::session_key{1}, fd::session_key{2});
  client.enable_mac(fd::session_key{3}, fd::session_key{1}); // seals under another key
  std::error_code refused, ended;
  bool client_ended = false;
  client.async_send(str_msg("forged"), [](std::error_code) {});
  server.async_recv([&](std::error_code ec, message) { refused = ec; });
  client.async_recv([&](std::error_code ec, message) {
    ended = ec;
    client_ended = true;
  });
  ctx.run_for(300ms); // the refusal, then a while in which the end must not come
  CHECK(refused == fd::make_error_code(fd::frame_mac_errc::bad_tag));
  CHECK_FALSE(client_ended);

  std::string text; // the pipe, read by another thread until the line is in it
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n;
         text.find("failed its authentication tag") == std::string::npos && (n = ::read(p[0], buf, sizeof buf)) > 0;)
      text.append(buf, std::size_t(n));
  });
  for (auto until = std::chrono::steady_clock::now() + 20s; !client_ended && std::chrono::steady_clock::now() < until;)
    ctx.run_one_for(100ms);
  reader.join();
  CHECK(client_ended);
  CHECK(ended == asio::error::eof);
  CHECK(text.find("failed its authentication tag") != std::string::npos);

  ::dup2(saved, 2);
  ::close(saved);
  char buf[4096]; // until no writer holds the pipe: none may meet a closed one
  while (::read(p[0], buf, sizeof buf) > 0) {
  }
  ::close(p[0]);
}

TEST_CASE("transport: buffer_cache hands large storage back out, bounded", "[transport]") {
  fd::buffer_cache cache; // not the process-wide one: other tests' frames leave buffers there
  const std::size_t n = (3u << 20) + 17;
  auto a = cache.take(n);
  CHECK(a.empty());
  CHECK(a.capacity() >= n);
  a.resize(n);
  const auto* storage = a.data();
  cache.give(std::move(a));
  auto b = cache.take(n - 100); // a few bytes smaller: the same storage serves
  CHECK(b.data() == storage);
  CHECK(b.empty());
  auto c = cache.take(64); // small: plain allocation, never a cached megabyte
  CHECK(c.capacity() < fd::buffer_cache::min_capacity);
  message small(100);
  cache.give(std::move(small)); // ignored, freed as usual
  auto shared = fd::share_recycled(std::move(b), cache);
  shared.reset(); // back to the cache
  auto d = cache.take(n);
  CHECK(d.data() == storage);
}

TEST_CASE("transport: oversized frames are refused before allocating", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::transport_options opt;
  opt.max_message_size = 1u << 20;
  fd::listener l(ctx.get_executor(), dir.ipc("big.ipc"), opt);
  raw_unix_client raw(l.url());
  raw.write_header(3);
  raw.write("abc", 3);
  raw.write_header(0xfffffff0u); // claims ~4 GiB
  raw.write("xyz", 3);
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto server = co_await l.async_accept(asio::use_awaitable);
    auto m = co_await server.async_recv(asio::use_awaitable); // the valid frame first
    CHECK(msg_str(m) == "abc");
    g_largest_alloc = 0;
    auto [ec, m2] = co_await server.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec == asio::error::message_size);
    CHECK(m2.empty());
#ifndef FIBER_NO_ALLOC_TRACKING
    CHECK(g_largest_alloc.load() < (1u << 20));
#endif
    CHECK_FALSE(server.is_open());
    auto [ec3, m3] = co_await server.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec3 == asio::error::message_size); // the stream stays failed
  });
}

TEST_CASE("transport: sending above max_message_size fails that send only", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::transport_options opt;
  opt.max_message_size = 1000;
  fd::listener l(ctx.get_executor(), dir.ipc("max.ipc"), opt);
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    using namespace asio::experimental::awaitable_operators;
    auto [server, client] = co_await (l.async_accept(asio::use_awaitable) &&
                                      fd::async_connect(ex, l.url(), opt, asio::use_awaitable));
    auto [ec] = co_await client.async_send(message(1001), asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec == asio::error::message_size);
    CHECK(client.is_open());
    co_await client.async_send(message(1000), asio::use_awaitable);
    auto got = co_await server.async_recv(asio::use_awaitable);
    CHECK(got.size() == 1000);
  });
}

TEST_CASE("transport: cancelling a pending recv through its slot", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  auto work = asio::make_work_guard(ctx); // run_one_for loops below: keep ctx from stopping
  fd::listener l(ctx.get_executor(), dir.ipc("cancel.ipc"));
  raw_unix_client raw(l.url());
  fd::stream server;
  l.async_accept([&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    server = std::move(s);
  });
  while (!server.is_open() && ctx.run_one_for(10s)) {
  }
  REQUIRE(server.is_open());

  // Half a frame is on the wire when the recv is cancelled.
  raw.write_header(6);
  raw.write("hal", 3);
  asio::cancellation_signal sig;
  std::optional<std::error_code> result;
  server.async_recv(asio::bind_cancellation_slot(sig.slot(), [&](std::error_code ec, message m) {
    result = ec;
    CHECK(m.empty());
  }));
  sig.emit(asio::cancellation_type::terminal);
  while (!result && ctx.run_one_for(10s)) {
  }
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
  CHECK(server.is_open());

  // No byte was lost: the rest of the frame completes the next recv.
  raw.write("ves", 3);
  std::string got;
  server.async_recv([&](std::error_code ec, message m) {
    REQUIRE_FALSE(ec);
    got = msg_str(m);
  });
  while (got.empty() && ctx.run_one_for(10s)) {
  }
  CHECK(got == "halves");
}

TEST_CASE("transport: timeouts cancel a recv cleanly", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("timeout.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto [server, client] = co_await connect_pair(l, no_options);
    asio::steady_timer timer(ex);

    // awaitable_operators ||
    using namespace asio::experimental::awaitable_operators;
    timer.expires_after(50ms);
    auto r = co_await (server.async_recv(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    CHECK(r.index() == 1);

    // parallel_group with deferred operations
    timer.expires_after(50ms);
    auto [order, ec, m,
          tec] = co_await asio::experimental::make_parallel_group(server.async_recv(asio::experimental::deferred),
                                                                  timer.async_wait(asio::experimental::deferred))
                     .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    CHECK(order[0] == 1);
    CHECK(ec == asio::error::operation_aborted);
    CHECK_FALSE(tec);

    // The stream still works, and a recv that wins the race is not cancelled.
    co_await client.async_send(str_msg("late"), asio::use_awaitable);
    timer.expires_after(30s);
    auto r2 = co_await (server.async_recv(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    REQUIRE(r2.index() == 0);
    CHECK(msg_str(std::get<0>(r2)) == "late");
  });
}

TEST_CASE("transport: a send that cannot finish times out and closes the stream", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("stuck.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto [server, client] = co_await connect_pair(l, no_options);
    asio::steady_timer timer(ex);
    timer.expires_after(100ms);
    using namespace asio::experimental::awaitable_operators;
    // Nobody reads on the server: 64 MiB cannot fit in socket buffers.
    auto r = co_await (client.async_send(make_msg(64u << 20), asio::use_awaitable) ||
                       timer.async_wait(asio::use_awaitable));
    CHECK(r.index() == 1);
    CHECK_FALSE(client.is_open()); // a partial frame may be on the wire
    auto [sec, m] = co_await server.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(is_peer_gone(sec));
  });
}

TEST_CASE("transport: a peer that disappears fails the pending recv", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("gone.ipc"));

  SECTION("peer closes") {
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, no_options);
      co_await client.async_send(str_msg("last words"), asio::use_awaitable);
      client.close();
      CHECK_FALSE(client.is_open());
      {
        auto got = msg_str(co_await server.async_recv(asio::use_awaitable));
        CHECK(got == "last words");
      }
      auto [ec, m] = co_await server.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
      CHECK(is_peer_gone(ec));
      CHECK_FALSE(server.is_open());
      auto [ec2] = co_await server.async_send(str_msg("x"), asio::experimental::as_tuple(asio::use_awaitable));
      CHECK(ec2);
    });
  }

  SECTION("peer object destroyed with operations pending") {
    std::optional<std::error_code> client_recv;
    std::optional<std::error_code> server_recv;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
    fd::stream server;
    {
      fd::stream client;
      run_coro(ctx, [&]() -> asio::awaitable<void> {
        auto p = co_await connect_pair(l, no_options);
        server = std::move(p.server);
        client = std::move(p.client);
      });
      ctx.restart();
      work.emplace(ctx.get_executor());
      client.async_recv([&](std::error_code ec, message) { client_recv = ec; });
      server.async_recv([&](std::error_code ec, message) { server_recv = ec; });
    } // client destroyed here
    while ((!client_recv || !server_recv) && ctx.run_one_for(10s)) {
    }
    REQUIRE(client_recv);
    REQUIRE(server_recv);
    CHECK(*client_recv == asio::error::operation_aborted);
    CHECK(is_peer_gone(*server_recv));
  }
}

TEST_CASE("transport: a SIGKILLed peer process fails the pending recv", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("kill.ipc"));
  // Everything the child needs is prepared before fork(): after it, the
  // child only makes async-signal-safe calls (nng threads may exist).
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, l.url().substr(6).c_str(), sizeof sa.sun_path - 1);
  const unsigned char bytes[] = {3, 0, 0, 0, 'a', 'b', 'c', 100, 0, 0, 0, 'p', 'a', 'r', 't'};
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) ::_exit(1);
    if (::write(s, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) ::_exit(1);
    for (;;) ::pause();
  }
  struct reaper {
    pid_t pid;
    ~reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{pid};

  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto server = co_await l.async_accept(asio::use_awaitable);
    {
      auto got = msg_str(co_await server.async_recv(asio::use_awaitable));
      CHECK(got == "abc");
    }
    // The child has written a partial frame and waits forever: kill it.
    std::optional<std::error_code> result;
    server.async_recv([&](std::error_code ec, message) { result = ec; });
    REQUIRE(::kill(pid, SIGKILL) == 0);
    co_await poll_until([&] { return bool(result); }, 10ms, 1000);
    REQUIRE(result);
    CHECK(is_peer_gone(*result));
  });
}

TEST_CASE("transport: close() aborts pending operations", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("close.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    std::optional<std::error_code> recv_ec, send_ec, queued_ec;
    client.async_recv([&](std::error_code ec, message) { recv_ec = ec; });
    client.async_send(make_msg(64u << 20), [&](std::error_code ec) { send_ec = ec; });
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable); // now in flight
    client.async_send(str_msg("queued"), [&](std::error_code ec) { queued_ec = ec; });
    client.close();
    CHECK_FALSE(recv_ec); // never inline
    co_await poll_until([&] { return recv_ec && send_ec && queued_ec; }, 10ms, 1000);
    REQUIRE(recv_ec);
    REQUIRE(send_ec);
    REQUIRE(queued_ec);
    CHECK(*recv_ec == asio::error::operation_aborted);
    CHECK(*send_ec == asio::error::operation_aborted);
    CHECK(*queued_ec == asio::error::operation_aborted);
    auto [ec] = co_await client.async_send(str_msg("after"), asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec == asio::error::operation_aborted);

    fd::stream moved = std::move(server);
    auto [ec2, m] = co_await server.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec2 == asio::error::bad_descriptor); // moved-from
    CHECK(moved.is_open());
  });
}

TEST_CASE("transport: use_future and deferred tokens", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  auto work = asio::make_work_guard(ctx);
  fd::listener l(ctx.get_executor(), dir.ipc("future.ipc"));
  fd::stream server, client;
  std::thread io([&] { ctx.run(); });
  struct joiner {
    asio::executor_work_guard<asio::io_context::executor_type>& w;
    std::thread& t;
    ~joiner() {
      w.reset();
      t.join();
    }
  } join{work, io};
  // The streams are not thread-safe: initiate on the io thread, wait here.
  auto on_io = [&](auto f) { return asio::post(ctx, asio::use_future(std::move(f))).get(); };
  auto accepted = on_io([&] { return l.async_accept(asio::use_future); });
  client = on_io([&] { return fd::async_connect(ctx.get_executor(), l.url(), no_options, asio::use_future); }).get();
  server = accepted.get();
  on_io([&] { return client.async_send(str_msg("future"), asio::use_future); }).get();
  CHECK(msg_str(on_io([&] { return server.async_recv(asio::use_future); }).get()) == "future");

  // deferred: nothing starts until the deferred operation is invoked.
  // (Handlers run on the io thread: no Catch assertions there.)
  std::promise<std::string> got;
  std::promise<std::error_code> sent;
  on_io([&] {
    auto op = server.async_recv(asio::experimental::deferred);
    client.async_send(str_msg("deferred"),
                      asio::experimental::deferred)([&](std::error_code ec) { sent.set_value(ec); });
    std::move(op)([&](std::error_code ec, message m) { got.set_value(ec ? ec.message() : msg_str(m)); });
  });
  CHECK(got.get_future().get() == "deferred");
  CHECK_FALSE(sent.get_future().get());

  // Errors surface as exceptions from the future.
  on_io([&] { client.close(); });
  auto f = on_io([&] { return server.async_recv(asio::use_future); });
  CHECK_THROWS_AS(f.get(), std::system_error);
  on_io([&] {
    server.close();
    l.close();
  });
}

TEST_CASE("transport: listener and connect errors", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  try {
    fd::listener bad(ctx.get_executor(), "bogus://nowhere");
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(std::string(e.what()).find("bogus://nowhere") != std::string::npos);
  }
  fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
  try {
    fd::listener again(ctx.get_executor(), l.url());
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(e.code() == asio::error::address_in_use);
    CHECK(std::string(e.what()).find(l.url()) != std::string::npos);
  }
  std::optional<std::error_code> refused;
  fd::async_connect(ctx.get_executor(), dir.ipc("nobody.ipc"), no_options, [&](std::error_code ec, fd::stream s) {
    refused = ec;
    CHECK_FALSE(s.is_open());
  });
  ctx.run_for(10s);
  REQUIRE(refused);
  CHECK(*refused == std::errc::no_such_file_or_directory); // no socket there: its process ended
}

TEST_CASE("transport: a dial resolves a host name off the executor's thread", "[transport]") {
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
  const std::string port = l.url().substr(l.url().rfind(':') + 1);
  fd::stream server, client;
  std::string got, peer;
  l.async_accept([&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    server = std::move(s);
    server.async_recv([&](std::error_code ec, message m) {
      REQUIRE_FALSE(ec);
      got = msg_str(m);
      peer = client.peer_address();
      server.close(); // nothing left to do: run_for returns
      client.close();
    });
  });
  fd::async_connect(ctx.get_executor(), "tcp://localhost:" + port, no_options, [&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    client = std::move(s);
    client.async_send(str_msg("by name"), [](std::error_code ec) { REQUIRE_FALSE(ec); });
  });
  ctx.run_for(30s);
  CHECK(got == "by name");
  CHECK(peer == l.url()); // localhost resolved to the listener's address
  std::optional<std::error_code> bad;
  ctx.restart();
  fd::async_connect(ctx.get_executor(), "tcp://no-port", no_options, [&](std::error_code ec, fd::stream) { bad = ec; });
  ctx.run_for(10s);
  REQUIRE(bad);
  CHECK(*bad == std::errc::invalid_argument);
  bad.reset();
  ctx.restart();
  fd::async_connect(ctx.get_executor(), "tcp://127.0.0.1:70000", no_options,
                    [&](std::error_code ec, fd::stream) { bad = ec; });
  ctx.run_for(10s);
  REQUIRE(bad);
  CHECK(*bad == std::errc::invalid_argument); // not port 70000 mod 65536
}

TEST_CASE("transport: a listen URL's host name is resolved before the listener, which takes only addresses",
          "[transport]") {
  asio::io_context ctx;
  try { // resolving here would block the thread that runs the executor
    fd::listener named(ctx.get_executor(), "tcp://localhost:0");
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(e.code() == std::errc::invalid_argument);
    CHECK(std::string(e.what()).find("tcp://localhost:0") != std::string::npos);
  }
  const auto url = fd::numeric_listen_url("tcp://localhost:0");
  INFO(url);
  CHECK((url == "tcp://127.0.0.1:0" || url == "tcp://[::1]:0"));
  const auto tls = fd::numeric_listen_url("tls+tcp://localhost:4000");
  CHECK((tls == "tls+tcp://127.0.0.1:4000" || tls == "tls+tcp://[::1]:4000"));
  for (const std::string same :
       {"tcp://10.1.2.3:0", "tcp://[::1]:7", "tcp://[fe80::1%lo]:0", "tcp://*:0", "ipc:///tmp/x.ipc"})
    CHECK(fd::numeric_listen_url(same) == same);
  CHECK(fd::listen_host_name("tls+tcp://node-1:0") == "node-1");
  for (const std::string numeric :
       {"tcp://10.1.2.3:0", "tcp://[fe80::1%lo]:0", "tcp://*:0", "ipc:///tmp/x.ipc", "inproc://a"})
    CHECK(fd::listen_host_name(numeric).empty());
  CHECK_THROWS_WITH(fd::numeric_listen_url("tcp://no-such-host.invalid:0"), Catch::Contains("no-such-host.invalid"));
  fd::listener l(ctx.get_executor(), url);
  CHECK(l.url().starts_with(url.substr(0, url.size() - 1)));
}

TEST_CASE("transport: accept cancellation and listener close", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  const bool tcp = GENERATE(false, true); // nng's acceptor, the socket's
  fd::listener l(ctx.get_executor(), tcp ? std::string("tcp://127.0.0.1:0") : dir.ipc("acc.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex);
    timer.expires_after(20ms);
    using namespace asio::experimental::awaitable_operators;
    auto r = co_await (l.async_accept(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    CHECK(r.index() == 1);
    // A connection arriving later is not lost.
    auto [server, client] = co_await connect_pair(l, no_options);
    co_await client.async_send(str_msg("hi"), asio::use_awaitable);
    {
      auto got = msg_str(co_await server.async_recv(asio::use_awaitable));
      CHECK(got == "hi");
    }

    std::optional<std::error_code> ec;
    l.async_accept([&](std::error_code e, fd::stream) { ec = e; });
    l.close();
    co_await poll_until([&] { return bool(ec); }, 10ms, 100);
    REQUIRE(ec);
    CHECK(*ec == asio::error::operation_aborted);
  });
}

namespace {
// Voluntary context switches of this process's threads named by nng
// ("nng:poll", "nng:task", ...), and how many there are.
std::pair<long, int> nng_thread_switches() {
  long sum = 0;
  int threads = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string task = std::string("/proc/self/task/") + e->d_name;
      std::string name;
      std::getline(std::ifstream(task + "/comm"), name);
      if (!name.starts_with("nng:")) continue;
      ++threads;
      std::ifstream st(task + "/status");
      for (std::string line; std::getline(st, line);)
        if (line.starts_with("voluntary_ctxt_switches:")) sum += std::atol(line.c_str() + 24);
    }
    ::closedir(d);
  }
  return {sum, threads};
}

// This process's socket descriptors that a launched job would inherit.
std::set<int> inheritable_sockets() {
  std::set<int> out;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (auto* e = ::readdir(d)) {
      const int n = std::atoi(e->d_name);
      if (e->d_name[0] == '.' || n == ::dirfd(d)) continue;
      char buf[64] = {};
      const auto len = ::readlink((std::string("/proc/self/fd/") + e->d_name).c_str(), buf, sizeof buf - 1);
      if (len > 0 && std::string(buf).starts_with("socket:") && !(::fcntl(n, F_GETFD) & FD_CLOEXEC)) out.insert(n);
    }
    ::closedir(d);
  }
  return out;
}
} // namespace

TEST_CASE("transport: a tcp:// link a listener accepts is read on its executor's reactor, not by nng's threads",
          "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener ipc(ctx.get_executor(), dir.ipc("nng.ipc")); // nng's threads now run in this process
  REQUIRE(nng_thread_switches().second > 0);
  const auto inheritable = inheritable_sockets();
  fd::listener l(ctx.get_executor(), "tcp://127.0.0.1:0");
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    CHECK(inheritable_sockets() == inheritable); // the listening and the accepted socket are close-on-exec
    constexpr int rounds = 200;
    const long before = nng_thread_switches().first;
    for (int i = 0; i < rounds; ++i) {
      co_await client.async_send(str_msg(std::to_string(i)), asio::use_awaitable);
      auto got = msg_str(co_await server.async_recv(asio::use_awaitable));
      REQUIRE(got == std::to_string(i));
      co_await server.async_send(str_msg(got), asio::use_awaitable);
      auto back = msg_str(co_await client.async_recv(asio::use_awaitable));
      REQUIRE(back == got);
    }
    // nng's timer may wake now and then; each frame through nng's poller and
    // task thread would be 2 × 2 × rounds.
    CHECK(nng_thread_switches().first - before < rounds / 10);
  });
}

namespace {
/// Writes `<name>c.pem` and `<name>k.pem` (a self-signed certificate for
/// CN=localhost and its key) into `dir`, with the openssl command.
void self_signed(const temp_dir& dir, const std::string& name) {
  const auto d = dir.path.string();
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 1 -keyout " + d + "/" +
                          name + "k.pem -out " + d + "/" + name + "c.pem >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
}
} // namespace

TEST_CASE("transport: TLS round trip with a self-signed certificate", "[transport][tls]") {
  REQUIRE(fd::libssl_api::get()); // Debian's libssl3 (libcurl needs it too)
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    WARN("openssl not found: TLS test skipped");
    return;
  }
  temp_dir dir;
  self_signed(dir, "a");
  self_signed(dir, "b");
  const std::string d = dir.path.string() + "/";
  fd::transport_options srv;
  srv.tls_cert_file = d + "ac.pem";
  srv.tls_key_file = d + "ak.pem";
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), "tls+tcp://127.0.0.1:0", srv);
  CHECK(l.url().rfind("tls+tcp://127.0.0.1:", 0) == 0);

  SECTION("verified server") {
    fd::transport_options cli;
    cli.tls_ca_file = d + "ac.pem";
    cli.tls_server_name = "localhost";
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, cli);
      co_await client.async_send(str_msg("secret"), asio::use_awaitable);
      {
        auto got = msg_str(co_await server.async_recv(asio::use_awaitable));
        CHECK(got == "secret");
      }
      const message big = make_msg((4u << 20) + 3, 5); // many TLS records, partial writes
      std::size_t sent = 0;
      send_burst(server, 300, sent);
      server.async_send(big, [&](std::error_code ec) {
        REQUIRE_FALSE(ec);
        ++sent;
      });
      co_await expect_burst(client, 300);
      auto got_big = co_await client.async_recv(asio::use_awaitable);
      CHECK(got_big == big);
      // The peer may hold every byte before nng's thread completes the send.
      co_await poll_until([&] { return sent >= 301; }, 1ms, 5000);
      CHECK(sent == 301);
    });
  }
  SECTION("big frames, encrypted as they are written: batched, tailed and direct") {
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, no_options);
      co_await check_big_frames(client, server, 2 * fd::trailing_seal_threshold + 5); // past one piece ahead
    });
  }
  SECTION("unverified client still encrypts, on a channel both ends bind alike") {
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, no_options);
      co_await client.async_send(str_msg("opaque"), asio::use_awaitable);
      {
        auto got = msg_str(co_await server.async_recv(asio::use_awaitable));
        CHECK(got == "opaque");
      }
      CHECK(server.is_tls());
      CHECK(client.is_tls());
      CHECK(server.binding() == client.binding());
      CHECK(server.binding() != fd::channel_binding{});
    });
  }
  SECTION("wrong CA is refused") {
    fd::transport_options cli;
    cli.tls_ca_file = d + "bc.pem";
    cli.tls_server_name = "localhost";
    run_coro(ctx, [&]() -> asio::awaitable<void> {
      auto [server, client] = co_await connect_pair(l, cli);
      using asio::experimental::as_tuple;
      auto server_failed = std::make_shared<bool>(false);
      server.async_recv([server_failed](std::error_code, message) { *server_failed = true; }); // drive its handshake
      auto [ec] = co_await client.async_send(str_msg("x"), as_tuple(asio::use_awaitable));
      auto [ec2, m] = co_await client.async_recv(as_tuple(asio::use_awaitable));
      // The server's handshake fails too once the client gives up: its
      // pending recv completes before the streams go (else its nng read may
      // complete into an io_context that is no longer run, and leak).
      client.close();
      asio::steady_timer tick(co_await asio::this_coro::executor);
      for (int i = 0; i < 10000 && !*server_failed; ++i) {
        tick.expires_after(1ms);
        co_await tick.async_wait(asio::use_awaitable);
      }
      CHECK(*server_failed);
      INFO(ec.message() << " / " << ec2.message());
      CHECK(fd::is_tls_verify_failure(ec));
      CHECK(fd::is_tls_verify_failure(ec2));
      CHECK(ec2.message() == "the peer's TLS certificate failed verification: self-signed certificate");
    });
  }
}

TEST_CASE("transport: a client verifies the name tls_server_name gives, else the URL's host", "[transport][tls]") {
  fd::transport_options o;
  CHECK(fd::tls_name_for("tls+tcp://10.0.0.5:4000", o) == "10.0.0.5");
  CHECK(fd::tls_name_for("tls+tcp://[fd00::1]:4000", o) == "fd00::1");
  CHECK(fd::tls_name_for("tls+tcp://node-3.cluster:4000", o) == "node-3.cluster");
  o.tls_server_name = "fiber-master";
  CHECK(fd::tls_name_for("tls+tcp://10.0.0.5:4000", o) == "fiber-master");
}

TEST_CASE("transport: set_max_message_size bounds frames from now on", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("limit.ipc"));
  run_coro(ctx, [&]() -> asio::awaitable<void> {
    auto [server, client] = co_await connect_pair(l, no_options);
    server.set_max_message_size(100); // e.g. until the peer has authenticated
    client.set_max_message_size(100);
    auto [ec] = co_await client.async_send(message(101), asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec == asio::error::message_size);
    client.set_max_message_size(1000);
    co_await client.async_send(message(100), asio::use_awaitable);
    co_await client.async_send(message(101), asio::use_awaitable);
    auto ok = co_await server.async_recv(asio::use_awaitable);
    CHECK(ok.size() == 100);
    auto [ec2, m] = co_await server.async_recv(asio::experimental::as_tuple(asio::use_awaitable));
    CHECK(ec2 == asio::error::message_size);
    CHECK_FALSE(server.is_open());
  });
}

TEST_CASE("transport: streams on strands of a multi-threaded io_context", "[transport]") {
  temp_dir dir;
  asio::io_context ctx(2);
  auto sa = asio::make_strand(ctx), sb = asio::make_strand(ctx);
  fd::listener l(sa, dir.ipc("strand.ipc"));
  constexpr std::uint32_t n = 5000;
  // Each side runs on its stream's strand: burst both ways, then exchange an
  // empty "fin" so that neither side closes while its sends are in flight.
  // (Catch2 assertions are not thread-safe: the sides throw, main checks.)
  auto side = [](fd::stream& s) -> asio::awaitable<void> { // (n is constexpr: no capture)
    std::size_t sent = 0, failed = 0;
    for (std::uint32_t i = 0; i < n; ++i)
      s.async_send(seq_msg(i), [&](std::error_code ec) {
        ++sent;
        failed += ec ? 1 : 0;
      });
    for (std::uint32_t i = 0; i < n; ++i) {
      auto m = co_await s.async_recv(asio::use_awaitable);
      if (m != seq_msg(i)) throw std::runtime_error("message " + std::to_string(i) + " wrong or out of order");
    }
    co_await s.async_send(message{}, asio::use_awaitable); // completes after all sends above
    auto fin = co_await s.async_recv(asio::use_awaitable);
    if (!fin.empty() || sent != n || failed != 0) throw std::runtime_error("bad fin or failed sends");
  };
  auto fa = asio::co_spawn(
      sa,
      [&]() -> asio::awaitable<void> {
        auto s = co_await l.async_accept(asio::use_awaitable);
        co_await side(s);
      },
      asio::use_future);
  auto fb = asio::co_spawn(
      sb,
      [&]() -> asio::awaitable<void> {
        auto c = co_await fd::async_connect(sb, l.url(), no_options, asio::use_awaitable);
        co_await side(c);
      },
      asio::use_future);
  std::thread t1([&] { ctx.run_for(60s); }), t2([&] { ctx.run_for(60s); });
  t1.join();
  t2.join();
  REQUIRE(fa.wait_for(0s) == std::future_status::ready);
  REQUIRE(fb.wait_for(0s) == std::future_status::ready);
  fa.get();
  fb.get();
} // (no thread runs ctx any more: destroying l here is race-free)

namespace {
// Runs f on ctx's thread and returns what it returns.
template <class F>
auto on_ctx(asio::io_context& ctx, F f) {
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto fut = task.get_future();
  asio::post(ctx, [&task] { task(); });
  return fut.get();
}
} // namespace

TEST_CASE("transport: the read side lent to a blocking thread, and taken back", "[transport]") {
  temp_dir dir;
  asio::io_context ctx;
  auto work = asio::make_work_guard(ctx);
  std::thread t([&] { ctx.run(); });
  fd::listener l(ctx.get_executor(), dir.ipc("lend.ipc"));
  auto p = asio::co_spawn(ctx, connect_pair(l, no_options), asio::use_future).get();
  auto& server = p.server;
  auto& client = p.client;
  auto recv_on_ctx = [&] {
    auto pr = std::make_shared<std::promise<std::pair<std::error_code, message>>>();
    on_ctx(ctx, [&, pr] {
      server.async_recv([pr](std::error_code ec, message m) { pr->set_value({ec, std::move(m)}); });
      return 0;
    });
    return pr->get_future();
  };
  // Catch is not thread-safe: handlers on ctx's thread only count failures.
  std::atomic<int> send_errors{0};
  auto send = [&](message m) {
    on_ctx(ctx, [&, m = std::move(m)]() mutable {
      client.async_send(std::move(m), [&](std::error_code ec) { send_errors += bool(ec); });
      return 0;
    });
  };
  auto lend = [&] {
    auto pr = std::make_shared<std::promise<fd::lent_reader>>();
    on_ctx(ctx, [&, pr] {
      server.lend_reader([pr](fd::lent_reader r) { pr->set_value(r); });
      return 0;
    });
    return pr->get_future().get();
  };

  // Read on the executor first, then lend while its nng read is in flight
  // (it is cancelled): a receive pending on the executor just waits.
  auto a = recv_on_ctx();
  send(str_msg("a"));
  CHECK(msg_str(a.get().second) == "a");
  auto b = recv_on_ctx();
  auto r = lend();
  REQUIRE(r);

  // The borrower gets every frame, small and larger than the read buffer, in order.
  const message big = make_msg(300 * 1024, 3);
  send(str_msg("b"));
  send(big);
  send(str_msg("c"));
  message m;
  REQUIRE_FALSE(r.recv(m));
  CHECK(msg_str(m) == "b");
  REQUIRE_FALSE(r.recv(m));
  CHECK(m == big);
  REQUIRE_FALSE(r.recv(m));
  CHECK(msg_str(m) == "c");
  CHECK(b.wait_for(0s) == std::future_status::timeout);

  // Three frames in one write: the borrower takes one; taken back while it
  // is not reading, the other two (already buffered) go to the executor's
  // receivers in order, and the borrower is told it lost the read side.
  on_ctx(ctx, [&] {
    for (const char* s : {"d", "e", "f"})
      client.async_send(str_msg(s), [&](std::error_code ec) { send_errors += bool(ec); });
    return 0;
  });
  REQUIRE_FALSE(r.recv(m));
  CHECK(msg_str(m) == "d");
  CHECK(on_ctx(ctx, [&] { return server.take_back_reader(); }));
  CHECK_FALSE(on_ctx(ctx, [&] { return server.take_back_reader(); })); // not lent any more
  CHECK(msg_str(b.get().second) == "e");
  CHECK(msg_str(recv_on_ctx().get().second) == "f");
  CHECK(r.recv(m) == asio::error::already_started);
  r.give_back(); // no-op once taken back
  send(str_msg("g"));
  CHECK(msg_str(recv_on_ctx().get().second) == "g");
  CHECK(send_errors == 0);

  // Lent again (no nng read in flight now that nothing waits? one always is:
  // cancelled again); the peer goes away while the borrower blocks: it gets
  // the error, gives the read side back with it, the stream is closed, and
  // the executor's pending receive fails.
  auto c = recv_on_ctx();
  auto r2 = lend();
  std::error_code borrower_ec;
  std::thread borrower([&] {
    message x;
    borrower_ec = r2.recv(x);
    r2.give_back(borrower_ec);
  });
  on_ctx(ctx, [&] {
    client.close();
    return 0;
  });
  borrower.join();
  CHECK(borrower_ec);
  auto [cec, cm] = c.get();
  CHECK(cec);
  CHECK_FALSE(on_ctx(ctx, [&] { return server.is_open(); }));
  CHECK(on_ctx(ctx, [&] { return server.stats().messages_received; }) == 8);

  on_ctx(ctx, [&] {
    server.close();
    l.close();
    return 0;
  });
  work.reset();
  t.join();
}

TEST_CASE("transport: over TLS a lend is granted once the handshake is done; a direct frame leaves in one send",
          "[transport][tls]") {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    WARN("openssl not found: TLS test skipped");
    return;
  }
  temp_dir dir;
  self_signed(dir, "a");
  fd::transport_options srv;
  srv.tls_cert_file = dir.path.string() + "/ac.pem";
  srv.tls_key_file = dir.path.string() + "/ak.pem";
  asio::io_context ctx;
  auto work = asio::make_work_guard(ctx);
  std::thread t([&] { ctx.run(); });
  fd::listener l(ctx.get_executor(), "tls+tcp://127.0.0.1:0", srv);
  auto p = asio::co_spawn(ctx, connect_pair(l, no_options), asio::use_future).get();
  auto& server = p.server;
  auto& client = p.client;
  std::atomic<int> send_errors{0};
  auto send = [&](message m) {
    on_ctx(ctx, [&, m = std::move(m)]() mutable {
      client.async_send(std::move(m), [&](std::error_code ec) { send_errors += bool(ec); });
      return 0;
    });
  };
  // Asked for while the TLS handshake may still run: granted after it, and
  // frames then reach the borrower decrypted.
  auto granted = std::make_shared<std::promise<fd::lent_reader>>();
  on_ctx(ctx, [&] {
    server.lend_reader([granted](fd::lent_reader r) { granted->set_value(r); });
    return 0;
  });
  auto lent = granted->get_future();
  REQUIRE(lent.wait_for(10s) == std::future_status::ready);
  auto r = lent.get();
  CHECK(on_ctx(ctx, [&] { return server.binding() != fd::channel_binding{}; }));
  message m;
  send(str_msg("a"));
  REQUIRE_FALSE(r.recv(m));
  CHECK(msg_str(m) == "a");
  send(str_msg("b"));
  REQUIRE_FALSE(r.recv(m));
  CHECK(msg_str(m) == "b");

  // A direct write of length, head and tail is one nng send (encrypted
  // into one buffer, written before it returns), not one per part.
  const message h = make_msg(20, 1), tail = make_msg(3000, 2);
  const auto sends0 = on_ctx(ctx, [&] { return client.stats().write_calls; });
  bool ok = false;
  std::thread writer([&, d = client.direct()] { ok = d.try_send(h, tail); });
  writer.join();
  CHECK(ok);
  CHECK(on_ctx(ctx, [&] { return client.stats().write_calls; }) - sends0 == 1);
  REQUIRE_FALSE(r.recv(m));
  CHECK(m == joined(h, tail));
  r.give_back();
  CHECK(send_errors == 0);

  on_ctx(ctx, [&] {
    client.close();
    server.close();
    l.close();
    return 0;
  });
  work.reset();
  t.join();
}

TEST_CASE("transport: a link takes the longer heartbeat period its peer announces, and still closes a silent peer",
          "[transport][heartbeat]") {
  // A master of 10,000 workers stretches its period to 10 s (heartbeat_period):
  // its workers must not take that silence for its death.
  CHECK(fd::heartbeat_period(10000, 500ms) == 10s);
  CHECK(fd::heartbeat_period(3, 500ms) == 500ms);
  heartbeat_config hb("20", "80");
  temp_dir dir;
  asio::io_context ctx;
  fd::listener l(ctx.get_executor(), dir.ipc("hb.ipc"));
  std::shared_ptr<fd::peer_link> link; // the worker's end
  fd::stream peer;                     // the master's: announces 400 ms, then falls silent
  std::string closed;
  std::vector<std::uint32_t> announced; // the periods the link announces
  std::function<void()> read_peer = [&] {
    peer.async_recv([&](std::error_code ec, message m) {
      if (ec) return;
      auto [k, body] = fd::unframe(m);
      if (k == fd::frame_kind::heartbeat && !body.empty()) announced.push_back(fiber::deserialize<std::uint32_t>(body));
      read_peer();
    });
  };
  l.async_accept([&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    peer = std::move(s);
    peer.async_send(fd::frame(fd::frame_kind::heartbeat, std::uint32_t(400)), [](std::error_code) {});
    read_peer();
  });
  fd::async_connect(ctx.get_executor(), l.url(), {}, [&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    link = std::make_shared<fd::peer_link>(std::move(s), fd::peer_identity{});
    link->start([](fd::frame_kind, std::span<const std::byte>, message&) {},
                [&](const std::string& why) { closed = why; });
  });
  // 80 ms of silence would close it at the configured period; 400 ms
  // announced gives 1.6 s.
  ctx.run_for(800ms);
  CHECK(closed.empty());
  CHECK_FALSE(announced.empty());
  if (!announced.empty()) CHECK(announced.back() == 20); // its own period
  const auto t0 = std::chrono::steady_clock::now();
  while (closed.empty() && std::chrono::steady_clock::now() - t0 < 10s) ctx.run_for(50ms);
  CHECK(closed == "heartbeat missed");
}
