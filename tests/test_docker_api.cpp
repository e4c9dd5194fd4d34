// SPDX-License-Identifier: BSL-1.0
// Tests of fiber's HTTP client (libcurl on Asio) and Docker Engine API client
// against a real daemon (CTest fixture docker_daemon: tests/rigs/docker-up.sh)
// and the test image (fixture docker_image: FIBER_DOCKER_IMAGE). The
// pure parts (DOCKER_HOST, versions, the create document, stream framing)
// are tested without one. Containers made here carry the label
// fiber.apitest=<random>; each test checks none of them is left.

#include <fiber/backend/docker/api.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;
namespace http = fiber::detail::http;
namespace dk = fiber::detail::docker;
using clk = std::chrono::steady_clock;

namespace {

/// An io_context on its own thread; `run(f)` runs f there and returns its
/// result (the clients belong to that thread).
struct io_thread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  std::thread t{[this] { io.run(); }};
  ~io_thread() {
    guard.reset();
    t.join();
  }
  template <class F>
  auto run(F f) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto fut = task.get_future();
    asio::post(io, [&task] { task(); });
    return fut.get();
  }
};

std::string test_image() {
  const char* v = std::getenv("FIBER_DOCKER_IMAGE");
  return v ? v : "";
}

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

std::string random_tag() {
  std::random_device rd;
  return std::to_string(rd());
}

void require_daemon() {
  if (test_image().empty()) FAIL("FIBER_DOCKER_IMAGE is not set: run through ctest (fixtures docker_up, docker_image)");
}

/// A container running this test binary's hidden helper test case: prints
/// to stdout and stderr, then exits with DOCKER_TEST_HELPER_EXIT.
dk::container_spec helper(const std::string& tag, int exit_code, bool sleep = false) {
  dk::container_spec c;
  c.name = "fiber-apitest-" + tag + (sleep ? "-sleep" : "-exit" + std::to_string(exit_code));
  c.image = test_image();
  c.argv = {self_exe(), "[docker-helper]"};
  c.env = {"DOCKER_TEST_HELPER_EXIT=" + std::to_string(exit_code), sleep ? "DOCKER_TEST_HELPER_SLEEP=1" : "X=1"};
  c.labels = {{"app.kubernetes.io/managed-by", "fiber"}, {"fiber.apitest", tag}};
  if (const char* l = std::getenv("FIBER_DOCKER_LABELS")) // the fixture's label of this build tree's containers
    if (std::string kv = l; kv.find('=') != std::string::npos)
      c.labels[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  auto dir = c.argv[0].substr(0, c.argv[0].rfind('/'));
  c.binds = {dir + ":" + dir + ":ro"};
  c.user = std::to_string(::getuid()) + ":" + std::to_string(::getgid());
  return c;
}

/// Events seen by an events stream, waited on with deadlines.
struct event_log {
  std::mutex m;
  std::condition_variable cv;
  std::vector<dk::event> events;
  bool subscribed = false;
  void add(const dk::event& e) {
    std::lock_guard lk(m);
    events.push_back(e);
    cv.notify_all();
  }
  template <class Pred>
  bool wait(Pred p, std::chrono::milliseconds limit) {
    std::unique_lock lk(m);
    return cv.wait_for(lk, limit, [&] { return p(); });
  }
  std::optional<dk::event> find(const std::string& action, const std::string& name) {
    for (auto& e : events)
      if (e.action == action && e.attribute("name") == name) return e;
    return std::nullopt;
  }
};

std::size_t containers_tagged(io_thread& io, dk::api& api, const std::string& tag) {
  auto f = io.run([&] { return api.async_list({"fiber.apitest=" + tag}, true, asio::use_future); });
  return f.get().size();
}

bool none_left(io_thread& io, dk::api& api, const std::string& tag, std::chrono::seconds limit = 10s) {
  auto deadline = clk::now() + limit;
  while (containers_tagged(io, api, tag) != 0) {
    if (clk::now() > deadline) return false;
    std::this_thread::sleep_for(50ms); // polling the daemon's list against a deadline
  }
  return true;
}

} // namespace

// Run inside a container by the tests below (hidden).
TEST_CASE("docker helper: output then exit", "[.][docker-helper]") {
  std::printf("helper stdout\n");
  std::fflush(stdout);
  std::fprintf(stderr, "helper stderr\n");
  if (std::getenv("DOCKER_TEST_HELPER_SLEEP")) std::this_thread::sleep_for(120s);
  std::_Exit(std::atoi(std::getenv("DOCKER_TEST_HELPER_EXIT") ? std::getenv("DOCKER_TEST_HELPER_EXIT") : "0"));
}

// ---------------------------------------------------------------------------
// Pure parts
// ---------------------------------------------------------------------------

TEST_CASE("DOCKER_HOST parsing", "[docker][unit]") {
  auto d = dk::parse_host("");
  CHECK(d.unix_socket == "/var/run/docker.sock"); // DOCKER_HOST unset
  CHECK(d.base_url == "http://localhost");
  CHECK(dk::parse_host("unix:///run/user/1000/docker.sock").unix_socket == "/run/user/1000/docker.sock");
  CHECK(dk::parse_host("/tmp/d.sock").unix_socket == "/tmp/d.sock");
  CHECK(dk::parse_host("tcp://10.0.0.5").base_url == "http://10.0.0.5:2375");
  CHECK(dk::parse_host("tcp://10.0.0.5:4243/").base_url == "http://10.0.0.5:4243");
  auto t = dk::parse_host("tcp://h:2376", true, "/certs");
  CHECK(t.base_url == "https://h:2376");
  CHECK(t.tls.ca_file == "/certs/ca.pem");
  CHECK(t.tls.cert_file == "/certs/cert.pem");
  CHECK(t.tls.key_file == "/certs/key.pem");
  CHECK_THROWS_WITH(dk::parse_host("ssh://me@host"),
                    Catch::Contains("docker: DOCKER_HOST=ssh://me@host is not supported"));
}

TEST_CASE("DOCKER_HOST: what goes over the network in clear is named", "[docker][unit]") {
  auto exposed = [](const dk::endpoint& e) { return fiber::detail::http::exposure(e.base_url, e.tls); };
  CHECK_THAT(exposed(dk::parse_host("tcp://10.0.0.5")), Catch::StartsWith("plain HTTP"));
  CHECK_THAT(exposed(dk::parse_host("http://docker.example:2375")), Catch::StartsWith("plain HTTP"));
  CHECK(exposed(dk::parse_host("tcp://10.0.0.5", true, "/certs")).empty());
  CHECK(exposed(dk::parse_host("")).empty()); // the unix socket
  CHECK(exposed(dk::parse_host("tcp://127.0.0.1:2375")).empty());
  CHECK(exposed(dk::parse_host("tcp://localhost")).empty());
  CHECK(exposed(dk::parse_host("tcp://[::1]:2375")).empty());
}

TEST_CASE("API version negotiation: the older of the daemon's and fiber's newest", "[docker][unit]") {
  CHECK(dk::choose_api_version("1.41", "1.12", "h") == "1.41");
  CHECK(dk::choose_api_version("1.51", "1.24", "h") == std::string(dk::newest_api_version));
  CHECK(dk::choose_api_version("1.52", "1.44", "h") == std::string(dk::newest_api_version));
  CHECK_THROWS_WITH(dk::choose_api_version("1.39", "1.12", "h"), Catch::Contains("speaks Engine API 1.39"));
  CHECK_THROWS_WITH(dk::choose_api_version("1.60", "1.50", "h"), Catch::Contains("minimum 1.50"));
  CHECK_THROWS_AS(dk::choose_api_version("", "", "h"), fiber::backend_error);
}

TEST_CASE("the create document", "[docker][unit]") {
  dk::container_spec s;
  s.name = "n";
  s.image = "img:1";
  s.argv = {"/opt/app/bin/app", "--x"};
  s.env = {"A=1"};
  s.labels = {{"k", "v"}};
  s.user = "1000:1000";
  s.binds = {"/opt/app/bin:/opt/app/bin:ro"};
  s.nano_cpus = 2'000'000'000;
  s.memory_bytes = 64 << 20;
  s.gpus = 1;
  auto j = dk::create_body(s);
  CHECK(j["Image"] == "img:1");
  CHECK(j["Entrypoint"] == nlohmann::json::array({"/opt/app/bin/app"}));
  CHECK(j["Cmd"] == nlohmann::json::array({"--x"}));
  CHECK(j["Env"][0] == "A=1");
  CHECK(j["Labels"]["k"] == "v");
  CHECK(j["User"] == "1000:1000");
  auto& h = j["HostConfig"];
  CHECK(h["AutoRemove"] == true);
  CHECK(h["Init"] == true);
  CHECK(h["NetworkMode"] == "host");
  CHECK(h["Binds"][0] == "/opt/app/bin:/opt/app/bin:ro");
  CHECK(h["NanoCpus"] == 2'000'000'000);
  CHECK(h["Memory"] == 64 << 20);
  CHECK(h["MemorySwap"] == 64 << 20);
  CHECK(h["DeviceRequests"][0]["Count"] == 1);
  CHECK(h["DeviceRequests"][0]["Capabilities"][0][0] == "gpu");
}

TEST_CASE("event lines and attach frames", "[docker][unit]") {
  auto e = dk::parse_event(
      R"({"status":"die","id":"abc","Type":"container","Action":"die","Actor":{"ID":"abc","Attributes":{"exitCode":"7","name":"w1"}},"time":1,"timeNano":1000000001})");
  REQUIRE(e);
  CHECK(e->action == "die");
  CHECK(e->id == "abc");
  CHECK(e->attribute("exitCode") == "7");
  CHECK(e->attribute("name") == "w1");
  CHECK(e->time_nano == 1000000001);
  CHECK_FALSE(dk::parse_event("not json"));

  std::vector<std::string> lines;
  dk::line_splitter sp;
  sp.feed("{\"a\":1}\n{\"b\"", [&](std::string_view l) { lines.emplace_back(l); });
  sp.feed(":2}\n", [&](std::string_view l) { lines.emplace_back(l); });
  CHECK(lines == std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"});

  std::string frames;
  auto frame = [&](char stream, std::string_view s) {
    frames += stream;
    frames += std::string(3, '\0');
    for (int i = 3; i >= 0; --i) frames += char((s.size() >> (8 * i)) & 0xff);
    frames += s;
  };
  frame(1, "out\n");
  frame(2, "err\n");
  std::vector<std::pair<int, std::string>> got;
  dk::output_demux d;
  auto on = [&](int s, std::string_view b) { got.emplace_back(s, std::string(b)); };
  d.feed(std::string_view(frames).substr(0, 5), on); // a frame split anywhere
  d.feed(std::string_view(frames).substr(5), on);
  CHECK(got == std::vector<std::pair<int, std::string>>{{1, "out\n"}, {2, "err\n"}});
}

// ---------------------------------------------------------------------------
// The HTTP client against the daemon's socket
// ---------------------------------------------------------------------------

TEST_CASE("http: a request over a unix socket, kept-alive reuse, a failure at once", "[docker][http]") {
  require_daemon();
  io_thread io;
  std::optional<http::client> c;
  io.run([&] { c.emplace(io.io.get_executor()); });
  http::request r;
  r.url = "http://localhost/_ping";
  r.unix_socket = dk::endpoint_from_env().unix_socket;
  r.timeout = 10s;
  for (int i = 0; i < 3; ++i) {
    auto f = io.run([&] { return c->async_request(r, asio::use_future); });
    auto resp = f.get();
    CHECK(resp.status == 200);
    CHECK(resp.body == "OK");
    CHECK_FALSE(resp.header("api-version").empty());
  }
  // No daemon there: an error at once, with curl's words.
  r.unix_socket = "/nonexistent/docker.sock";
  auto t0 = clk::now();
  auto f = io.run([&] { return c->async_request(r, asio::use_future); });
  try {
    f.get();
    FAIL("expected an error");
  } catch (const std::system_error& e) {
    CHECK(e.code() == http::make_error(CURLE_COULDNT_CONNECT));
  }
  CHECK(clk::now() - t0 < 1s);
  io.run([&] { c.reset(); });
}

TEST_CASE("http: a per-request timeout ends a request that gets no complete answer", "[docker][http]") {
  require_daemon();
  io_thread io;
  std::optional<http::client> c;
  io.run([&] { c.emplace(io.io.get_executor()); });
  http::request r; // an events stream with nothing to say: its body never ends
  r.url = "http://localhost/events?filters=" + dk::label_filter({"fiber.apitest=none-" + random_tag()});
  r.unix_socket = dk::endpoint_from_env().unix_socket;
  r.timeout = 300ms;
  auto t0 = clk::now();
  auto f = io.run([&] { return c->async_request(r, asio::use_future); });
  try {
    f.get();
    FAIL("expected a timeout");
  } catch (const std::system_error& e) {
    CHECK(e.code() == http::make_error(CURLE_OPERATION_TIMEDOUT));
  }
  auto took = clk::now() - t0;
  CHECK(took >= 250ms);
  CHECK(took < 5s);
  io.run([&] { c.reset(); });
}

TEST_CASE("http: a stream delivers as it comes and ends when cancelled", "[docker][http]") {
  require_daemon();
  io_thread io;
  std::optional<http::client> c;
  io.run([&] { c.emplace(io.io.get_executor()); });
  const auto tag = random_tag();
  http::request r;
  r.url = "http://localhost/events?filters=" + dk::label_filter({"fiber.apitest=" + tag});
  r.unix_socket = dk::endpoint_from_env().unix_socket;
  std::mutex m;
  std::condition_variable cv;
  std::string got;
  bool head = false, done = false;
  std::error_code result;
  asio::cancellation_signal stop;
  io.run([&] {
    http::stream_handlers h;
    h.on_head = [&](const http::response& resp) {
      std::lock_guard lk(m);
      head = resp.status == 200;
      cv.notify_all();
    };
    h.on_data = [&](std::string_view d) {
      std::lock_guard lk(m);
      got += d;
      cv.notify_all();
    };
    c->async_stream(r, std::move(h), asio::bind_cancellation_slot(stop.slot(), [&](std::error_code ec, http::response) {
                      std::lock_guard lk(m);
                      done = true;
                      result = ec;
                      cv.notify_all();
                    }));
  });
  {
    std::unique_lock lk(m);
    REQUIRE(cv.wait_for(lk, 10s, [&] { return head; }));
  }
  // Something to see: a container with the tag (created, removed).
  dk::api api(io.io.get_executor(), dk::endpoint_from_env());
  auto spec = helper(tag, 0);
  auto id = io.run([&] { return api.async_create(spec, asio::use_future); }).get().at("Id").get<std::string>();
  io.run([&] { return api.async_remove(id, true, asio::use_future); }).get();
  {
    std::unique_lock lk(m);
    CHECK(cv.wait_for(lk, 10s, [&] { return got.find("\"destroy\"") != std::string::npos; }));
    CHECK(got.find("\"create\"") != std::string::npos);
    CHECK_FALSE(done);
  }
  io.run([&] { stop.emit(asio::cancellation_type::terminal); });
  {
    std::unique_lock lk(m);
    REQUIRE(cv.wait_for(lk, 10s, [&] { return done; }));
    CHECK(result == asio::error::operation_aborted);
  }
  io.run([&] { c.reset(); });
}

// ---------------------------------------------------------------------------
// The Docker API client
// ---------------------------------------------------------------------------

TEST_CASE("docker api: version negotiation", "[docker][api]") {
  require_daemon();
  io_thread io;
  dk::api api(io.io.get_executor(), dk::endpoint_from_env());
  auto doc = io.run([&] { return api.async_version(asio::use_future); }).get();
  auto daemon = doc.value("ApiVersion", "");
  INFO("daemon API " << daemon << ", negotiated " << api.version());
  REQUIRE_FALSE(daemon.empty());
  CHECK(api.version() == dk::choose_api_version(daemon, doc.value("MinAPIVersion", ""), "h"));
  CHECK(dk::parse_api_version(api.version()) <= dk::parse_api_version(dk::newest_api_version));
}

TEST_CASE("docker api: create, attach, start, events (die with exit code, destroy), kill, remove", "[docker][api]") {
  require_daemon();
  io_thread io;
  dk::api api(io.io.get_executor(), dk::endpoint_from_env());
  const auto tag = random_tag();
  event_log log;
  asio::cancellation_signal stop_events;
  std::promise<std::exception_ptr> events_ended;
  io.run([&] {
    dk::event_handlers h;
    h.on_subscribed = [&] {
      std::lock_guard lk(log.m);
      log.subscribed = true;
      log.cv.notify_all();
    };
    h.on_event = [&](const dk::event& e) { log.add(e); };
    api.async_events({"fiber.apitest=" + tag}, "", std::move(h),
                     asio::bind_cancellation_slot(stop_events.slot(), [&](std::exception_ptr e, nlohmann::json) {
                       events_ended.set_value(e);
                     }));
  });
  REQUIRE(log.wait([&] { return log.subscribed; }, 10s));

  // Exit 7, with its output seen through attach.
  auto seven = helper(tag, 7);
  auto created = io.run([&] { return api.async_create(seven, asio::use_future); }).get();
  auto id = created.at("Id").get<std::string>();
  CHECK(id.size() == 64);
  std::mutex om;
  std::string out, err;
  std::promise<void> attached;
  std::promise<std::exception_ptr> attach_done;
  io.run([&] {
    dk::attach_handlers h;
    h.on_attached = [&] { attached.set_value(); };
    h.on_output = [&](int stream, std::string_view b) {
      std::lock_guard lk(om);
      (stream == 2 ? err : out) += b;
    };
    api.async_attach(seven.name, std::move(h), [&](std::exception_ptr e, nlohmann::json) { attach_done.set_value(e); });
  });
  REQUIRE(attached.get_future().wait_for(10s) == std::future_status::ready);
  io.run([&] { return api.async_start(seven.name, asio::use_future); }).get();
  REQUIRE(log.wait([&] { return log.find("die", seven.name).has_value(); }, 30s));
  CHECK(log.find("die", seven.name)->attribute("exitCode") == "7");
  CHECK(log.find("die", seven.name)->attribute("fiber.apitest") == tag); // labels come with the event
  auto ended = attach_done.get_future();
  REQUIRE(ended.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(ended.get());
  {
    std::lock_guard lk(om);
    CHECK_THAT(out, Catch::EndsWith("helper stdout\n"));
    CHECK(err == "helper stderr\n"); // nothing else: the helper sets no FIBER_* variable
  }
  // AutoRemove: destroyed by the daemon.
  CHECK(log.wait([&] { return log.find("destroy", seven.name).has_value(); }, 10s));

  // A sleeper, inspected, killed with SIGTERM: docker-init forwards it.
  auto sleeper = helper(tag, 0, true);
  io.run([&] { return api.async_create(sleeper, asio::use_future); }).get();
  io.run([&] { return api.async_start(sleeper.name, asio::use_future); }).get();
  auto info = io.run([&] { return api.async_inspect(sleeper.name, asio::use_future); }).get();
  CHECK(info["State"]["Running"] == true);
  CHECK(info["HostConfig"]["Init"] == true);
  CHECK(info["Config"]["Labels"]["fiber.apitest"] == tag);
  auto listed = io.run([&] { return api.async_list({"fiber.apitest=" + tag}, false, asio::use_future); }).get();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["Names"][0] == "/" + sleeper.name);
  io.run([&] { return api.async_kill(sleeper.name, 15, asio::use_future); }).get();
  REQUIRE(log.wait([&] { return log.find("die", sleeper.name).has_value(); }, 30s));
  CHECK(log.find("die", sleeper.name)->attribute("exitCode") == "143"); // 128 + SIGTERM, through docker-init

  // Killing or removing what is gone: Docker's own words, its status.
  CHECK(log.wait([&] { return log.find("destroy", sleeper.name).has_value(); }, 10s));
  try {
    io.run([&] { return api.async_kill(sleeper.name, 9, asio::use_future); }).get();
    FAIL("kill of a removed container succeeded");
  } catch (const dk::api_error& e) {
    CHECK(e.status() == 404);
    CHECK_THAT(e.what(), Catch::StartsWith("docker: kill container " + sleeper.name + ": ") &&
                             Catch::Contains("No such container"));
  }
  // A created, never started container: removed with force.
  auto idle = helper(tag, 3);
  io.run([&] { return api.async_create(idle, asio::use_future); }).get();
  io.run([&] { return api.async_remove(idle.name, true, asio::use_future); }).get();

  io.run([&] { stop_events.emit(asio::cancellation_type::terminal); });
  auto ev_end = events_ended.get_future();
  REQUIRE(ev_end.wait_for(10s) == std::future_status::ready);
  auto e = ev_end.get();
  REQUIRE(e);
  CHECK_THROWS_AS(std::rethrow_exception(e), std::system_error); // aborted, not an api_error
  CHECK(none_left(io, api, tag));
}

TEST_CASE("docker api: a missing image is Docker's message within 2 s", "[docker][api][errors]") {
  require_daemon();
  io_thread io;
  dk::api api(io.io.get_executor(), dk::endpoint_from_env());
  auto spec = helper(random_tag(), 0);
  spec.image = "fiber-no-such-image:" + random_tag();
  auto t0 = clk::now();
  try {
    io.run([&] { return api.async_create(spec, asio::use_future); }).get();
    FAIL("created a container from a missing image");
  } catch (const dk::api_error& e) {
    CHECK(e.status() == 404);
    CHECK_THAT(e.what(), Catch::StartsWith("docker: create container " + spec.name) &&
                             Catch::Contains("No such image: " + spec.image));
  }
  CHECK(clk::now() - t0 < 2s);
}

TEST_CASE("docker api: a daemon that cannot be reached is an error at once, saying where and what to do",
          "[docker][api][errors]") {
  io_thread io;
  dk::api api(io.io.get_executor(), dk::parse_host("unix:///nonexistent/docker.sock"));
  auto t0 = clk::now();
  try {
    io.run([&] { return api.async_create(helper("x", 0), asio::use_future); }).get();
    FAIL("no error");
  } catch (const dk::api_error& e) {
    CHECK(e.status() == 0);
    CHECK_THAT(e.what(),
               Catch::StartsWith("docker: cannot reach the Docker daemon at unix:///nonexistent/docker.sock") &&
                   Catch::Contains("dockerd"));
  }
  CHECK(clk::now() - t0 < 1s);
  // Nothing listens on this TCP port either.
  dk::api tcp(io.io.get_executor(), dk::parse_host("tcp://127.0.0.1:1"));
  CHECK_THROWS_WITH(io.run([&] { return tcp.async_version(asio::use_future); }).get(),
                    Catch::StartsWith("docker: cannot reach the Docker daemon at tcp://127.0.0.1:1"));
}

TEST_CASE("docker api: blocking removal for destructors", "[docker][api]") {
  require_daemon();
  io_thread io;
  dk::api api(io.io.get_executor(), dk::endpoint_from_env());
  const auto tag = random_tag();
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    auto s = helper(tag, 0, true);
    s.name += std::to_string(i);
    names.push_back(s.name);
    io.run([&] { return api.async_create(s, asio::use_future); }).get();
    io.run([&] { return api.async_start(s.name, asio::use_future); }).get();
  }
  CHECK(api.list_blocking({"fiber.apitest=" + tag}, 5s).size() == 3);
  names.push_back("fiber-apitest-never-existed");
  auto t0 = clk::now();
  auto failed = api.remove_blocking(names, 10s);
  CHECK(failed.empty()); // a missing one counts as removed
  CHECK(clk::now() - t0 < 10s);
  CHECK(api.list_blocking({"fiber.apitest=" + tag}, 5s).empty());
}
