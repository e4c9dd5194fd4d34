// SPDX-License-Identifier: BSL-1.0
#include <fiber/process.hpp>
#include <fiber/queue.hpp>
#include <fiber/stats.hpp>

#include <catch2/catch.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

using namespace std::chrono_literals;

namespace {

struct Foo {
  int a = 0;
  double b = 0;
};

void produce(fiber::Queue<int> q, int base, int n) {
  for (int i = 0; i < n; ++i) q.put(base + i);
}

// Takes until a negative sentinel, then reports everything it got.
void consume(fiber::Queue<int> q, fiber::Queue<std::vector<int>> out) {
  std::vector<int> got;
  for (;;) {
    int v = q.get();
    if (v < 0) break;
    got.push_back(v);
  }
  out.put(got);
}

void fill(fiber::Queue<int> q, int n) {
  for (int i = 0; i < n; ++i) q.put(i);
}

void timed_get(fiber::Queue<int> q, fiber::Queue<int> out) {
  auto v = q.get(50ms);
  out.put(v ? *v : -1);
  auto w = q.get(30s);
  out.put(w ? *w : -1);
}

// Gets with 1 ms timeouts while the master puts: a timed-out get must never eat an item.
void drain_with_timeouts(fiber::Queue<int> q, fiber::Queue<std::vector<int>> out, int n) {
  std::vector<int> got;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (int(got.size()) < n && std::chrono::steady_clock::now() < deadline)
    if (auto v = q.get(1ms)) got.push_back(*v);
  out.put(got);
}

void echo_double(fiber::Queue<int> in, fiber::Queue<int> out) {
  for (;;) {
    int v = in.get();
    if (v < 0) return;
    out.put(2 * v);
  }
}

void get_foos(fiber::Queue<Foo> q, fiber::Queue<std::string> out, int n) {
  for (int i = 0; i < n; ++i) {
    try {
      auto f = q.get();
      out.put("ok " + std::to_string(f.a));
    } catch (const fiber::serialization_error&) {
      out.put("serialization_error");
    }
  }
}

void make_queue_and_exit(fiber::Queue<fiber::Queue<int>> out) {
  fiber::Queue<int> q;
  q.put(1);
  out.put(q);
}

void make_queue_and_wait(fiber::Queue<fiber::Queue<int>> out, fiber::Queue<int> go) {
  fiber::Queue<int> q;
  out.put(q);
  (void)go.get();
}

std::vector<int> iota(int base, int n) {
  std::vector<int> v(std::size_t(n), 0);
  std::iota(v.begin(), v.end(), base);
  return v;
}

// The master's waits on its children are bounded, so a broken child fails the test instead of hanging it.
using fiber_test::is_aborted;
using fiber_test::next;

} // namespace

TEST_CASE("a queue is FIFO; get(timeout) returns nullopt when nothing comes", "[queue]") {
  fiber::Queue<int> q;
  CHECK(q.maxsize() == 0);
  CHECK(q.empty());
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(q.get(50ms));
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
  CHECK_FALSE(q.get_nowait());
  for (int i = 0; i < 5; ++i) q.put(i);
  CHECK(q.qsize() == 5);
  for (int i = 0; i < 5; ++i) CHECK(q.get() == i);
  q.put(9);
  CHECK(q.get(50ms) == 9);
  CHECK(q.empty());
}

TEST_CASE("fiber::stats lists the queues this process serves with their depth", "[queue][stats]") {
  fiber::Queue<int> q;
  const auto depths = [] {
    std::vector<std::uint64_t> d;
    for (auto& s : fiber::stats().services)
      if (s.kind == "queue") d.push_back(s.depth);
    return d;
  };
  const auto before = depths();
  for (int i = 0; i < 3; ++i) q.put(i);
  auto after = depths();
  REQUIRE(after.size() == before.size() + 1);
  CHECK(std::ranges::count(after, 3u) >= 1);
  CHECK(q.get() == 0);
  CHECK(std::ranges::count(depths(), 2u) >= 1);
}

TEST_CASE("a bounded queue refuses puts while full", "[queue]") {
  fiber::Queue<std::string> q{2};
  CHECK(q.maxsize() == 2);
  q.put("a");
  CHECK(q.put_nowait("b"));
  CHECK_FALSE(q.put_nowait("c"));
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(q.put("c", 50ms));
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
  CHECK(q.qsize() == 2);
  // A blocked put completes as soon as a get makes room, in FIFO order.
  auto f = std::async(std::launch::async, [&] { q.put("c"); });
  CHECK(q.get() == "a");
  f.get();
  CHECK(q.get() == "b");
  CHECK(q.get() == "c");

  const int n = 1, none = -1; // any integer type; Python's rule: <= 0 is unbounded
  fiber::Queue<int> one{n}, unbounded{none};
  CHECK(one.maxsize() == 1);
  CHECK(unbounded.maxsize() == 0);
  CHECK(one.put_nowait(1));
  CHECK_FALSE(one.put_nowait(2));
  for (int i = 0; i < 3; ++i) CHECK(unbounded.put_nowait(i));
}

TEST_CASE("handles are copies of one queue, and come back to their creator intact", "[queue]") {
  fiber::Queue<int> q;
  auto copy = q;
  copy.put(4);
  CHECK(q.get() == 4);
  CHECK(copy == q);
  CHECK_FALSE(fiber::Queue<int>{} == q);

  fiber::Queue<fiber::Queue<int>> qq;
  qq.put(q);
  auto back = qq.get();
  CHECK(back == q);
  back.put(5);
  CHECK(q.get() == 5);

  // The creator's last handle gone: the queue is gone, even if its bytes live on.
  {
    fiber::Queue<int> tmp;
    tmp.put(1);
    qq.put(tmp);
  }
  auto orphan = qq.get();
  CHECK_THROWS_AS(orphan.put(2), fiber::error);
}

TEST_CASE("4 producers x 250 items, 3 consumer processes: every item exactly once", "[queue][process]") {
  fiber::Queue<int> q;
  fiber::Queue<std::vector<int>> results;
  std::vector<fiber::Process> producers, consumers;
  for (int p = 0; p < 4; ++p) producers.emplace_back(fiber::target<&produce>, q, p * 1000, 250);
  for (int c = 0; c < 3; ++c) consumers.emplace_back(fiber::target<&consume>, q, results);
  for (auto& c : consumers) c.start();
  for (auto& p : producers) p.start();
  for (auto& p : producers) {
    p.join();
    CHECK(p.exitcode() == 0);
  }
  for (int c = 0; c < 3; ++c) q.put(-1);
  std::vector<int> all;
  std::size_t busy_consumers = 0;
  for (int c = 0; c < 3; ++c) {
    auto got = next(results);
    busy_consumers += got.empty() ? 0 : 1;
    all.insert(all.end(), got.begin(), got.end());
  }
  for (auto& c : consumers) {
    c.join();
    CHECK(c.exitcode() == 0);
  }
  std::sort(all.begin(), all.end());
  std::vector<int> expected;
  for (int p = 0; p < 4; ++p) {
    auto v = iota(p * 1000, 250);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  CHECK(all.size() == 1000);
  CHECK(all == expected);
  CHECK(busy_consumers >= 1);
  CHECK(q.empty());
  fiber_test::require_no_children();
}

TEST_CASE("back-pressure: a producer process cannot finish until the master gets", "[queue][process]") {
  fiber::Queue<int> q{2};
  fiber::Process p{fiber::target<&fill>, q, 10};
  p.start();
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (q.qsize() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(q.qsize() == 2);
  // 8 items are still to come and there is no room: the producer is stuck in put.
  CHECK_FALSE(p.join(300ms));
  CHECK(p.is_alive());
  CHECK_FALSE(q.put(99, 50ms));
  for (int i = 0; i < 10; ++i) {
    CHECK(next(q) == i);
    CHECK(q.qsize() <= 2);
  }
  p.join();
  CHECK(p.exitcode() == 0);
  CHECK_FALSE(q.get_nowait());
  fiber_test::require_no_children();
}

TEST_CASE("get(timeout) in another process: nullopt, then the item", "[queue][process]") {
  fiber::Queue<int> q, out;
  fiber::Process p{fiber::target<&timed_get>, q, out};
  p.start();
  CHECK(next(out) == -1);
  q.put(7);
  CHECK(next(out) == 7);
  p.join();
  CHECK(p.exitcode() == 0);
  fiber_test::require_no_children();
}

TEST_CASE("timed-out gets racing puts lose nothing", "[queue][process]") {
  constexpr int n = 300;
  SECTION("threads") {
    fiber::Queue<int> q;
    std::vector<int> got;
    std::thread consumer([&] {
      auto deadline = std::chrono::steady_clock::now() + 60s;
      while (int(got.size()) < n && std::chrono::steady_clock::now() < deadline)
        if (auto v = q.get(1ms)) got.push_back(*v);
    });
    for (int i = 0; i < n; ++i) q.put(i);
    consumer.join();
    CHECK(got == iota(0, n));
  }
  SECTION("a consumer process") {
    fiber::Queue<int> q;
    fiber::Queue<std::vector<int>> out;
    fiber::Process p{fiber::target<&drain_with_timeouts>, q, out, n};
    p.start();
    for (int i = 0; i < n; ++i) q.put(i);
    auto got = next(out);
    CHECK(got == iota(0, n));
    p.join();
    CHECK(q.empty());
  }
  fiber_test::require_no_children();
}

TEST_CASE("async_get and async_put with use_future", "[queue][async]") {
  fiber::Queue<std::string> q{1};
  auto f = q.async_get(asio::use_future);
  CHECK(f.wait_for(20ms) == std::future_status::timeout);
  q.async_put("hello", asio::use_future).get();
  CHECK(f.get() == "hello");

  // A waiting async_put (queue full) completes when a get makes room.
  q.put("first");
  auto pf = q.async_put("second", asio::use_future);
  CHECK(pf.wait_for(20ms) == std::future_status::timeout);
  CHECK(q.get() == "first");
  pf.get();
  CHECK(q.get() == "second");
}

TEST_CASE("async_get and async_put in a coroutine, with a worker process", "[queue][async][process]") {
  fiber::Queue<int> in, out;
  fiber::Process p{fiber::target<&echo_double>, in, out};
  p.start();
  asio::io_context ioc;
  const auto me = std::this_thread::get_id();
  bool on_my_thread = true;
  auto sum = asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<int> {
        int s = 0;
        for (int i = 1; i <= 5; ++i) {
          co_await in.async_put(i, asio::use_awaitable);
          on_my_thread = on_my_thread && std::this_thread::get_id() == me;
          s += co_await out.async_get(asio::use_awaitable);
          on_my_thread = on_my_thread && std::this_thread::get_id() == me;
        }
        co_await in.async_put(-1, asio::use_awaitable);
        co_return s;
      },
      asio::use_future);
  ioc.run();
  CHECK(sum.get() == 30);
  CHECK(on_my_thread); // handlers ran on the coroutine's executor, not fiber's thread
  p.join();
  CHECK(p.exitcode() == 0);
  fiber_test::require_no_children();
}

TEST_CASE("cancelling async_get loses no item", "[queue][async]") {
  fiber::Queue<int> q;
  SECTION("cancelled while waiting") {
    asio::io_context ioc;
    asio::cancellation_signal sig;
    std::exception_ptr err;
    bool done = false;
    q.async_get(asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](std::exception_ptr e, int) {
                                               err = e;
                                               done = true;
                                             })));
    asio::post(ioc, [&] { sig.emit(asio::cancellation_type::terminal); });
    ioc.run();
    REQUIRE(done);
    CHECK(is_aborted(err));
    q.put(5);
    CHECK(q.get_nowait() == 5); // the withdrawn getter did not take it
  }
  SECTION("cancel racing a put: each item is got exactly once") {
    for (int i = 0; i < 100; ++i) {
      asio::io_context ioc;
      asio::cancellation_signal sig;
      std::exception_ptr err;
      int got = -1;
      q.async_get(asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](std::exception_ptr e, int v) {
                                                 err = e;
                                                 if (!e) got = v;
                                               })));
      auto put = q.async_put(i, asio::use_future);
      asio::post(ioc, [&] { sig.emit(asio::cancellation_type::terminal); });
      ioc.run();
      put.get();
      auto left = q.get_nowait();
      INFO("iteration " << i);
      CHECK(int(got == i) + int(left == i) == 1);
      if (got != i) CHECK(is_aborted(err));
    }
  }
  SECTION("with awaitable operators: a timer wins, the queue keeps the item") {
    using namespace asio::experimental::awaitable_operators;
    asio::io_context ioc;
    auto r = asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<std::size_t> {
          asio::steady_timer t(co_await asio::this_coro::executor, 30ms);
          auto v = co_await (q.async_get(asio::use_awaitable) || t.async_wait(asio::use_awaitable));
          co_return v.index();
        },
        asio::use_future);
    ioc.run();
    CHECK(r.get() == 1);
    q.put(8);
    CHECK(q.get() == 8);
  }
}

TEST_CASE("a malformed item raises serialization_error at the receiver; the queue keeps working",
          "[queue][serialization]") {
  fiber::Queue<Foo> q;
  // Another handle type naming the same queue puts bytes that are no Foo.
  auto alias = fiber::deserialize<fiber::Queue<std::string>>(fiber::serialize(q));
  SECTION("blocking get") {
    alias.put("no Foo");
    CHECK_THROWS_AS(q.get(), fiber::serialization_error);
    q.put(Foo{1, 2.5});
    auto f = q.get();
    CHECK(f.a == 1);
    CHECK(f.b == 2.5);
  }
  SECTION("async_get") {
    alias.put("no Foo either");
    CHECK_THROWS_AS(q.async_get(asio::use_future).get(), fiber::serialization_error);
    q.put(Foo{2, 0});
    CHECK(q.async_get(asio::use_future).get().a == 2);
  }
  SECTION("in a consumer process") {
    fiber::Queue<std::string> out;
    fiber::Process p{fiber::target<&get_foos>, q, out, 2};
    p.start();
    alias.put("bad");
    q.put(Foo{7, 1});
    CHECK(next(out) == "serialization_error");
    CHECK(next(out) == "ok 7");
    p.join();
    CHECK(p.exitcode() == 0);
  }
  CHECK(q.empty());
  fiber_test::require_no_children();
}

TEST_CASE("when the creating process exits, users get worker_lost", "[queue][process]") {
  SECTION("on their next operation") {
    fiber::Queue<fiber::Queue<int>> out;
    fiber::Process p{fiber::target<&make_queue_and_exit>, out};
    p.start();
    auto q = next(out);
    p.join();
    CHECK_THROWS_AS(q.get(), fiber::worker_lost);
    CHECK_THROWS_AS(q.put(1), fiber::worker_lost);
  }
  SECTION("while waiting") {
    fiber::Queue<fiber::Queue<int>> out;
    fiber::Queue<int> go;
    fiber::Process p{fiber::target<&make_queue_and_wait>, out, go};
    p.start();
    auto q = next(out);
    auto f = q.async_get(asio::use_future);
    // Requests on one link are served in order: once qsize has its reply,
    // the get waits at the owner (else it could arrive after the release).
    CHECK(q.qsize() == 0);
    CHECK(f.wait_for(0ms) == std::future_status::timeout);
    go.put(1);
    CHECK_THROWS_AS(f.get(), fiber::worker_lost);
    p.join();
  }
  fiber_test::require_no_children();
}

TEST_CASE("a blocking Queue call on the runtime thread is a logic_error, not a deadlock", "[queue][async]") {
  fiber::Queue<int> q;
  std::promise<bool> threw;
  q.async_get([&](std::exception_ptr, int) {
    try {
      (void)q.get_nowait();
      threw.set_value(false);
    } catch (const std::logic_error&) {
      threw.set_value(true);
    }
  });
  q.put(1);
  CHECK(threw.get_future().get());
}

// White box: the broker's view of a client process that vanishes (link ids
// 7 and 8 stand for two other processes' connections, which no master
// knows; 9 is the first one's again after a reconnect).
TEST_CASE("the broker never loses an item to a vanished client, nor hands it out twice", "[queue][broker]") {
  namespace d = fiber::detail;
  auto& rt = d::runtime::instance();
  auto b = std::make_shared<d::queue_broker>(rt.executor(), 0);
  const d::peer_identity seven{d::role::client, 0, 999981, "fencing-test-host", "seven"};
  rt.sync([&] {
    rt.attach_link(7, seven);
    rt.attach_link(8, {d::role::client, 0, 999982, "fencing-test-host", "eight"});
  });
  auto vanish = [&](std::uint64_t link) {
    rt.sync([&] {
      b->peer_gone(link);
      rt.detach_link(link);
    });
  };
  auto call = [&](std::uint64_t peer, std::uint32_t op, std::vector<std::byte> payload) {
    auto out = std::make_shared<std::vector<std::pair<d::wire_status, std::vector<std::byte>>>>();
    rt.sync([&] {
      b->handle(peer, op, payload,
                [out](d::wire_status st, std::vector<std::byte> p) { out->emplace_back(st, std::move(p)); });
    });
    return out;
  };
  auto header = [](std::uint64_t wait, std::int64_t timeout) { return d::op_header{wait, timeout, 0}.bytes(); };
  auto put = [&](int v) {
    return call(0, d::queue_op::put, d::put_payload(d::op_header{100 + std::uint64_t(v), -1, 0}, v));
  };
  auto item_of = [](const std::vector<std::byte>& p) {
    REQUIRE(p.size() >= 2);
    REQUIRE(p[0] == std::byte(d::take_tag::item));
    return fiber::deserialize<int>(std::span<const std::byte>(p).subspan(2));
  };

  using reply_list = std::shared_ptr<std::vector<std::pair<d::wire_status, std::vector<std::byte>>>>;
  auto is_empty = [](const reply_list& r) {
    return r->size() == 1 && (*r)[0].second == std::vector<std::byte>{std::byte(d::take_tag::empty)};
  };

  SECTION("an item not acknowledged stays its getter's until the getter is dead, then goes back in front") {
    put(1);
    put(2);
    auto got = call(7, d::queue_op::get, header(1, -1));
    REQUIRE(got->size() == 1);
    CHECK((*got)[0].second[1] == std::byte{1}); // remote: ack requested
    CHECK(item_of((*got)[0].second) == 1);
    vanish(7);                                                                 // its link is lost before the ack
    CHECK(item_of((*call(0, d::queue_op::get, header(2, 0)))[0].second) == 2); // 1 stays reserved
    CHECK(is_empty(call(0, d::queue_op::get, header(3, 0))));
    // Nobody knows the process and it has no link: dead after the grace period.
    reply_list again;
    REQUIRE(fiber_test::eventually([&] { return !is_empty(again = call(0, d::queue_op::get, header(4, 0))); }));
    CHECK(item_of((*again)[0].second) == 1);
  }
  SECTION("an item acknowledged over a new link after a lost one is gone for good") {
    put(1);
    auto got = call(7, d::queue_op::get, header(1, -1));
    CHECK(item_of((*got)[0].second) == 1);
    vanish(7);
    rt.sync([&] { rt.attach_link(9, seven); });
    call(9, d::queue_op::ack, header(1, 0)); // the same process, reconnected
    vanish(9);
    CHECK(is_empty(call(0, d::queue_op::get, header(2, 0))));
  }
  SECTION("a get abandoned after a lost link gives its item back at once") {
    put(1);
    auto got = call(7, d::queue_op::get, header(1, -1));
    CHECK(item_of((*got)[0].second) == 1);
    vanish(7); // the reply was lost with the link: the getter abandons the get
    rt.sync([&] { rt.attach_link(9, seven); });
    call(9, d::queue_op::abandon, header(1, 0));
    CHECK(item_of((*call(0, d::queue_op::get, header(2, 0)))[0].second) == 1);
    put(2);
    auto late = call(9, d::queue_op::get, header(1, -1)); // the abandoned get, arriving late: refused
    REQUIRE(late->size() == 1);
    CHECK((*late)[0].second == std::vector<std::byte>{std::byte(d::take_tag::cancelled)});
    CHECK(item_of((*call(0, d::queue_op::get, header(3, 0)))[0].second) == 2);
    vanish(9);
  }
  SECTION("a vanished client's waiting get is dropped, not served") {
    auto dead = call(7, d::queue_op::get, header(1, -1));
    auto alive = call(8, d::queue_op::get, header(1, -1));
    vanish(7);
    put(5);
    CHECK(dead->empty());
    REQUIRE(alive->size() == 1);
    CHECK(item_of((*alive)[0].second) == 5);
  }
  rt.sync([&] {
    rt.detach_link(7);
    rt.detach_link(8);
    b->shutdown("test over");
  });
}
