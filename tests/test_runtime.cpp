// SPDX-License-Identifier: BSL-1.0
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <future>
#include <sys/socket.h>
#include <sys/un.h>
#include <sched.h>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "support.hpp"

namespace {

int ident(int x) { return x; }

// Runs in a Process: it becomes a master itself (a nested pool), reports its
// pool worker's pid through a file, then waits to be killed.
void nested_master(std::string pid_file) {
  fiber::Pool pool{fiber::target<&ident>, {.processes = 1}};
  pool.apply(1);
  auto pids = pool.worker_pids();
  std::ofstream(pid_file + ".tmp") << pids.at(0) << "\n";
  std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
  std::this_thread::sleep_for(std::chrono::minutes(5));
}

// Threads of this process by scheduling policy.
struct policy_count {
  int batch = 0, other = 0;
};
policy_count count_policies() {
  policy_count c;
  DIR* d = ::opendir("/proc/self/task"); // no REQUIRE: also runs in a worker
  if (!d) return c;
  while (dirent* e = ::readdir(d)) {
    int tid = std::atoi(e->d_name);
    if (tid <= 0) continue;
    int p = ::sched_getscheduler(tid);
    if (p == SCHED_BATCH) ++c.batch;
    else if (p == SCHED_OTHER) ++c.other;
  }
  ::closedir(d);
  return c;
}

// Exit status: 10 × (main thread is SCHED_OTHER) + min(batch threads, 9).
void report_policies() {
  auto c = count_policies();
  std::exit(10 * (::sched_getscheduler(0) == SCHED_OTHER) + std::min(c.batch, 9));
}

// In a worker: {its pid, the number of the link it inherited (-1: none),
// that descriptor's flags}.
std::vector<int> inherited_link(int) {
  const int fd = fiber::detail::worker_environment().link_fd;
  return {int(::getpid()), fd, fd < 0 ? -1 : ::fcntl(fd, F_GETFD)};
}

std::string fd_target(const std::string& path) {
  char buf[256];
  const auto n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

// Whether this process holds a descriptor of the open file `target` ("socket:[N]").
bool holds(const std::string& target) {
  bool found = false;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (auto* e = ::readdir(d))
      if (e->d_name[0] != '.') found |= fd_target(std::string("/proc/self/fd/") + e->d_name) == target;
    ::closedir(d);
  }
  return found;
}

// Voluntary context switches of process `pid`'s threads other than its main one.
long other_threads_switches(std::int64_t pid) {
  long sum = 0;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = ::opendir(task.c_str())) {
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.' || std::atoll(e->d_name) == pid) continue;
      std::ifstream st(task + "/" + e->d_name + "/status");
      for (std::string line; std::getline(st, line);)
        if (line.starts_with("voluntary_ctxt_switches:")) sum += std::atol(line.c_str() + 24);
    }
    ::closedir(d);
  }
  return sum;
}

} // namespace

TEST_CASE("configuration: code beats environment beats file; unknown keys are errors", "[config]") {
  // (unknown FIBER_ environment variables excepted: see below)
  auto& t = fiber::detail::config_table::instance();
  std::string dir = "/tmp/fiber-cfg-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()));
  auto file = dir + "/fiber.toml";
  std::ofstream(file) << "log_dir = \"/from/file\"\nheartbeat_interval_ms = 700\n[slurm]\npartition = \"filepart\"\n";
  ::setenv("FIBER_CONFIG", file.c_str(), 1);
  ::setenv("FIBER_SLURM_PARTITION", "envpart", 1);
  t.reload();
  CHECK(fiber::detail::config_string("log_dir") == "/from/file");
  CHECK(fiber::detail::config_int("heartbeat_interval_ms") == 700);
  CHECK(fiber::detail::config_string("slurm.partition") == "envpart");
  fiber::set_config("slurm.partition", "codepart");
  CHECK(fiber::detail::config_string("slurm.partition") == "codepart");
  CHECK(fiber::effective_config().at("slurm.partition") == "codepart");
  CHECK_THROWS_AS(fiber::set_config("no_such_key", "x"), fiber::config_error);

  std::ofstream(file) << "[slurm]\npartitoin = \"typo\"\n";
  try {
    t.reload();
    FAIL("an unknown key in the file must throw");
  } catch (const fiber::config_error& e) {
    CHECK(std::string(e.what()).find("slurm.partitoin") != std::string::npos);
  }
  ::setenv("FIBER_CONFIG", (dir + "/missing.toml").c_str(), 1);
  CHECK_THROWS_AS(t.reload(), fiber::config_error);
  ::unsetenv("FIBER_CONFIG");
  // The environment is shared (Python Fiber's FIBER_IMAGE, ...): an unknown
  // FIBER_ variable is ignored with a warning, never an error.
  ::setenv("FIBER_NO_SUCH_VARIABLE", "1", 1);
  CHECK_NOTHROW(t.reload());
  auto unknown = t.unknown_environment();
  CHECK(std::find(unknown.begin(), unknown.end(), "FIBER_NO_SUCH_VARIABLE") != unknown.end());
  CHECK(fiber::detail::config_string("slurm.partition") == "codepart"); // the rest still applies
  ::unsetenv("FIBER_NO_SUCH_VARIABLE");
  t.reload();
  unknown = t.unknown_environment();
  CHECK(std::find(unknown.begin(), unknown.end(), "FIBER_NO_SUCH_VARIABLE") == unknown.end());
  ::unsetenv("FIBER_SLURM_PARTITION");
  t.reload();
  std::filesystem::remove_all(dir);
}

TEST_CASE("FIBER_BACKEND picks the default policy's backend; an unknown one is a backend_error", "[config]") {
  auto& t = fiber::detail::config_table::instance();
  auto& rt = fiber::detail::runtime::instance();
  auto make = [&] { return rt.sync([&] { return fiber::backend::from_env::make(rt.executor()); }); };
  ::setenv("FIBER_BACKEND", "local", 1);
  t.reload();
  CHECK(make()->name() == "local");
  ::setenv("FIBER_BACKEND", "mesos", 1);
  t.reload();
  try {
    make();
    FAIL("an unknown backend must throw");
  } catch (const fiber::backend_error& e) {
    CHECK(std::string(e.what()).find("'mesos'") != std::string::npos);
  }
  ::unsetenv("FIBER_BACKEND");
  t.reload();
  CHECK(make()->name() == "local"); // unset: local
}

TEST_CASE("under FIBER_SEPARATE_COMPILATION impl/src.hpp registers docker and kubernetes; without it the error says so",
          "[config]") {
  // This file includes fiber/fiber.hpp with the macro defined (CMake target
  // fiber_src): only the one object compiled from impl/src.hpp registers.
#if !defined(FIBER_SEPARATE_COMPILATION)
  FAIL("fiber's tests are built with FIBER_SEPARATE_COMPILATION (target fiber_src)");
#endif
  auto& named = fiber::detail::named_backends();
  const auto docker = fiber::detail::find_backend("docker");
  REQUIRE(docker != nullptr);
  CHECK(fiber::detail::find_backend("kubernetes") != nullptr);

  auto& t = fiber::detail::config_table::instance();
  auto& rt = fiber::detail::runtime::instance();
  named.erase("docker"); // as in a program that left impl/src.hpp out
  ::setenv("FIBER_BACKEND", "docker", 1);
  t.reload();
  std::string what;
  try {
    rt.sync([&] { return fiber::backend::from_env::make(rt.executor()); });
  } catch (const fiber::backend_error& e) {
    what = e.what();
  }
  named["docker"] = docker;
  ::unsetenv("FIBER_BACKEND");
  t.reload();
  CHECK(what.find("does not contain the docker backend") != std::string::npos);
  CHECK(what.find("<fiber/impl/src.hpp>") != std::string::npos);
}

TEST_CASE("the log sink receives records with the process name", "[log]") {
  std::vector<std::string> seen;
  fiber::set_log_sink([&](const fiber::log_record& r) {
    seen.push_back(std::string(r.process) + "|" + std::string(r.message));
  });
  fiber::set_log_level(fiber::log_level::info);
  fiber::detail::log(fiber::log_level::debug, "hidden");
  fiber::detail::log(fiber::log_level::info, "value ", 42);
  fiber::set_log_sink(nullptr);
  fiber::set_log_level(fiber::log_level::warning);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == "master|value 42");
}

TEST_CASE("targets have stable ids and readable names", "[target]") {
  using T = fiber::target_t<&ident>;
  CHECK(T::name().find("ident") != std::string_view::npos);
  CHECK(fiber::detail::registry::instance().find(T::id) != nullptr);
  static_assert(fiber::callable_with<&ident, int>);
  static_assert(!fiber::callable_with<&ident, std::string>);
  static_assert(!fiber::callable_with<&ident, int, int>);
}

TEST_CASE("helpers: cpu_count, current_process", "[helpers]") {
  CHECK(fiber::cpu_count() >= 1);
  auto me = fiber::current_process();
  CHECK(me.name == "master");
  CHECK_FALSE(me.is_worker);
  CHECK(me.pid == ::getpid());
}

TEST_CASE("runtime: a local worker's link is a socketpair made at launch; neither end leaks", "[runtime][link]") {
  auto& rt = fiber::detail::runtime::instance();
  const auto adopted = rt.adopted_links_.load();
  fiber::Pool pool{fiber::target<&inherited_link>, {.processes = 2}};
  // Both spoke on it: no dial (a Pool starts its second worker meanwhile).
  REQUIRE(fiber_test::eventually([&] { return rt.adopted_links_ - adopted == 2; }));
  CHECK(rt.adopted_links_ - adopted == 2);
  for (const auto& w : pool.map(std::vector<int>(8, 0))) {
    REQUIRE(w.size() == 3);
    REQUIRE(w[1] >= 3);         // it was given one
    CHECK((w[2] & FD_CLOEXEC)); // and nothing it starts inherits it
    // The master closed its copy of the worker's end once the job started
    // (else the worker's death would not close the link).
    const auto end = fd_target("/proc/" + std::to_string(w[0]) + "/fd/" + std::to_string(w[1]));
    REQUIRE(end.starts_with("socket:["));
    CHECK_FALSE(holds(end));
  }
}

TEST_CASE("runtime: frames a worker's main thread reads do not wake its runtime thread", "[runtime][link]") {
  fiber::Pool pool{fiber::target<&ident>, {.processes = 1}};
  CHECK(pool.apply(1) == 1); // its main thread has the read side from now on
  const auto pids = pool.worker_pids();
  REQUIRE(pids.size() == 1);
  constexpr int tasks = 400;
  const long before = other_threads_switches(pids[0]);
  for (int i = 0; i < tasks; ++i) REQUIRE(pool.apply(i) == i);
  // Heartbeats still wake it, a few times a second: not once a task.
  CHECK(other_threads_switches(pids[0]) - before < tasks / 4);
}

TEST_CASE("a worker whose master is SIGKILLed exits within 5 seconds", "[runtime][lifetime]") {
  std::string dir = "/tmp/fiber-orphan-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()));
  auto pid_file = dir + "/worker.pid";
  fiber::Process master{fiber::target<&nested_master>, pid_file};
  master.start();
  // Wait (bounded) for the nested master to report its worker.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(pid_file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(std::filesystem::exists(pid_file));
  std::int64_t worker = 0;
  std::ifstream(pid_file) >> worker;
  REQUIRE(worker > 0);
  REQUIRE(fiber_test::process_exists(worker));
  auto t0 = std::chrono::steady_clock::now();
  master.kill();
  master.join();
  CHECK(fiber_test::process_gone(worker, std::chrono::seconds(5)));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

TEST_CASE("runtime: a worker's dial to an ipc socket nobody listens on fails at once (its master ended)",
          "[runtime][lifetime]") {
  // The socket file a SIGKILLed master leaves: bound once, no listener now.
  std::string dir = "/tmp/fiber-refused-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()));
  const std::string path = dir + "/master.sock";
  {
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    ::close(s);
  }
  auto& rt = fiber::detail::runtime::instance();
  auto failed = std::make_shared<std::promise<std::string>>(); // outlives a dial that would go on
  auto f = failed->get_future();
  asio::post(rt.executor(), [&rt, failed, url = "ipc://" + path] {
    rt.connect(url, fiber::detail::role::worker, 1,
               [failed](std::exception_ptr e, std::shared_ptr<fiber::detail::peer_link>,
                        std::map<std::string, std::string>) {
                 failed->set_value(e ? fiber::detail::exception_text(e, "?") : "connected");
               });
  });
  // Refused is final on ipc://: not dialled again for start_timeout_s (120 s).
  REQUIRE(f.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(f.get().find("Connection refused") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fiber's I/O threads run as SCHED_BATCH, the caller's thread keeps its policy", "[runtime][sched]") {
  // This process's runtime started with the default (io_threads_batch = true):
  // the runtime thread, and nng's (poller, task queues, timers, resolver),
  // which its first listener starts from the runtime thread.
  (void)fiber::detail::runtime::instance().listen_url();
  auto c = count_policies();
  CHECK(::sched_getscheduler(0) == SCHED_OTHER);
  CHECK(c.batch >= 2);

  SECTION("in a worker too") { // it only dialled: the runtime thread alone
    fiber::Process p{fiber::target<&report_policies>};
    p.start();
    p.join();
    REQUIRE(p.exitcode());
    CHECK(*p.exitcode() / 10 == 1);
    CHECK(*p.exitcode() % 10 >= 1);
  }
  SECTION("off with FIBER_IO_THREADS_BATCH=false") {
    ::setenv("FIBER_IO_THREADS_BATCH", "false", 1);
    fiber::detail::config_table::instance().reload(); // as if set before fiber started
    fiber::Process p{fiber::target<&report_policies>};
    p.start();
    p.join();
    ::unsetenv("FIBER_IO_THREADS_BATCH");
    fiber::detail::config_table::instance().reload();
    REQUIRE(p.exitcode());
    CHECK(*p.exitcode() == 10);
  }
  SECTION("off in workers with set_config, although their runtime starts before the handshake") {
    fiber::set_config("io_threads_batch", "false");
    fiber::Process p{fiber::target<&report_policies>};
    p.start();
    p.join();
    fiber::set_config("io_threads_batch", "true"); // the default
    REQUIRE(p.exitcode());
    CHECK(*p.exitcode() == 10);
  }
  fiber_test::require_no_children();
}

TEST_CASE("runtime: an idle worker holds at most 4 threads (its dialled link runs on fiber's own)", "[runtime]") {
  fiber::Pool pool{fiber::target<&ident>, {.processes = 1}}; // one: it is up once the map is done
  CHECK(pool.map(std::vector<int>{1, 2, 3, 4}) == std::vector<int>{1, 2, 3, 4});
  const auto pids = pool.worker_pids();
  REQUIRE(pids.size() == 1);
  for (auto pid : pids) {
    int threads = -1;
    std::ifstream st("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(st, line);)
      if (line.starts_with("Threads:")) threads = std::atoi(line.c_str() + 8);
    INFO("worker " << pid << " holds " << threads << " threads");
    CHECK(threads >= 2); // its main thread, waiting for work, and the runtime's
    CHECK(threads <= 4);
  }
}

TEST_CASE("runtime: a listen base's host name is resolved on the caller's thread; the URL is numeric", "[runtime]") {
  auto& rt = fiber::detail::runtime::instance();
  const auto url = rt.listen_url("tcp://localhost:0");
  INFO(url);
  CHECK((url.starts_with("tcp://127.0.0.1:") || url.starts_with("tcp://[::1]:")));
  CHECK(rt.listen_url("tcp://localhost:0") == url); // bound once
  CHECK_THROWS_WITH(rt.listen_url("tcp://no-such-host.invalid:0"), Catch::Contains("no-such-host.invalid"));
}

TEST_CASE("runtime: a worker on another host listens at its address on the route to its master", "[runtime]") {
  using fiber::detail::own_listen_base;
  CHECK(own_listen_base("tcp://127.0.0.1:4000") == "tcp://127.0.0.1:0");
  CHECK(own_listen_base("tls+tcp://127.0.0.1:4000") == "tls+tcp://127.0.0.1:0");
  const auto v6 = own_listen_base("tcp://[::1]:4000"); // bracketed, routable or not
  CHECK(v6 == "tcp://[::1]:0");
  // A master's host that does not resolve: its name is kept.
  CHECK(own_listen_base("tcp://no-such-host.invalid:4000") == "tcp://no-such-host.invalid:0");
}
