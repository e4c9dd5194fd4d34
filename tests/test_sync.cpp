// SPDX-License-Identifier: BSL-1.0
// fiber::Lock, RLock, Semaphore, BoundedSemaphore, Condition, Event and
// Barrier with Python's semantics: in one process, across Processes and a
// Pool, when a holder or a waiter is SIGKILLed, and in their async forms.
#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>
#include <fiber/sharedctypes.hpp>
#include <fiber/synchronize.hpp>

#include <catch2/catch.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "support.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

using fiber_test::eventually;
using fiber_test::is_aborted;
using fiber_test::next;

std::string logic_error_of(auto f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return "logic_error";
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "none";
}

// ---- targets ------------------------------------------------------------

void hold_lock_forever(fiber::Lock lock, fiber::Queue<int> out) {
  lock.acquire();
  out.put(1);
  for (;;) ::pause(); // until SIGKILLed
}

void acquire_and_report(fiber::Lock lock, fiber::Queue<int> out) {
  out.put(2);
  const bool got = lock.acquire(60s);
  out.put(got ? 1 : 0);
  if (got) lock.release();
}

void hold_until_told(fiber::Lock lock, fiber::Queue<int> out, fiber::Queue<int> go) {
  lock.acquire();
  out.put(1);
  (void)go.get(60s);
  lock.release();
  out.put(2);
}

void release_lock(fiber::Lock lock) { lock.release(); }

void release_rlock(fiber::RLock lock, fiber::Queue<std::string> out) {
  out.put(logic_error_of([&] { lock.release(); }));
  out.put(lock.acquire(0ms) ? "acquired" : "busy");
}

void hold_permit_forever(fiber::Semaphore sem, fiber::Queue<int> out) {
  sem.acquire();
  out.put(1);
  for (;;) ::pause();
}

void release_n(fiber::Semaphore sem, int n) {
  for (int i = 0; i < n; ++i) sem.release();
}

void acquire_n(fiber::Semaphore sem, int n) {
  for (int i = 0; i < n; ++i) sem.acquire();
}

// Pool task: at most `sem`'s value of these run at once; arr = {running, most seen}.
int limited(std::tuple<fiber::Semaphore, fiber::Array<int>, int> in) {
  auto [sem, arr, x] = in;
  std::lock_guard s{sem};
  {
    std::lock_guard g{arr.get_lock()};
    const int now = arr.get(0) + 1;
    arr.set(0, now);
    arr.set(1, std::max(now, arr.get(1)));
  }
  std::this_thread::sleep_for(10ms); // work
  {
    std::lock_guard g{arr.get_lock()};
    arr.set(0, arr.get(0) - 1);
  }
  return x;
}

void set_flag_and_notify(fiber::Condition cond, fiber::Value<int> flag, bool all) {
  std::lock_guard g{cond};
  flag.set(1);
  if (all) cond.notify_all();
  else cond.notify();
}

// Waits for flag == 1 under the condition; reports what wait_for returned.
void wait_for_flag(fiber::Condition cond, fiber::Value<int> flag, fiber::Queue<int> out) {
  std::lock_guard g{cond};
  out.put(0); // holding the lock: the master's notify comes after our wait started
  out.put(cond.wait_for([&] { return flag.get() == 1; }, 60s) ? 1 : 0);
}

void set_event(fiber::Event ev) { ev.set(); }

void wait_event(fiber::Event ev, fiber::Queue<int> out) { out.put(ev.wait(60s) ? 1 : 0); }

void barrier_rounds(fiber::Barrier bar, fiber::Queue<std::vector<std::size_t>> out, int rounds) {
  std::vector<std::size_t> idx;
  for (int i = 0; i < rounds; ++i) idx.push_back(bar.wait(60s));
  out.put(idx);
}

// Waits on the barrier; reports "broken", "index N" or another error.
void barrier_report(fiber::Barrier bar, fiber::Queue<std::string> out) {
  try {
    out.put("index " + std::to_string(bar.wait(60s)));
  } catch (const fiber::broken_barrier_error& e) {
    out.put(std::string("broken: ") + e.what());
  } catch (const std::exception& e) {
    out.put(std::string("other: ") + e.what());
  }
}

void barrier_wait_forever(fiber::Barrier bar) { (void)bar.wait(); }

std::size_t barrier_task(fiber::Barrier bar) { return bar.wait(60s); }

} // namespace

// ---- Lock -----------------------------------------------------------------

TEST_CASE("Lock: acquire, timeouts, Lockable; releasing an unlocked Lock is a logic_error", "[sync][lock]") {
  fiber::Lock lock;
  CHECK(lock.acquire());
  CHECK_FALSE(lock.acquire(false));
  const auto t0 = clk::now();
  CHECK_FALSE(lock.acquire(50ms));
  CHECK(clk::now() - t0 >= 50ms);
  lock.release();
  CHECK_THROWS_AS(lock.release(), std::logic_error);
  {
    std::lock_guard g{lock};
    CHECK_FALSE(lock.try_lock());
  }
  CHECK(lock.try_lock());
  lock.unlock();

  // Copies and serialized copies name the same lock.
  auto copy = lock;
  auto back = fiber::deserialize<fiber::Lock>(fiber::serialize(lock));
  CHECK(copy == lock);
  CHECK(back == lock);
  CHECK_FALSE(fiber::Lock{} == lock);
  copy.acquire();
  CHECK_FALSE(back.acquire(0ms));
  back.release(); // any holder may release a Lock
  CHECK(lock.acquire(0ms));
  lock.release();
  // A Lock's bytes are no RLock.
  CHECK_THROWS_AS(fiber::deserialize<fiber::RLock>(fiber::serialize(lock)), fiber::serialization_error);
}

TEST_CASE("Lock: mutual exclusion between threads", "[sync][lock]") {
  fiber::Lock lock;
  long counter = 0; // plain: only the lock orders the increments
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::lock_guard g{lock};
        const long v = counter;
        std::this_thread::yield();
        counter = v + 1;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(counter == 800);
}

TEST_CASE("Lock across processes: a child holds it, the master waits; any process may release",
          "[sync][lock][process]") {
  fiber::Lock lock;
  fiber::Queue<int> out, go;
  fiber::Process p{fiber::target<&hold_until_told>, lock, out, go};
  p.start();
  CHECK(next(out) == 1);
  CHECK_FALSE(lock.acquire(50ms)); // the child has it
  auto waiting = std::async(std::launch::async, [&] { return lock.acquire(60s); });
  CHECK(waiting.wait_for(20ms) == std::future_status::timeout);
  go.put(1);
  CHECK(waiting.get());
  CHECK(next(out) == 2);
  p.join();
  CHECK(p.exitcode() == 0);
  // Released by a process that does not hold it, as Python allows.
  fiber::Process r{fiber::target<&release_lock>, lock};
  r.start();
  r.join();
  CHECK(r.exitcode() == 0);
  CHECK(lock.acquire(0ms));
  lock.release();
  fiber_test::require_no_children();
}

TEST_CASE("a Lock holder SIGKILLed while others wait: the waiter gets the lock", "[sync][lock][process][resilience]") {
  std::mutex m;
  std::vector<std::string> warnings;
  fiber::set_log_sink([&](const fiber::log_record& r) {
    std::lock_guard g{m};
    warnings.emplace_back(r.message);
  });
  fiber::Lock lock;
  fiber::Queue<int> held, rep;
  fiber::Process holder{fiber::target<&hold_lock_forever>, lock, held};
  holder.start();
  REQUIRE(next(held) == 1);
  fiber::Process waiter{fiber::target<&acquire_and_report>, lock, rep};
  waiter.start();
  REQUIRE(next(rep) == 2);
  auto master_waits = std::async(std::launch::async, [&] {
    const bool got = lock.acquire(60s);
    if (got) lock.release();
    return got;
  });
  CHECK(master_waits.wait_for(50ms) == std::future_status::timeout);
  holder.kill();
  holder.join();
  CHECK(holder.exitcode() == -9);
  // Both waiters get the lock in turn: nobody hangs.
  CHECK(next(rep) == 1);
  CHECK(master_waits.get());
  waiter.join();
  CHECK(waiter.exitcode() == 0);
  fiber::set_log_sink(nullptr);
  std::lock_guard g{m};
  const auto pid = std::to_string(*holder.pid());
  CHECK(std::any_of(warnings.begin(), warnings.end(), [&](const std::string& w) {
    return w.find("fiber::Lock") != std::string::npos && w.find("pid " + pid) != std::string::npos &&
           w.find("released") != std::string::npos;
  }));
  fiber_test::require_no_children();
}

// ---- RLock ------------------------------------------------------------------

TEST_CASE("RLock: re-entrant for its thread; release by a non-owner is a logic_error", "[sync][rlock]") {
  fiber::RLock lock;
  CHECK(lock.acquire());
  CHECK(lock.acquire(0ms)); // re-entrant
  {
    std::lock_guard g{lock}; // depth 3
  }
  auto other = std::async(std::launch::async, [&] {
                 return std::make_pair(lock.acquire(20ms), logic_error_of([&] { lock.release(); }));
               }).get();
  CHECK_FALSE(other.first);
  CHECK(other.second == "logic_error");
  lock.release();
  lock.release(); // depth 0: free
  CHECK_THROWS_AS(lock.release(), std::logic_error);
  CHECK(std::async(std::launch::async, [&] {
          const bool got = lock.acquire(0ms);
          if (got) lock.release();
          return got;
        }).get());

  SECTION("another process") {
    fiber::Queue<std::string> out;
    lock.acquire();
    fiber::Process p{fiber::target<&release_rlock>, lock, out};
    p.start();
    CHECK(next(out) == "logic_error");
    CHECK(next(out) == "busy");
    p.join();
    lock.release();
    fiber_test::require_no_children();
  }
}

// ---- Semaphore, BoundedSemaphore ------------------------------------------------

TEST_CASE("Semaphore counts permits; BoundedSemaphore refuses too many releases", "[sync][semaphore]") {
  fiber::Semaphore sem{2};
  CHECK(sem.get_value() == 2);
  CHECK(sem.acquire());
  CHECK(sem.acquire(0ms));
  CHECK_FALSE(sem.acquire(false));
  CHECK(sem.get_value() == 0);
  sem.release();
  sem.release();
  sem.release(); // beyond the initial value: allowed, as in Python
  CHECK(sem.get_value() == 3);

  fiber::BoundedSemaphore bsem{2};
  CHECK_THROWS_AS(bsem.release(), std::logic_error);
  {
    std::lock_guard g{bsem};
    CHECK(bsem.get_value() == 1);
  }
  CHECK(bsem.get_value() == 2);
  CHECK_THROWS_AS(bsem.release(), std::logic_error);
  CHECK(bsem.get_value() == 2);
  auto back = fiber::deserialize<fiber::BoundedSemaphore>(fiber::serialize(bsem));
  CHECK(back == bsem);
  CHECK_THROWS_AS(fiber::deserialize<fiber::Semaphore>(fiber::serialize(bsem)), fiber::serialization_error);
}

TEST_CASE("Semaphore across a Pool: never more holders than permits", "[sync][semaphore][pool]") {
  fiber::Semaphore sem{2};
  fiber::Array<int> arr(2);
  {
    fiber::Pool pool{fiber::target<&limited>, {.processes = 4, .chunksize = 1}};
    std::vector<std::tuple<fiber::Semaphore, fiber::Array<int>, int>> in;
    for (int i = 0; i < 12; ++i) in.emplace_back(sem, arr, i);
    auto r = pool.map(in);
    CHECK(r.size() == 12);
  }
  CHECK(arr.get(0) == 0);
  CHECK(arr.get(1) >= 1);
  CHECK(arr.get(1) <= 2);
  CHECK(sem.get_value() == 2);
  fiber_test::require_no_children();
}

TEST_CASE("Semaphore permits of a SIGKILLed holder come back; a signalling Semaphore gets none",
          "[sync][semaphore][resilience]") {
  SECTION("a holder") {
    fiber::Semaphore sem{1};
    fiber::Queue<int> out;
    fiber::Process p{fiber::target<&hold_permit_forever>, sem, out};
    p.start();
    REQUIRE(next(out) == 1);
    CHECK_FALSE(sem.acquire(20ms));
    auto waits = std::async(std::launch::async, [&] { return sem.acquire(60s); });
    p.kill();
    p.join();
    CHECK(waits.get());
    CHECK(sem.get_value() == 0);
  }
  SECTION("released by one process, acquired by another that exits") {
    fiber::Semaphore sem{0};
    fiber::Process producer{fiber::target<&release_n>, sem, 3};
    producer.start();
    producer.join();
    CHECK(sem.get_value() == 3);
    fiber::Process consumer{fiber::target<&acquire_n>, sem, 2};
    consumer.start();
    consumer.join();
    CHECK(consumer.exitcode() == 0);
    // The consumer's link is gone; it acquired 2, but the initial value was 0.
    CHECK(eventually([&] { return sem.get_value() == 1; }));
    CHECK(sem.acquire(0ms));
    CHECK_FALSE(sem.acquire(0ms));
  }
  fiber_test::require_no_children();
}

// ---- Condition --------------------------------------------------------------------

TEST_CASE("Condition: notify wakes one, notify_all the rest; wait needs the lock", "[sync][condition]") {
  fiber::Lock lock;
  fiber::Condition cond{lock};
  int waiting = 0, tokens = 0, woken = 0; // guarded by the lock
  auto waiter = [&] {
    std::lock_guard g{cond};
    ++waiting;
    cond.wait_for([&] { return tokens > 0; });
    --tokens;
    ++woken;
  };
  std::thread a(waiter), b(waiter);
  auto locked = [&](auto f) {
    std::lock_guard g{cond};
    return f();
  };
  REQUIRE(eventually([&] { return locked([&] { return waiting == 2; }); }));
  locked([&] {
    tokens = 1;
    cond.notify();
    return 0;
  });
  REQUIRE(eventually([&] { return locked([&] { return woken == 1; }); }));
  locked([&] {
    tokens = 1;
    cond.notify_all();
    return 0;
  });
  a.join();
  b.join();
  CHECK(woken == 2);

  CHECK_THROWS_AS(cond.wait(), std::logic_error);
  CHECK_THROWS_AS(cond.notify(), std::logic_error);
  // Condition() makes its own RLock; waits keep its depth.
  fiber::Condition rc;
  rc.acquire();
  rc.acquire();
  CHECK_FALSE(rc.wait(10ms));
  rc.release();
  rc.release();
  CHECK_THROWS_AS(rc.release(), std::logic_error);
}

TEST_CASE("Condition::wait_for(pred, timeout) returns pred's last value", "[sync][condition]") {
  fiber::Condition cond{fiber::Lock{}};
  std::lock_guard g{cond};
  int calls = 0;
  const auto t0 = clk::now();
  CHECK_FALSE(cond.wait_for([&] { return ++calls > 1000; }, 60ms));
  CHECK(clk::now() - t0 >= 60ms);
  CHECK(calls >= 1);
  CHECK(cond.wait_for([] { return 7; }, 1ms) == 7);
  CHECK_FALSE(cond.wait(10ms)); // a timed-out wait holds the lock again
  cond.notify_all();            // so this is allowed
}

TEST_CASE("Condition across processes: a child's notify wakes the master, and the reverse",
          "[sync][condition][process]") {
  fiber::Lock lock;
  fiber::Condition cond{lock};
  fiber::Value<int> flag{0};
  SECTION("the master waits") {
    fiber::Process p{fiber::target<&set_flag_and_notify>, cond, flag, false};
    std::lock_guard g{cond};
    p.start();
    CHECK(cond.wait_for([&] { return flag.get() == 1; }, 60s));
    p.join(); // the child released the lock before it exited
    CHECK(p.exitcode() == 0);
  }
  SECTION("two children wait, notify_all wakes both") {
    fiber::Queue<int> out;
    fiber::Process a{fiber::target<&wait_for_flag>, cond, flag, out}, b{fiber::target<&wait_for_flag>, cond, flag, out};
    a.start();
    b.start();
    CHECK(next(out) == 0);
    CHECK(next(out) == 0);
    set_flag_and_notify(cond, flag, true);
    CHECK(next(out) == 1);
    CHECK(next(out) == 1);
    a.join();
    b.join();
  }
  fiber_test::require_no_children();
}

// ---- Event ----------------------------------------------------------------------------

TEST_CASE("Event: wait times out, set wakes waiters in other processes, clear", "[sync][event]") {
  fiber::Event ev;
  CHECK_FALSE(ev.is_set());
  const auto t0 = clk::now();
  CHECK_FALSE(ev.wait(50ms));
  CHECK(clk::now() - t0 >= 50ms);
  fiber::Queue<int> out;
  fiber::Process w{fiber::target<&wait_event>, ev, out};
  w.start();
  fiber::Process s{fiber::target<&set_event>, ev};
  s.start();
  CHECK(next(out) == 1);
  CHECK(ev.is_set());
  CHECK(ev.wait());
  CHECK(ev.wait(0ms));
  ev.clear();
  CHECK_FALSE(ev.is_set());
  CHECK_FALSE(ev.wait(0ms));
  w.join();
  s.join();
  fiber_test::require_no_children();
}

// ---- Barrier --------------------------------------------------------------------------

TEST_CASE("Barrier across processes: each cycle's indices are 0..n-1", "[sync][barrier][process]") {
  fiber::Barrier bar{3};
  CHECK(bar.parties() == 3);
  fiber::Queue<std::vector<std::size_t>> out;
  fiber::Process a{fiber::target<&barrier_rounds>, bar, out, 5}, b{fiber::target<&barrier_rounds>, bar, out, 5};
  a.start();
  b.start();
  std::vector<std::size_t> mine;
  for (int i = 0; i < 5; ++i) mine.push_back(bar.wait(60s));
  auto x = next(out), y = next(out);
  for (int i = 0; i < 5; ++i) {
    std::set<std::size_t> cycle{mine[i], x[i], y[i]};
    CHECK(cycle == std::set<std::size_t>{0, 1, 2});
  }
  a.join();
  b.join();
  CHECK_FALSE(bar.broken());
  CHECK(bar.n_waiting() == 0);
  fiber_test::require_no_children();
}

TEST_CASE("Barrier: a timeout breaks it for everyone until reset; abort too", "[sync][barrier]") {
  fiber::Barrier bar{3};
  auto other = std::async(std::launch::async, [&] {
    try {
      (void)bar.wait(60s);
      return std::string("passed");
    } catch (const fiber::broken_barrier_error&) {
      return std::string("broken");
    }
  });
  REQUIRE(eventually([&] { return bar.n_waiting() == 1; }));
  CHECK_THROWS_AS(bar.wait(50ms), fiber::broken_barrier_error);
  CHECK(other.get() == "broken");
  CHECK(bar.broken());
  CHECK_THROWS_AS(bar.wait(), fiber::broken_barrier_error); // at once
  bar.reset();
  CHECK_FALSE(bar.broken());

  fiber::Barrier two{2};
  auto t = std::async(std::launch::async, [&] { return two.wait(60s); });
  const auto mine = two.wait(60s);
  CHECK(mine + t.get() == 1);

  auto aborted = std::async(std::launch::async, [&] {
    try {
      (void)two.wait(60s);
      return std::string("passed");
    } catch (const fiber::broken_barrier_error& e) {
      return std::string(e.what());
    }
  });
  REQUIRE(eventually([&] { return two.n_waiting() == 1; }));
  two.abort();
  CHECK(aborted.get().find("aborted") != std::string::npos);
  CHECK_THROWS_AS(two.wait(), fiber::broken_barrier_error);
  CHECK_THROWS_AS(fiber::Barrier{0}, std::invalid_argument);
}

TEST_CASE("a Barrier of 4 processes where one dies: broken_barrier_error for the others",
          "[sync][barrier][resilience]") {
  fiber::Barrier bar{4};
  fiber::Queue<std::string> out;
  fiber::Process victim{fiber::target<&barrier_wait_forever>, bar};
  victim.start();
  REQUIRE(eventually([&] { return bar.n_waiting() == 1; }));
  std::vector<fiber::Process> others;
  for (int i = 0; i < 3; ++i) others.emplace_back(fiber::target<&barrier_report>, bar, out);
  others[0].start();
  others[1].start();
  REQUIRE(eventually([&] { return bar.n_waiting() == 3; }));
  victim.kill();
  victim.join();
  others[2].start(); // arrives after the break: broken at once
  for (int i = 0; i < 3; ++i) {
    auto r = next(out);
    INFO(r);
    CHECK(r.rfind("broken", 0) == 0);
    if (i < 2) CHECK(r.find("a waiting process ended") != std::string::npos);
  }
  for (auto& p : others) {
    p.join();
    CHECK(p.exitcode() == 0);
  }
  CHECK(bar.broken());
  fiber_test::require_no_children();
}

TEST_CASE("Barrier between the master and a Pool task", "[sync][barrier][pool]") {
  fiber::Barrier bar{2};
  fiber::Pool pool{fiber::target<&barrier_task>, {.processes = 1}};
  for (int round = 0; round < 3; ++round) {
    auto task = pool.apply_async(bar);
    const auto mine = bar.wait(60s);
    CHECK(mine + task.get() == 1);
  }
}

// ---- async forms ----------------------------------------------------------------------

TEST_CASE("async forms: use_awaitable and use_future", "[sync][async]") {
  fiber::Lock lock;
  fiber::Barrier bar{2};
  fiber::Event ev;
  asio::io_context ioc;
  bool on_my_thread = true;
  auto r = asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<std::size_t> {
        const auto me = std::this_thread::get_id();
        co_await lock.async_acquire(asio::use_awaitable);
        on_my_thread = on_my_thread && std::this_thread::get_id() == me;
        const bool again = co_await lock.async_acquire(20ms, asio::use_awaitable);
        lock.release();
        co_await ev.async_wait(asio::use_awaitable);
        const bool set = co_await ev.async_wait(5ms, asio::use_awaitable);
        auto idx = co_await bar.async_wait(asio::use_awaitable);
        on_my_thread = on_my_thread && std::this_thread::get_id() == me;
        co_return (again ? 100 : 0) + (set ? 10 : 0) + idx;
      },
      asio::use_future);
  auto t = std::thread([&] { ioc.run(); });
  ev.set();
  const auto mine = bar.wait(60s);
  t.join();
  const auto v = r.get();
  CHECK(v / 100 == 0);       // the second acquire timed out
  CHECK(v / 10 % 10 == 1);   // the event was set
  CHECK(v % 10 + mine == 1); // indices 0 and 1
  CHECK(on_my_thread);

  CHECK(lock.async_acquire(asio::use_future).wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(lock.async_acquire(10ms, asio::use_future).get());
  lock.release();

  // use_future: the predicate runs on fiber's runtime thread (no blocking calls there).
  fiber::Condition cond{lock};
  std::atomic<int> flag{0};
  lock.acquire();
  auto f = cond.async_wait_for([&] { return flag.load() == 1; }, 60s, asio::use_future);
  CHECK(eventually([&] { return lock.acquire(0ms); })); // the wait released it
  flag = 1;
  cond.notify();
  lock.release();
  CHECK(f.get());
  lock.release(); // the completed wait held it again
  lock.acquire();
  CHECK_FALSE(cond.async_wait_for([] { return false; }, 20ms, asio::use_future).get());
  lock.release();
  CHECK_THROWS_AS(cond.async_wait(10ms, asio::use_future).get(), std::logic_error); // lock not held
}

TEST_CASE("cancelling an async acquire withdraws it: no permit is lost", "[sync][async]") {
  fiber::Lock lock;
  lock.acquire();
  SECTION("cancelled while waiting") {
    asio::io_context ioc;
    asio::cancellation_signal sig;
    std::exception_ptr err;
    bool done = false;
    lock.async_acquire(asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](std::exception_ptr e) {
                                                      err = e;
                                                      done = true;
                                                    })));
    asio::post(ioc, [&] { sig.emit(asio::cancellation_type::terminal); });
    ioc.run();
    REQUIRE(done);
    CHECK(is_aborted(err));
    lock.release();
    CHECK(lock.acquire(0ms)); // the withdrawn request did not take it
    lock.release();
  }
  SECTION("cancel racing a release: acquired exactly when not aborted") {
    for (int i = 0; i < 50; ++i) {
      asio::io_context ioc;
      asio::cancellation_signal sig;
      std::exception_ptr err;
      bool done = false;
      lock.async_acquire(asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](std::exception_ptr e) {
                                                        err = e;
                                                        done = true;
                                                      })));
      lock.release();
      asio::post(ioc, [&] { sig.emit(asio::cancellation_type::terminal); });
      ioc.run();
      REQUIRE(done);
      INFO("iteration " << i);
      if (err) {
        CHECK(is_aborted(err));
        CHECK(lock.acquire(0ms)); // free: take it for the next round
      } else {
        CHECK_FALSE(lock.acquire(0ms)); // ours: keep it for the next round
      }
    }
    lock.release();
  }
  SECTION("a Barrier wait cancelled breaks the barrier") {
    lock.release();
    fiber::Barrier bar{2};
    asio::io_context ioc;
    asio::cancellation_signal sig;
    std::exception_ptr err;
    bar.async_wait(asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](std::exception_ptr e,
                                                                                         std::size_t) { err = e; })));
    asio::post(ioc, [&] { sig.emit(asio::cancellation_type::terminal); });
    ioc.run();
    CHECK(is_aborted(err));
    CHECK(bar.broken());
  }
}

TEST_CASE("a blocking Event call on the runtime thread is a logic_error, not a deadlock", "[sync][async]") {
  fiber::Event ev;
  std::promise<std::string> what;
  ev.async_wait([&](std::exception_ptr) { what.set_value(logic_error_of([&] { (void)ev.is_set(); })); });
  ev.set();
  CHECK(what.get_future().get() == "logic_error");
}

// ---- the service's bookkeeping (white box: links 7 and 8 stand for two other processes) ----

TEST_CASE("permit service: a vanished link's waits are dropped; its lock waits for its process's death, then fences it",
          "[sync][service]") {
  namespace d = fiber::detail;
  auto& rt = d::runtime::instance();
  auto call = [&](auto& svc, std::uint64_t peer, std::uint32_t op, std::vector<std::byte> payload) {
    auto out = std::make_shared<std::vector<d::wait_tag>>();
    rt.sync([&] {
      svc->handle(peer, op, payload, [out](d::wire_status st, std::vector<std::byte> p) {
        out->push_back(st == d::wire_status::ok && !p.empty() ? d::wait_tag(std::to_integer<int>(p[0]))
                                                              : d::wait_tag(255));
      });
    });
    return out;
  };
  // Links 7 and 8 stand for two other processes, which no master knows;
  // link 9 is the first one's again after a reconnect.
  const d::peer_identity a{d::role::client, 0, 999991, "fencing-test-host", "a"};
  const d::peer_identity b{d::role::client, 0, 999992, "fencing-test-host", "b"};
  rt.sync([&] {
    rt.attach_link(7, a);
    rt.attach_link(8, b);
  });
  auto lock = std::make_shared<d::permit_service>(rt.executor(), d::permit_kind::lock, 1);
  auto acquire = [&](std::uint64_t peer, std::uint64_t wait) {
    return call(lock, peer, d::sync_op::acquire, d::sync_payload(wait, -1));
  };
  CHECK(*acquire(7, 1) == std::vector{d::wait_tag::done});
  auto dead_wait = acquire(7, 2); // 7 waits on itself (not re-entrant)
  auto live_wait = acquire(8, 1);
  CHECK(live_wait->empty());
  rt.sync([&] {
    lock->peer_gone(7);
    rt.detach_link(7);
  });
  CHECK(dead_wait->empty()); // never answered: nobody is there
  CHECK(live_wait->empty()); // a lost link is not a death: the lock stays a's
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(fiber_test::eventually([&] { return rt.sync([&] { return !live_wait->empty(); }); }));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(500)); // after the grace period
  CHECK(*live_wait == std::vector{d::wait_tag::done});
  // a comes back (judged dead, it was not): its release is refused, b keeps the lock.
  rt.sync([&] { rt.attach_link(9, a); });
  CHECK(*call(lock, 9, d::sync_op::release, d::sync_payload(5, -1)) == std::vector{d::wait_tag::revoked});
  CHECK(*call(lock, 8, d::sync_op::release, d::sync_payload(3, -1)) == std::vector{d::wait_tag::done});
  CHECK(*call(lock, 8, d::sync_op::release, d::sync_payload(4, -1)) == std::vector{d::wait_tag::misuse});
  // Granted again, a is no longer fenced.
  CHECK(*acquire(9, 6) == std::vector{d::wait_tag::done});
  CHECK(*call(lock, 9, d::sync_op::release, d::sync_payload(7, -1)) == std::vector{d::wait_tag::done});
  // An acquire whose grant was lost with its link is abandoned: the grant is given back.
  CHECK(*acquire(9, 8) == std::vector{d::wait_tag::done});
  CHECK(*call(lock, 9, d::sync_op::abandon, d::sync_payload(8, 0)) == std::vector{d::wait_tag::done});
  CHECK(*acquire(9, 8) == std::vector{d::wait_tag::cancelled}); // the abandoned request, arriving late
  CHECK(*acquire(8, 5) == std::vector{d::wait_tag::done});
  rt.sync([&] {
    rt.detach_link(8);
    rt.detach_link(9);
    lock->shutdown("test over");
  });
}
