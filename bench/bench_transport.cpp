// SPDX-License-Identifier: BSL-1.0
// bench_transport: fiber's framed transport (a dialled Asio socket to an
// accepted nng stream) against raw nng SP sockets, same machine, same run,
// two threads (one io_context each) over ipc.
//
//   64 B round trip (ping-pong): median / p99 / mean in microseconds
//   PUSH-style throughput: 64 B and 1 MiB messages, sender keeps a window of
//   sends in flight; msg/s and MiB/s measured until the receiver has all
//
// Baselines: nng REQ/REP (ping-pong) and PUSH/PULL (throughput) between two
// threads of this process. The cross-process floor (and a raw AF_UNIX
// socketpair) is bench/baselines/nng_pingpong.c.
//
// Usage: bench_transport [--smoke] [--trips N] [--small N] [--big N]

// Asio 1.22 enables co_await for clang only with libc++; clang 14 with
// libstdc++'s <coroutine> works, so opt in (before any Asio header).
#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT) && __has_include(<coroutine>)
#define ASIO_HAS_CO_AWAIT 1
#define ASIO_HAS_STD_COROUTINE 1
#endif

#include <fiber/detail/transport.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace fd = fiber::detail;
using clk = std::chrono::steady_clock;

namespace {

double us_since(clk::time_point t0) { return std::chrono::duration<double, std::micro>(clk::now() - t0).count(); }

void die(const char* what, int rv) {
  std::fprintf(stderr, "%s: %s\n", what, nng_strerror(rv));
  std::exit(1);
}

void print_rtt(const char* name, std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  std::printf("%-28s 64B RTT us: median %7.1f  p99 %7.1f  mean %7.1f  (n=%zu)\n", name, v[v.size() / 2],
              v[std::min(v.size() - 1, v.size() * 99 / 100)], sum / double(v.size()), v.size());
}

void print_rate(const char* name, std::size_t size, std::size_t n, double secs) {
  std::printf("%-28s %7zuB: %10.0f msg/s  %9.1f MiB/s  (n=%zu)\n", name, size, double(n) / secs,
              double(n) * double(size) / secs / 1048576.0, n);
}

// --------------------------------------------------------------- fiber

// Runs `server(stream)` on a second thread's io_context and `client(stream)`
// on this thread's, connected over `url`.
template <class Server, class Client>
void fiber_pair(const std::string& url, Server server, Client client) {
  asio::io_context sctx, cctx;
  fd::listener l(sctx.get_executor(), url);
  asio::co_spawn(
      sctx,
      [&]() -> asio::awaitable<void> {
        auto s = co_await l.async_accept(asio::use_awaitable);
        l.close();
        co_await server(s);
      },
      asio::detached);
  std::thread st([&] { sctx.run(); });
  asio::co_spawn(
      cctx,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        fd::transport_options opt;
        auto c = co_await fd::async_connect(ex, url, opt, asio::use_awaitable);
        co_await client(c);
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  cctx.run();
  st.join();
}

void fiber_pingpong(const std::string& url, int trips, int warmup) {
  std::vector<double> rtt;
  rtt.reserve(std::size_t(trips));
  fiber_pair(
      url,
      [&](fd::stream& s) -> asio::awaitable<void> {
        for (int i = 0; i < trips + warmup; ++i) {
          auto m = co_await s.async_recv(asio::use_awaitable);
          co_await s.async_send(std::move(m), asio::use_awaitable);
        }
      },
      [&](fd::stream& c) -> asio::awaitable<void> {
        for (int i = 0; i < trips + warmup; ++i) {
          const auto t0 = clk::now();
          co_await c.async_send(fd::message(64, std::byte(i)), asio::use_awaitable);
          auto m = co_await c.async_recv(asio::use_awaitable);
          if (i >= warmup) rtt.push_back(us_since(t0));
        }
      });
  print_rtt("fiber stream (ipc)", rtt);
}

// The sender keeps `window` sends in flight; the receiver acknowledges the
// last message, so the time covers delivery of everything.
void fiber_push(const std::string& url, std::size_t size, std::size_t n, std::size_t window) {
  double secs = 0;
  fd::stream_stats cs{}, ss{};
  fiber_pair(
      url,
      [&](fd::stream& s) -> asio::awaitable<void> {
        for (std::size_t i = 0; i < n; ++i) co_await s.async_recv(asio::use_awaitable);
        ss = s.stats();
        co_await s.async_send(fd::message(1), asio::use_awaitable);
      },
      [&](fd::stream& c) -> asio::awaitable<void> {
        const fd::message payload(size, std::byte(7));
        std::size_t sent = 0, done = 0;
        const auto t0 = clk::now();
        auto ex = co_await asio::this_coro::executor;
        asio::steady_timer wake(ex, clk::time_point::max());
        while (done < n) {
          while (sent < n && sent - done < window) {
            ++sent;
            c.async_send(payload, [&](std::error_code ec) {
              if (ec) die("send", NNG_EINTERNAL);
              ++done;
              wake.cancel();
            });
          }
          co_await wake.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        }
        co_await c.async_recv(asio::use_awaitable); // the receiver's ack
        secs = us_since(t0) / 1e6;
        cs = c.stats();
      });
  print_rate("fiber stream PUSH (ipc)", size, n, secs);
  std::printf("%-28s   %.1f msgs per write, %.1f msgs per read\n", "",
              double(cs.messages_sent) / double(std::max<std::uint64_t>(1, cs.write_calls)),
              double(ss.messages_received) / double(std::max<std::uint64_t>(1, ss.read_calls)));
}

// --------------------------------------------------------------- raw nng

void nng_reqrep(const std::string& url, int trips, int warmup) {
  nng_socket rep, req;
  int rv;
  if ((rv = nng_rep0_open(&rep)) || (rv = nng_listen(rep, url.c_str(), nullptr, 0))) die("rep", rv);
  std::thread server([&] {
    for (int i = 0; i < trips + warmup; ++i) {
      nng_msg* m;
      if (int r = nng_recvmsg(rep, &m, 0)) die("rep recv", r);
      if (int r = nng_sendmsg(rep, m, 0)) die("rep send", r);
    }
  });
  if ((rv = nng_req0_open(&req)) || (rv = nng_dial(req, url.c_str(), nullptr, 0))) die("req", rv);
  std::vector<double> rtt;
  rtt.reserve(std::size_t(trips));
  for (int i = 0; i < trips + warmup; ++i) {
    const auto t0 = clk::now();
    nng_msg* m;
    if ((rv = nng_msg_alloc(&m, 64))) die("alloc", rv);
    std::memset(nng_msg_body(m), i, 64);
    if ((rv = nng_sendmsg(req, m, 0)) || (rv = nng_recvmsg(req, &m, 0))) die("req io", rv);
    nng_msg_free(m);
    if (i >= warmup) rtt.push_back(us_since(t0));
  }
  server.join();
  nng_close(req);
  nng_close(rep);
  print_rtt("nng REQ/REP (ipc)", rtt);
}

void nng_pushpull(const std::string& url, std::size_t size, std::size_t n) {
  nng_socket pull, push;
  int rv;
  if ((rv = nng_pull0_open(&pull)) || (rv = nng_listen(pull, url.c_str(), nullptr, 0))) die("pull", rv);
  nng_socket_set_size(pull, NNG_OPT_RECVMAXSZ, 0);
  if ((rv = nng_push0_open(&push)) || (rv = nng_dial(push, url.c_str(), nullptr, 0))) die("push", rv);
  const auto t0 = clk::now();
  std::thread receiver([&] {
    for (std::size_t i = 0; i < n; ++i) {
      nng_msg* m;
      if (int r = nng_recvmsg(pull, &m, 0)) die("pull recv", r);
      nng_msg_free(m);
    }
  });
  for (std::size_t i = 0; i < n; ++i) {
    nng_msg* m;
    if ((rv = nng_msg_alloc(&m, size)) || (rv = nng_sendmsg(push, m, 0))) die("push send", rv);
  }
  receiver.join();
  const double secs = us_since(t0) / 1e6;
  nng_close(push);
  nng_close(pull);
  print_rate("nng PUSH/PULL (ipc)", size, n, secs);
}

} // namespace

int main(int argc, char** argv) {
  int trips = 20000;
  std::size_t n_small = 200000, n_big = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      trips = 200;
      n_small = 2000;
      n_big = 20;
    } else if (a == "--trips" && i + 1 < argc) {
      trips = std::atoi(argv[++i]);
    } else if (a == "--small" && i + 1 < argc) {
      n_small = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--big" && i + 1 < argc) {
      n_big = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--smoke] [--trips N] [--small N] [--big N]\n", argv[0]);
      return 2;
    }
  }
  const int warmup = std::min(1000, trips / 10);
  int k = 0;
  auto url = [&] { return "ipc:///tmp/fiber_bench_transport_" + std::to_string(getpid()) + "_" + std::to_string(k++); };

  std::printf("nng %s, two threads in one process, ipc\n", nng_version());
  nng_reqrep(url(), trips, warmup);
  fiber_pingpong(url(), trips, warmup);
  nng_pushpull(url(), 64, n_small);
  fiber_push(url(), 64, n_small, 4096);
  nng_pushpull(url(), 1u << 20, n_big);
  fiber_push(url(), 1u << 20, n_big, 8);
  for (int i = 0; i < k; ++i)
    ::unlink(("/tmp/fiber_bench_transport_" + std::to_string(getpid()) + "_" + std::to_string(i)).c_str());
  return 0;
}
