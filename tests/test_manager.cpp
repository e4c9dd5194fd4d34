// SPDX-License-Identifier: BSL-1.0
#include <fiber/manager.hpp>
#include <fiber/pool.hpp>
#include <fiber/stats.hpp>

#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <map>
#include <future>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "support.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// The test object: records what it was sent, reports where it lives.
struct Recorder {
  Recorder() { ++alive; }
  explicit Recorder(std::string name) : name_(std::move(name)) { ++alive; }
  Recorder(std::string name, int start) : name_(std::move(name)), seen_{start} { ++alive; }
  ~Recorder() { --alive; }

  void push(int x) { seen_.push_back(x); }
  std::vector<int> seen() const { return seen_; } // const method
  std::string name() const { return name_; }
  std::int64_t pid() const { return ::getpid(); }
  double slow(double s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(s)); // creates overlap, not synchronization
    return s;
  }
  int fail(std::string msg) { throw std::invalid_argument(msg); }
  int alive_now() const { return alive.load(); } // Recorders alive in this process
  void reset() { seen_.clear(); }                // void result
  int policy() const { return ::sched_getscheduler(0); }
  // Arrives, then waits at most `s` seconds until `n` calls of meet have
  // arrived in this process; true if they did.
  bool meet(int n, double s) {
    std::unique_lock lk(meet_m);
    ++arrived;
    meet_cv.notify_all();
    return meet_cv.wait_for(lk, std::chrono::duration<double>(s), [&] { return arrived >= n; });
  }
  bool on_main_thread() const { return ::gettid() == ::getpid(); }
  // Writes one byte into the FIFO at `path` (the test reads it).
  void touch(std::string path) {
    if (auto* f = std::fopen(path.c_str(), "w")) std::fputc('x', f), std::fclose(f);
  }

  // Sockets of this process that a program it starts would inherit.
  int inheritable_sockets() const {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      while (auto* e = ::readdir(d)) {
        const int fd = std::atoi(e->d_name);
        struct stat st {};
        if (e->d_name[0] != '.' && fd != ::dirfd(d) && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
            !(::fcntl(fd, F_GETFD) & FD_CLOEXEC))
          ++n;
      }
      ::closedir(d);
    }
    return n;
  }

  // Writes bytes that are no reply on this process's reply line (false: it has none).
  bool garble_reply_line() const {
    const int fd = fiber::detail::worker_environment().reply_fd;
    const unsigned char junk[] = {5, 0, 0, 0, 'x', 'x', 'x', 'x', 'x'}; // a frame of 5 bytes of kind 'x'
    return fd >= 0 && ::write(fd, junk, sizeof junk) == ssize_t(sizeof junk);
  }

  // Writes a frame whose tag is wrong on the reply line this process dialled
  // (its newest TCP socket to its master); false if it has none.
  bool garble_dialled_line() const {
    const auto& master = fiber::detail::worker_environment().master;
    const auto port = std::uint16_t(std::stoul(master.substr(master.rfind(':') + 1)));
    int line = -1;
    for (int fd = 3; fd < 1024; ++fd) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0 && peer.sin_family == AF_INET &&
          ntohs(peer.sin_port) == port)
        line = fd;
    }
    if (line < 0 || !fiber::detail::reply_line_writer::instance().has_line()) return false;
    unsigned char junk[4 + 17] = {17, 0, 0, 0, 'x'}; // a frame of 1 byte and a tag of zeros
    return ::send(line, junk, sizeof junk, MSG_NOSIGNAL) == ssize_t(sizeof junk);
  }
  std::uint64_t worker_id() const { return fiber::detail::worker_environment().worker_id; }

  static inline std::atomic<int> alive{0};
  static inline std::mutex meet_m;
  static inline std::condition_variable meet_cv;
  static inline int arrived = 0;

  std::string name_;
  std::vector<int> seen_;
};
BOOST_DESCRIBE_STRUCT(Recorder, (),
                      (push, seen, name, pid, slow, fail, alive_now, reset, policy, meet, touch, on_main_thread,
                       inheritable_sockets, garble_reply_line, garble_dialled_line, worker_id))

/// Throws from its constructor when asked to.
struct Fragile {
  explicit Fragile(bool ok) {
    if (!ok) throw std::runtime_error("cannot build");
  }
  int one() const { return 1; }
};
BOOST_DESCRIBE_STRUCT(Fragile, (), (one))

/// Inherited and virtual described methods.
struct Base {
  virtual ~Base() = default;
  virtual std::string who() const { return "base"; }
  int base_only() const { return 7; }
};
BOOST_DESCRIBE_STRUCT(Base, (), (who, base_only))
struct Derived : Base {
  std::string who() const override { return "derived"; }
};
BOOST_DESCRIBE_STRUCT(Derived, (Base), (who))

// ---- Pool tasks that receive a handle -----------------------------------------

std::int64_t push_from_task(fiber::Remote<Recorder> r, int x) {
  r.call<&Recorder::push>(x);
  return ::getpid();
}

// Sends 20 calls without waiting, then reads: its own values must be in order.
bool ordered_from_task(fiber::Remote<Recorder> r, int base) {
  for (int i = 0; i < 20; ++i) r.call_async<&Recorder::push>(base + i);
  std::vector<int> mine;
  for (int x : r.call<&Recorder::seen>())
    if (x >= base && x < base + 20) mine.push_back(x - base);
  return mine == fiber_test::iota(20);
}

using Dict = fiber::shared::dict<int, int>;
using List = fiber::shared::list<std::string>;

int put_square_in_dict(fiber::Remote<Dict> d, int x) {
  d.call<&Dict::set>(x, x * x);
  return int(::getpid());
}

int append_word(fiber::Remote<List> l, std::string w) {
  l.call<&List::append>(w);
  return 0;
}

} // namespace

TEST_CASE("an object lives in a manager process; make forwards constructor arguments", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto r = m.make("alpha", 7);
  REQUIRE(r);
  auto pid = r.call<&Recorder::pid>();
  CHECK(pid != ::getpid());
  CHECK(m.pids() == std::vector<std::int64_t>{pid});
  CHECK(r.call<&Recorder::name>() == "alpha");
  CHECK(r.call<&Recorder::seen>() == std::vector<int>{7});
  r.call<&Recorder::reset>(); // void
  CHECK(r.call<&Recorder::seen>().empty());
  auto plain = m.make();
  CHECK(plain.call<&Recorder::name>().empty());
  CHECK(m.objects() == 2);
}

TEST_CASE("methods run with the user's scheduling policy, not the I/O threads' SCHED_BATCH", "[manager][sched]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto r = m.make("p");
  CHECK(r.call<&Recorder::policy>() == SCHED_OTHER);
}

TEST_CASE("50 async calls on one object run in the order they were made", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 2}};
  auto r = m.make();
  std::vector<fiber::remote_result<void>> hs;
  for (int i = 0; i < 50; ++i) hs.push_back(r.call_async<&Recorder::push>(i));
  for (auto& h : hs) h.get();
  CHECK(r.call<&Recorder::seen>() == fiber_test::iota(50));

  // Two threads calling one object: each thread's calls keep their order.
  r.call<&Recorder::reset>();
  auto worker = [&](int base) {
    for (int i = 0; i < 50; ++i) r.call_async<&Recorder::push>(base + i);
  };
  std::thread a(worker, 0), b(worker, 1000);
  a.join();
  b.join();
  auto seen = r.call<&Recorder::seen>(); // queued after both threads' calls
  REQUIRE(seen.size() == 100);
  std::vector<int> from_a, from_b;
  for (int x : seen) (x < 1000 ? from_a : from_b).push_back(x);
  CHECK(from_a == fiber_test::iota(50));
  for (auto& x : from_b) x -= 1000;
  CHECK(from_b == fiber_test::iota(50));
}

TEST_CASE("calls on different objects overlap; calls on one object do not", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}}; // both objects in one process: threads
  auto a = m.make();
  auto b = m.make();
  CHECK(a.call<&Recorder::pid>() == b.call<&Recorder::pid>());

  auto t0 = clock_type::now();
  auto ha = a.call_async<&Recorder::slow>(0.4);
  auto hb = b.call_async<&Recorder::slow>(0.4);
  CHECK(ha.get() == 0.4);
  CHECK(hb.get() == 0.4);
  CHECK(seconds_since(t0) < 0.75);

  t0 = clock_type::now();
  auto h1 = a.call_async<&Recorder::slow>(0.2);
  auto h2 = a.call_async<&Recorder::slow>(0.2);
  h1.get();
  h2.get();
  CHECK(seconds_since(t0) >= 0.4);
}

TEST_CASE("manager_options::threads: at most that many of a process's objects run at once", "[manager]") {
  SECTION("threads = 1: the second object's call waits for the first's to end") {
    fiber::RemoteManager<Recorder> m{{.processes = 1, .threads = 1}};
    auto a = m.make();
    auto b = m.make();
    auto first = a.call_async<&Recorder::meet>(2, 0.5); // b's call cannot run meanwhile: it never meets
    auto second = b.call_async<&Recorder::meet>(2, 30.0);
    CHECK_FALSE(first.get());
    CHECK(second.get());
    // The process's main thread reads the calls and runs them itself.
    CHECK(a.call<&Recorder::on_main_thread>());
    CHECK(b.call<&Recorder::on_main_thread>());
  }
  SECTION("threads = 0 (the default): both run at once") {
    fiber::RemoteManager<Recorder> m{{.processes = 1}};
    auto a = m.make();
    auto b = m.make();
    auto first = a.call_async<&Recorder::meet>(2, 30.0);
    auto second = b.call_async<&Recorder::meet>(2, 30.0);
    CHECK(first.get());
    CHECK(second.get());
    CHECK_FALSE(a.call<&Recorder::on_main_thread>()); // on the actors' threads
  }
}

TEST_CASE("a call from a user thread reaches its object while fiber's runtime thread is busy", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto r = m.make();
  r.call<&Recorder::pid>();
  char dir[] = "/tmp/fiber-test-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  const std::string fifo = std::string(dir) + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK); // the method's open then does not wait
  REQUIRE(fd >= 0);
  // Hold the runtime thread: the call must leave from this thread.
  std::promise<void> holding, release;
  asio::post(fiber::detail::runtime::instance().executor(), [&, held = release.get_future()] {
    holding.set_value();
    held.wait();
  });
  holding.get_future().wait();
  auto done = r.call_async<&Recorder::touch>(fifo);
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, 10000); // the byte the method writes
  release.set_value();
  done.get();
  ::close(fd);
  ::unlink(fifo.c_str());
  ::rmdir(dir);
  CHECK(ready == 1);
}

TEST_CASE("a method that throws gives remote_error and the object survives", "[manager]") {
  fiber::RemoteManager<Recorder> m;
  auto r = m.make();
  r.call<&Recorder::push>(1);
  try {
    r.call<&Recorder::fail>("bad input");
    FAIL("call should throw");
  } catch (const fiber::remote_error& e) {
    CHECK(e.type_name() == "std::invalid_argument");
    CHECK(e.message() == "bad input");
  }
  auto h = r.call_async<&Recorder::fail>("again");
  CHECK_THROWS_AS(h.get(), fiber::remote_error);
  CHECK_FALSE(h.successful());
  r.call<&Recorder::push>(2);
  CHECK(r.call<&Recorder::seen>() == std::vector<int>{1, 2});

  // A constructor that throws: make() throws remote_error, nothing is left.
  fiber::RemoteManager<Fragile> f;
  CHECK_THROWS_AS(f.make(false), fiber::remote_error);
  CHECK(f.objects() == 0);
  CHECK(f.make(true).call<&Fragile::one>() == 1);
}

TEST_CASE("get(timeout), ready, wait", "[manager]") {
  fiber::RemoteManager<Recorder> m;
  auto r = m.make();
  auto h = r.call_async<&Recorder::slow>(0.5);
  CHECK_THROWS_AS(h.get(std::chrono::milliseconds(20)), fiber::timeout_error);
  CHECK(h.get(std::chrono::seconds(30)) == 0.5);
  CHECK(h.ready());
  CHECK(h.successful());
  CHECK(h.get() == 0.5); // again
}

TEST_CASE("co_await async_call from an Asio coroutine", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 2}};
  auto a = m.make("a");
  auto b = m.make("b");
  asio::io_context ctx;
  std::string na, nb;
  std::vector<int> seen;
  std::string error_type;
  std::thread::id ran_on;
  asio::co_spawn(
      ctx,
      [&]() -> asio::awaitable<void> {
        na = co_await a.async_call<&Recorder::name>(asio::use_awaitable);
        co_await a.async_call<&Recorder::push>(5, asio::use_awaitable); // void method
        seen = co_await a.async_call<&Recorder::seen>(asio::use_awaitable);
        nb = co_await b.async_call<&Recorder::name>(asio::use_awaitable);
        ran_on = std::this_thread::get_id();
        try {
          co_await b.async_call<&Recorder::fail>("boom", asio::use_awaitable);
        } catch (const fiber::remote_error& e) {
          error_type = e.type_name();
        }
      },
      asio::detached);
  ctx.run();
  CHECK(na == "a");
  CHECK(nb == "b");
  CHECK(seen == std::vector<int>{5});
  CHECK(error_type == "std::invalid_argument");
  CHECK(ran_on == std::this_thread::get_id()); // completions on the coroutine's executor

  // Plain callbacks and use_future work too.
  std::promise<std::string> p;
  a.async_call<&Recorder::name>([&](std::exception_ptr e, std::string n) {
    if (e) p.set_exception(e);
    else p.set_value(n);
  });
  CHECK(p.get_future().get() == "a");
  auto fut = b.async_call<&Recorder::pid>(asio::use_future);
  CHECK(fut.get() != ::getpid());
}

TEST_CASE("co_await async_call completes on the caller's io_context while fiber's runtime thread is held",
          "[manager]") {
  // The reply comes on the process's reply line, read where the caller
  // awaits: the master's runtime thread has no part in the call. A process
  // that dials its master (tcp://, as on another host) dials its line too.
  const unsigned threads = GENERATE(1u, 0u); // the main thread runs methods; actor threads do
  const std::string transport = GENERATE("ipc", "tcp");
  CAPTURE(threads, transport);
  fiber_test::config_scope cfg{{"local_transport", transport.c_str()}};
  fiber::RemoteManager<Recorder> m{{.processes = 1, .threads = threads}};
  auto r = m.make("held");
  r.call<&Recorder::pid>();
  REQUIRE(fiber_test::eventually([&] { return r.has_reply_line(); }));
  std::promise<void> holding, release;
  asio::post(fiber::detail::runtime::instance().executor(), [&, held = release.get_future()] {
    holding.set_value();
    held.wait();
  });
  holding.get_future().wait();
  asio::io_context ctx;
  std::string name;
  std::vector<int> seen;
  std::string error_type;
  bool finished = false;
  std::string failed; // what ended the calls early
  asio::co_spawn(
      ctx,
      [&]() -> asio::awaitable<void> {
        name = co_await r.async_call<&Recorder::name>(asio::use_awaitable);
        for (int i = 0; i < 20; ++i) co_await r.async_call<&Recorder::push>(i, asio::use_awaitable);
        seen = co_await r.async_call<&Recorder::seen>(asio::use_awaitable);
        try {
          co_await r.async_call<&Recorder::fail>("boom", asio::use_awaitable);
        } catch (const fiber::remote_error& e) {
          error_type = e.type_name();
        }
        finished = true;
      },
      [&](std::exception_ptr e) {
        try {
          if (e) std::rethrow_exception(e);
        } catch (const std::exception& x) {
          failed = x.what();
        }
      });
  ctx.run_for(std::chrono::seconds(10)); // a bound: before reply lines it ran out here
  const bool while_held = finished;
  release.set_value();
  ctx.restart();
  ctx.run();
  CHECK(failed == "");
  CHECK(while_held);
  CHECK(finished);
  CHECK(name == "held");
  CHECK(seen.size() == 20);
  CHECK(error_type == "std::invalid_argument");
}

TEST_CASE("Remote::has_reply_line: an object of a local manager process has one, an empty handle and a lost "
          "process's object none",
          "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto r = m.make("lined");
  const auto pid = r.call<&Recorder::pid>();
  CHECK(r.has_reply_line());
  CHECK(fiber::Remote<Recorder>(r).has_reply_line()); // a copy in this process names the same object
  CHECK_FALSE(fiber::Remote<Recorder>{}.has_reply_line());
  ::kill(pid_t(pid), SIGKILL);
  CHECK(fiber_test::eventually([&] { return !r.has_reply_line(); }));
  CHECK_THROWS_AS(r.call<&Recorder::pid>(), fiber::worker_lost);
}

TEST_CASE("a handler that throws as its reply is read: run() rethrows it, the replies read with it complete",
          "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1, .threads = 1}}; // calls run in order
  auto r = m.make();
  r.call<&Recorder::pid>();
  char dir[] = "/tmp/fiber-test-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  const std::string fifo = std::string(dir) + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(fd >= 0);
  asio::io_context ctx;
  auto ex = ctx.get_executor();
  int completed = 0;
  asio::post(ctx, [&] { // calls made on the thread that runs ctx: their replies come on the line
    r.async_call<&Recorder::push>(1, asio::bind_executor(ex, [](std::exception_ptr) {
                                    throw std::runtime_error("the handler's own");
                                  }));
    r.async_call<&Recorder::push>(2, asio::bind_executor(ex, [&](std::exception_ptr e) { completed += !e; }));
    r.async_call<&Recorder::touch>(fifo, asio::bind_executor(ex, [&](std::exception_ptr e) { completed += !e; }));
  });
  ctx.run_one(); // sends the three calls
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1); // the third ran: the first two replies wait on the line, read at once
  std::string thrown;
  try {
    ctx.run_for(std::chrono::seconds(10));
  } catch (const std::runtime_error& e) {
    thrown = e.what();
  }
  ctx.run_for(std::chrono::seconds(10)); // a bound: a reply dropped with the exception would wait here
  ::close(fd);
  ::unlink(fifo.c_str());
  ::rmdir(dir);
  CHECK(thrown == "the handler's own");
  CHECK(completed == 2);
  CHECK(r.call<&Recorder::seen>() == std::vector<int>{1, 2});
}

TEST_CASE("bytes on a reply line that do not decode, or fail their tag: the process is lost, the call fails with "
          "worker_lost",
          "[manager]") {
  // An inherited line carries frames without tags; a dialled one (tcp://) with them.
  const std::string transport = GENERATE("ipc", "tcp");
  CAPTURE(transport);
  fiber_test::config_scope cfg{{"local_transport", transport.c_str()}};
  fiber::RemoteManager<Recorder> m{{.processes = 1, .threads = 1}};
  auto r = m.make();
  r.call<&Recorder::pid>();
  REQUIRE(fiber_test::eventually([&] { return r.has_reply_line(); }));
  asio::io_context ctx;
  std::string why;
  asio::co_spawn(
      ctx,
      [&]() -> asio::awaitable<void> {
        try {
          if (transport == "ipc") co_await r.async_call<&Recorder::garble_reply_line>(asio::use_awaitable);
          else co_await r.async_call<&Recorder::garble_dialled_line>(asio::use_awaitable);
        } catch (const fiber::worker_lost& e) {
          why = e.what();
        }
      },
      asio::detached);
  ctx.run();
  CAPTURE(why);
  CHECK(why.find("reply line") != std::string::npos);
  CHECK(why.find(transport == "ipc" ? "does not decode" : "authentication tag") != std::string::npos);
  CHECK_THROWS_AS(r.call<&Recorder::pid>(), fiber::worker_lost);
  auto fresh = m.make("fresh"); // a replacement process
  CHECK(fresh.call<&Recorder::name>() == "fresh");
}

TEST_CASE("a reply line no manager process expects, or dialled again, is refused; the process keeps its own",
          "[manager]") {
  fiber_test::config_scope cfg{{"local_transport", "tcp"}};
  fiber::RemoteManager<Recorder> m{{.processes = 1, .threads = 1}};
  auto r = m.make("kept");
  const auto id = r.call<&Recorder::worker_id>();
  REQUIRE(fiber_test::eventually([&] { return r.has_reply_line(); }));
  auto& rt = fiber::detail::runtime::instance();
  const auto urls = rt.listener_urls();
  const auto url = *std::find_if(urls.begin(), urls.end(), [](auto& u) { return u.starts_with("tcp://"); });
  const auto refused_before = rt.refused_peers_.load();
  for (const std::uint64_t claimed : {id, id + 1000}) { // its id, whose line is taken; nobody's
    std::promise<void> dialled;
    asio::post(rt.executor(), [&] {
      rt.connect(url, fiber::detail::role::reply_line, claimed,
                 [&](std::exception_ptr, std::shared_ptr<fiber::detail::peer_link>, auto) { dialled.set_value(); });
    });
    dialled.get_future().wait();
  }
  CHECK(fiber_test::eventually([&] { return rt.refused_peers_.load() == refused_before + 2; }));
  asio::io_context ctx;
  std::string name;
  asio::co_spawn(
      ctx, [&]() -> asio::awaitable<void> { name = co_await r.async_call<&Recorder::name>(asio::use_awaitable); },
      asio::detached);
  ctx.run();
  CHECK(name == "kept");
  CHECK(r.has_reply_line());
}

TEST_CASE("a manager process's inherited sockets (its link, its reply line) are close-on-exec", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto r = m.make(); // constructed before any reply has gone on the line
  CHECK(r.call<&Recorder::inheritable_sockets>() == 0);
}

TEST_CASE("a SIGKILLed manager process fails a co_await'ed call with worker_lost; io_context::run returns",
          "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1, .threads = 1}};
  auto r = m.make();
  const auto pid = r.call<&Recorder::pid>();
  asio::io_context ctx;
  bool lost = false;
  asio::co_spawn(
      ctx,
      [&]() -> asio::awaitable<void> {
        co_await r.async_call<&Recorder::push>(1, asio::use_awaitable); // the line is read here
        asio::post(ctx, [pid] { ::kill(pid_t(pid), SIGKILL); });        // while the next call waits
        try {
          co_await r.async_call<&Recorder::slow>(60.0, asio::use_awaitable);
        } catch (const fiber::worker_lost&) {
          lost = true;
        }
      },
      asio::detached);
  auto t0 = clock_type::now();
  ctx.run();
  CHECK(lost);
  CHECK(seconds_since(t0) < 10);
  // The replacement process takes new objects, and its line serves them.
  auto fresh = m.make("fresh");
  asio::io_context again;
  std::string name;
  asio::co_spawn(
      again, [&]() -> asio::awaitable<void> { name = co_await fresh.async_call<&Recorder::name>(asio::use_awaitable); },
      asio::detached);
  again.run();
  CHECK(name == "fresh");
}

TEST_CASE("objects are spread evenly over the manager processes", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 2}};
  std::vector<fiber::Remote<Recorder>> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(m.make());
  std::map<std::int64_t, int> per_pid;
  for (auto& r : rs) ++per_pid[r.call<&Recorder::pid>()];
  REQUIRE(per_pid.size() == 2);
  for (auto& [pid, n] : per_pid) CHECK(n == 2);
}

TEST_CASE("a handle passed into a Pool task calls the same object from there", "[manager]") {
  fiber::RemoteManager<Recorder> m;
  auto r = m.make();
  auto manager_pid = r.call<&Recorder::pid>();
  fiber::Pool pool{fiber::target<&push_from_task>, {.processes = 2}};
  std::vector<std::tuple<fiber::Remote<Recorder>, int>> args;
  for (int i = 0; i < 20; ++i) args.emplace_back(r, i);
  auto pids = pool.starmap(args);
  for (auto p : pids) {
    CHECK(p != ::getpid());
    CHECK(p != manager_pid);
  }
  auto seen = r.call<&Recorder::seen>();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == fiber_test::iota(20));

  CHECK(pool.apply(r, 99) != ::getpid());
  CHECK(r.call<&Recorder::seen>().back() == 99);

  // Through the relay, each caller's calls keep their order, while three
  // tasks call the same object at once.
  fiber::Pool order_pool{fiber::target<&ordered_from_task>, {.processes = 3}};
  std::vector<std::tuple<fiber::Remote<Recorder>, int>> bases{{r, 1000}, {r, 2000}, {r, 3000}};
  auto ok = order_pool.starmap(bases);
  CHECK(ok == std::vector<bool>{true, true, true});
}

TEST_CASE("a SIGKILLed manager process fails pending and later calls with worker_lost", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto r = m.make();
  auto pid = r.call<&Recorder::pid>();
  auto pending = r.call_async<&Recorder::slow>(60.0);
  REQUIRE(::kill(pid_t(pid), SIGKILL) == 0);
  auto t0 = clock_type::now();
  CHECK_THROWS_AS(pending.get(), fiber::worker_lost);
  CHECK(seconds_since(t0) < 10);
  CHECK_THROWS_AS(r.call<&Recorder::pid>(), fiber::worker_lost);
  CHECK_THROWS_AS(r.call_async<&Recorder::push>(1).get(), fiber::worker_lost);
  try {
    r.call<&Recorder::seen>();
  } catch (const fiber::worker_lost& e) {
    CHECK(std::string(e.what()).find("was lost") != std::string::npos);
  }
  // A replacement process takes new objects; the lost one is not recreated.
  auto fresh = m.make();
  auto pid2 = fresh.call<&Recorder::pid>();
  CHECK(pid2 != pid);
  CHECK_THROWS_AS(r.call<&Recorder::pid>(), fiber::worker_lost);
}

namespace {
// This process's snapshot of the RemoteManager named `name`.
fiber::manager_stats manager_snapshot(const std::string& name) {
  for (auto& m : fiber::stats().managers)
    if (m.name == name) return m;
  FAIL("no RemoteManager named " << name << " in fiber::stats()");
  return {};
}
} // namespace

TEST_CASE("fiber::stats: a RemoteManager's objects, calls and processes, and a process lost with its cause",
          "[manager][stats]") {
  {
    fiber::RemoteManager<Recorder> m{{.processes = 2, .name = "stats-envs"}};
    auto a = m.make();
    auto b = m.make();
    auto c = m.make();
    a.call<&Recorder::push>(1);
    const auto b_pid = b.call<&Recorder::pid>();
    auto pending = b.call_async<&Recorder::slow>(60.0);
    auto s = manager_snapshot("stats-envs");
    CHECK(s.backend == "local");
    CHECK(s.processes == 2);
    CHECK(s.objects == 3);
    CHECK(s.calls == 6); // three constructions, three calls
    CHECK(s.calls_waiting == 1);
    CHECK(s.workers_started == 2);
    CHECK(s.workers_lost == 0);
    REQUIRE(s.workers.size() == 2);
    std::uint64_t objects = 0;
    for (auto& w : s.workers) {
      objects += w.objects;
      CHECK(w.bytes_sent > 0);
      CHECK(w.bytes_received > 0);
    }
    CHECK(objects == 3);
    CHECK(s.workers_by_state[fiber::worker_state::busy] == 1); // b's process, in slow()
    CHECK(s.workers_by_state[fiber::worker_state::idle] == 1);
    CHECK(s.workers_by_state.size() == 6);
    // b's process dies: the loss as the manager saw it, with the objects it held.
    const auto b_objects = [&] {
      for (auto& w : s.workers)
        if (w.state == fiber::worker_state::busy) return w.objects;
      return std::uint64_t(0);
    }();
    REQUIRE(::kill(pid_t(b_pid), SIGKILL) == 0);
    CHECK_THROWS_AS(pending.get(), fiber::worker_lost);
    s = manager_snapshot("stats-envs");
    CHECK(s.workers_lost == 1);
    CHECK(s.calls_waiting == 0);
    REQUIRE(s.recent_losses.size() == 1);
    CHECK(s.recent_losses[0].tasks == b_objects);
    CHECK(s.recent_losses[0].cause != "");
    CHECK(s.recent_losses[0].worker.starts_with("stats-envs-m"));
  }
  for (auto& m : fiber::stats().managers) CHECK(m.name != "stats-envs");
}

TEST_CASE("shared::dict and shared::list across a Pool", "[manager]") {
  fiber::RemoteManager<Dict> dm;
  auto d = dm.make();
  fiber::Pool pool{fiber::target<&put_square_in_dict>, {.processes = 3}};
  std::vector<std::tuple<fiber::Remote<Dict>, int>> args;
  for (int i = 0; i < 30; ++i) args.emplace_back(d, i);
  auto pids = pool.starmap(args);
  CHECK(std::set<int>(pids.begin(), pids.end()).count(::getpid()) == 0);

  CHECK(d.call<&Dict::size>() == 30);
  std::map<int, int> want;
  for (int i = 0; i < 30; ++i) want[i] = i * i;
  CHECK(d.call<&Dict::items>() == want);
  CHECK(d.call<&Dict::get>(7) == std::optional<int>(49));
  CHECK(d.call<&Dict::get>(100) == std::nullopt);
  CHECK(d.call<&Dict::contains>(3));
  CHECK(d.call<&Dict::erase>(3));
  CHECK_FALSE(d.call<&Dict::contains>(3));
  try {
    d.call<&Dict::at>(3);
    FAIL("at should throw");
  } catch (const fiber::remote_error& e) {
    CHECK(e.type_name() == "std::out_of_range");
  }
  d.call<&Dict::update>(std::map<int, int>{{3, 9}, {100, 1}});
  CHECK(d.call<&Dict::at>(100) == 1);
  CHECK(d.call<&Dict::pop>(100) == std::optional<int>(1));
  CHECK(d.call<&Dict::setdefault>(5, 0) == 25);
  CHECK(d.call<&Dict::keys>() == fiber_test::iota(30));
  CHECK(d.call<&Dict::values>().size() == 30);

  fiber::RemoteManager<List> lm;
  auto l = lm.make(std::vector<std::string>{"start"});
  fiber::Pool lpool{fiber::target<&append_word>, {.processes = 2}};
  std::vector<std::tuple<fiber::Remote<List>, std::string>> words;
  for (auto w : {"a", "b", "c", "d"}) words.emplace_back(l, w);
  lpool.starmap(words);
  CHECK(l.call<&List::size>() == 5);
  CHECK(l.call<&List::get>(0) == "start");
  auto items = l.call<&List::items>();
  CHECK(std::set<std::string>(items.begin() + 1, items.end()) == std::set<std::string>{"a", "b", "c", "d"});
  l.call<&List::set>(-1, "z");
  CHECK(l.call<&List::pop>() == "z");
  CHECK_THROWS_AS(l.call<&List::get>(10), fiber::remote_error);
}

TEST_CASE("destroying the last handle destroys the object", "[manager]") {
  fiber::RemoteManager<Recorder> m{{.processes = 1}};
  auto keeper = m.make("keeper"); // observes, from the same process
  std::vector<std::byte> bytes;
  {
    auto r = m.make("doomed");
    auto copy = r;
    CHECK(keeper.call<&Recorder::alive_now>() == 2);
    bytes = fiber::serialize(r);
    auto back = fiber::deserialize<fiber::Remote<Recorder>>(bytes); // owns again in this process
    CHECK(back == r);
    CHECK(m.objects() == 2);
  }
  // The destroy message travels after every call made before it; the
  // destructor runs on the object's own actor, so poll (bounded) from another.
  auto deadline = clock_type::now() + std::chrono::seconds(10);
  while (keeper.call<&Recorder::alive_now>() != 1 && clock_type::now() < deadline) {
  }
  CHECK(keeper.call<&Recorder::alive_now>() == 1);
  CHECK(m.objects() == 1);
  // A handle that does not own it (e.g. one serialized earlier) finds it gone.
  auto stale = fiber::deserialize<fiber::Remote<Recorder>>(bytes);
  CHECK_THROWS_AS(stale.call<&Recorder::pid>(), fiber::error);
}

TEST_CASE("handles: empty, equality, type-checked serialization", "[manager]") {
  fiber::Remote<Recorder> empty;
  CHECK_FALSE(empty);
  CHECK_THROWS_AS(empty.call<&Recorder::pid>(), std::logic_error);
  auto e2 = fiber::deserialize<fiber::Remote<Recorder>>(fiber::serialize(empty));
  CHECK_FALSE(e2);

  fiber::RemoteManager<Recorder> m;
  auto a = m.make();
  auto b = m.make();
  CHECK(a == a);
  CHECK_FALSE(a == b);
  CHECK(a.id() != b.id());
  CHECK_THROWS_AS(fiber::deserialize<fiber::Remote<Fragile>>(fiber::serialize(a)), fiber::serialization_error);

  // A plain callback runs on fiber's runtime thread: blocking there is refused.
  std::promise<bool> refused;
  a.async_call<&Recorder::pid>([&](std::exception_ptr, std::int64_t) {
    try {
      a.call<&Recorder::pid>();
      refused.set_value(false);
    } catch (const std::logic_error&) {
      refused.set_value(true);
    }
  });
  CHECK(refused.get_future().get());
}

TEST_CASE("virtual and inherited described methods", "[manager]") {
  fiber::RemoteManager<Derived> m;
  auto d = m.make();
  CHECK(d.call<&Derived::who>() == "derived");
  CHECK(d.call<&Base::base_only>() == 7);
}

TEST_CASE("a RemoteManager's destructor stops its processes; remaining handles fail", "[manager]") {
  fiber::Remote<Recorder> survivor;
  std::int64_t pid = 0;
  {
    fiber::RemoteManager<Recorder> m{{.processes = 2}};
    survivor = m.make();
    pid = survivor.call<&Recorder::pid>();
    (void)survivor.call_async<&Recorder::slow>(0.2); // queued work delays, not blocks, shutdown
  }
  CHECK(fiber_test::process_gone(pid));
  CHECK_THROWS_AS(survivor.call<&Recorder::pid>(), fiber::error);

  fiber::RemoteManager<Recorder> m2;
  m2.shutdown();
  CHECK_THROWS_AS(m2.make(), fiber::error);
  fiber_test::require_no_children();
}
