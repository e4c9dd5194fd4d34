// SPDX-License-Identifier: BSL-1.0
// Faults of the Docker and Kubernetes backends (issue 27): transient API
// errors, a daemon or API server that goes away for seconds, a stalled output
// reader, odd API documents, a black-holed watch, a SIGKILLed master. Rigs:
//   [kube] tests: tests/fake_kube (started here; python3) and, for the
//          SIGKILLed master, kubectl (`kubectl proxy` gives it k8s.api_server).
//   [docker-wire] test: nothing.
//   [docker] tests: a Docker daemon (tests/rigs/docker-up.sh) and the test
//          image in FIBER_DOCKER_IMAGE (tests/test_faults_backends.cmake builds
//          it with tests/rigs/docker-image.sh); tests/faults/docker_proxy.py.
// After each test no pod, container or process running this executable is left.

#include <fiber/backend/docker.hpp>
#include <fiber/backend/kubernetes.hpp>
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include "fake_kube/fake_kube.hpp"
#include "integration_support.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
using nlohmann::json;

namespace {

using fiber_test::lines;
using fiber_test::poll_until;
using fiber_test::read_file;
using fiber_test::seconds_since;
using fiber_test::shell;
using fiber_test::stray_workers;
using fiber_test::trim;

// ---------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------

struct task_in {
  std::int64_t x = 0;
  int sleep_ms = 0;
  int print_kb = 0; ///< KiB written to stdout
};

std::int64_t work(task_in in) {
  if (in.print_kb > 0) {
    std::string line(1023, 'o');
    line += '\n';
    for (int i = 0; i < in.print_kb; ++i) std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }
  if (in.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(in.sleep_ms));
  return in.x * in.x;
}

int twice(int x) { return 2 * x; }

std::vector<task_in> inputs(int n, int sleep, int print_kb = 0) {
  std::vector<task_in> v;
  for (int i = 0; i < n; ++i) v.push_back({i, sleep, print_kb});
  return v;
}

std::int64_t sum_of_squares(int n) {
  std::int64_t s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += i * i;
  return s;
}

std::int64_t sum(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

fiber::pool_options pool_opts(unsigned n, std::string name) {
  fiber::pool_options o;
  o.processes = n;
  o.name = std::move(name);
  return o;
}

/// Log records whose message contains `needle`, from now until destroyed.
class log_watch {
public:
  explicit log_watch(std::string needle) : s_(std::make_shared<state>()) {
    s_->needle = std::move(needle);
    fiber::set_log_sink([s = s_](const fiber::log_record& r) {
      std::fprintf(stderr, "fiber[%.*s] %.*s\n", int(r.process.size()), r.process.data(), int(r.message.size()),
                   r.message.data());
      if (r.message.find(s->needle) != std::string_view::npos) {
        std::lock_guard g(s->m);
        s->seen.emplace_back(r.message);
      }
    });
  }
  log_watch(const log_watch&) = delete;
  log_watch& operator=(const log_watch&) = delete;
  ~log_watch() { fiber::set_log_sink(nullptr); }
  std::vector<std::string> seen() const {
    std::lock_guard g(s_->m);
    return s_->seen;
  }

private:
  struct state {
    std::string needle;
    mutable std::mutex m;
    std::vector<std::string> seen;
  };
  std::shared_ptr<state> s_;
};

/// A helper program on a pipe: started, read until its first line (20 s at
/// most), SIGTERMed and reaped when destroyed.
class helper_process {
public:
  explicit helper_process(std::vector<std::string> argv) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    if (::posix_spawnp(&pid_, a[0], &fa, nullptr, a.data(), environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    const auto deadline = clk::now() + 20s;
    while (pid_ && first_.find('\n') == std::string::npos && clk::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[512];
      auto n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      first_.append(buf, std::size_t(n));
    }
    ::close(out[0]);
    first_ = trim(first_.substr(0, first_.find('\n')));
  }
  helper_process(const helper_process&) = delete;
  helper_process& operator=(const helper_process&) = delete;
  ~helper_process() {
    if (!pid_) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  const std::string& first_line() const { return first_; }
  pid_t pid() const { return pid_; }

private:
  pid_t pid_ = 0;
  std::string first_;
};

std::string here() {
  std::string f = __FILE__;
  return f.substr(0, f.rfind('/'));
}

// ---------------------------------------------------------------------------
// Kubernetes: tests/fake_kube
// ---------------------------------------------------------------------------

fiber_test::fake_kube& shared_fake() {
  struct holder {
    fiber_test::fake_kube k{{"--node-cpu", "64", "--node-memory", "256Gi", "--pass-env", "ASAN_*", "--pass-env",
                             "UBSAN_*", "--pass-env", "LSAN_*", "--pass-env", "LD_LIBRARY_PATH", "--sa-dir-env",
                             "FIBER_K8S_SERVICE_ACCOUNT_DIR", "--restart-backoff", "1", "--no-events"}};
    ~holder() { fiber::detail::runtime::instance().stop(); }
  };
  static holder h;
  return h.k;
}

/// The fake every test of this process shares, answering again (an outage an
/// earlier test started is over) and with no error injected.
fiber_test::fake_kube& fake() {
  auto& k = shared_fake();
  bool up = poll_until(
      [&] {
        try {
          k.control("DELETE", "errors");
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!up) FAIL("fake_kube does not answer");
  return k;
}

std::vector<std::string> fiber_pods(const std::string& extra = "") {
  return shared_fake().pods("app.kubernetes.io/managed-by=fiber" + (extra.empty() ? "" : "," + extra));
}

void check_clean_kube() {
  CHECK(poll_until([] { return fiber_pods().empty(); }, 15s));
  CHECK(poll_until([] { return stray_workers().empty(); }, 10s));
}

/// The kubernetes backend against the fake, with the fake's token (no watchdog).
struct kube_fake {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    auto o = fiber::detail::kube_options::from_config();
    o.state_dir = fiber::detail::runtime::instance().run_dir();
    o.image = "fiber-test:1";
    auto l = std::make_shared<fiber::detail::kube_launcher>(std::move(ex), std::move(o), shared_fake().access());
    l->start();
    return l;
  }
};

/// Exit reports of a launcher driven directly.
struct exit_log {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, fiber::backend::job_exit> got;
  std::optional<fiber::backend::job_exit> wait(const std::string& n, std::chrono::milliseconds limit) {
    std::unique_lock lk(m);
    cv.wait_for(lk, limit, [&] { return got.count(n) > 0; });
    if (!got.count(n)) return std::nullopt;
    return got[n];
  }
};

// ---------------------------------------------------------------------------
// Docker
// ---------------------------------------------------------------------------

std::string image() {
  const char* v = std::getenv("FIBER_DOCKER_IMAGE");
  return v ? v : "";
}

void require_docker() {
  static const bool up = trim(shell("docker version -f '{{.Server.APIVersion}}' 2>/dev/null")).size() > 0;
  if (!up) FAIL("no Docker daemon answers (tests/rigs/docker-up.sh)");
  if (image().empty()) FAIL("FIBER_DOCKER_IMAGE is not set: run through ctest (tests/test_faults_backends.cmake)");
}

std::vector<std::string> my_containers() {
  return lines(
      shell("docker ps -aq --filter label=app.kubernetes.io/managed-by=fiber --filter label=fiber.master.pid=" +
            std::to_string(::getpid()) + " 2>/dev/null"));
}

void check_clean_docker() {
  CHECK(poll_until([] { return my_containers().empty(); }, 15s));
  CHECK(poll_until([] { return stray_workers().empty(); }, 10s));
}

/// The socket docker_via_proxy's launchers talk to.
std::string& proxy_socket() {
  static std::string s;
  return s;
}

template <bool ViaProxy>
struct docker_at {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    auto o = fiber::detail::docker_options::from_config();
    o.image = image();
    auto where = ViaProxy ? fiber::detail::docker::parse_host("unix://" + proxy_socket())
                          : fiber::detail::docker::endpoint_from_env();
    auto l = std::make_shared<fiber::detail::docker_launcher>(std::move(ex), std::move(o), std::move(where));
    l->start();
    return l;
  }
};

} // namespace

// ===========================================================================
// Kubernetes
// ===========================================================================

TEST_CASE("kubernetes: 502s, then 15 s of reset connections while a Pool grows: the map completes", "[kube][faults]") {
  auto& k = fake();
  fiber::Pool<&work, kube_fake> pool{fiber::target<&work>, pool_opts(2, "k8s-grow")};
  REQUIRE(sum(pool.map(inputs(8, 0))) == sum_of_squares(8));
  // The next pod creates get 502 (a load balancer before the API server),
  // then every connection is reset for 15 s (the control plane is upgraded).
  k.control("POST", "stats/reset");
  k.control("POST", "errors", {{"verb", "create"}, {"resource", "pods"}, {"code", 502}, {"count", 6}});
  pool.resize(4);
  k.control("POST", "outage", {{"seconds", 15}});
  auto t0 = clk::now();
  auto out = pool.map(inputs(40, 100));
  CHECK(sum(out) == sum_of_squares(40));
  INFO("after " << seconds_since(t0) << " s");
  // The two new pods were created once the API server came back.
  CHECK(poll_until([&] { return pool.live_workers() == 4; }, 40s));
  CHECK(k.control("GET", "stats")["by_code"].value("502", 0) >= 1);
  pool.close();
  pool.join();
  check_clean_kube();
}

namespace {

/// A kube_launcher of its own on the fake (options from the configuration,
/// then `tweak`) running one pod, `name`, of `sh -c script`, whose end goes
/// to `log`. Returns once the pod is Running.
std::shared_ptr<fiber::detail::kube_launcher> run_one_pod(fiber_test::fake_kube& k, exit_log& log,
                                                          const std::string& name, const std::string& script,
                                                          void (*tweak)(fiber::detail::kube_options&) = nullptr) {
  auto& rt = fiber::detail::runtime::instance();
  auto l = rt.sync([&] {
    auto o = fiber::detail::kube_options::from_config();
    o.state_dir = rt.run_dir();
    o.image = "fiber-test:1";
    if (tweak) tweak(o);
    auto p = std::make_shared<fiber::detail::kube_launcher>(rt.executor(), std::move(o), k.access());
    p->start();
    return p;
  });
  std::vector<fiber::backend::job_spec> specs{{name, {"/bin/sh", "-c", script}, {}, {}, std::nullopt, std::nullopt}};
  std::vector<fiber::backend::exit_handler> h{[&log, name](const fiber::backend::job_exit& x) {
    std::lock_guard g(log.m);
    log.got[name] = x;
    log.cv.notify_all();
  }};
  auto jobs = rt.sync([&] { return l->launch(specs, std::move(h)); });
  const auto pod = jobs.at(0).id;
  REQUIRE(poll_until(
      [&] {
        auto [st, p] = k.api("GET", "/api/v1/namespaces/default/pods/" + pod);
        return st == 200 && p["status"].value("phase", "") == "Running";
      },
      20s));
  return l;
}

} // namespace

TEST_CASE("kubernetes: odd JSON in watch events is skipped and the watch goes on", "[kube][faults]") {
  auto& k = fake();
  log_watch skipped("skipped");
  exit_log log;
  auto& rt = fiber::detail::runtime::instance();
  auto l = run_one_pod(k, log, "odd-json", "sleep 3; exit 7");
  for (const char* line : {R"({"type":"MODIFIED","object":{"metadata":"odd"}})",
                           R"({"type":"MODIFIED","object":{"metadata":{"name":["odd"]},"status":7}})",
                           R"({"type":"ERROR","object":"odd"})", R"({"type":"ADDED","object":[1,2]})"})
    CHECK(k.control("POST", "watch/raw", {{"line", line}}).value("watches", 0) >= 1);
  // The pod's end (exit 7, 3 s after it started) still comes through the same watch.
  auto x = log.wait("odd-json", 20s);
  REQUIRE(x);
  CHECK(x->how == fiber::backend::job_exit::kind::exited);
  CHECK(x->code == 7);
  CHECK_FALSE(skipped.seen().empty());
  rt.sync([&] { l.reset(); });
  check_clean_kube();
}

TEST_CASE("kubernetes: a black-holed watch is re-listed after k8s.watch_silence_s; no exit lost",
          "[kube][faults][watch]") {
  auto& k = fake();
  log_watch silence("said nothing");
  exit_log log;
  auto& rt = fiber::detail::runtime::instance();
  auto l = run_one_pod(k, log, "black-hole", "sleep 2; exit 9",
                       [](fiber::detail::kube_options& o) { o.watch_silence = 2s; });
  const unsigned lists0 = rt.sync([&] { return l->lists(); });
  // The open watch stays connected and says nothing more: the pod's end
  // reaches fiber only through the list made after the silence.
  REQUIRE(k.control("POST", "watch/blackhole", json::object()).value("watches", 0) >= 1);
  auto x = log.wait("black-hole", 20s);
  REQUIRE(x);
  CHECK(x->how == fiber::backend::job_exit::kind::exited);
  CHECK(x->code == 9);
  CHECK_FALSE(silence.seen().empty());
  CHECK(rt.sync([&] { return l->lists(); }) > lists0);
  rt.sync([&] { l.reset(); });
  check_clean_kube();
}

// Run by the next test as a separate master, which it SIGKILLs.
TEST_CASE("kubernetes (child): a master with k8s.api_server and 2 pod workers", "[.][faults-kube-child]") {
  fiber::Pool pool{fiber::target<&twice>, pool_opts(2, "k8s-child")};
  REQUIRE(pool.map(std::vector{1, 2}) == std::vector{2, 4});
  REQUIRE(poll_until([&] { return pool.live_workers() == 2; }, 30s));
  auto& rt = fiber::detail::runtime::instance();
  auto run = rt.sync([&] {
    return std::dynamic_pointer_cast<fiber::detail::kube_launcher>(rt.launcher<fiber::backend::from_env>())->run_id();
  });
  std::printf("READY %s\n", run.c_str());
  std::fflush(stdout);
  std::this_thread::sleep_for(300s); // until SIGKILLed
}

TEST_CASE("kubernetes: a SIGKILLed master with k8s.api_server leaves no pod or Secret", "[kube][faults][cleanup]") {
  auto& k = fake();
  const auto kcache = k.state_dir() + "/kcache";
  ::setenv("KUBECACHEDIR", kcache.c_str(), 1);
  helper_process proxy({"kubectl", "--kubeconfig=" + k.kubeconfig(), "proxy", "--port=0"});
  INFO("kubectl proxy said: " << proxy.first_line());
  auto at = proxy.first_line().rfind(':');
  REQUIRE(proxy.first_line().starts_with("Starting to serve on"));
  const std::string server = "http://127.0.0.1:" + proxy.first_line().substr(at + 1);
  // The child's configuration: credentials from the configuration only.
  ::setenv("FIBER_BACKEND", "kubernetes", 1);
  ::setenv("FIBER_K8S_CREDENTIALS", "api-server", 1);
  ::setenv("FIBER_K8S_API_SERVER", server.c_str(), 1);
  ::setenv("FIBER_K8S_IMAGE", "fiber-test:1", 1);
  std::string run;
  {
    fiber_test::child_master child("[faults-kube-child]");
    for (auto* v : {"FIBER_BACKEND", "FIBER_K8S_CREDENTIALS", "FIBER_K8S_API_SERVER", "FIBER_K8S_IMAGE"}) ::unsetenv(v);
    INFO("child said: " << child.said());
    run = child.run();
    REQUIRE_FALSE(run.empty());
    CHECK(k.pods("fiber.run=" + run).size() == 2);
    child.kill();
  }
  auto t0 = clk::now();
  bool pods_gone = poll_until([&] { return k.pods("fiber.run=" + run).empty(); }, 30s);
  bool secret_gone = poll_until(
      [&] {
        auto [st, l] = k.api("GET", "/api/v1/namespaces/default/secrets?labelSelector=fiber.run%3D" + run);
        return st == 200 && l["items"].empty();
      },
      30s - std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0));
  std::printf("kubernetes: a SIGKILLed master's pods gone: %d, Secret gone: %d, after %.2f s\n", pods_gone, secret_gone,
              seconds_since(t0));
  CHECK(pods_gone);
  CHECK(secret_gone);
  if (!pods_gone) // leave nothing behind
    k.api("DELETE", "/api/v1/namespaces/default/pods?labelSelector=fiber.run%3D" + run + "&gracePeriodSeconds=0");
  check_clean_kube();
}

// Run in a pod of the fake by the next test: a master that crashes once
// (its container restarts) after writing its run id to FIBER_TEST_MARKER.
TEST_CASE("kubernetes (child): a master in a pod whose container restarts", "[.][faults-kube-in-pod]") {
  const std::string marker = std::getenv("FIBER_TEST_MARKER");
  const bool first = !fs::exists(marker);
  fiber::Pool pool{fiber::target<&twice>, pool_opts(2, "in-pod")};
  REQUIRE(pool.map(std::vector{1, 2}) == std::vector{2, 4});
  auto& rt = fiber::detail::runtime::instance();
  auto run = rt.sync([&] {
    return std::dynamic_pointer_cast<fiber::detail::kube_launcher>(rt.launcher<fiber::backend::from_env>())->run_id();
  });
  std::printf("READY %s %s\n", first ? "first" : "again", run.c_str());
  std::fflush(stdout);
  if (first) {
    std::ofstream(marker) << run << "\n";
    std::_Exit(1); // restartPolicy OnFailure: a new master in the same pod
  }
  std::this_thread::sleep_for(300s); // until its pod is deleted
}

TEST_CASE("kubernetes: a master whose container restarts in its pod deletes what the earlier run left",
          "[kube][faults][cleanup]") {
  auto& k = fake();
  char tmpl[] = "/tmp/fiber-faults-marker-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  ::chmod(tmpl, 0777);
  const std::string dir = tmpl, marker = dir + "/run";
  const std::string name = "master-" + std::to_string(::getpid());
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}}},
              {"spec",
               {{"restartPolicy", "OnFailure"},
                {"containers",
                 {{{"name", "master"},
                   {"image", "fiber-test:1"},
                   {"command", {fs::read_symlink("/proc/self/exe").string()}},
                   {"args", {"[faults-kube-in-pod]"}},
                   {"env",
                    {{{"name", "FIBER_BACKEND"}, {"value", "kubernetes"}},
                     {{"name", "FIBER_TEST_MARKER"}, {"value", marker}}}}}}}}}};
  REQUIRE(k.api("POST", "/api/v1/namespaces/default/pods", pod).first == 201);
  const std::string log_path = "/api/v1/namespaces/default/pods/" + name + "/log";
  std::string logs;
  bool again = poll_until(
      [&] {
        logs = k.api_text("GET", log_path).second;
        return logs.find("READY again") != std::string::npos;
      },
      60s);
  INFO("master's log: " << logs);
  CHECK(again);
  const auto first_run = trim(read_file(marker));
  REQUIRE_FALSE(first_run.empty());
  const auto secrets = "/api/v1/namespaces/default/secrets?labelSelector=fiber.run%3D" + first_run;
  auto t0 = clk::now();
  CHECK(poll_until(
      [&] {
        auto [st, l] = k.api("GET", secrets);
        return k.pods("fiber.run=" + first_run).empty() && st == 200 && l["items"].empty();
      },
      20s));
  std::printf("kubernetes: the earlier run's pods and Secret gone %.2f s after the new master's READY\n",
              seconds_since(t0));
  // The master's pod goes: the garbage collector takes the rest (the earlier run's too, should the check fail).
  CHECK(k.api("DELETE", "/api/v1/namespaces/default/pods/" + name, {{"gracePeriodSeconds", 0}}).first == 200);
  check_clean_kube();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// ===========================================================================
// Docker
// ===========================================================================

TEST_CASE("docker: an event line with a field of another type is a clear error, which the stream logs and skips",
          "[docker-wire][faults]") {
  namespace docker = fiber::detail::docker;
  CHECK_THROWS_AS(docker::parse_event(R"({"Type":"container","Action":"die","timeNano":"soon"})"),
                  std::invalid_argument);
  CHECK_THROWS_WITH(docker::parse_event(R"({"Type":7})"), Catch::Contains("an event of an unexpected shape"));
  auto e = docker::parse_event(R"({"Type":"container","Action":"die","Actor":{"Attributes":{"exitCode":"3"}}})");
  REQUIRE(e);
  CHECK(e->attribute("exitCode") == "3");
}

TEST_CASE("docker: every connection to the daemon cut for 3 s during a map, one container killed meanwhile: the map "
          "completes, only that one is replaced",
          "[docker][faults]") {
  require_docker();
  char tmpl[] = "/tmp/fiber-faults-proxy-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  const std::string dir = tmpl;
  proxy_socket() = dir + "/docker.sock";
  const std::string creates = dir + "/creates";
  {
    helper_process proxy({"python3", here() + "/faults/docker_proxy.py", "--listen", proxy_socket(), "--outage", "3",
                          "--creates", creates});
    REQUIRE(proxy.first_line() == "READY");
    const unsigned n = 4;
    fiber::Pool<&work, docker_at<true>> pool{fiber::target<&work>, pool_opts(n, "docker-cut")};
    REQUIRE(sum(pool.map(inputs(8, 0))) == sum_of_squares(8));
    REQUIRE(poll_until([&] { return pool.live_workers() == n; }, 30s));
    auto& rt = fiber::detail::runtime::instance();
    const auto run = rt.sync([&] {
      return std::dynamic_pointer_cast<fiber::detail::docker_launcher>(rt.launcher<docker_at<true>>())->run_id();
    });
    const auto before = lines(read_file(creates)).size();
    auto result = std::async(std::launch::async, [&] { return pool.map(inputs(80, 200)); });
    ::kill(proxy.pid(), SIGUSR1); // cut: the event stream and every call fail for 3 s
    // Meanwhile one container is killed (through the daemon's own socket): its end must still be seen.
    auto victims = lines(shell("docker ps -q --filter label=fiber.run=" + run + " 2>/dev/null"));
    REQUIRE_FALSE(victims.empty());
    shell("docker kill " + victims[0] + " >/dev/null 2>&1");
    auto out = result.get();
    CHECK(sum(out) == sum_of_squares(80));
    // The killed one is replaced (once its end is known: after the cut), and no other.
    auto created = [&] { return lines(read_file(creates)).size() - before; };
    CHECK(poll_until([&] { return created() >= 1; }, 30s));
    CHECK(poll_until([&] { return pool.live_workers() == n; }, 30s));
    pool.close();
    pool.join();
    INFO("containers created again: " << created());
    CHECK(created() == 1);
  }
  check_clean_docker();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("docker: a stalled reader of workers' output does not stall heartbeats", "[docker][faults]") {
  require_docker();
  std::signal(SIGPIPE, SIG_IGN);
  log_watch missed("heartbeat missed");
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  std::fflush(stdout);
  const int saved = ::dup(1);
  ::dup2(p[1], 1); // the master's stdout: a pipe nobody reads
  ::close(p[1]);
  bool done = false;
  std::int64_t total = 0;
  {
    fiber::Pool<&work, docker_at<false>> pool{fiber::target<&work>, pool_opts(2, "docker-stall")};
    auto result = std::async(std::launch::async, [&] { return pool.map(inputs(24, 100, 64)); });
    done = result.wait_for(40s) == std::future_status::ready;
    ::close(p[0]); // a relay blocked on the pipe fails now (EPIPE), whatever happened
    total = sum(result.get());
    pool.close();
    pool.join();
  }
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  CHECK(done);
  CHECK(total == sum_of_squares(24));
  CHECK(missed.seen().empty());
  check_clean_docker();
}
