// SPDX-License-Identifier: BSL-1.0
#include <fiber/pool.hpp>
#include <fiber/pipe.hpp>
#include <fiber/queue.hpp>
#include <fiber/stats.hpp>

#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <tuple>
#include <map>
#include <algorithm>
#include <csignal>
#include <fstream>
#include <future>
#include <numeric>
#include <optional>
#include <ranges>
#include <random>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "support.hpp"

using namespace std::chrono_literals; // also compiled alone (FIBER_TEST_UNITY=OFF)

namespace {

int square(int x) { return x * x; }
int add(int a, int b) { return a + b; }
double sleep_for(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return seconds;
}
int fail_on_three(int x) {
  if (x == 3) throw std::invalid_argument("three is not allowed");
  return x;
}
int getpid_task(int) { return int(::getpid()); }

// A slow start-up (a large binary, a slow static initializer) for the
// workers of the "[start]" case, whose master sets this in their environment.
[[maybe_unused]] const bool slow_start = [] {
  if (const char* ms = std::getenv("FIBER_TEST_SLOW_START_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  return true;
}();
void nothing(int) {}

// SIGKILLs its own worker the first time it sees a multiple of 10: a marker
// file (named by the input) records that it happened, so the rerun succeeds.
int die_once(std::pair<std::string, int> in) {
  auto [dir, x] = in;
  if (x % 10 == 0) {
    auto marker = dir + "/" + std::to_string(x);
    struct stat st {};
    if (::stat(marker.c_str(), &st) != 0) {
      std::ofstream(marker) << "died";
      ::kill(::getpid(), SIGKILL);
    }
  }
  return x * 2;
}

int always_die(int) {
  ::kill(::getpid(), SIGKILL);
  return 0;
}

// SIGKILLs its worker on 5, throws on 1.
int die_on_five(int x) {
  if (x == 5) ::kill(::getpid(), SIGKILL);
  if (x == 1) throw std::invalid_argument("one");
  return x * x;
}

int send_through(fiber::Connection<int> c) {
  c.send(42);
  return 7;
}

void put_square(fiber::Queue<int> q, int x) { q.put(x * x); }

struct scaler {
  static int twice(int x) { return 2 * x; }
};

fiber::process_info whoami(int) { return fiber::current_process(); }

int sqr_wait(int x, double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return x * x;
}
int sqr_pause(int x) { return sqr_wait(x, 0.02); }

int slow_square(int x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return x * x;
}

std::string temp_dir() {
  std::string t = "/tmp/fiber-test-XXXXXX";
  REQUIRE(::mkdtemp(t.data()));
  return t;
}

} // namespace

TEST_CASE("map keeps input order for chunksizes 1, 7, 1000 and automatic", "[pool]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  auto in = fiber_test::iota(2000);
  std::vector<int> want;
  for (int x : in) want.push_back(x * x);
  CHECK(pool.map(in) == want);
  CHECK(pool.map(in, 1) == want);
  CHECK(pool.map(in, 7) == want);
  CHECK(pool.map(in, 1000) == want);
  CHECK(pool.map(std::vector<int>{}).empty());
  // any input range, not only vectors
  auto r = pool.map(std::views::iota(0, 10) | std::views::transform([](int x) { return x + 1; }));
  CHECK(r == std::vector<int>{1, 4, 9, 16, 25, 36, 49, 64, 81, 100});
}

TEST_CASE("starmap, apply, apply_async", "[pool]") {
  fiber::Pool pool{fiber::target<&add>, {.processes = 2}};
  std::vector<std::tuple<int, int>> args{{1, 2}, {3, 4}, {5, 6}};
  CHECK(pool.starmap(args) == std::vector<int>{3, 7, 11});
  CHECK(pool.apply(20, 22) == 42);
  auto res = pool.apply_async(1, 1);
  res.wait();
  CHECK(res.ready());
  CHECK(res.get() == 2);
  CHECK(res.successful());
}

TEST_CASE("get(timeout) throws timeout_error when not ready", "[pool]") {
  fiber::Pool pool{fiber::target<&sleep_for>, {.processes = 1}};
  auto res = pool.apply_async(0.5);
  CHECK_THROWS_AS(res.get(std::chrono::milliseconds(20)), fiber::timeout_error);
  CHECK(res.get(std::chrono::seconds(30)) == 0.5);
}

TEST_CASE("a task that throws reaches the caller as remote_error; the worker survives", "[pool]") {
  fiber::Pool pool{fiber::target<&fail_on_three>, {.processes = 2}};
  try {
    pool.map(fiber_test::iota(6));
    FAIL("map should throw");
  } catch (const fiber::remote_error& e) {
    CHECK(e.type_name() == "std::invalid_argument");
    CHECK(e.message() == "three is not allowed");
  }
  CHECK_THROWS_AS(pool.apply(3), fiber::remote_error);
  CHECK(pool.apply(4) == 4);
  // imap_unordered: the other results still arrive
  std::multiset<int> got;
  int errors = 0;
  auto it = pool.imap_unordered(fiber_test::iota(6));
  for (auto i = it.begin();;) {
    try {
      if (i == it.end()) break;
      got.insert(*i);
      ++i;
    } catch (const fiber::remote_error&) {
      ++errors;
      ++i;
    }
  }
  CHECK(errors == 1);
  CHECK(got == std::multiset<int>{0, 1, 2, 4, 5});
}

TEST_CASE("4 tasks on 4 workers run at once (automatic chunksize batches, never serializes)", "[pool]") {
  fiber::Pool pool{fiber::target<&sleep_for>, {.processes = 4}};
  pool.map(std::vector<double>{0.01, 0.01, 0.01, 0.01}); // all workers up
  auto t0 = std::chrono::steady_clock::now();
  auto r = pool.map(std::vector<double>{0.3, 0.1, 0.2, 0.4});
  auto dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r == std::vector<double>{0.3, 0.1, 0.2, 0.4});
  CHECK(dt < 0.8);
}

TEST_CASE("imap is lazy and ordered; imap_unordered yields everything", "[pool]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  // An input range that blocks after its first 5 items until released.
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> produced{0};
  auto gen = std::views::iota(0, 10) | std::views::transform([&](int x) {
               if (x == 5) {
                 std::unique_lock lk(m);
                 cv.wait(lk, [&] { return release; });
               }
               ++produced;
               return x;
             });
  {
    auto results = pool.imap(gen);
    std::vector<int> first;
    auto it = results.begin();
    first.push_back(*it);
    for (int i = 1; i < 5; ++i) first.push_back(*++it);
    CHECK(first == std::vector<int>{0, 1, 4, 9, 16});
    CHECK(produced.load() == 5); // the input was not materialized
    {
      std::lock_guard lk(m);
      release = true;
    }
    cv.notify_all();
    std::vector<int> rest;
    for (++it; it != results.end(); ++it) rest.push_back(*it);
    CHECK(rest == std::vector<int>{25, 36, 49, 64, 81});
  }
  std::multiset<int> un;
  for (int v : pool.imap_unordered(fiber_test::iota(50), 3)) un.insert(v);
  std::multiset<int> want;
  for (int x : fiber_test::iota(50)) want.insert(x * x);
  CHECK(un == want);
}

// --- initializer, maxtasksperchild (issue 21) ---------------------------------

std::string g_init_tag; // set by the initializer in each worker; empty in the master
void set_tag(std::string tag, int times) {
  for (int i = 0; i < times; ++i) g_init_tag += tag;
}
std::string tag_of_worker(int) { return g_init_tag; }
void failing_setup(int) { throw std::runtime_error("cannot open the environment"); }
// Records each worker's start: one line per initializer run, O_APPEND so that
// lines from several workers never interleave.
void count_start(std::string file) {
  std::FILE* f = std::fopen(file.c_str(), "a");
  if (!f) throw std::runtime_error("cannot open " + file);
  std::fprintf(f, "%d\n", int(::getpid()));
  std::fclose(f);
}

TEST_CASE("an initializer runs once in every worker before its first task, also in replacements",
          "[pool][initializer]") {
  fiber::Pool pool{fiber::target<&tag_of_worker>, {.processes = 2}, fiber::target<&set_tag>, std::string("ab"), 2};
  auto tags = pool.map(fiber_test::iota(20));
  CHECK(std::all_of(tags.begin(), tags.end(), [](auto& t) { return t == "abab"; }));
  // A replacement of a killed worker, and a worker added by resize, run it too.
  auto pids = pool.worker_pids();
  REQUIRE(!pids.empty());
  ::kill(pid_t(pids.front()), SIGKILL);
  pool.resize(3);
  auto again = pool.map(fiber_test::iota(60), 1);
  CHECK(std::all_of(again.begin(), again.end(), [](auto& t) { return t == "abab"; }));
  CHECK(g_init_tag.empty()); // never in the master
}

TEST_CASE("an initializer that always throws fails the Pool's calls with worker_lost naming its error",
          "[pool][initializer]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 1}, fiber::target<&failing_setup>, 0};
  try {
    (void)pool.map(fiber_test::iota(4));
    FAIL("map returned although no worker can initialize");
  } catch (const fiber::worker_lost& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot open the environment"));
    CHECK_THAT(e.what(), Catch::Contains("initializer"));
  }
}

TEST_CASE("maxtasksperchild = 1: every task in a fresh worker, no task lost", "[pool][maxtasks]") {
  char tmpl[] = "/tmp/fiber-maxtasks-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  const std::string starts = std::string(tmpl) + "/starts";
  const int n = 200;
  {
    fiber::Pool pool{
        fiber::target<&getpid_task>, {.processes = 4, .maxtasksperchild = 1}, fiber::target<&count_start>, starts};
    auto pids = pool.map(fiber_test::iota(n));
    CHECK(pids.size() == std::size_t(n));
    // A worker never runs a second task: every task's pid is one start.
    std::ifstream in(starts);
    std::vector<int> started;
    for (int p; in >> p;) started.push_back(p);
    CHECK(started.size() >= std::size_t(n));
    std::map<int, int> runs;
    for (auto p : pids) ++runs[p];
    for (auto& [p, k] : runs) CHECK(k <= std::count(started.begin(), started.end(), p));
  }
  std::remove(starts.c_str());
  ::rmdir(tmpl);
}

TEST_CASE("map_async, starmap_async and async_starmap; a callback token runs on fiber's runtime thread",
          "[pool][async]") {
  fiber::Pool squares{fiber::target<&square>, {.processes = 2}};
  auto res = squares.map_async(std::vector{1, 2, 3});
  CHECK(res.get() == std::vector<int>{1, 4, 9});
  CHECK(res.ready());
  CHECK(res.successful());

  fiber::Pool adds{fiber::target<&add>, {.processes = 2}};
  std::vector<std::tuple<int, int>> pairs{{1, 2}, {3, 4}};
  auto sres = adds.starmap_async(pairs);
  CHECK(sres.get(std::chrono::seconds(30)) == std::vector<int>{3, 7});
  auto fut = adds.async_starmap(pairs, asio::use_future);
  CHECK(fut.get() == std::vector<int>{3, 7});

  fiber::Pool failing{fiber::target<&fail_on_three>, {.processes = 1}};
  auto bad = failing.map_async(std::vector{1, 3});
  bad.wait();
  CHECK_FALSE(bad.successful());
  CHECK_THROWS_AS(bad.get(), fiber::remote_error);

  std::promise<std::pair<int, bool>> got;
  squares.async_apply(7, [&got](std::exception_ptr e, int r) {
    got.set_value({e ? -1 : r, fiber::detail::runtime::instance().on_runtime_thread()});
  });
  auto [value, on_runtime] = got.get_future().get();
  CHECK(value == 49);
  CHECK(on_runtime);
}

// CPython's test_imap_handle_iterable_exception: a generator that fails at
// item 3. Before the fix the feeder thread let the exception escape and the
// whole program died (std::terminate).
TEST_CASE("imap over an input range that throws: earlier results, then the exception at its place", "[pool][imap]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  auto failing = [] {
    return std::views::iota(0, 10) | std::views::transform([](int x) {
             if (x == 3) throw std::runtime_error("input fails at 3");
             return x;
           });
  };
  SECTION("ordered") {
    std::vector<int> got;
    auto results = pool.imap(failing());
    auto it = results.begin();
    CHECK_THROWS_WITH(
        [&] {
          for (; it != results.end(); ++it) got.push_back(*it);
        }(),
        "input fails at 3");
    CHECK(got == std::vector<int>{0, 1, 4});
  }
  SECTION("unordered, chunks of 2") {
    std::multiset<int> got;
    auto results = pool.imap_unordered(failing(), 2);
    CHECK_THROWS_WITH(
        [&] {
          for (int v : results) got.insert(v);
        }(),
        "input fails at 3");
    CHECK(got == std::multiset<int>{0, 1, 4});
  }
  SECTION("map rethrows to its caller") { CHECK_THROWS_WITH(pool.map(failing()), "input fails at 3"); }
  // The Pool stays usable.
  CHECK(pool.map(std::vector{5, 6}) == std::vector<int>{25, 36});
}

TEST_CASE("an imap range that outlives its Pool ends with a clear error, never undefined behaviour", "[pool][imap]") {
  std::optional<fiber::Pool<&square>> pool;
  pool.emplace(fiber::target<&square>, fiber::pool_options{.processes = 1});
  auto results = pool->imap(std::views::iota(0, 1000), 10);
  auto it = results.begin();
  CHECK(*it == 0);
  pool.reset(); // terminates: what was not computed yet can no longer be
  bool ended_with_error = false;
  int later = 0;
  for (int i = 0; i < 2000; ++i) { // bounded: every item at most once, then the end
    try {
      if (++it == results.end()) break;
      ++later;
    } catch (const fiber::error& e) {
      CHECK(std::string(e.what()).find("terminated") != std::string::npos);
      ended_with_error = true;
    }
  }
  CHECK(ended_with_error);
  CHECK(later < 999);
  fiber_test::require_no_children();
}

TEST_CASE("a target that SIGKILLs its worker: results complete, in order, exactly once", "[pool][resilience]") {
  auto dir = temp_dir();
  fiber::Pool pool{fiber::target<&die_once>, {.processes = 2, .chunksize = 4}};
  std::vector<std::pair<std::string, int>> in;
  for (int i = 0; i < 100; ++i) in.push_back({dir, i});
  auto r = pool.map(in);
  REQUIRE(r.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(r[std::size_t(i)] == 2 * i);
  std::filesystem::remove_all(dir);
}

TEST_CASE("random SIGKILL of workers during a 10,000-task map", "[pool][resilience]") {
  fiber::Pool pool{fiber::target<&slow_square>, {.processes = 2, .chunksize = 10, .max_retries = 1000}};
  std::atomic<bool> done{false};
  std::atomic<int> kills{0};
  std::thread killer([&] {
    std::mt19937 rng(42);
    while (!done) {
      auto pids = pool.worker_pids();
      if (!pids.empty()) {
        ::kill(pid_t(pids[rng() % pids.size()]), SIGKILL);
        ++kills;
      }
      // pacing of an external fault injector, not synchronization
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto in = fiber_test::iota(10000);
  auto r = pool.map(in);
  done = true;
  killer.join();
  REQUIRE(r.size() == 10000);
  bool all = true;
  for (int i = 0; i < 10000; ++i) all = all && r[std::size_t(i)] == i * i;
  CHECK(all);
  CHECK(kills.load() > 0);
}

TEST_CASE("max_retries exhausted gives worker_lost", "[pool][resilience]") {
  fiber::Pool pool{fiber::target<&always_die>, {.processes = 1, .max_retries = 2}};
  CHECK_THROWS_AS(pool.apply(1), fiber::worker_lost);
}

TEST_CASE("a chunk whose worker dies is rerun task by task: only the task that kills it fails, in its place",
          "[pool][resilience]") {
  fiber::Pool pool{fiber::target<&die_on_five>, {.processes = 1, .max_retries = 0}};
  // Chunks of 3: {0 1 2} {3 4 5} {6 7 8} {9 10 11}; 5 kills the worker, 1 throws.
  // With max_retries 0 the chunk {3 4 5} is split, not failed: 3 and 4 deliver.
  SECTION("imap: the iteration goes on after each failure, every result in its place") {
    std::vector<std::string> got;
    auto results = pool.imap(fiber_test::iota(12), 3);
    auto it = results.begin(); // 0: its chunk holds 1, which throws later
    got.push_back(std::to_string(*it));
    for (;;) {
      try {
        ++it;
        if (it == results.end()) break;
        got.push_back(std::to_string(*it));
      } catch (const fiber::worker_lost& e) {
        got.push_back("lost");
        CHECK_THAT(e.what(), Catch::Contains("died 1 times (max_retries 0)"));
      } catch (const fiber::remote_error&) {
        got.push_back("threw");
      }
    }
    CHECK(got == std::vector<std::string>{"0", "threw", "4", "9", "16", "lost", "36", "49", "64", "81", "100", "121"});
  }
  SECTION("imap_unordered: every task is accounted for once") {
    std::multiset<int> values;
    int lost = 0, threw = 0;
    auto results = pool.imap_unordered(fiber_test::iota(12), 3);
    decltype(results.begin()) it; // begin() may itself throw: it reads the first result
    for (bool started = false;;) {
      try {
        if (!started) {
          started = true;
          it = results.begin();
        } else {
          ++it;
        }
        if (it == results.end()) break;
        values.insert(*it);
      } catch (const fiber::worker_lost&) {
        ++lost;
      } catch (const fiber::remote_error&) {
        ++threw;
      }
    }
    CHECK(lost == 1);
    CHECK(threw == 1);
    CHECK(values == std::multiset<int>{0, 4, 9, 16, 36, 49, 64, 81, 100, 121});
  }
  SECTION("map raises the first failure in input order: the remote_error of 1, not the lost chunk") {
    CHECK_THROWS_AS(pool.map(fiber_test::iota(12), 3), fiber::remote_error);
    auto later = fiber_test::iota(12);
    later.erase(later.begin() + 1); // without 1: the lost chunk is the first failure
    CHECK_THROWS_AS(pool.map(later, 3), fiber::worker_lost);
  }
}

TEST_CASE("a Queue or a Connection end passed to a Pool task works there; a moved end leaves the caller", "[pool]") {
  SECTION("Connection") {
    auto [a, b] = fiber::Pipe<int>();
    fiber::Pool pool{fiber::target<&send_through>, {.processes = 1}};
    CHECK(pool.apply(std::move(b)) == 7);
    REQUIRE(b.closed()); // else the caller still holds the end and a never sees EOF
    CHECK(a.recv() == 42);
    CHECK_THROWS_AS(a.recv(), fiber::eof_error); // the task's end was the last holder
  }
  SECTION("Queue") {
    fiber::Queue<int> q;
    fiber::Pool pool{fiber::target<&put_square>, {.processes = 2}};
    pool.starmap(std::vector<std::tuple<fiber::Queue<int>, int>>{{q, 3}, {q, 4}});
    std::multiset<int> got{q.get(), q.get()};
    CHECK(got == std::multiset<int>{9, 16});
  }
}

TEST_CASE("a static member function is a target; current_process() in a worker names it", "[pool]") {
  fiber::Pool twice{fiber::target<&scaler::twice>, {.processes = 1}};
  CHECK(twice.apply(21) == 42);
  fiber::Pool who{fiber::target<&whoami>, {.processes = 1, .name = "who"}};
  const fiber::process_info p = who.apply(0);
  CHECK(p.is_worker);
  CHECK(p.name.rfind("who-w", 0) == 0);
  CHECK(p.pid != ::getpid());
  CHECK(who.worker_pids() == std::vector<std::int64_t>{p.pid});
  const auto me = fiber::current_process();
  CHECK_FALSE(me.is_worker);
  CHECK(me.pid == ::getpid());
}

TEST_CASE("resize up and down while a map runs", "[pool]") {
  fiber::Pool pool{fiber::target<&slow_square>, {.processes = 1, .chunksize = 5}};
  auto fut = std::async(std::launch::async, [&] { return pool.map(fiber_test::iota(1500)); });
  pool.resize(3);
  CHECK(pool.processes() == 3);
  pool.resize(1);
  auto r = fut.get();
  REQUIRE(r.size() == 1500);
  CHECK(r[1499] == 1499 * 1499);
  pool.resize(2);
  CHECK(pool.map(fiber_test::iota(10)).size() == 10);
}

TEST_CASE("submit after close is a logic_error; join waits for workers", "[pool]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  CHECK(pool.apply(3) == 9);
  pool.close();
  CHECK_THROWS_AS(pool.map(fiber_test::iota(3)), std::logic_error);
  CHECK_THROWS_AS(pool.apply(1), std::logic_error);
  pool.join();
  fiber_test::require_no_children();
}

// Python's Pool contract (CPython test_pool_worker_lifetime_early_close):
// close() stops submissions; join() returns once every task already
// submitted has its result and the workers have exited. Right after
// construction the workers are still starting: nothing may be dropped.
TEST_CASE("close + join right after construction delivers every task (apply_async, map_async, imap)", "[pool][close]") {
  const unsigned processes = GENERATE(1u, 3u, 16u);
  const unsigned maxtasks = GENERATE(0u, 1u);
  CAPTURE(processes, maxtasks);
  fiber::Pool pool{fiber::target<&sqr_pause>, {.processes = processes, .maxtasksperchild = maxtasks}};
  // imap's feeder stays this far ahead of its consumer; read past it.
  const int window = int(processes) * 4 + 2, n_imap = 2 * window + 3;
  std::vector<fiber::async_result<int>> applied;
  for (int i = 0; i < 6; ++i) applied.push_back(pool.apply_async(i));
  auto mapped = pool.map_async(fiber_test::iota(6));
  auto lazy = pool.imap(fiber_test::iota(n_imap));
  pool.close();
  pool.join();
  for (int i = 0; i < 6; ++i) {
    REQUIRE(applied[std::size_t(i)].ready());
    CHECK(applied[std::size_t(i)].get() == i * i);
  }
  REQUIRE(mapped.ready());
  CHECK(mapped.get() == std::vector<int>{0, 1, 4, 9, 16, 25});
  int k = 0;
  for (int v : lazy) {
    CHECK(v == k * k);
    ++k;
  }
  CHECK(k == n_imap);
  fiber_test::require_no_children();
}

TEST_CASE("close + join while workers die, retire and start: every task delivered once", "[pool][close]") {
  const auto dir = temp_dir();
  fiber::Pool pool{fiber::target<&die_once>, {.processes = 2, .maxtasksperchild = 2}};
  std::vector<fiber::async_result<int>> rs;
  for (int i = 0; i < 30; ++i) rs.push_back(pool.apply_async(std::pair{dir, i}));
  pool.close();
  pool.resize(3); // a closing Pool with work left may still grow
  pool.join();
  for (int i = 0; i < 30; ++i) {
    REQUIRE(rs[std::size_t(i)].ready());
    CHECK(rs[std::size_t(i)].get() == 2 * i);
  }
  fiber_test::require_no_children();
  std::filesystem::remove_all(dir);
}

TEST_CASE("terminate right after submitting: every pending result is an error, none stays pending", "[pool][close]") {
  fiber::Pool pool{fiber::target<&sqr_wait>, {.processes = 3}};
  std::vector<fiber::async_result<int>> rs;
  for (int i = 0; i < 6; ++i) rs.push_back(pool.apply_async(i, 5.0));
  auto mapped = pool.starmap_async(std::vector<std::tuple<int, double>>{{1, 5.0}, {2, 5.0}});
  pool.terminate();
  pool.join();
  for (auto& r : rs) {
    REQUIRE(r.ready());
    CHECK_THROWS_AS(r.get(), fiber::error);
  }
  REQUIRE(mapped.ready());
  CHECK_THROWS_AS(mapped.get(), fiber::error);
  fiber_test::require_no_children();
}

TEST_CASE("terminate leaves no process behind", "[pool]") {
  std::vector<std::int64_t> pids;
  {
    fiber::Pool pool{fiber::target<&sleep_for>, {.processes = 3}};
    auto res = pool.apply_async(30.0);
    while (pool.live_workers() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pids = pool.worker_pids();
    pool.terminate();
    CHECK_THROWS_AS(res.get(), fiber::error);
  }
  for (auto p : pids) CHECK(fiber_test::process_gone(p));
  fiber_test::require_no_children();
}

TEST_CASE("async_apply and async_map take completion tokens", "[pool][asio]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  auto fut = pool.async_apply(7, asio::use_future);
  CHECK(fut.get() == 49);

  asio::io_context ctx;
  int got = 0;
  std::vector<int> all;
  asio::co_spawn(
      ctx,
      [&]() -> asio::awaitable<void> {
        got = co_await pool.async_apply(9, asio::use_awaitable);
        all = co_await pool.async_map(fiber_test::iota(5), asio::use_awaitable);
      },
      asio::detached);
  ctx.run();
  CHECK(got == 81);
  CHECK(all == std::vector<int>{0, 1, 4, 9, 16});

  // A plain callback runs on fiber's runtime thread: hand the result over.
  std::promise<std::pair<std::exception_ptr, int>> handed;
  pool.async_apply(2, [&](std::exception_ptr e, int v) { handed.set_value({e, v}); });
  auto [err, v] = handed.get_future().get();
  CHECK_FALSE(err);
  CHECK(v == 4);
}

TEST_CASE("progress callback sees every item", "[pool]") {
  std::atomic<std::size_t> last{0}, total{0};
  fiber::Pool pool{fiber::target<&nothing>,
                   {.processes = 2, .chunksize = 10, .progress = [&](std::size_t d, std::size_t t) {
                      last = d;
                      total = t;
                    }}};
  pool.map(fiber_test::iota(100));
  CHECK(last.load() == 100);
  CHECK(total.load() == 100);
  // imap submits chunk by chunk: each chunk's items are counted once
  std::size_t seen = 0;
  for ([[maybe_unused]] auto& v : pool.imap(fiber_test::iota(50), 5)) ++seen;
  CHECK(seen == 50);
  CHECK(last.load() == 50);
}

TEST_CASE("work starts with the first worker; the pool default is cpu_count", "[pool]") {
  fiber::Pool pool{fiber::target<&getpid_task>};
  CHECK(pool.processes() == fiber::cpu_count());
  auto pids = pool.map(fiber_test::iota(20));
  std::set<int> distinct(pids.begin(), pids.end());
  CHECK_FALSE(distinct.count(::getpid()));
  CHECK(distinct.size() >= 1);
}

TEST_CASE("an idle worker keeps to the master's stretched heartbeat period", "[pool][heartbeat]") {
  // A master holding many links announces a period longer than the configured
  // one (heartbeat_period). A worker must adopt it from the heartbeats its
  // main thread reads while waiting for work: otherwise it counts the master
  // silent after its own 400 ms and leaves, and the pool replaces it.
  fiber_test::config_scope cfg{{"heartbeat_interval_ms", "50"}, {"heartbeat_timeout_ms", "400"}};
  constexpr std::size_t extra_links = 1950; // the master's period: about 2 s
  fiber::detail::open_links() += extra_links;
  struct links_back {
    ~links_back() { fiber::detail::open_links() -= extra_links; }
  } put_back;
  {
    fiber::Pool pool{fiber::target<&getpid_task>, {.processes = 1}};
    auto before = pool.map(fiber_test::iota(4));
    // Idle across several of the master's periods: the time is the subject
    // here, not a wait for something to happen.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    auto after = pool.map(fiber_test::iota(4));
    CHECK(std::set<int>(after.begin(), after.end()) == std::set<int>(before.begin(), before.end()));
  }
}

TEST_CASE("slow-starting local workers start at most a handshake window at a time", "[pool][start]") {
  // None of them connects for 1.5 s. Before, the Pool started two more every
  // 20 ms without a connection, so a large Pool on a loaded host started all
  // its workers at once, and they took the cores from the master and from
  // each other (at 2,048 workers on 2 CPUs, a host's relay was starved
  // until its master ended it).
  constexpr unsigned n = 100;
  fiber_test::require_no_children();               // every child counted below is this Pool's
  ::setenv("FIBER_TEST_SLOW_START_MS", "1500", 1); // before the Pool: no spawn runs yet
  struct unset_env {
    ~unset_env() { ::unsetenv("FIBER_TEST_SLOW_START_MS"); } // after the Pool and its spawns, even on a throw
  } unset;
  std::size_t most = 0;
  {
    fiber::Pool pool{fiber::target<&getpid_task>, {.processes = n}};
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1200)) {
      const auto alive = fiber_test::children().size();
      if (pool.live_workers() == 0) most = std::max(most, alive); // none connected: all are starting
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // sampling interval
    }
    CHECK(pool.map(fiber_test::iota(2 * int(n))).size() == 2 * n);
  }
  CHECK(most >= 2);
  CHECK(most <= fiber::detail::max_pending_handshakes);
}

namespace {
// This process's snapshot of the Pool named `name`.
fiber::pool_stats pool_snapshot(const std::string& name) {
  for (auto& p : fiber::stats().pools)
    if (p.name == name) return p;
  FAIL("no Pool named " << name << " in fiber::stats()");
  return {};
}

std::uint64_t sum(const std::map<std::string, std::uint64_t>& m) {
  std::uint64_t n = 0;
  for (auto& [k, v] : m) n += v;
  return n;
}
} // namespace

TEST_CASE("fiber::stats counts a map's tasks through worker deaths: every task once, reruns with their cause",
          "[pool][stats]") {
  const auto known = std::set<std::string>{"oom_killed", "node_lost", "heartbeat_missed",
                                           "killed",     "exited",    "link_lost"};
  {
    // Chunks of 3 on one worker, max_retries 0: 5 kills its worker twice
    // (in its chunk, then alone after the split) and fails; 1 throws, which
    // is a task done (its exception is its result).
    fiber::Pool pool{fiber::target<&die_on_five>, {.processes = 1, .max_retries = 0, .name = "stats-deaths"}};
    CHECK_THROWS_AS(pool.map(fiber_test::iota(12), 3), fiber::remote_error);
    auto p = pool_snapshot("stats-deaths");
    CHECK(p.backend == "local");
    CHECK(p.processes == 1);
    CHECK(p.tasks.submitted == 12);
    CHECK(p.tasks.done == 11);
    CHECK(p.tasks.failed == 1);
    CHECK(p.tasks.queued == 0);
    CHECK(p.tasks.running == 0);
    CHECK(p.chunks_queued == 0);
    CHECK(p.chunks_running == 0);
    REQUIRE(p.tasks.failed_by_cause.size() == 1);
    CHECK(p.tasks.failed_by_cause.begin()->first == "killed");
    // {3 4 5} is split and sent again (3 tasks), then whatever the worker
    // held behind 5 each time.
    CHECK(p.tasks.rerun >= 4);
    CHECK(sum(p.tasks.rerun_by_cause) == p.tasks.rerun);
    for (auto& [cause, n] : p.tasks.rerun_by_cause) CHECK(known.contains(cause));
    CHECK(p.workers_lost == 2);
    CHECK(p.workers_started >= 3);
    unsigned states = 0;
    for (auto& [s, n] : p.workers_by_state) states += n;
    CHECK(states == p.workers.size());
    CHECK(p.workers_by_state.size() == 6);
    // Four chunks of 3 were submitted (the splits after a death are not submissions).
    CHECK(p.chunk_sizes == std::map<std::uint64_t, std::uint64_t>{{4, 4}});
    // Each loss as the Pool saw it, oldest first.
    REQUIRE(fiber_test::eventually([&] { return pool_snapshot("stats-deaths").recent_losses.size() == 2; }, 30s));
    p = pool_snapshot("stats-deaths");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    for (const auto& l : p.recent_losses) {
      CHECK(l.cause == "killed");
      CHECK(l.host == host);
      CHECK(l.worker.starts_with("stats-deaths-w"));
      CHECK(l.tasks >= 1);
      CHECK(l.reason.find("signal 9") != std::string::npos);
    }
    CHECK(p.recent_losses[0].time <= p.recent_losses[1].time);
    CHECK(p.recent_losses[0].worker != p.recent_losses[1].worker);
    CHECK(p.bytes_sent > 0); // the links of workers gone still count
    CHECK(p.bytes_received > 0);
  }
  // A Pool once destroyed is gone from the snapshot.
  for (auto& p : fiber::stats().pools) CHECK(p.name != "stats-deaths");
}

TEST_CASE("fiber::stats during a map: submitted = done + failed + queued + running; workers by state and host",
          "[pool][stats]") {
  fiber::Pool pool{fiber::target<&sqr_pause>, {.processes = 2, .name = "stats-running"}};
  auto results = pool.imap(fiber_test::iota(40), 1);
  auto it = results.begin(); // one result in: the workers are connected and busy
  CHECK(*it == 0);
  auto p = pool_snapshot("stats-running");
  CHECK(p.tasks.submitted == p.tasks.done + p.tasks.failed + p.tasks.queued + p.tasks.running);
  CHECK(p.tasks.done >= 1);
  CHECK(p.tasks.failed == 0);
  CHECK(p.tasks.rerun == 0);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  unsigned connected = 0;
  for (auto& w : p.workers)
    if (w.state != fiber::worker_state::starting) {
      ++connected;
      CHECK(w.host == host);
    }
  CHECK(connected >= 1);
  CHECK(p.workers_by_host[host] == connected);
  std::uint64_t held = 0;
  for (auto& w : p.workers) held += w.tasks_held;
  CHECK(held == p.tasks.running);
  // The local backend's jobs: at least this Pool's connected workers run.
  unsigned running = 0;
  for (auto& b : fiber::stats().backends)
    if (b.name == "local" && b.jobs_by_state.contains("running")) running = b.jobs_by_state.at("running");
  CHECK(running >= connected);
  int n = 1;
  for (++it; it != results.end(); ++it) ++n;
  CHECK(n == 40);
  auto q = pool_snapshot("stats-running");
  CHECK(q.chunk_sizes == std::map<std::uint64_t, std::uint64_t>{{1, 40}});
  for (auto& w : q.workers) {
    CHECK(w.bytes_sent > 0); // 40 tasks went out and their results came back
    CHECK(w.bytes_received > 0);
  }
  CHECK(q.bytes_sent >= q.workers[0].bytes_sent + q.workers[1].bytes_sent);
  CHECK(q.tasks.done == 40);
  CHECK(q.tasks.submitted == 40);
  CHECK(q.tasks.running + q.tasks.queued == 0);
  CHECK(q.workers_by_state[fiber::worker_state::busy] == 0);
  // The master pings each worker link in a heartbeat at its first tick, then
  // every 16 periods; the echo comes in the worker's next heartbeat.
  CHECK(fiber_test::eventually(
      [] {
        auto r = pool_snapshot("stats-running");
        return std::ranges::all_of(r.workers,
                                   [](auto& w) { return w.round_trip_seconds > 0 && w.round_trip_seconds < 1; });
      },
      10s));
}
