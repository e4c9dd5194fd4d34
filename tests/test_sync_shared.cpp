// SPDX-License-Identifier: BSL-1.0
// fiber::Value, fiber::Array and fiber::JoinableQueue with Python's
// semantics, across Processes and a Pool; Queue's close, join_thread, full.
#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>
#include <fiber/sharedctypes.hpp>

#include <catch2/catch.hpp>

#include <asio/use_future.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using fiber_test::next;

// Items each process takes and marks done: 40k in all over 4 processes
// (fewer under the sanitizers, which slow every round trip 5-20x). Two
// round trips each: with 100k the case took over 60 s on 2 loaded cores.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int n_items = 20'000;
#else
constexpr int n_items = 40'000;
#endif

void increment(fiber::Value<long> v, fiber::Array<int> a, int n) {
  for (int i = 0; i < n; ++i) {
    {
      std::lock_guard g{v.get_lock()};
      v.set(v.get() + 1);
    }
    std::lock_guard g{a.get_lock()};
    a.set(0, a.get(0) + 1);
    a.set(1, a.get(1) + 2);
  }
}

int increment_task(std::pair<fiber::Value<long>, int> in) {
  auto& v = in.first;
  std::lock_guard g{v.get_lock()};
  v.set(v.get() + in.second);
  return in.second;
}

// Takes items until the queue is empty, marking each done, except item 0:
// that one is marked done only when `go` says so. Reports how many it
// marked, then (if it had item 0) 1 more after marking it.
void drain(fiber::JoinableQueue<int> q, fiber::Queue<long> out, fiber::Queue<int> go) {
  long done = 0;
  bool held = false;
  while (auto v = q.get_nowait()) {
    if (*v == 0) {
      held = true;
      continue;
    }
    q.task_done();
    ++done;
  }
  out.put(done);
  if (!held) return;
  (void)go.get(60s);
  q.task_done();
  out.put(1);
}

int take_and_mark(fiber::JoinableQueue<int> q) {
  const int v = q.get();
  q.task_done();
  return v;
}

} // namespace

// ---- Value, Array ------------------------------------------------------------------------

TEST_CASE("Value: get, set, its lock, copies and serialized copies", "[sync][value]") {
  fiber::Value<double> v{1.5};
  CHECK(v.get() == 1.5);
  v.set(-2.25);
  CHECK(v.get() == -2.25);
  auto copy = v;
  auto back = fiber::deserialize<fiber::Value<double>>(fiber::serialize(v));
  CHECK(copy == v);
  CHECK(back == v);
  back.set(3.0);
  CHECK(v.get() == 3.0);
  // One lock for all the handles.
  {
    std::lock_guard g{v.get_lock()};
    CHECK_FALSE(back.get_lock().acquire(0ms));
    v.set(v.get() + 1); // get and set do not take the lock
  }
  CHECK(copy.get_lock().acquire(0ms));
  copy.get_lock().release();
  CHECK(v.get() == 4.0);
  fiber::Value<bool> b;
  CHECK_FALSE(b.get());
  b.set(true);
  CHECK(b.get());
  fiber::Value<std::uint64_t> big{~std::uint64_t{0}};
  CHECK(big.get() == ~std::uint64_t{0});
  // A Value<double>'s bytes are no Value<int>.
  CHECK_THROWS_AS(fiber::deserialize<fiber::Value<int>>(fiber::serialize(v)), fiber::serialization_error);
}

TEST_CASE("Array: size, get, set, out_of_range", "[sync][value]") {
  fiber::Array<int> zeros(4);
  CHECK(zeros.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(zeros.get(i) == 0);
  fiber::Array<long> a(std::vector<long>{5, 6, 7});
  CHECK(a.size() == 3);
  CHECK(a.get(2) == 7);
  a.set(0, -1);
  CHECK(a.get(0) == -1);
  CHECK_THROWS_AS(a.get(3), std::out_of_range);
  CHECK_THROWS_AS(a.set(3, 1), std::out_of_range);
  auto back = fiber::deserialize<fiber::Array<long>>(fiber::serialize(a));
  CHECK(back.size() == 3);
  CHECK(back.get(1) == 6);
  CHECK(back == a);
  fiber::Array<float> empty;
  CHECK(empty.size() == 0);
  CHECK_THROWS_AS(empty.get(0), std::out_of_range);
}

TEST_CASE("Value and Array increments from 4 processes and a Pool end exact", "[sync][value][process]") {
  fiber::Value<long> v{0};
  fiber::Array<int> a(2);
  std::vector<fiber::Process> ps;
  for (int i = 0; i < 4; ++i) ps.emplace_back(fiber::target<&increment>, v, a, 150);
  for (auto& p : ps) p.start();
  increment(v, a, 150); // and the master
  for (auto& p : ps) {
    p.join();
    CHECK(p.exitcode() == 0);
  }
  CHECK(v.get() == 750);
  CHECK(a.get(0) == 750);
  CHECK(a.get(1) == 1500);

  {
    fiber::Pool pool{fiber::target<&increment_task>, {.processes = 2, .chunksize = 1}};
    std::vector<std::pair<fiber::Value<long>, int>> in;
    for (int i = 1; i <= 40; ++i) in.emplace_back(v, i);
    auto r = pool.map(in);
    CHECK(std::accumulate(r.begin(), r.end(), 0) == 820);
  }
  CHECK(v.get() == 750 + 820);
  fiber_test::require_no_children();
}

// ---- JoinableQueue ------------------------------------------------------------------------

TEST_CASE("JoinableQueue: task_done too often is a logic_error; join waits for every item", "[sync][queue]") {
  fiber::JoinableQueue<std::string> q;
  q.join(); // nothing put: at once
  CHECK(q.join(0ms));
  CHECK_THROWS_AS(q.task_done(), std::logic_error);
  q.put("a");
  q.put("b");
  CHECK_FALSE(q.join(20ms));
  auto joined = q.async_join(asio::use_future);
  CHECK(q.get() == "a");
  q.task_done();
  CHECK(joined.wait_for(20ms) == std::future_status::timeout);
  CHECK(q.get() == "b");
  q.task_done();
  joined.get();
  CHECK(q.join(0ms));
  CHECK_THROWS_AS(q.task_done(), std::logic_error);
  // A plain Queue handle naming it counts its puts too.
  auto plain = fiber::deserialize<fiber::Queue<std::string>>(fiber::serialize(q));
  plain.put("c");
  CHECK_FALSE(q.join(0ms));
  CHECK(q.get() == "c");
  q.task_done();
  CHECK(q.join(0ms));
}

TEST_CASE("JoinableQueue: task_done from 4 processes; join returns exactly after the last", "[sync][queue][process]") {
  fiber::JoinableQueue<int> q;
  fiber::Queue<long> out;
  fiber::Queue<int> go;
  for (int i = 0; i < n_items; ++i) q.put(i);
  auto joined = q.async_join(asio::use_future);
  std::vector<fiber::Process> ps;
  for (int i = 0; i < 4; ++i) ps.emplace_back(fiber::target<&drain>, q, out, go);
  for (auto& p : ps) p.start();
  long marked = 0;
  for (int i = 0; i < 4; ++i) marked += next(out);
  // Every item but item 0 is marked done (each task_done returned): join has not returned.
  CHECK(marked == n_items - 1);
  CHECK(joined.wait_for(0s) == std::future_status::timeout);
  CHECK_FALSE(q.join(0ms));
  go.put(1);
  CHECK(next(out) == 1);
  marked += 1;
  CHECK(joined.wait_for(60s) == std::future_status::ready);
  joined.get();
  CHECK(marked == n_items);
  CHECK(q.join(0ms));
  CHECK(q.empty());
  for (auto& p : ps) {
    p.join();
    CHECK(p.exitcode() == 0);
  }
  fiber_test::require_no_children();
}

TEST_CASE("JoinableQueue across a Pool: tasks mark items done, join returns", "[sync][queue][pool]") {
  fiber::JoinableQueue<int> q;
  for (int i = 0; i < 10; ++i) q.put(i);
  {
    fiber::Pool pool{fiber::target<&take_and_mark>, {.processes = 2}};
    auto r = pool.map(std::vector<fiber::JoinableQueue<int>>(10, q));
    std::sort(r.begin(), r.end());
    CHECK(r == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }
  CHECK(q.join(60s));
  fiber_test::require_no_children();
}

// ---- Queue: close, join_thread, full ----------------------------------------------------------

TEST_CASE("Queue: full(), close() refuses this handle's puts and gets, join_thread waits for async puts",
          "[sync][queue]") {
  fiber::Queue<int> q{1};
  auto other = fiber::deserialize<fiber::Queue<int>>(fiber::serialize(q)); // another handle, same queue
  CHECK_FALSE(q.full());
  q.put(1);
  CHECK(q.full());
  CHECK(q.qsize() == 1);
  CHECK_FALSE(fiber::Queue<int>{}.full());            // unbounded: never
  CHECK_THROWS_AS(q.join_thread(), std::logic_error); // not closed yet

  auto pending = q.async_put(2, asio::use_future); // waits for room
  auto copy = q;
  q.close();
  q.close(); // idempotent
  CHECK_THROWS_AS(q.put(3), std::logic_error);
  CHECK_THROWS_AS(copy.put(3), std::logic_error); // copies share the handle's state
  CHECK_THROWS_AS(q.get(), std::logic_error);
  CHECK_THROWS_AS(q.async_put(3, asio::use_future), std::logic_error);
  auto joined = std::async(std::launch::async, [&] { q.join_thread(); });
  CHECK(joined.wait_for(20ms) == std::future_status::timeout); // the async put is still in flight
  CHECK(other.get() == 1);                                     // room: it lands
  joined.get();
  pending.get();
  CHECK(other.get() == 2);
  q.cancel_join_thread();
  CHECK(other.empty());
}
