// SPDX-License-Identifier: BSL-1.0
// End-to-end tests of the kubernetes backend against tests/fake_kube (an API
// server whose kubelet runs each pod's command as a local process): Process
// exit codes and terminate/kill, a Queue and a Pipe shared with pods, Pool
// map, a pod deleted mid-map, a create answered late, each fault knob (image pull failure, eviction,
// OOM, node lost, unschedulable, watch 410/drop, token expiry, throttling),
// in-cluster and exec-plugin credentials, TLS, a master in a pod (its own
// image, ownerReferences), and a SIGKILLed master whose pods go away. After
// each test no pod and no process running this executable may be left.

#include <fiber/backend/kubernetes.hpp>
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include "backend_scenarios.hpp"
#include "fake_kube/fake_kube.hpp"
#include "integration_support.hpp"

#include <algorithm>
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
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
using nlohmann::json;
namespace kube = fiber::detail::kube;

namespace {

using fiber_test::exit_with;
using fiber_test::poll_until;
using fiber_test::read_file;
using fiber_test::returns_normally;
using fiber_test::seconds_since;
using fiber_test::sleep_ms;
using fiber_test::stray_workers;

// ---------------------------------------------------------------------------
// Targets (run in pods)
// ---------------------------------------------------------------------------

/// In a pod of the fake: its kubelet sets these, the test process has neither.
bool in_pod() { return std::getenv("KUBERNETES_SERVICE_HOST") && std::getenv("HOSTNAME"); }
std::string pod_name() { return in_pod() ? std::getenv("HOSTNAME") : ""; }

struct task_in {
  std::int64_t x = 0;
  int sleep_ms = 0;
  std::string start_log;  ///< if set, "x pod\n" is appended when the task starts
  int first_sleep_ms = 0; ///< slept instead of sleep_ms by x's first start (none in start_log before)
};
struct task_out {
  std::int64_t y = 0;
  std::string pod;
};

task_out square_where(task_in in) {
  if (in.first_sleep_ms > 0 && read_file(in.start_log).find(std::to_string(in.x) + " ") != 0 &&
      read_file(in.start_log).find("\n" + std::to_string(in.x) + " ") == std::string::npos)
    in.sleep_ms = in.first_sleep_ms;
  if (!in.start_log.empty()) {
    int fd = ::open(in.start_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) {
      auto line = std::to_string(in.x) + " " + pod_name() + "\n"; // one write(2): lines never interleave
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (in.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(in.sleep_ms));
  return {in.x * in.x, pod_name()};
}

int twice(int x) { return 2 * x; }

// ---------------------------------------------------------------------------
// Helpers (master side)
// ---------------------------------------------------------------------------

const std::vector<std::string>& fake_flags() {
  static const std::vector<std::string> f{"--node-cpu",    "64",
                                          "--node-memory", "256Gi",
                                          "--pass-env",    "ASAN_*",
                                          "--pass-env",    "UBSAN_*",
                                          "--pass-env",    "LSAN_*",
                                          "--pass-env",    "LD_LIBRARY_PATH",
                                          "--sa-dir-env",  "FIBER_K8S_SERVICE_ACCOUNT_DIR",
                                          "--no-events"};
  return f;
}

/// The fake every test of this process shares. Stopped at exit after
/// fiber's runtime (whose launchers delete their pods through it).
fiber_test::fake_kube& fake() {
  struct holder {
    fiber_test::fake_kube k{fake_flags()};
    ~holder() { fiber::detail::runtime::instance().stop(); }
  };
  static holder h;
  return h.k;
}

std::vector<std::string> fiber_pods(const std::string& extra = "") {
  return fake().pods("app.kubernetes.io/managed-by=fiber" + (extra.empty() ? "" : "," + extra));
}

/// After each test: no pod and no worker process left (bounded waits).
void check_clean() {
  bool none = poll_until([] { return fiber_pods().empty(); }, 10s);
  auto left = fiber_pods();
  INFO("pods left: " << left.size() << (left.empty() ? "" : " e.g. " + left[0]));
  CHECK(none);
  bool no_workers = poll_until([] { return stray_workers().empty(); }, 10s);
  INFO("worker processes left: " << stray_workers().size());
  CHECK(no_workers);
}

/// FIBER_BACKEND=kubernetes with the fake's kubeconfig, before the first
/// launcher is made. The image is any name: the process kubelet runs the
/// command (this executable) on this machine.
void configure() {
  static const bool once = [] {
    auto& k = fake();
    ::setenv("KUBECONFIG", k.kubeconfig().c_str(), 1);
    ::setenv("KUBECACHEDIR", (k.state_dir() + "/kcache").c_str(), 1);
    fiber::set_config("backend", "kubernetes");
    fiber::set_config("k8s.image", "fiber-test:1");
    return true;
  }();
  (void)once;
}

/// A directory tasks write their start logs to (pods share this machine's filesystem).
const std::string& shared_dir() {
  struct dir {
    std::string path = [] {
      std::string t = "/tmp/fiber-kube-it-XXXXXX";
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

/// Start log: task -> pods that started it.
std::map<std::int64_t, std::vector<std::string>> starts(const std::string& p) {
  std::map<std::int64_t, std::vector<std::string>> m;
  std::ifstream in(p);
  std::int64_t x;
  std::string pod;
  while (in >> x >> pod) m[x].push_back(pod);
  return m;
}

/// The launcher behind `Policy` in this process.
template <class Policy>
std::shared_ptr<fiber::detail::kube_launcher> launcher_of() {
  auto& rt = fiber::detail::runtime::instance();
  return rt.sync([&] {
    return std::dynamic_pointer_cast<fiber::detail::kube_launcher>(rt.template launcher<Policy>());
  });
}

/// A kubernetes policy with its own launcher (the runtime keeps one per
/// policy type), its options and access adjusted by Tweak::apply.
template <class Tweak>
struct kube_with {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    auto o = fiber::detail::kube_options::from_config();
    o.state_dir = fiber::detail::runtime::instance().run_dir();
    auto a = fake().access();
    Tweak::apply(o, a);
    auto l = std::make_shared<fiber::detail::kube_launcher>(std::move(ex), std::move(o), std::move(a));
    l->start();
    return l;
  }
};

struct missing_image {
  static void apply(fiber::detail::kube_options& o, kube::access&) { o.image = "fiber-missing:1"; }
};
struct no_api_server {
  static void apply(fiber::detail::kube_options&, kube::access& a) { a.server = "https://127.0.0.1:1"; }
};
struct plain_tcp {
  static void apply(fiber::detail::kube_options& o, kube::access&) { o.tls = false; }
};

/// Exit reports of a launcher driven directly (the runtime thread calls the handlers).
struct exit_log {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, fiber::backend::job_exit> got;
  std::vector<fiber::backend::exit_handler> handlers(const std::vector<std::string>& names) {
    std::vector<fiber::backend::exit_handler> h;
    for (auto& n : names)
      h.push_back([this, n](const fiber::backend::job_exit& x) {
        std::lock_guard g(m);
        got[n] = x;
        cv.notify_all();
      });
    return h;
  }
  std::optional<fiber::backend::job_exit> wait(const std::string& n, std::chrono::milliseconds limit) {
    std::unique_lock lk(m);
    cv.wait_for(lk, limit, [&] { return got.count(n) > 0; });
    if (!got.count(n)) return std::nullopt;
    return got[n];
  }
};

/// A launcher made on the runtime thread and destroyed there.
struct direct_launcher {
  std::shared_ptr<fiber::detail::kube_launcher> l;
  direct_launcher(fiber::detail::kube_options o, kube::access a) {
    auto& rt = fiber::detail::runtime::instance();
    o.state_dir = rt.run_dir();
    l = rt.sync([&] {
      auto p = std::make_shared<fiber::detail::kube_launcher>(rt.executor(), std::move(o), std::move(a));
      p->start();
      return p;
    });
  }
  ~direct_launcher() {
    fiber::detail::runtime::instance().sync([&] { l.reset(); });
  }
  /// Jobs running argv (not fiber workers), named `names`.
  std::vector<fiber::backend::job> launch(const std::vector<std::string>& names, std::vector<std::string> argv,
                                          exit_log& log, fiber::resources res = {}) {
    std::vector<fiber::backend::job_spec> specs;
    for (auto& n : names) specs.push_back({n, argv, {}, res, std::nullopt, std::nullopt});
    return fiber::detail::runtime::instance().sync([&] { return l->launch(specs, log.handlers(names)); });
  }
  void cancel(const fiber::backend::job& j, int sig) {
    fiber::detail::runtime::instance().sync([&] { l->cancel(j, sig); });
  }
  std::string run() const { return l->run_id(); }
};

fiber::detail::kube_options base_options() {
  configure();
  return fiber::detail::kube_options::from_config();
}

/// Waits until the pod is running (its container started).
bool pod_running(const std::string& name, std::chrono::milliseconds limit = 20s) {
  return poll_until(
      [&] {
        auto [st, p] = fake().api("GET", "/api/v1/namespaces/default/pods/" + name);
        return st == 200 && p["status"].value("phase", "") == "Running";
      },
      limit);
}

// The sum of an object's floats, read where the task runs.
double sum_object(fiber::object_ref<std::vector<float>> r) {
  auto v = r.get();
  double s = 0;
  for (float x : v) s += x;
  return s;
}

} // namespace

// ===========================================================================
// Process, Queue, Pipe
// ===========================================================================

TEST_CASE("kubernetes: Process exit codes, terminate -> -15, kill -> -9; the pod as created", "[kube][process]") {
  configure();
  {
    fiber_test::exit_code_processes<> ps;
    auto& term = ps.term;
    term.set_resources({1, 128, 0});
    auto t0 = clk::now();
    ps.start();
    std::printf("kubernetes Process: start -> connected %.2f s\n", seconds_since(t0));

    // The pod of `term`, as the API server has it.
    const auto run = launcher_of<fiber::backend::from_env>()->run_id();
    auto names = fake().pods("fiber.run=" + run + ",fiber.worker=" + kube::label_value(term.name()));
    REQUIRE(names.size() == 1);
    auto [st, pod] = fake().api("GET", "/api/v1/namespaces/default/pods/" + names[0]);
    REQUIRE(st == 200);
    auto& spec = pod["spec"];
    auto& c = spec["containers"][0];
    CHECK(spec["restartPolicy"] == "Never");
    CHECK(spec["automountServiceAccountToken"] == false);
    CHECK(c["image"] == "fiber-test:1");
    CHECK(c["command"][0] == fs::read_symlink("/proc/self/exe").string());
    CHECK(c["resources"]["limits"] == json({{"cpu", "1"}, {"memory", "128Mi"}}));
    CHECK(c["resources"]["requests"] == c["resources"]["limits"]);
    CHECK(pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fiber");
    CHECK(pod.dump().find(fiber::detail::runtime::instance().secret()) == std::string::npos); // never in the spec
    bool by_ref = false;
    for (auto& e : c["env"])
      if (e["name"] == "FIBER_INTERNAL_SECRET") by_ref = e["valueFrom"]["secretKeyRef"]["name"] == "fiber-" + run;
    CHECK(by_ref);
    auto [sst, secret] = fake().api("GET", "/api/v1/namespaces/default/secrets/fiber-" + run);
    REQUIRE(sst == 200);
    CHECK(kube::base64_decode(secret["data"]["fiber-secret"].get<std::string>()) ==
          std::optional<std::string>(fiber::detail::runtime::instance().secret()));

    ps.stop_and_check();
  }
  check_clean();
}

TEST_CASE("kubernetes: a Queue shared with pod Processes delivers every item exactly once", "[kube][queue]") {
  configure();
  fiber_test::check_queue_exactly_once<&in_pod>("pod");
  check_clean();
}

TEST_CASE("kubernetes: a duplex Pipe with a pod Process", "[kube][pipe]") {
  configure();
  fiber_test::check_duplex_pipe<&in_pod>();
  check_clean();
}

// ===========================================================================
// Pool
// ===========================================================================

TEST_CASE("kubernetes: Pool map over 4 pods, over TLS by default", "[kube][pool][tls]") {
  configure();
  {
    auto t0 = clk::now();
    fiber::Pool pool{fiber::target<&square_where>, pool_opts(4, "k8s-map")};
    auto first = pool.apply(task_in{3, 0, {}});
    std::printf("kubernetes Pool(4): construction -> first result %.2f s\n", seconds_since(t0));
    CHECK(first.y == 9);
    CHECK_THAT(first.pod, Catch::StartsWith("fiber-"));
    REQUIRE(poll_until([&] { return pool.live_workers() == 4; }, 30s));
    auto out = pool.map(inputs(400, 1), 5);
    REQUIRE(out.size() == 400);
    std::set<std::string> pods;
    for (std::size_t i = 0; i < out.size(); ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i * i));
      pods.insert(out[i].pod);
    }
    CHECK(pods.size() == 4);
    // fiber::stats(): each pod's phase as the launcher last saw it.
    CHECK(poll_until([] { return fiber_test::backend_jobs("kubernetes", "Running") == 4; }, 30s));
    auto urls = fiber::detail::runtime::instance().listener_urls();
    CHECK(std::any_of(urls.begin(), urls.end(), [](auto& u) { return u.rfind("tls+tcp://", 0) == 0; }));
    // The ephemeral certificate reaches the pods through the run's Secret.
    const auto run = launcher_of<fiber::backend::from_env>()->run_id();
    auto [st, secret] = fake().api("GET", "/api/v1/namespaces/default/secrets/fiber-" + run);
    REQUIRE(st == 200);
    auto cert = kube::base64_decode(secret["data"].value("tls-0", ""));
    REQUIRE(cert);
    CHECK_THAT(*cert, Catch::StartsWith("-----BEGIN CERTIFICATE-----"));
    // Only the certificate: the workers pin it (their tls_ca) under the
    // name it carries; they never hold the master's private key.
    for (auto& [key, value] : secret["data"].items()) {
      INFO(key);
      CHECK((key == "tls-0" || key == "fiber-secret"));
      CHECK(kube::base64_decode(value.get<std::string>())->find("PRIVATE KEY") == std::string::npos);
    }
    auto names = fake().pods("fiber.run=" + run);
    REQUIRE_FALSE(names.empty());
    auto [pst, pod] = fake().api("GET", "/api/v1/namespaces/default/pods/" + names[0]);
    REQUIRE(pst == 200);
    std::map<std::string, std::string> env;
    for (auto& e : pod["spec"]["containers"][0]["env"]) env[e["name"]] = e.value("value", "");
    CHECK(*cert == read_file(env["FIBER_TLS_CA"]));
    CHECK(env["FIBER_TLS_SERVER_NAME"] == "fiber-" + run);
    CHECK(env.count("FIBER_TLS_CERT") == 0);
    CHECK(env.count("FIBER_TLS_KEY") == 0);
    CHECK(pod["spec"]["volumes"][0]["secret"]["defaultMode"] == 0400);
    // The master's key stays in its memory: no file of the run holds it.
    CHECK(fiber::detail::config_string("tls_key").empty());
    CHECK(fiber::detail::config_string("tls_cert").empty());
    for (auto& f : fs::recursive_directory_iterator(fiber::detail::runtime::instance().run_dir())) {
      INFO(f.path());
      if (f.is_regular_file()) CHECK(read_file(f.path().string()).find("PRIVATE KEY") == std::string::npos);
    }
  }
  check_clean();
}

// A pod's own service listens as its master does (tls+tcp://): the pod holds
// no private key of the master's, so it serves with an ephemeral certificate.
void queue_in_pod(fiber::Queue<fiber::Queue<int>> out, fiber::Queue<int> go) {
  fiber::Queue<int> q;
  q.put(7);
  out.put(q);
  (void)go.get();
}

TEST_CASE("kubernetes: pods read an object the master put, over TLS by default", "[kube][objects][tls]") {
  configure();
  {
    std::vector<float> v(1 << 20);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i % 1000);
    double want = 0;
    for (float x : v) want += x;
    auto r = fiber::put(v);
    fiber::Pool pool{fiber::target<&sum_object>, pool_opts(2, "k8s-obj")};
    auto out = pool.map(std::vector(8, r), 1);
    REQUIRE(out.size() == 8);
    for (double s : out) CHECK(s == want);
  }
  check_clean();
}

TEST_CASE("kubernetes: a Queue made in a pod serves the master over TLS", "[kube][queue][tls]") {
  configure();
  {
    fiber::Queue<fiber::Queue<int>> out;
    fiber::Queue<int> go;
    fiber::Process p{fiber::target<&queue_in_pod>, out, go};
    p.start();
    auto q = out.get(60s);
    REQUIRE(q);
    CHECK(q->get(30s) == std::optional<int>(7));
    go.put(1);
    REQUIRE(p.join(60s));
    CHECK(p.exitcode() == 0);
  }
  check_clean();
}

TEST_CASE("kubernetes: maxtasksperchild: successors launched ahead wait for a seat; every task once",
          "[kube][pool][maxtasks]") {
  configure();
  {
    auto o = pool_opts(2, "k8s-ahead");
    o.maxtasksperchild = 2;
    fiber::Pool pool{fiber::target<&fiber_test::span_after>, o};
    auto spans = pool.map(std::vector<int>(16, 50), 1);
    REQUIRE(spans.size() == 16);
    auto sum = fiber_test::summarize(spans);
    for (auto& [pid, n] : sum.per_pid) CHECK(n <= 2);
    CHECK(sum.per_pid.size() >= 8);
    CHECK(sum.most_at_once <= 2);
  }
  check_clean();
}

TEST_CASE("kubernetes: k8s.tls off: workers dial tcp://", "[kube][pool][tls]") {
  configure();
  {
    // Exit status 128+n is told apart from death by signal n by the worker's
    // `exiting` frame (over TLS it is lost at _Exit: see docs/kubernetes/README.md).
    fiber::basic_process<kube_with<plain_tcp>> high{fiber::target<&exit_with>, 130};
    high.start();
    REQUIRE(high.join(30s));
    CHECK(high.exitcode() == 130); // not -2: the worker said it exits with 130
  }
  {
    fiber::Pool<&twice, kube_with<plain_tcp>> pool{fiber::target<&twice>, pool_opts(2, "k8s-tcp")};
    CHECK(pool.map(std::vector{1, 2, 3}) == std::vector{2, 4, 6});
    auto urls = fiber::detail::runtime::instance().listener_urls();
    CHECK(std::any_of(urls.begin(), urls.end(), [](auto& u) { return u.rfind("tcp://", 0) == 0; }));
  }
  check_clean();
}

// ===========================================================================
// Faults
// ===========================================================================

TEST_CASE("kubernetes: a pod deleted mid-map (kubectl delete): complete, exactly-once results",
          "[kube][pool][faults]") {
  configure();
  const auto log = shared_dir() + "/starts-delete";
  constexpr int n = 48;
  {
    fiber::Pool pool{fiber::target<&square_where>, pool_opts(4, "k8s-del")};
    REQUIRE(poll_until([&] { return pool.live_workers() == 4; }, 30s));
    std::vector<task_out> out;
    auto t0 = clk::now();
    auto in = inputs(n, 100, log);
    in[0].first_sleep_ms = 30000; // its pod is deleted while it runs, however slow kubectl is
    auto results = pool.imap(in, 1);
    // The pod running task 0.
    std::string victim;
    REQUIRE(poll_until(
        [&] {
          if (auto s = starts(log); s.count(0)) victim = s[0].front();
          return !victim.empty();
        },
        30s));
    fiber::detail::spawn_request kubectl;
    kubectl.argv = {"kubectl", "delete", "pod", victim, "--wait=false"};
    auto said = fiber::detail::run(kubectl, 30s);
    INFO("kubectl said: " << said.out << said.err);
    REQUIRE(said.ok());
    for (auto&& r : results) out.push_back(std::move(r));
    std::printf("kubernetes Pool(4): %d x 100 ms with pod %s deleted mid-map: %.2f s\n", n, victim.c_str(),
                seconds_since(t0));
    REQUIRE(out.size() == std::size_t(n));
    for (int i = 0; i < n; ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i) * i);
    }
    CHECK(poll_until([&] { return pool.live_workers() == 4; }, 30s)); // replaced
    auto s = starts(log);
    CHECK(s.size() == std::size_t(n));
    int reruns = 0;
    for (auto& [x, pods] : s) reruns += int(pods.size()) - 1;
    CHECK(reruns >= 1); // the victim's running task ran again elsewhere
    CHECK(s[0].size() == 2);
    CHECK(seconds_since(t0) < 25); // task 0's rerun did not sleep its first run's 30 s
  }
  check_clean();
}

TEST_CASE("kubernetes: an evicted pod's tasks rerun; complete, exactly-once results", "[kube][pool][faults]") {
  configure();
  const auto log = shared_dir() + "/starts-evict";
  constexpr int n = 30;
  {
    fiber::Pool pool{fiber::target<&square_where>, pool_opts(3, "k8s-evict")};
    std::vector<task_out> out;
    std::string victim;
    for (auto&& r : pool.imap(inputs(n, 100, log), 1)) {
      if (victim.empty()) {
        victim = r.pod;
        fake().control("POST", "pods/default/" + victim + "/evict", json::object());
      }
      out.push_back(std::move(r));
    }
    REQUIRE(out.size() == std::size_t(n));
    for (int i = 0; i < n; ++i) CHECK(out[i].y == std::int64_t(i) * i);
    std::set<std::string> after;
    for (int i = n / 2; i < n; ++i) after.insert(out[i].pod);
    CHECK_FALSE(after.count(victim));
    int reruns = 0;
    for (auto& [x, pods] : starts(log)) reruns += int(pods.size()) - 1;
    CHECK(reruns >= 1);
  }
  check_clean();
}

TEST_CASE("kubernetes: a task whose pods are OOMKilled fails with worker_lost saying so", "[kube][pool][faults]") {
  configure();
  const auto log = shared_dir() + "/starts-oom";
  {
    auto o = pool_opts(2, "k8s-oom");
    o.max_retries = 1;
    o.resources.memory_mb = 64;
    fiber::Pool pool{fiber::target<&square_where>, o};
    auto res = pool.apply_async(task_in{5, 120000, log});
    for (std::size_t round = 1; round <= 2; ++round) {
      REQUIRE(poll_until([&] { return starts(log)[5].size() == round; }, 30s));
      fake().control("POST", "pods/default/" + starts(log)[5].back() + "/oom", json::object());
    }
    try {
      (void)res.get(30s);
      FAIL("the task should fail with worker_lost");
    } catch (const fiber::worker_lost& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), Catch::Contains("OOMKilled") && Catch::Contains("64Mi"));
    }
    CHECK(pool.apply(task_in{6, 0, {}}).y == 36); // the pool goes on
  }
  check_clean();
}

TEST_CASE("kubernetes: an image that cannot be pulled is a backend_error at once", "[kube][errors]") {
  configure();
  using P = kube_with<missing_image>;
  fake().control("POST", "images", {{"image", "fiber-missing:1"}, {"fail", true}});
  {
    auto t0 = clk::now();
    fiber::basic_process<P> p{fiber::target<&returns_normally>};
    p.start();
    try {
      p.join(20s);
      FAIL("join() should throw fiber::backend_error");
    } catch (const fiber::backend_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("kubernetes: pod ") && Catch::Contains("ErrImagePull") &&
                               Catch::Contains("fiber-missing:1"));
    }
    std::printf("kubernetes: image pull failure -> backend_error from Process::join in %.3f s\n", seconds_since(t0));
    CHECK(seconds_since(t0) < 5.0);
  }
  {
    auto t0 = clk::now();
    fiber::Pool<&twice, P> pool{fiber::target<&twice>, pool_opts(2, "k8s-noimage")};
    try {
      (void)pool.map(std::vector{1, 2, 3});
      FAIL("map() should throw fiber::backend_error");
    } catch (const fiber::backend_error& e) {
      CHECK_THAT(e.what(), Catch::Contains("kubernetes backend") && Catch::Contains("ErrImagePull"));
    }
    std::printf("kubernetes: image pull failure -> backend_error from Pool::map in %.3f s\n", seconds_since(t0));
    CHECK(seconds_since(t0) < 10.0);
  }
  fake().control("POST", "images", {{"image", "fiber-missing:1"}, {"fail", false}});
  check_clean();
}

TEST_CASE("kubernetes: an API server that cannot be reached is a backend_error at once", "[kube][errors]") {
  configure();
  auto t0 = clk::now();
  fiber::basic_process<kube_with<no_api_server>> p{fiber::target<&returns_normally>};
  p.start();
  try {
    p.join(10s);
    FAIL("join() should throw fiber::backend_error");
  } catch (const fiber::backend_error& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("kubernetes: ") &&
                             Catch::Contains("cannot reach the API server at https://127.0.0.1:1"));
  }
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("kubernetes: each fault knob ends its job as lost with Kubernetes' reason", "[kube][faults]") {
  auto o = base_options();
  std::vector<std::string> warn_text;
  std::mutex wm;
  fiber::set_log_sink([&](const fiber::log_record& r) {
    std::lock_guard g(wm);
    warn_text.emplace_back(r.message);
  });
  struct restore_sink {
    ~restore_sink() { fiber::set_log_sink(nullptr); }
  } restore;
  exit_log log;
  {
    direct_launcher d(o, fake().access());
    auto jobs = d.launch({"oom", "evict", "deleted", "term"}, {"/bin/sleep", "60"}, log);
    auto unsched = d.launch({"unsched"}, {"/bin/sleep", "60"}, log, {1000, 0, 0});
    for (auto& j : jobs) REQUIRE(pod_running(j.id));
    fake().control("POST", "pods/default/" + jobs[0].id + "/oom", json::object());
    fake().control("POST", "pods/default/" + jobs[1].id + "/evict", json::object());
    REQUIRE(fake().api("DELETE", "/api/v1/namespaces/default/pods/" + jobs[2].id).first == 200);
    d.cancel(jobs[3], 15);
    auto oom = log.wait("oom", 20s);
    REQUIRE(oom);
    CHECK(oom->how == fiber::backend::job_exit::kind::lost);
    CHECK_THAT(oom->reason, Catch::Contains("OOMKilled"));
    auto ev = log.wait("evict", 20s);
    REQUIRE(ev);
    CHECK(ev->how == fiber::backend::job_exit::kind::lost);
    CHECK_THAT(ev->reason, Catch::Contains("evicted") && Catch::Contains("memory"));
    auto del = log.wait("deleted", 20s);
    REQUIRE(del);
    CHECK(del->how == fiber::backend::job_exit::kind::lost);
    CHECK_THAT(del->reason, Catch::Contains("deleted by someone else"));
    auto term = log.wait("term", 20s);
    REQUIRE(term);
    CHECK(term->exitcode() == -15);
    // Unschedulable: pending, its reason logged, no exit.
    CHECK(poll_until(
        [&] {
          std::lock_guard g(wm);
          return std::any_of(warn_text.begin(), warn_text.end(), [](auto& m) {
            return m.find("is pending: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu") !=
                   std::string::npos;
          });
        },
        20s));
    CHECK_FALSE(log.wait("unsched", 10ms));
    d.cancel(unsched[0], 9);
    auto u = log.wait("unsched", 20s);
    REQUIRE(u);
    CHECK(u->exitcode() == -9);
  }
  check_clean();
}

TEST_CASE("kubernetes: node lost: its pods' jobs are lost with the taint manager's reason", "[kube][faults]") {
  auto o = base_options();
  fiber_test::fake_kube k{fake_flags()}; // a node of its own: losing it stops every pod on it
  exit_log log;
  {
    direct_launcher d(o, k.access());
    auto jobs = d.launch({"n1", "n2"}, {"/bin/sleep", "60"}, log);
    for (auto& j : jobs)
      REQUIRE(poll_until(
          [&] {
            auto [st, p] = k.api("GET", "/api/v1/namespaces/default/pods/" + j.id);
            return st == 200 && p["status"].value("phase", "") == "Running";
          },
          20s));
    auto t0 = clk::now();
    k.control("POST", "node/lost", {{"not_ready_after_s", 0}, {"evict_after_s", 0.5}, {"pod_gc_after_s", 2}});
    for (const char* n : {"n1", "n2"}) {
      auto x = log.wait(n, 20s);
      REQUIRE(x);
      CHECK(x->how == fiber::backend::job_exit::kind::lost);
      CHECK_THAT(x->reason, Catch::Contains("DeletionByTaintManager"));
    }
    std::printf("kubernetes: node lost -> jobs lost after %.2f s\n", seconds_since(t0));
    k.control("POST", "node/recover", json::object());
  }
  CHECK(poll_until([&] { return k.pods("app.kubernetes.io/managed-by=fiber").empty(); }, 10s));
}

TEST_CASE("kubernetes: the watch expires (410) or drops: re-listed, no exit lost", "[kube][watch]") {
  configure();
  auto& rt = fiber::detail::runtime::instance();
  {
    fiber::Pool pool{fiber::target<&square_where>, pool_opts(2, "k8s-watch")};
    REQUIRE(pool.map(inputs(4, 0)).size() == 4);
    auto l = launcher_of<fiber::backend::from_env>();
    const unsigned lists0 = rt.sync([&] { return l->lists(); });
    fake().control("POST", "stats/reset", json::object());

    // Cut the watch and keep the API server failing lists for a while (the
    // client retries 503s: ~1.5 s), while Processes end: the re-list sees them.
    fiber::Process a{fiber::target<&sleep_ms>, 300}, b{fiber::target<&exit_with>, 3};
    a.start();
    REQUIRE(poll_until([&] { return a.pid() != 0; }, 30s));
    fake().control("POST", "errors",
                   {{"verb", "list"}, {"resource", "pods"}, {"code", 503}, {"count", 4}, {"retry_after_s", 0}});
    fake().control("POST", "watch/drop", json::object());
    b.start();
    REQUIRE(a.join(30s));
    REQUIRE(b.join(30s));
    CHECK(a.exitcode() == 0);
    CHECK(b.exitcode() == 3);
    CHECK(rt.sync([&] { return l->lists(); }) >= lists0 + 1);

    // 410 Expired on every open watch: re-listed; a map goes on and completes.
    // The watch reopened after the drop must be open, or the 410 reaches nobody.
    REQUIRE(poll_until([&] { return fake().control("GET", "stats").value("open_watches", 0) >= 1; }, 30s));
    auto mid = std::async(std::launch::async, [&] { return pool.map(inputs(40, 20)); });
    REQUIRE(fake().control("POST", "watch/expire", {{"scope", "all"}}).value("watches", 0) >= 1);
    fiber::Process c{fiber::target<&exit_with>, 4};
    c.start();
    REQUIRE(c.join(30s));
    CHECK(c.exitcode() == 4);
    REQUIRE(mid.wait_for(60s) == std::future_status::ready);
    auto out = mid.get();
    REQUIRE(out.size() == 40);
    for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i].y == std::int64_t(i * i));
    CHECK(rt.sync([&] { return l->lists(); }) >= lists0 + 2);
    auto calls = fake().user_requests();
    INFO(calls.dump());
    CHECK(calls.value("get pods", 0) == 0);  // never polled
    CHECK(calls.value("list pods", 0) >= 2); // re-listed after the drop and the 410
  }
  check_clean();
}

TEST_CASE("kubernetes: a create answered after the watch saw the pod run: the phase stays the watch's",
          "[kube][watch]") {
  configure();
  auto& rt = fiber::detail::runtime::instance();
  // A slow API server: the create is carried out, the watch reports the pod
  // Running, and only then the answer (the pod as created: Pending) arrives.
  fake().control("POST", "hold", {{"verb", "create"}, {"resource", "pods"}, {"count", 1}});
  {
    fiber::Process p{fiber::target<&sleep_ms>, 600000};
    p.start();
    auto l = launcher_of<fiber::backend::from_env>();
    REQUIRE(poll_until([] { return fake().control("GET", "hold").value("held", 0) == 1; }, 30s));
    REQUIRE(poll_until([] { return fiber_test::backend_jobs("kubernetes", "Running") == 1; }, 30s));
    CHECK(rt.sync([&] { return l->creates_in_flight(); }) == 1);
    CHECK(fake().control("DELETE", "hold", json::object()).value("released", 0) == 1);
    REQUIRE(poll_until([&] { return rt.sync([&] { return l->creates_in_flight(); }) == 0; }, 30s));
    CHECK(fiber_test::backend_jobs("kubernetes", "Running") == 1);
    CHECK(fiber_test::backend_jobs("kubernetes", "Pending") == 0);
    p.terminate();
    REQUIRE(p.join(30s));
    CHECK(p.exitcode() == -15);
  }
  fake().control("DELETE", "hold", json::object());
  check_clean();
}

TEST_CASE("kubernetes: throttled (429) and unavailable (503) calls are retried", "[kube][errors]") {
  configure();
  fake().control("POST", "stats/reset", json::object());
  fake().control("POST", "errors",
                 {{"verb", "create"}, {"resource", "pods"}, {"code", 429}, {"count", 2}, {"retry_after_s", 0}});
  {
    fiber::Process p{fiber::target<&exit_with>, 5};
    p.start();
    REQUIRE(p.join(30s));
    CHECK(p.exitcode() == 5);
  }
  CHECK(fake().control("GET", "stats")["by_code"].value("429", 0) == 2);
  check_clean();
}

// ===========================================================================
// Credentials
// ===========================================================================

TEST_CASE("kubernetes: in-cluster credentials; a rotated service-account token is re-read after a 401",
          "[kube][credentials]") {
  auto o = base_options();
  o.reaper = false;
  o.service_account_dir = fake().get("sa_dir");
  auto a = kube::resolve(o, {"127.0.0.1", std::to_string(fake().info()["port"].get<int>()), "", ""});
  REQUIRE(a.in_cluster);
  exit_log log;
  {
    direct_launcher d(o, a);
    auto first = d.launch({"sa-1"}, {"/bin/sleep", "60"}, log);
    REQUIRE(pod_running(first[0].id));
    fake().control("POST", "tokens/rotate-sa", {{"expire_old_after_s", 0}});
    auto second = d.launch({"sa-2"}, {"/bin/sleep", "60"}, log);
    REQUIRE(pod_running(second[0].id));
    CHECK(fiber::detail::runtime::instance().sync([&] { return d.l->api().reauthentications(); }) >= 1);
    d.cancel(first[0], 9);
    d.cancel(second[0], 9);
    REQUIRE(log.wait("sa-1", 20s));
    REQUIRE(log.wait("sa-2", 20s));
    CHECK(log.got["sa-2"].exitcode() == -9);
  }
  check_clean();
}

TEST_CASE("kubernetes: a kubeconfig with an exec credential plugin: run, re-run when expired and after a 401",
          "[kube][credentials]") {
  auto o = base_options();
  o.reaper = false;
  const auto dir = shared_dir() + "/exec";
  fs::create_directories(dir);
  std::ofstream(dir + "/fake.json") << fake().info().dump();
  const std::string plugin = dir + "/plugin.py";
  std::ofstream(plugin) << R"PY(#!/usr/bin/python3
import datetime, json, os, ssl, urllib.request
here = os.path.dirname(os.path.abspath(__file__))
info = json.load(open(os.path.join(here, "fake.json")))
assert json.loads(os.environ["KUBERNETES_EXEC_INFO"])["kind"] == "ExecCredential"
ctx = ssl.create_default_context(cafile=info["ca"])
req = urllib.request.Request(info["url"] + "/fake/tokens", data=b"{}", method="POST",
                             headers={"Authorization": "Bearer " + info["admin_token"], "Content-Type": "application/json"})
tok = json.load(urllib.request.urlopen(req, context=ctx))["token"]
with open(os.path.join(here, "tokens"), "a") as f:
    f.write(tok + "\n")

exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(os.environ["TTL"]))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": tok, "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
)PY";
  ::chmod(plugin.c_str(), 0755);
  json cfg = {
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"current-context", "exec"},
      {"clusters",
       {{{"name", "fake"}, {"cluster", {{"server", fake().url()}, {"certificate-authority", fake().get("ca")}}}}}},
      {"users",
       {{{"name", "plugin"},
         {"user",
          {{"exec",
            {{"apiVersion", "client.authentication.k8s.io/v1"},
             {"command", plugin},
             {"env", {{{"name", "TTL"}, {"value", "7"}}}},
             {"interactiveMode", "Never"}}}}}}}},
      {"contexts",
       {{{"name", "exec"}, {"context", {{"cluster", "fake"}, {"user", "plugin"}, {"namespace", "default"}}}}}}};
  std::ofstream(dir + "/kubeconfig") << cfg.dump(2);
  o.credentials = "kubeconfig";
  auto a = kube::resolve(o, {"", "", dir + "/kubeconfig", ""}); // through kubectl config view
  REQUIRE(a.exec);
  auto runs = [&] {
    std::ifstream in(dir + "/tokens");
    std::vector<std::string> v;
    for (std::string t; std::getline(in, t);) v.push_back(t);
    return v;
  };
  // Some kubectl builds (google-cloud-sdk's dispatcher) run the plugin themselves, to ask the server's version.
  const std::size_t runs0 = runs().size();
  exit_log log;
  {
    direct_launcher d(o, a);
    auto j1 = d.launch({"exec-1"}, {"/bin/sleep", "60"}, log);
    REQUIRE(pod_running(j1[0].id));
    const auto t_first = clk::now();
    REQUIRE(runs().size() == runs0 + 1);
    // Valid for 7 s, refreshed 5 s early: from 2 s on it counts as expired.
    REQUIRE(poll_until([&] { return seconds_since(t_first) > 2.5; }, 5s));
    auto j2 = d.launch({"exec-2"}, {"/bin/sleep", "60"}, log);
    REQUIRE(pod_running(j2[0].id));
    CHECK(runs().size() == runs0 + 2);
    const unsigned reauth0 = fiber::detail::runtime::instance().sync([&] { return d.l->api().reauthentications(); });
    fake().control("POST", "tokens/expire", {{"token", runs().back()}}); // rejected from now on: 401
    auto j3 = d.launch({"exec-3"}, {"/bin/sleep", "60"}, log);
    REQUIRE(pod_running(j3[0].id));
    CHECK(runs().size() == runs0 + 3);
    CHECK(fiber::detail::runtime::instance().sync([&] { return d.l->api().reauthentications(); }) == reauth0 + 1);
    for (auto* j : {&j1, &j2, &j3}) d.cancel((*j)[0], 9);
    for (const char* n : {"exec-1", "exec-2", "exec-3"}) REQUIRE(log.wait(n, 20s));
  }
  check_clean();
}

// ===========================================================================
// Nothing left behind
// ===========================================================================

// Run by the next test as a separate master, which it SIGKILLs.
TEST_CASE("kubernetes (child): a master with 2 pod workers, waiting to be killed", "[.][kube-master-child]") {
  fiber::set_config("backend", "kubernetes"); // KUBECONFIG: the parent's fake
  fiber::set_config("k8s.image", "fiber-test:1");
  fiber::Pool pool{fiber::target<&twice>, pool_opts(2, "k8s-child")};
  REQUIRE(pool.map(std::vector{1, 2}) == std::vector{2, 4});
  REQUIRE(poll_until([&] { return pool.live_workers() == 2; }, 30s));
  std::printf("READY %s\n", launcher_of<fiber::backend::from_env>()->run_id().c_str());
  std::fflush(stdout);
  std::this_thread::sleep_for(300s); // until SIGKILLed
}

TEST_CASE("kubernetes: a SIGKILLed master's pods are gone within the heartbeat timeout", "[kube][cleanup]") {
  configure();
  fiber_test::child_master child("[kube-master-child]");
  INFO("child said: " << child.said());
  const std::string run = child.run();
  REQUIRE_FALSE(run.empty());
  CHECK(fake().pods("fiber.run=" + run).size() == 2);
  child.kill();
  auto t0 = clk::now();
  const auto timeout = std::chrono::milliseconds(fiber::detail::config_int("heartbeat_timeout_ms"));
  bool gone = poll_until([&] { return fake().pods("fiber.run=" + run).empty(); }, timeout + 3s);
  std::printf("kubernetes: SIGKILLed master's pods gone after %.2f s\n", seconds_since(t0));
  CHECK(gone);
  CHECK(poll_until(
      [&] { // kubectl deletes the pods first, then the Secret
        auto [st, secrets] = fake().api("GET", "/api/v1/namespaces/default/secrets?labelSelector=fiber.run%3D" + run);
        return st == 200 && secrets["items"].empty();
      },
      5s));
  check_clean();
}

// Run in a pod of the fake by the next test: a master with in-cluster credentials.
TEST_CASE("kubernetes (child): a master in a pod", "[.][kube-master-in-pod]") {
  fiber::Pool pool{fiber::target<&square_where>, pool_opts(2, "in-pod")};
  auto out = pool.map(inputs(10, 0));
  std::set<std::string> pods;
  std::int64_t sum = 0;
  for (auto& r : out) {
    sum += r.y;
    pods.insert(r.pod);
  }
  std::printf("RESULT %lld (%zu pods)\nREADY\n", static_cast<long long>(sum), pods.size());
  std::fflush(stdout);
  std::this_thread::sleep_for(300s); // until its pod is deleted
}

TEST_CASE("kubernetes: a master in a pod: in-cluster credentials, its own image, workers owned by its pod",
          "[kube][cleanup][credentials]") {
  configure();
  const std::string name = "master-" + std::to_string(::getpid());
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"labels", {{"fiber.test", "master"}}}}},
              {"spec",
               {{"restartPolicy", "Never"},
                {"containers",
                 {{{"name", "master"},
                   {"image", "registry.example/fiber-master:7"},
                   {"command", {fs::read_symlink("/proc/self/exe").string()}},
                   {"args", {"[kube-master-in-pod]"}},
                   {"env", {{{"name", "FIBER_BACKEND"}, {"value", "kubernetes"}}}}}}}}}};
  auto [st, created] = fake().api("POST", "/api/v1/namespaces/default/pods", pod);
  REQUIRE(st == 201);
  const std::string uid = created["metadata"]["uid"];
  std::string logs;
  bool ready = poll_until(
      [&] {
        logs = fake().api_text("GET", "/api/v1/namespaces/default/pods/" + name + "/log").second;
        return logs.find("READY") != std::string::npos;
      },
      60s);
  INFO("master's log: " << logs);
  REQUIRE(ready);
  CHECK_THAT(logs, Catch::Contains("RESULT 285"));
  auto workers = fiber_pods();
  REQUIRE(workers.size() == 2);
  const std::string run =
      fake().api("GET", "/api/v1/namespaces/default/pods/" + workers[0]).second["metadata"]["labels"]["fiber.run"];
  const std::string secrets = "/api/v1/namespaces/default/secrets?labelSelector=fiber.run%3D" + run;
  {
    auto [s, l] = fake().api("GET", secrets);
    REQUIRE(l["items"].size() == 1);
    CHECK(l["items"][0]["metadata"]["ownerReferences"][0]["uid"] == uid);
  }
  for (auto& w : workers) {
    auto [s, p] = fake().api("GET", "/api/v1/namespaces/default/pods/" + w);
    CHECK(p["metadata"]["ownerReferences"][0]["uid"] == uid);
    CHECK(p["spec"]["containers"][0]["image"] == "registry.example/fiber-master:7");
  }
  // The master's pod goes (grace 0: its process is killed, nothing of fiber runs): the garbage collector takes the rest.
  REQUIRE(fake().api("DELETE", "/api/v1/namespaces/default/pods/" + name, {{"gracePeriodSeconds", 0}}).first == 200);
  CHECK(poll_until([&] { return fiber_pods().empty(); }, 10s));
  CHECK(poll_until(
      [&] {
        auto [s, l] = fake().api("GET", secrets);
        return s == 200 && l["items"].empty();
      },
      10s));
  check_clean();
}
