// SPDX-License-Identifier: BSL-1.0
#include <fiber/pipe.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>

#include <catch2/catch.hpp>

#include <asio/use_future.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

using namespace std::chrono_literals;

namespace {

void echo(fiber::Connection<int> c) {
  for (;;) {
    int v = c.recv();
    if (v < 0) return;
    c.send(v * 2);
  }
}

void send_strings(fiber::Connection<std::string> tx, int n) {
  for (int i = 0; i < n; ++i) tx.send("item " + std::to_string(i));
}

void send3(fiber::Connection<int> b) {
  b.send(1);
  b.send(2);
  b.send(3);
}

// Exits without destroying its end: only the broken link tells the broker.
void send1_and_vanish(fiber::Connection<int> b) {
  b.send(1);
  std::_Exit(0);
}

void hold_forever(fiber::Connection<int> b) {
  b.send(0); // ready
  for (;;) std::this_thread::sleep_for(1s);
}

// Exit code 0: got 0..n-1, then eof_error; 3: wrong item; 4: no EOF.
void drain_then_eof(fiber::Connection<int> b, int n) {
  b.send(-1); // ready
  for (int i = 0; i < n; ++i)
    if (b.recv() != i) std::exit(3);
  try {
    (void)b.recv();
  } catch (const fiber::eof_error&) {
    return;
  }
  std::exit(4);
}

void send_from_queue(fiber::Queue<fiber::Connection<int>> q) {
  auto c = q.get();
  c.send(10);
  c.send(20);
}

} // namespace

TEST_CASE("a duplex pipe in one process", "[pipe]") {
  auto [a, b] = fiber::Pipe<std::string>();
  CHECK(a.readable());
  CHECK(a.writable());
  CHECK_FALSE(b.poll());
  a.send("to b");
  CHECK(b.poll(1s));
  CHECK(b.recv() == "to b");
  b.send("to a");
  CHECK(a.recv() == "to a");
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(a.poll(50ms));
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
}

TEST_CASE("a simplex pipe: the first end receives, the second sends", "[pipe]") {
  auto [rx, tx] = fiber::Pipe<int>(false);
  CHECK(rx.readable());
  CHECK_FALSE(rx.writable());
  CHECK_FALSE(tx.readable());
  CHECK(tx.writable());
  CHECK_THROWS_AS(rx.send(1), std::logic_error);
  CHECK_THROWS_AS(tx.recv(), std::logic_error);
  CHECK_THROWS_AS(tx.poll(), std::logic_error);
  tx.send(5);
  tx.send(6);
  CHECK(rx.recv() == 5);
  CHECK(rx.recv() == 6);
}

TEST_CASE("EOF in one process: reads drain, then eof_error; sends to a gone end fail", "[pipe][eof]") {
  SECTION("close()") {
    auto [a, b] = fiber::Pipe<int>();
    a.send(1);
    a.send(2);
    a.close();
    CHECK(a.closed());
    a.close(); // idempotent
    CHECK_THROWS_AS(a.recv(), std::logic_error);
    CHECK_THROWS_AS(a.send(3), std::logic_error);
    CHECK(b.poll()); // data
    CHECK(b.recv() == 1);
    CHECK(b.recv() == 2);
    CHECK(b.poll()); // EOF: recv would not block
    CHECK_THROWS_AS(b.recv(), fiber::eof_error);
    CHECK_THROWS_AS(b.recv(), fiber::eof_error);
    CHECK_THROWS_AS(b.send(4), fiber::eof_error); // broken pipe
  }
  SECTION("destroying the last holder") {
    fiber::Connection<int> b;
    CHECK(b.closed());
    CHECK_THROWS_AS(b.recv(), std::logic_error);
    {
      auto ends = fiber::Pipe<int>();
      b = std::move(ends.second);
      ends.first.send(9);
    }
    CHECK(b.recv() == 9);
    CHECK_THROWS_AS(b.recv(), fiber::eof_error);
  }
  SECTION("a waiting recv is woken by EOF") {
    auto [a, b] = fiber::Pipe<int>();
    auto f = b.async_recv(asio::use_future);
    CHECK(f.wait_for(20ms) == std::future_status::timeout);
    a.close();
    CHECK_THROWS_AS(f.get(), fiber::eof_error);
  }
}

TEST_CASE("async_send and async_recv", "[pipe][async]") {
  auto [a, b] = fiber::Pipe<std::vector<int>>();
  auto f = b.async_recv(asio::use_future);
  a.async_send({1, 2, 3}, asio::use_future).get();
  CHECK(f.get() == std::vector<int>{1, 2, 3});
}

TEST_CASE("a malformed item raises serialization_error at the receiver; the pipe keeps working",
          "[pipe][serialization]") {
  auto [a, b] = fiber::Pipe<int>();
  // A second holder of end `a` with another item type (serializing registers
  // a transfer, deserializing claims it).
  auto alias = fiber::deserialize<fiber::Connection<std::string>>(fiber::serialize(a));
  alias.send("xy"); // 3 bytes: no int
  CHECK_THROWS_AS(b.recv(), fiber::serialization_error);
  a.send(5);
  CHECK(b.recv() == 5);
  // Both holders of `a` must close before b reads EOF.
  a.close();
  CHECK_FALSE(b.poll(50ms));
  alias.close();
  CHECK_THROWS_AS(b.recv(), fiber::eof_error);
}

TEST_CASE("a duplex pipe across processes", "[pipe][process]") {
  auto [a, b] = fiber::Pipe<int>();
  fiber::Process p{fiber::target<&echo>, std::move(b)};
  CHECK(b.closed()); // moved into the process's arguments
  p.start();
  CHECK_FALSE(a.poll());
  for (int i = 1; i <= 20; ++i) {
    a.send(i);
    CHECK(a.poll(30s));
    CHECK(a.recv() == 2 * i);
  }
  a.send(-1);
  p.join();
  CHECK(p.exitcode() == 0);
  CHECK_THROWS_AS(a.recv(), fiber::eof_error);
  fiber_test::require_no_children();
}

TEST_CASE("a simplex pipe across processes", "[pipe][process]") {
  auto [rx, tx] = fiber::Pipe<std::string>(false);
  fiber::Process p{fiber::target<&send_strings>, std::move(tx), 50};
  p.start();
  for (int i = 0; i < 50; ++i) CHECK(rx.recv() == "item " + std::to_string(i));
  p.join();
  CHECK(p.exitcode() == 0);
  CHECK_THROWS_AS(rx.recv(), fiber::eof_error);
  fiber_test::require_no_children();
}

TEST_CASE("EOF (1): a child sends 3 items and exits; the parent reads 3, then eof_error", "[pipe][eof][process]") {
  auto [a, b] = fiber::Pipe<int>();
  fiber::Process p{fiber::target<&send3>, std::move(b)};
  // The argument's temporary is gone, but the transfer keeps end b open.
  CHECK_FALSE(a.poll(50ms));
  p.start();
  CHECK(a.recv() == 1);
  CHECK(a.recv() == 2);
  CHECK(a.recv() == 3);
  REQUIRE(a.poll(30s)); // bounded: a missing EOF fails here instead of hanging
  CHECK_THROWS_AS(a.recv(), fiber::eof_error);
  p.join();
  CHECK(p.exitcode() == 0);
  fiber_test::require_no_children();
}

TEST_CASE("EOF (2): the parent closes its end; the child drains, then eof_error", "[pipe][eof][process]") {
  auto [a, b] = fiber::Pipe<int>();
  fiber::Process p{fiber::target<&drain_then_eof>, std::move(b), 2};
  p.start();
  CHECK(a.recv() == -1); // the child is attached and about to read
  a.send(0);
  a.send(1);
  a.close();
  REQUIRE(p.join(30s)); // a child that never sees EOF fails the test, not hangs it
  CHECK(p.exitcode() == 0);
  fiber_test::require_no_children();
}

TEST_CASE("EOF when the holding process dies without closing", "[pipe][eof][process]") {
  SECTION("it exits at once") {
    auto [a, b] = fiber::Pipe<int>();
    fiber::Process p{fiber::target<&send1_and_vanish>, std::move(b)};
    p.start();
    CHECK(a.recv() == 1);
    REQUIRE(a.poll(30s));
    CHECK_THROWS_AS(a.recv(), fiber::eof_error);
    p.join();
  }
  SECTION("it is killed") {
    auto [a, b] = fiber::Pipe<int>();
    fiber::Process p{fiber::target<&hold_forever>, std::move(b)};
    p.start();
    CHECK(a.recv() == 0);
    CHECK_FALSE(a.poll(50ms));
    p.kill();
    REQUIRE(a.poll(30s));
    CHECK_THROWS_AS(a.recv(), fiber::eof_error);
    p.join();
    CHECK(p.exitcode() == -9);
    CHECK_THROWS_AS(a.send(1), fiber::eof_error);
  }
  fiber_test::require_no_children();
}

TEST_CASE("a Connection passed through a Queue: the sender closes its copy", "[pipe][queue][process]") {
  auto [a, b] = fiber::Pipe<int>();
  fiber::Queue<fiber::Connection<int>> q;
  fiber::Process p{fiber::target<&send_from_queue>, q};
  p.start();
  q.put(b);  // a copy travels; this process still holds b...
  b.close(); // ...until it closes it, as with multiprocessing
  CHECK(a.recv() == 10);
  CHECK(a.recv() == 20);
  REQUIRE(a.poll(30s));
  CHECK_THROWS_AS(a.recv(), fiber::eof_error);
  p.join();
  CHECK(p.exitcode() == 0);
  fiber_test::require_no_children();
}
