// SPDX-License-Identifier: BSL-1.0
// End-to-end tests of fiber's public API with FIBER_BACKEND=docker: each
// worker a container on a real daemon (CTest fixtures: docker_daemon starts
// one when none runs, docker_image builds FIBER_DOCKER_IMAGE from the test
// programs' shared libraries). Process exit codes, terminate/kill, a Queue
// and a Pipe shared with containers, Pool map, a container killed with
// `docker kill` mid-map, OOM, a missing image, an unreachable daemon, a
// different binary refused at the handshake, TLS, worker output, the sweep
// of a dead master's containers, and a SIGKILLed master whose containers go
// away by themselves. After each test no container of this master and no
// process running this executable (a worker outside its container, say) may
// be left.

#include <fiber/backend/docker.hpp>
#include <fiber/backend/kubernetes.hpp>
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "backend_scenarios.hpp"
#include "integration_support.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

using fiber_test::lines;
using fiber_test::poll_until;
using fiber_test::read_file;
using fiber_test::seconds_since;
using fiber_test::shell;
using fiber_test::stray_workers;
using fiber_test::trim;

// ---------------------------------------------------------------------------
// Targets (run in containers)
// ---------------------------------------------------------------------------

/// Inside a container of fiber's: PID 1 is docker-init (HostConfig.Init).
bool in_container() { return read_file("/proc/1/comm") == "docker-init\n"; }

std::string worker_name() { return fiber::current_process().name; }

void say_hello(std::string word) {
  std::printf("hello %s from %s\n", word.c_str(), worker_name().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "bye %s\n", word.c_str());
}

struct task_in {
  std::int64_t x = 0;
  int sleep_ms = 0;
  std::string start_log; ///< if set, "x\n" is appended when the task starts (a bind-mounted dir)
};

struct task_out {
  std::int64_t y = 0;
  std::string worker;
  bool container = false;
};

task_out square_where(task_in in) {
  if (!in.start_log.empty()) {
    int fd = ::open(in.start_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) {
      auto line = std::to_string(in.x) + "\n"; // one write(2) with O_APPEND: lines never interleave
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (in.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(in.sleep_ms));
  return {in.x * in.x, worker_name(), in_container()};
}

// The sum of an object's floats, read where the task runs.
double sum_object(fiber::object_ref<std::vector<float>> r) {
  auto v = r.get();
  double s = 0;
  for (float x : v) s += x;
  return s;
}

/// Allocates and touches `mb` MiB.
std::int64_t allocate(int mb) {
  std::vector<std::vector<char>> blocks;
  for (int i = 0; i < mb; ++i) blocks.emplace_back(std::size_t(1) << 20, char(i));
  std::int64_t sum = 0;
  for (auto& b : blocks) sum += b[4096];
  return sum;
}

int twice(int x) { return 2 * x; }

// ---------------------------------------------------------------------------
// Helpers (master side)
// ---------------------------------------------------------------------------

std::string image() {
  const char* v = std::getenv("FIBER_DOCKER_IMAGE");
  return v ? v : "";
}

/// The fixture's docker.labels (FIBER_DOCKER_LABELS) as `docker create` options.
std::string extra_labels() {
  std::string out;
  for (auto& kv : fiber::detail::docker_impl::split_list(fiber::detail::config_string("docker.labels")))
    out += " --label '" + kv + "'";
  return out;
}

/// Containers (any state) whose labels match all of `filters` ("k=v").
std::vector<std::string> containers(const std::vector<std::string>& filters) {
  std::string cmd = "docker ps -aq";
  for (auto& f : filters) cmd += " --filter label=" + f;
  return lines(shell(cmd + " 2>/dev/null"));
}

/// Containers of this master (whatever run).
std::vector<std::string> my_containers() {
  return containers({"app.kubernetes.io/managed-by=fiber", "fiber.master.pid=" + std::to_string(::getpid())});
}

/// After each test: no container of this master and no worker process is
/// left (bounded waits: AutoRemove finishes a moment after a container's end).
void check_clean() {
  bool none = poll_until([] { return my_containers().empty(); }, 10s);
  INFO("containers left: " << shell("docker ps -a --filter label=fiber.master.pid=" + std::to_string(::getpid()) +
                                    " --format '{{.Names}} {{.Status}}'"));
  CHECK(none);
  bool no_workers = poll_until([] { return stray_workers().empty(); }, 10s);
  INFO("worker processes left: " << stray_workers().size());
  CHECK(no_workers);
}

void require_daemon() {
  static const bool up = trim(shell("docker version -f '{{.Server.APIVersion}}' 2>/dev/null")).size() > 0;
  if (!up) FAIL("no Docker daemon answers: run through ctest (fixture docker_up: tests/rigs/docker-up.sh)");
  if (image().empty()) FAIL("FIBER_DOCKER_IMAGE is not set: run through ctest (fixture docker_image)");
}

/// A directory every container sees at the same path (docker.binds), for
/// tasks' start logs and worker output; removed when this process exits.
const std::string& shared_dir() {
  struct dir {
    std::string path = [] {
      std::string t = "/tmp/fiber-docker-it-XXXXXX";
      if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
      ::chmod(t.c_str(), 0777);
      return t;
    }();
    ~dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const dir d;
  return d.path;
}

/// The default Process, Queue, Pool: FIBER_BACKEND=docker. Set before the
/// first launcher is made (it reads docker.binds once).
void configure(bool with_shared_dir = true) {
  static const bool once = [&] {
    fiber::set_config("backend", "docker");
    if (with_shared_dir) fiber::set_config("docker.binds", shared_dir() + ":" + shared_dir());
    return true;
  }();
  (void)once;
  require_daemon();
}

fiber::pool_options pool_opts(unsigned n, std::string name) {
  fiber::pool_options o;
  o.processes = n;
  o.name = std::move(name);
  return o;
}

std::vector<task_in> inputs(int n, int sleep, const std::string& log = {}) {
  std::vector<task_in> v;
  for (int i = 0; i < n; ++i) v.push_back({i, sleep, log});
  return v;
}

std::map<std::int64_t, int> count_lines(const std::string& p) {
  std::map<std::int64_t, int> m;
  std::ifstream in(p);
  for (std::int64_t x; in >> x;) ++m[x];
  return m;
}

/// A docker policy with its own launcher (the runtime keeps one launcher per
/// policy type) and options adjusted by Tweak::apply.
template <class Tweak>
struct docker_with {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    auto o = fiber::detail::docker_options::from_config();
    auto where = fiber::detail::docker::endpoint_from_env();
    Tweak::apply(o, where);
    auto l = std::make_shared<fiber::detail::docker_launcher>(std::move(ex), std::move(o), std::move(where));
    l->start();
    return l;
  }
};

struct missing_image {
  static void apply(fiber::detail::docker_options& o, fiber::detail::docker::endpoint&) {
    o.image = "fiber-no-such-image:test";
  }
};
struct no_daemon {
  static void apply(fiber::detail::docker_options&, fiber::detail::docker::endpoint& e) {
    e = fiber::detail::docker::parse_host("unix:///nonexistent/docker.sock");
  }
};
struct other_binary {
  static void apply(fiber::detail::docker_options& o, fiber::detail::docker::endpoint&) {
    o.image = image() + "-other"; // test_docker_api's binary at this executable's path
    o.mount_binary = false;
  }
};
std::string& test_network() {
  static std::string n;
  return n;
}
struct on_network {
  static void apply(fiber::detail::docker_options& o, fiber::detail::docker::endpoint&) { o.network = test_network(); }
};
struct with_tls {
  static void apply(fiber::detail::docker_options& o, fiber::detail::docker::endpoint&) { o.tls = true; }
};

/// The run id of the launcher behind `Policy` in this process.
template <class Policy>
std::string run_id_of() {
  auto& rt = fiber::detail::runtime::instance();
  return rt.sync([&] {
    auto l = std::dynamic_pointer_cast<fiber::detail::docker_launcher>(rt.template launcher<Policy>());
    return l ? l->run_id() : std::string();
  });
}

} // namespace

// ===========================================================================
// Process
// ===========================================================================

TEST_CASE("docker: Process exit codes, terminate -> -15, kill -> -9", "[docker][process]") {
  configure();
  {
    fiber_test::exit_code_processes<> ps;
    auto t0 = clk::now();
    ps.start();
    std::printf("docker Process: start -> connected %.2f s\n", seconds_since(t0));
    ps.stop_and_check();
  }
  check_clean();
}

TEST_CASE("docker: a Queue shared with container Processes delivers every item exactly once", "[docker][queue]") {
  configure();
  fiber_test::check_queue_exactly_once<&in_container>("container");
  check_clean();
}

TEST_CASE("docker: a duplex Pipe with a container Process", "[docker][pipe]") {
  configure();
  fiber_test::check_duplex_pipe<&in_container>();
  check_clean();
}

TEST_CASE("docker: worker output reaches the master's files (worker_output_dir)", "[docker][process]") {
  configure();
  const auto dir = shared_dir() + "/out";
  fiber::set_config("worker_output_dir", dir);
  {
    fiber::Process p{fiber::target<&say_hello>, std::string("docker")};
    p.set_name("dk-hello");
    p.start();
    REQUIRE(p.join(60s));
    CHECK(p.exitcode() == 0);
  }
  fiber::set_config("worker_output_dir", "");
  CHECK(read_file(dir + "/dk-hello.out") == "hello docker from dk-hello\n");
  CHECK(read_file(dir + "/dk-hello.err") == "bye docker\n");
  check_clean();
}

// ===========================================================================
// Pool
// ===========================================================================

TEST_CASE("docker: Pool map over 4 containers; their settings", "[docker][pool]") {
  configure();
  {
    auto o = pool_opts(4, "dk-map");
    o.resources.cpu = 1;
    o.resources.memory_mb = 256;
    auto t0 = clk::now();
    fiber::Pool pool{fiber::target<&square_where>, o};
    auto first = pool.apply(task_in{3, 0, {}});
    std::printf("docker Pool(4): construction -> first result %.2f s\n", seconds_since(t0));
    CHECK(first.y == 9);
    CHECK(first.container);
    REQUIRE(poll_until([&] { return pool.live_workers() == 4; }, 60s));
    std::printf("docker Pool(4): construction -> 4 workers connected %.2f s\n", seconds_since(t0));

    auto in = inputs(400, 2);
    auto out = pool.map(in, 5);
    REQUIRE(out.size() == in.size());
    std::set<std::string> workers;
    for (std::size_t i = 0; i < out.size(); ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i * i));
      CHECK(out[i].container);
      workers.insert(out[i].worker);
    }
    CHECK(workers.size() == 4);
    // fiber::stats(): the launcher's phase of each container.
    CHECK(poll_until([] { return fiber_test::backend_jobs("docker", "running") == 4; }, 30s));
    // The containers, as Docker sees them.
    const auto run = run_id_of<fiber::backend::from_env>();
    REQUIRE_FALSE(run.empty());
    auto ids = containers({"fiber.run=" + run, "fiber.worker=dk-map-w1"});
    REQUIRE(ids.size() == 1);
    auto settings = trim(shell("docker inspect -f '{{.HostConfig.Init}} {{.HostConfig.AutoRemove}} "
                               "{{.HostConfig.NetworkMode}} {{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} "
                               "{{.Config.User}} {{.State.Running}}' " +
                               ids[0]));
    CHECK(settings == "true true host 1000000000 268435456 " + std::to_string(::getuid()) + ":" +
                          std::to_string(::getgid()) + " true");
  }
  check_clean();
}

TEST_CASE("docker: containers read an object the master put; the master sends about one copy", "[docker][objects]") {
  configure();
  {
    std::vector<float> v(4 << 20); // 16 MiB
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i % 1000);
    double want = 0;
    for (float x : v) want += x;
    auto r = fiber::put(v);
    const auto& served = fiber::detail::object_source::served();
    const auto served0 = served.load();
    fiber::Pool pool{fiber::target<&sum_object>, pool_opts(2, "dk-obj")};
    REQUIRE(poll_until([&] { return pool.live_workers() == 2; }, 60s));
    auto out = pool.map(std::vector(8, r), 1);
    REQUIRE(out.size() == 8);
    for (double s : out) CHECK(s == want);
    // each container is a host of its own (its PID namespace): one fetched
    // from the master, the other from it or its memfd
    CHECK(served.load() - served0 <= v.size() * sizeof(float) * 12 / 10);
  }
  check_clean();
}

// Containers take longest to start: close() + join() right after
// construction must still deliver every task submitted (issue 26).
TEST_CASE("docker: close + join right after construction delivers every task", "[docker][pool][close]") {
  configure();
  const unsigned maxtasks = GENERATE(0u, 1u);
  CAPTURE(maxtasks);
  {
    auto o = pool_opts(3, "dk-close");
    o.maxtasksperchild = maxtasks;
    fiber::Pool pool{fiber::target<&square_where>, o};
    std::vector<fiber::async_result<task_out>> rs;
    for (int i = 0; i < 6; ++i) rs.push_back(pool.apply_async(task_in{i, 50, {}}));
    auto mapped = pool.map_async(inputs(6, 0));
    pool.close();
    pool.join();
    for (int i = 0; i < 6; ++i) {
      REQUIRE(rs[std::size_t(i)].ready());
      auto r = rs[std::size_t(i)].get();
      CHECK(r.y == i * i);
      CHECK(r.container);
    }
    REQUIRE(mapped.ready());
    auto m = mapped.get();
    REQUIRE(m.size() == 6);
    for (std::size_t i = 0; i < m.size(); ++i) CHECK(m[i].y == std::int64_t(i * i));
  }
  check_clean();
}

TEST_CASE("docker: a container killed with `docker kill` mid-map: complete, exactly-once results", "[docker][pool]") {
  configure();
  const auto log = shared_dir() + "/starts-kill";
  constexpr int n = 64;
  {
    fiber::Pool pool{fiber::target<&square_where>, pool_opts(4, "dk-kill")};
    REQUIRE(poll_until([&] { return pool.live_workers() == 4; }, 60s));
    const auto run = run_id_of<fiber::backend::from_env>();
    auto in = inputs(n, 100, log);
    std::vector<task_out> out;
    std::string victim;
    auto t0 = clk::now();
    for (auto&& r : pool.imap(in, 1)) {
      if (victim.empty()) {
        // A worker that has just delivered a result holds more (prefetch 2)
        // and runs its next task: kill its container.
        victim = r.worker;
        auto ids = containers({"fiber.run=" + run, "fiber.worker=" + victim});
        REQUIRE(ids.size() == 1);
        auto said = shell("docker kill " + ids[0] + " 2>&1");
        INFO("docker kill said: " << said);
        REQUIRE(trim(said) == ids[0]);
      }
      out.push_back(std::move(r));
    }
    std::printf("docker Pool(4): %d x 100 ms with container of %s killed mid-map: %.2f s\n", n, victim.c_str(),
                seconds_since(t0));
    REQUIRE(out.size() == std::size_t(n));
    for (int i = 0; i < n; ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i) * i);
    }
    // The pool replaced the worker: 4 again, the victim not among them.
    CHECK(poll_until([&] { return pool.live_workers() == 4; }, 60s));
    CHECK(containers({"fiber.run=" + run, "fiber.worker=" + victim}).empty());
    auto starts = count_lines(log);
    CHECK(starts.size() == std::size_t(n)); // every task started; reruns possible, results once
    int reruns = 0;
    for (auto& [x, c] : starts) reruns += c - 1;
    std::printf("docker Pool(4): %d task(s) started again after the kill\n", reruns);
    CHECK(reruns >= 1); // the victim's running task ran again elsewhere
  }
  check_clean();
}

TEST_CASE("docker: a worker over its memory limit is lost, and the reason says out of memory", "[docker][pool][oom]") {
  configure();
  {
    auto o = pool_opts(1, "dk-oom");
    o.resources.memory_mb = 64;
    o.max_retries = 1;
    fiber::Pool pool{fiber::target<&allocate>, o};
    CHECK(pool.apply(8) >= 0); // fits
    try {
      (void)pool.apply(1024);
      FAIL("allocating 1 GiB under a 64 MiB limit succeeded");
    } catch (const fiber::worker_lost& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), Catch::Contains("out of memory") && Catch::Contains("64 MiB"));
    }
    CHECK(pool.apply(8) >= 0); // the pool goes on with a new worker
  }
  check_clean();
}

TEST_CASE("docker: a missing image is a backend_error with Docker's message within 2 s", "[docker][errors]") {
  configure();
  using P = docker_with<missing_image>;
  {
    auto t0 = clk::now();
    fiber::basic_process<P> p{fiber::target<&fiber_test::returns_normally>};
    p.start();
    try {
      p.join(10s);
      FAIL("join() should throw fiber::backend_error");
    } catch (const fiber::backend_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("docker: ") && Catch::Contains("No such image: fiber-no-such-image:test"));
    }
    CHECK(seconds_since(t0) < 2.0);
  }
  {
    auto t0 = clk::now();
    fiber::Pool<&twice, P> pool{fiber::target<&twice>, pool_opts(2, "dk-noimage")};
    try {
      (void)pool.map(std::vector{1, 2, 3});
      FAIL("map() should throw fiber::backend_error");
    } catch (const fiber::backend_error& e) {
      CHECK_THAT(e.what(),
                 Catch::Contains("docker backend") && Catch::Contains("No such image: fiber-no-such-image:test"));
    }
    double s = seconds_since(t0);
    std::printf("docker: missing image -> backend_error from Pool::map in %.3f s\n", s);
    CHECK(s < 2.0);
  }
  check_clean();
}

TEST_CASE("docker: a daemon that cannot be reached is a backend_error at once", "[docker][errors]") {
  configure();
  auto t0 = clk::now();
  fiber::basic_process<docker_with<no_daemon>> p{fiber::target<&fiber_test::returns_normally>};
  p.start();
  try {
    p.join(10s);
    FAIL("join() should throw fiber::backend_error");
  } catch (const fiber::backend_error& e) {
    CHECK_THAT(e.what(),
               Catch::StartsWith("docker: cannot reach the Docker daemon at unix:///nonexistent/docker.sock"));
  }
  CHECK(seconds_since(t0) < 1.0);
}

TEST_CASE("docker: a container running a different binary is refused at the handshake", "[docker][handshake]") {
  configure();
  {
    fiber::basic_process<docker_with<other_binary>> p{fiber::target<&fiber_test::returns_normally>};
    p.start();
    try {
      p.join(60s);
      FAIL("join() should throw fiber::handshake_error");
    } catch (const fiber::handshake_error& e) {
      std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("handshake refused") &&
                           Catch::Contains("master runs build " + fiber::detail::build_id()));
    }
    CHECK(p.exitcode() != 0);
  }
  check_clean();
}

TEST_CASE("docker: workers dial back over tls+tcp when the master has a certificate", "[docker][tls]") {
  configure();
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) FAIL("openssl is needed to make a certificate");
  const auto dir = shared_dir() + "/tls";
  fs::create_directories(dir);
  REQUIRE(
      std::system(
          ("openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -days 1 -keyout " +
           dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1")
              .c_str()) == 0);
  for (auto [k, v] : {std::pair{"tls_cert", "/cert.pem"}, {"tls_key", "/key.pem"}, {"tls_ca", "/cert.pem"}})
    fiber::set_config(k, dir + v);
  {
    fiber::Pool<&twice, docker_with<with_tls>> pool{fiber::target<&twice>, pool_opts(2, "dk-tls")};
    auto r = pool.map(std::vector{1, 2, 3, 4});
    CHECK(r == std::vector{2, 4, 6, 8});
    auto urls = fiber::detail::runtime::instance().listener_urls();
    CHECK(std::any_of(urls.begin(), urls.end(), [](auto& u) { return u.rfind("tls+tcp://127.0.0.1:", 0) == 0; }));
  }
  for (auto k : {"tls_cert", "tls_key", "tls_ca"}) fiber::set_config(k, "");
  check_clean();
}

TEST_CASE("docker: workers on a user-defined network dial the network's gateway", "[docker][network]") {
  configure();
  test_network() = "fiber-it-" + std::to_string(::getpid());
  auto made = lines(shell("docker network create " + test_network() + " 2>&1"));
  struct network_guard {
    ~network_guard() { shell("docker network rm " + test_network() + " >/dev/null 2>&1"); }
  } guard;
  REQUIRE_FALSE(made.empty());
  REQUIRE(made.back().size() == 64);
  const auto gateway =
      trim(shell("docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' " + test_network()));
  REQUIRE_FALSE(gateway.empty());
  {
    fiber::Pool<&square_where, docker_with<on_network>> pool{fiber::target<&square_where>, pool_opts(2, "dk-net")};
    auto out = pool.map(inputs(20, 0));
    REQUIRE(out.size() == 20);
    for (std::size_t i = 0; i < out.size(); ++i) {
      CHECK(out[i].y == std::int64_t(i * i));
      CHECK(out[i].container);
    }
    auto urls = fiber::detail::runtime::instance().listener_urls();
    INFO("gateway " << gateway);
    CHECK(std::any_of(urls.begin(), urls.end(), [&](auto& u) { return u.rfind("tcp://" + gateway + ":", 0) == 0; }));
  }
  check_clean(); // the containers are gone before the network is removed
}

// ===========================================================================
// Nothing left behind
// ===========================================================================

TEST_CASE("docker: the sweep removes containers of masters that are gone, and only those", "[docker][sweep]") {
  configure();
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  auto me = fiber::detail::docker_impl::master_identity::self();
  auto create = [&](const std::string& name, const std::string& start) {
    auto cmd = "docker create --name " + name +
               " --label app.kubernetes.io/managed-by=fiber --label fiber.run=sweeptest" +
               " --label fiber.master.host=" + me.host + " --label fiber.master.pid=" + me.pid +
               " --label fiber.master.start=" + start + " --label fiber.master.boot=" + me.boot +
               " --label 'fiber.master.pidns=" + me.pidns + "'" + extra_labels() + " --network none " + image() +
               " /nonexistent";
    auto out = lines(shell(cmd));
    return out.empty() ? std::string() : out.back();
  };
  const auto tag = std::to_string(::getpid());
  auto dead = create("fiber-sweeptest-dead-" + tag, "1"); // this pid, another start time: its master is gone
  auto alive = create("fiber-sweeptest-alive-" + tag, me.start);
  struct remove_guard {
    std::string id;
    ~remove_guard() { shell("docker rm -f " + id + " >/dev/null 2>&1"); }
  } g1{dead}, g2{alive};
  REQUIRE(dead.size() == 64);
  REQUIRE(alive.size() == 64);
  struct sweeper {
    static void apply(fiber::detail::docker_options&, fiber::detail::docker::endpoint&) {}
  };
  auto& rt = fiber::detail::runtime::instance();
  rt.sync([&] { (void)rt.launcher<docker_with<sweeper>>(); }); // a new launcher sweeps as it starts
  CHECK(poll_until([&] { return trim(shell("docker ps -aq --filter id=" + dead)).empty(); }, 10s));
  CHECK_FALSE(trim(shell("docker ps -aq --filter id=" + alive)).empty());
  shell("docker rm -f " + alive + " >/dev/null 2>&1");
  check_clean();
}

// Run by the next test as a separate master, which it SIGKILLs.
TEST_CASE("docker (child): a master with 2 container workers, waiting to be killed", "[.][docker-master-child]") {
  configure(false); // SIGKILLed: nothing of its own to clean up
  fiber::Pool pool{fiber::target<&twice>, pool_opts(2, "dk-child")};
  REQUIRE(pool.map(std::vector{1, 2}) == std::vector{2, 4});
  REQUIRE(poll_until([&] { return pool.live_workers() == 2; }, 60s));
  std::printf("READY %s\n", run_id_of<fiber::backend::from_env>().c_str());
  std::fflush(stdout);
  std::this_thread::sleep_for(300s); // until SIGKILLed
}

TEST_CASE("docker: a SIGKILLed master's containers are gone within 5 s", "[docker][cleanup]") {
  configure();
  fiber_test::child_master child("[docker-master-child]");
  INFO("child said: " << child.said());
  const std::string run = child.run();
  REQUIRE_FALSE(run.empty());
  CHECK(containers({"fiber.run=" + run}).size() == 2);
  child.kill();
  auto t0 = clk::now();
  bool gone = poll_until([&] { return containers({"fiber.run=" + run}).empty(); }, 5s);
  std::printf("docker: SIGKILLed master's containers gone after %.2f s\n", seconds_since(t0));
  CHECK(gone);
  check_clean();
}

TEST_CASE("docker: no container of these tests is left", "[docker][cleanup]") {
  configure();
  check_clean();
}
