// SPDX-License-Identifier: BSL-1.0
// fiber/metrics.hpp: the families built from fiber::stats(), the endpoint of
// a master running a map, a real Prometheus scraping it (PromQL through its
// HTTP API) and the status page in headless Chromium.

#include <fiber/fiber.hpp>
#include <fiber/metrics.hpp>

#include <boost/describe/class.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include "integration_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

int metrics_slow_square(int x) {
  std::this_thread::sleep_for(5ms);
  return x * x;
}

int metrics_die_on_seven(int x) {
  if (x == 7) ::kill(::getpid(), SIGKILL);
  return x;
}

/// A remote object for the page's RemoteManager section.
struct metrics_counter {
  int add(int x) { return total += x; }
  int total = 0;
};
BOOST_DESCRIBE_STRUCT(metrics_counter, (), (add))

/// GET `path` from `url` ("http://127.0.0.1:PORT"): the body of a 200
/// reply. Throws std::runtime_error otherwise.
std::string http_get(const std::string& url, const std::string& path) {
  auto hostport = url.substr(url.find("//") + 2);
  auto colon = hostport.rfind(':');
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address(hostport.substr(0, colon)), std::uint16_t(std::stoi(hostport.substr(colon + 1)))});
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + hostport + "\r\n\r\n";
  asio::write(s, asio::buffer(req));
  std::string reply;
  asio::error_code ec;
  asio::read(s, asio::dynamic_buffer(reply), ec);
  if (ec && ec != asio::error::eof) throw std::runtime_error("GET " + path + ": " + ec.message());
  auto end = reply.find("\r\n\r\n");
  if (!(reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200")) || end == std::string::npos)
    throw std::runtime_error("GET " + path + ": " + reply.substr(0, reply.find("\r\n")));
  return reply.substr(end + 4);
}

/// The value of the sample `line_start` (name and labels) in a text exposition, or -1.
double sample(const std::string& text, const std::string& line_start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(line_start + " ")) return std::stod(line.substr(line_start.size() + 1));
  return -1;
}

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

/// A program of the test (Prometheus): SIGTERMed and reaped however the test ends.
class spawned {
public:
  explicit spawned(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = 0;
  }
  spawned(const spawned&) = delete;
  spawned& operator=(const spawned&) = delete;
  ~spawned() {
    if (!pid_) return;
    ::kill(pid_, SIGTERM);
    if (!fiber_test::eventually([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, 20s)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ != 0; }

private:
  pid_t pid_ = 0;
};

/// PromQL `query`'s one value through Prometheus' HTTP API at `url`, or -1.
double promql(const std::string& url, const std::string& query) {
  std::string q;
  for (unsigned char c : query) {
    if (std::isalnum(c) || c == '_') q += char(c);
    else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      q += b;
    }
  }
  try {
    auto j = nlohmann::json::parse(http_get(url, "/api/v1/query?query=" + q));
    const auto& r = j.at("data").at("result");
    if (r.empty()) return -1;
    return std::stod(r.at(0).at("value").at(1).get<std::string>());
  } catch (const std::exception&) {
    return -1;
  }
}

/// `path` exists (a program of Debian's `package`, which scripts/setup.sh installs).
void require_program(const char* path, const char* package) {
  INFO(path << " is the Debian package " << package << " (bash scripts/setup.sh)");
  REQUIRE(std::filesystem::exists(path));
}

/// Runs `n` tasks on `pool` to their end.
template <class P>
void run_tasks(P& pool, int n) {
  auto r = pool.map(fiber_test::iota(n));
  REQUIRE(r.size() == std::size_t(n));
}

} // namespace

TEST_CASE("metrics: a snapshot as Prometheus families, with their names and labels", "[metrics]") {
  fiber::runtime_stats s;
  auto& p = s.pools.emplace_back();
  p.name = "es";
  p.backend = "slurm";
  p.processes = 4;
  p.chunks_queued = 3;
  p.tasks.submitted = 12;
  p.tasks.done = 9;
  p.tasks.failed = 1;
  p.tasks.queued = 2;
  p.tasks.rerun = 3;
  p.tasks.rerun_by_cause = {{"oom_killed", 2}, {"node_lost", 1}};
  p.tasks.failed_by_cause = {{"oom_killed", 1}};
  p.workers_by_state = {{fiber::worker_state::busy, 3}, {fiber::worker_state::starting, 1}};
  p.workers_by_host = {{"node7", 3}};
  p.workers_started = 6;
  p.workers_lost = 2;
  std::ostringstream out;
  prometheus::TextSerializer{}.Serialize(out, fiber::detail::metrics_families(s));
  auto text = out.str();
  CHECK(sample(text, R"(fiber_tasks_total{pool="es",status="done"})") == 9);
  CHECK(sample(text, R"(fiber_tasks_total{pool="es",status="failed"})") == 1);
  CHECK(sample(text, R"(fiber_tasks_submitted_total{pool="es"})") == 12);
  CHECK(sample(text, R"(fiber_task_reruns_total{pool="es",cause="oom_killed"})") == 2);
  CHECK(sample(text, R"(fiber_task_reruns_total{pool="es",cause="node_lost"})") == 1);
  CHECK(sample(text, R"(fiber_task_failures_total{pool="es",cause="oom_killed"})") == 1);
  CHECK(sample(text, R"(fiber_tasks_in_flight{pool="es",state="queued"})") == 2);
  CHECK(sample(text, R"(fiber_chunks{pool="es",state="queued"})") == 3);
  CHECK(sample(text, R"(fiber_workers{pool="es",state="busy"})") == 3);
  CHECK(sample(text, R"(fiber_host_workers{pool="es",host="node7"})") == 3);
  CHECK(sample(text, R"(fiber_pool_processes{pool="es",backend="slurm"})") == 4);
  CHECK(sample(text, R"(fiber_workers_started_total{pool="es"})") == 6);
  CHECK(sample(text, R"(fiber_workers_lost_total{pool="es"})") == 2);
  CHECK(text.find("# TYPE fiber_tasks_total counter") != std::string::npos);
  CHECK(text.find("# TYPE fiber_workers gauge") != std::string::npos);
}

TEST_CASE("metrics: chunk sizes, link traffic, managers, processes, services and the object store as families",
          "[metrics]") {
  fiber::runtime_stats s;
  auto& p = s.pools.emplace_back();
  p.name = "es";
  p.tasks.submitted = 13;
  p.chunk_sizes = {{1, 1}, {4, 3}}; // a chunk of 1, three of 3 or 4 tasks
  p.bytes_sent = 1000;
  p.bytes_received = 2000;
  for (double rtt : {0.004, 0.001, 0.002, 0.0}) // the last: none measured yet, not counted
    p.workers.emplace_back().round_trip_seconds = rtt;
  auto& m = s.managers.emplace_back();
  m.name = "envs";
  m.objects = 8;
  m.calls = 100;
  m.calls_waiting = 2;
  m.workers_lost = 1;
  m.bytes_sent = 5;
  m.workers_by_state = {{fiber::worker_state::busy, 2}};
  for (auto state : {fiber::worker_state::exited, fiber::worker_state::busy})
    s.processes.emplace_back().worker.state = state;
  s.services.push_back({"queue", "queue-3", 7});
  s.object_store = {2, 4096, 1 << 20, 512};
  s.backends.push_back({"slurm", {{"PENDING", 3}, {"RUNNING", 5}}});
  std::ostringstream out;
  prometheus::TextSerializer{}.Serialize(out, fiber::detail::metrics_families(s));
  auto text = out.str();
  CHECK(text.find("# TYPE fiber_chunk_size_tasks histogram") != std::string::npos);
  CHECK(sample(text, R"(fiber_chunk_size_tasks_bucket{pool="es",le="1"})") == 1);
  CHECK(sample(text, R"(fiber_chunk_size_tasks_bucket{pool="es",le="4"})") == 4);
  CHECK(sample(text, R"(fiber_chunk_size_tasks_bucket{pool="es",le="+Inf"})") == 4);
  CHECK(sample(text, R"(fiber_chunk_size_tasks_count{pool="es"})") == 4);
  CHECK(sample(text, R"(fiber_chunk_size_tasks_sum{pool="es"})") == 13);
  CHECK(sample(text, R"(fiber_link_bytes_total{group="es",kind="pool",direction="sent"})") == 1000);
  CHECK(sample(text, R"(fiber_link_bytes_total{group="es",kind="pool",direction="received"})") == 2000);
  CHECK(sample(text, R"(fiber_link_round_trip_seconds{group="es",kind="pool",stat="median"})") == 0.002);
  CHECK(sample(text, R"(fiber_link_round_trip_seconds{group="es",kind="pool",stat="max"})") == 0.004);
  CHECK(sample(text, R"(fiber_manager_objects{manager="envs"})") == 8);
  CHECK(sample(text, R"(fiber_manager_calls_total{manager="envs"})") == 100);
  CHECK(sample(text, R"(fiber_manager_calls_waiting{manager="envs"})") == 2);
  CHECK(sample(text, R"(fiber_manager_processes{manager="envs",state="busy"})") == 2);
  CHECK(sample(text, R"(fiber_manager_processes_lost_total{manager="envs"})") == 1);
  CHECK(sample(text, R"(fiber_link_bytes_total{group="envs",kind="manager",direction="sent"})") == 5);
  CHECK(sample(text, R"(fiber_processes{state="exited"})") == 1);
  CHECK(sample(text, R"(fiber_processes{state="busy"})") == 1);
  CHECK(sample(text, R"(fiber_service_depth{kind="queue",service="queue-3"})") == 7);
  CHECK(sample(text, R"(fiber_backend_jobs{backend="slurm",state="PENDING"})") == 3);
  CHECK(sample(text, R"(fiber_backend_jobs{backend="slurm",state="RUNNING"})") == 5);
  CHECK(sample(text, "fiber_object_store_objects") == 2);
  CHECK(sample(text, "fiber_object_store_bytes") == 4096);
  CHECK(sample(text, "fiber_object_store_bound_bytes") == 1 << 20);
  CHECK(sample(text, "fiber_object_store_fetched_bytes_total") == 512);

  // No Pool: every family is still announced.
  std::ostringstream none;
  prometheus::TextSerializer{}.Serialize(none, fiber::detail::metrics_families({}));
  CHECK(none.str().find("# TYPE fiber_task_reruns_total counter") != std::string::npos);
}

TEST_CASE("metrics: the endpoint binds loopback unless metrics_public says otherwise", "[metrics]") {
  using fiber::detail::metrics_listen_spec;
  CHECK(metrics_listen_spec("auto", false) == "127.0.0.1:0");
  CHECK(metrics_listen_spec("localhost:9464", false) == "127.0.0.1:9464");
  CHECK(metrics_listen_spec("127.0.0.1:9464", false) == "127.0.0.1:9464");
  CHECK(metrics_listen_spec("[::1]:9464", false) == "[::1]:9464");
  CHECK_THROWS_WITH(metrics_listen_spec("0.0.0.0:9464", false), Catch::Contains("metrics_public"));
  CHECK_THROWS_AS(metrics_listen_spec("9464", false), fiber::config_error);
  CHECK_THROWS_AS(metrics_listen_spec("127.0.0.1:http", false), fiber::config_error);
  CHECK(metrics_listen_spec("0.0.0.0:9464", true) == "0.0.0.0:9464");
}

TEST_CASE("metrics: /metrics, /status.json and the page of a master running a map", "[metrics]") {
  auto url = fiber::serve_metrics("auto");
  REQUIRE(url.starts_with("http://127.0.0.1:"));
  CHECK(fiber::metrics_url() == url);
  CHECK(fiber::serve_metrics("auto") == url); // once serving, the same endpoint

  auto& gauge = prometheus::BuildGauge()
                    .Name("test_metrics_mean_return")
                    .Help("a user series")
                    .Register(fiber::metrics_registry())
                    .Add({});
  gauge.Set(412.5);

  fiber::Pool pool{fiber::target<&metrics_slow_square>, {.processes = 2, .name = "metrics-map"}};
  run_tasks(pool, 40);
  // A snapshot is at most 200 ms old.
  REQUIRE(fiber_test::eventually(
      [&] { return sample(http_get(url, "/metrics"), R"(fiber_tasks_total{pool="metrics-map",status="done"})") == 40; },
      10s));
  auto text = http_get(url, "/metrics");
  CHECK(sample(text, R"(fiber_tasks_submitted_total{pool="metrics-map"})") == 40);
  CHECK(sample(text, R"(fiber_tasks_total{pool="metrics-map",status="failed"})") == 0);
  CHECK(sample(text, "test_metrics_mean_return") == 412.5);

  auto j = nlohmann::json::parse(http_get(url, "/status.json"));
  const nlohmann::json* mine = nullptr;
  for (const auto& p : j.at("pools"))
    if (p.at("name") == "metrics-map") mine = &p;
  REQUIRE(mine);
  CHECK(mine->at("tasks").at("done") == 40);
  CHECK(mine->at("workers").size() == 2);
  CHECK(j.at("process").at("host") == fiber::detail::host_name());
  CHECK(mine->at("bytes_sent").get<std::uint64_t>() > 0);
  CHECK(mine->at("bytes_received").get<std::uint64_t>() > 0);
  std::uint64_t chunks = 0;
  for (const auto& [bound, n] : mine->at("chunk_sizes").items()) chunks += n.get<std::uint64_t>();
  CHECK(chunks >= 1);
  CHECK(mine->at("recent_losses").empty());
  for (const char* key : {"managers", "processes", "services", "backends"}) CHECK(j.at(key).is_array());
  CHECK(j.at("object_store").at("bound_bytes").is_number());
  bool series = false;
  for (const auto& x : j.at("series"))
    series = series || (x.at("name") == "test_metrics_mean_return" && x.at("value") == 412.5);
  CHECK(series);
  CHECK(http_get(url, "/").find("<title>fiber</title>") != std::string::npos);
  CHECK_THROWS(http_get(url, "/nothing-here"));
}

TEST_CASE("metrics: a real Prometheus scrapes the master; PromQL sees fiber_tasks_total rise",
          "[metrics][prometheus]") {
  const char* prom = "/usr/bin/prometheus";
  require_program(prom, "prometheus");
  auto url = fiber::serve_metrics("auto");
  fiber_test::temp_dir dir("fiber-prometheus");
  auto target = url.substr(url.find("//") + 2);
  {
    std::ofstream cfg(dir / "prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: fiber\n"
        << "    static_configs:\n      - targets: ['" << target << "']\n";
  }
  auto port = std::to_string(free_port());
  auto prom_url = "http://127.0.0.1:" + port;
  spawned server({prom, "--config.file=" + (dir / "prometheus.yml"), "--storage.tsdb.path=" + (dir / "data"),
                  "--web.listen-address=127.0.0.1:" + port, "--log.level=error"});
  REQUIRE(server.started());
  REQUIRE(fiber_test::eventually(
      [&] {
        try {
          return http_get(prom_url, "/-/ready").find("Ready") != std::string::npos;
        } catch (const std::exception&) {
          return false;
        }
      },
      60s));

  fiber::Pool pool{fiber::target<&metrics_slow_square>, {.processes = 2, .name = "prom-map"}};
  const std::string q = R"(fiber_tasks_total{job="fiber",pool="prom-map",status="done"})";
  run_tasks(pool, 30);
  CHECK(fiber_test::eventually([&] { return promql(prom_url, q) == 30; }, 60s));
  run_tasks(pool, 30);
  CHECK(fiber_test::eventually([&] { return promql(prom_url, q) == 60; }, 60s));
  CHECK(fiber_test::eventually([&] { return promql(prom_url, R"(up{job="fiber"})") == 1; }, 30s));
}

TEST_CASE("metrics: the status page in headless Chromium shows the workers and a rising task count",
          "[metrics][chromium]") {
  const char* chromium = "/usr/bin/chromium";
  require_program(chromium, "chromium");
  auto url = fiber::serve_metrics("auto");
  fiber_test::temp_dir profile("fiber-chromium");
  // The page polls /status.json each second: a virtual-time budget lets its
  // timers and fetches run before the DOM is dumped.
  const auto browse = [&](const std::string& extra) {
    return fiber_test::shell(std::string("timeout -s KILL 120 ") + chromium +
                             " --headless --no-sandbox --disable-gpu --disable-crash-reporter --no-first-run"
                             " --user-data-dir=" +
                             profile.path.string() + " --virtual-time-budget=4000 " + extra + " " + url +
                             "/ 2>/dev/null");
  };
  const auto value = [](const std::string& dom, const std::string& cls, const std::string& section = "data-pool") {
    std::smatch m;
    std::regex re(section + "=\"page-(map|envs)\"[\\s\\S]*?class=\"" + cls + "\">([0-9.]+)<");
    return std::regex_search(dom, m, re) ? std::stod(m[2]) : -1.0;
  };
  fiber::Pool pool{fiber::target<&metrics_slow_square>, {.processes = 2, .name = "page-map"}};
  run_tasks(pool, 20);
  auto first = browse("--dump-dom");
  CHECK(value(first, "workers-up") == 2);
  CHECK(value(first, "tasks-done") == 20);
  run_tasks(pool, 20);
  // A RemoteManager with two objects and three calls; a Pool whose worker dies.
  fiber::RemoteManager<metrics_counter> envs({.processes = 1, .name = "page-envs"});
  auto a = envs.make();
  auto b = envs.make();
  a.call<&metrics_counter::add>(1);
  b.call<&metrics_counter::add>(2);
  CHECK(a.call<&metrics_counter::add>(3) == 4);
  {
    fiber::Pool deaths{fiber::target<&metrics_die_on_seven>, {.processes = 1, .max_retries = 0, .name = "page-deaths"}};
    CHECK_THROWS_AS(deaths.map(fiber_test::iota(10), 1), fiber::worker_lost);
    REQUIRE(fiber_test::eventually( // the task fails at the link's loss; the loss is recorded at the job's end
        [] {
          for (const auto& p : fiber::stats().pools)
            if (p.name == "page-deaths") return !p.recent_losses.empty();
          return false;
        },
        30s));
    auto second = browse("--dump-dom");
    CHECK(value(second, "tasks-done") == 40);
    CHECK(value(second, "workers-up") == 2);
    CHECK(second.find(">ok<") != std::string::npos);
    CHECK(value(second, "objects", "data-manager") == 2);
    CHECK(value(second, "calls", "data-manager") == 5); // two constructions, three calls
    // The loss, as the master saw it: its group, its cause.
    std::smatch loss;
    CHECK(std::regex_search(
        second, loss, std::regex("<td>page-deaths</td><td>page-deaths-w[0-9]+</td><td>[^<]+</td><td>killed</td>")));
    // The screenshot, kept in the build tree (CI's artifact; docs/observability.md's figure).
    std::filesystem::remove("metrics_status_page.png");
    browse("--window-size=1280,900 --screenshot=" +
           (std::filesystem::current_path() / "metrics_status_page.png").string());
    CHECK(std::filesystem::exists("metrics_status_page.png"));
  }

  // Nothing of Chromium's is left (its profile directory names every process of it).
  auto pattern = "[/]" + profile.path.string().substr(1); // does not match pgrep's own shell
  CHECK(fiber_test::trim(fiber_test::shell("pgrep -f '" + pattern + "' || true")).empty());
}
