// Tests for fiber's nng-stream transport (include/fiber/detail/transport.hpp).

// Asio 1.22 enables co_await for clang only with libc++; clang 14 with
// libstdc++'s <coroutine> works, so opt in (before any Asio header).
#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT) && __has_include(<coroutine>)
#define ASIO_HAS_CO_AWAIT 1
#define ASIO_HAS_STD_COROUTINE 1
#endif
#include <fiber/detail/transport.hpp>

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
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fd = fiber::detail;
using fd::message;

namespace {

// A private temp directory, removed at scope exit.
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
std::string msg_str(const message& m) { return std::string(reinterpret_cast<const char*>(m.data()), m.size()); }

// Runs a coroutine on ctx to completion (bounded in time); rethrows its exception.
template <class F>
void run_coro(asio::io_context& ctx, F&& f) {
  auto fut = asio::co_spawn(ctx, f(), asio::use_future);
  ctx.run_for(60s);
  REQUIRE(fut.wait_for(0s) == std::future_status::ready);
  fut.get();
}

// A connected pair (server side accepted from a listener on url).
struct pair {
  fd::stream server, client;
};
// g++ 12 bug: a prvalue class argument to a by-value coroutine parameter
// inside co_await is destroyed twice (`co_await f(T{})`): pass lvalues.
asio::awaitable<pair> connect_pair(fd::listener& l, fd::transport_options copt) {
  auto ex = co_await asio::this_coro::executor;
  using namespace asio::experimental::awaitable_operators;
  auto [s, c] = co_await (l.async_accept(asio::use_awaitable) &&
                          fd::async_connect(ex, l.url(), copt, asio::use_awaitable));
  co_return pair{std::move(s), std::move(c)};
}

const fd::transport_options no_options;

} // namespace

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
    });
  });
  ctx.run_for(30s);
  CHECK(sent);
  CHECK(got == "hello!");
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
