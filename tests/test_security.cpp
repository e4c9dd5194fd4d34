// SPDX-License-Identifier: BSL-1.0
// Security and fault tolerance (issue 8): rogue peers on the master's
// listeners, the run directory and secret, hung/crashing/leaking workers,
// the fd limit, TLS end to end, message and handshake limits, and workers
// outliving a SIGKILLed master. The hidden [netns] cases (men in the middle
// placed by DNAT on the network-namespace rig; root) run as CTest
// test_security_netns in CI's faults stage (test_security.cmake).
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>

#include <nng/nng.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "support.hpp"

namespace fd = fiber::detail;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------- helpers

std::string make_temp_dir() {
  std::string t = "/tmp/fiber-sec-XXXXXX";
  REQUIRE(::mkdtemp(t.data()));
  return t;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A self-signed certificate issued to `cn`, its own CA, as <dir>/cert.pem
/// and <dir>/key.pem (the openssl command); false when that fails.
/// The subjectAltName naming `cn`: an IPv4 address (which OpenSSL matches
/// only against IP entries) or a DNS name.
std::string san_for(const std::string& cn) {
  return (cn.find_first_not_of("0123456789.") == std::string::npos ? "subjectAltName=IP:" : "subjectAltName=DNS:") + cn;
}

bool self_signed(const std::string& dir, const std::string& cn) {
  const auto cmd = "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=" + cn + " -addext " + san_for(cn) +
                   " -days 1 -keyout " + dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::size_t count_lines(const std::string& path) {
  auto s = slurp(path);
  return std::size_t(std::count(s.begin(), s.end(), '\n'));
}

/// One line, appended atomically (O_APPEND, one write).
void append_line(const std::string& path, const std::string& line) {
  int f = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (f < 0) return;
  auto s = line + "\n";
  (void)!::write(f, s.data(), s.size());
  ::close(f);
}

template <class Pred>
bool wait_until(Pred p, std::chrono::milliseconds limit) {
  auto deadline = steady::now() + limit;
  while (!p()) {
    if (steady::now() > deadline) return false;
    std::this_thread::sleep_for(1ms); // a poll that leaves the cores to fiber's threads
  }
  return true;
}

/// Sets configuration keys for one test and puts the previous values back.
class config_guard {
public:
  config_guard(std::initializer_list<std::pair<std::string, std::string>> kv) {
    for (auto& [k, v] : kv) {
      old_.emplace_back(k, fd::config_string(k));
      fiber::set_config(k, v);
    }
  }
  ~config_guard() {
    for (auto& [k, v] : old_) fiber::set_config(k, v);
  }

private:
  std::vector<std::pair<std::string, std::string>> old_;
};

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::vector<std::byte> with_header(const std::vector<std::byte>& body, std::optional<std::uint32_t> claimed = {}) {
  std::uint32_t n = claimed.value_or(std::uint32_t(body.size()));
  std::vector<std::byte> out{std::byte(n), std::byte(n >> 8), std::byte(n >> 16), std::byte(n >> 24)};
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

/// A rogue peer speaking raw bytes to a listener through nng's stream API
/// (no fiber framing, so it can send anything).
class raw_peer {
public:
  explicit raw_peer(const std::string& url) {
    nng_stream_dialer* d = nullptr;
    REQUIRE(nng_stream_dialer_alloc(&d, url.c_str()) == 0);
    nng_aio* a = nullptr;
    REQUIRE(nng_aio_alloc(&a, nullptr, nullptr) == 0);
    nng_aio_set_timeout(a, 5000);
    nng_stream_dialer_dial(d, a);
    nng_aio_wait(a);
    int rv = nng_aio_result(a);
    if (rv == 0) s_ = static_cast<nng_stream*>(nng_aio_get_output(a, 0));
    nng_aio_free(a);
    nng_stream_dialer_free(d);
    INFO("dial " << url << ": " << nng_strerror(rv));
    REQUIRE(rv == 0);
  }
  raw_peer(const raw_peer&) = delete;
  ~raw_peer() {
    if (s_) {
      nng_stream_close(s_);
      nng_stream_free(s_);
    }
  }

  /// All of `b`, or false once the master has closed the connection.
  bool send(const std::vector<std::byte>& b) {
    std::size_t off = 0;
    while (off < b.size()) {
      nng_iov iov{const_cast<std::byte*>(b.data() + off), b.size() - off};
      int rv = io(false, &iov, 5000);
      if (rv != 0) return false;
      off += last_;
    }
    return true;
  }

  /// Exactly n bytes within `ms`, or nullopt (timeout or closed).
  std::optional<std::vector<std::byte>> recv_exact(std::size_t n, int ms) {
    std::vector<std::byte> b(n);
    std::size_t off = 0;
    auto deadline = steady::now() + std::chrono::milliseconds(ms);
    while (off < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
      if (left <= 0) return std::nullopt;
      nng_iov iov{b.data() + off, n - off};
      if (io(true, &iov, int(left)) != 0) return std::nullopt;
      off += last_;
    }
    return b;
  }

  /// One length-prefixed frame.
  std::optional<std::vector<std::byte>> recv_frame(int ms = 5000) {
    auto h = recv_exact(4, ms);
    if (!h) return std::nullopt;
    std::uint32_t n = std::uint32_t((*h)[0]) | std::uint32_t((*h)[1]) << 8 | std::uint32_t((*h)[2]) << 16 |
                      std::uint32_t((*h)[3]) << 24;
    return recv_exact(n, ms);
  }

  /// True once the other side has closed the connection (within `ms`).
  bool closed_within(int ms) {
    auto deadline = steady::now() + std::chrono::milliseconds(ms);
    std::byte buf[256];
    while (steady::now() < deadline) {
      nng_iov iov{buf, sizeof buf};
      int rv = io(true, &iov, 50);
      if (rv == NNG_ETIMEDOUT) continue;
      if (rv != 0) return true; // closed / reset
      // data: discard, keep waiting for the close
    }
    return false;
  }

private:
  int io(bool recv, nng_iov* iov, int ms) {
    nng_aio* a = nullptr;
    if (nng_aio_alloc(&a, nullptr, nullptr) != 0) return NNG_ENOMEM;
    nng_aio_set_timeout(a, ms);
    nng_aio_set_iov(a, 1, iov);
    if (recv) nng_stream_recv(s_, a);
    else nng_stream_send(s_, a);
    nng_aio_wait(a);
    int rv = nng_aio_result(a);
    last_ = nng_aio_count(a);
    nng_aio_free(a);
    if (rv == 0 && last_ == 0) rv = NNG_ECLOSED;
    return rv;
  }

  nng_stream* s_ = nullptr;
  std::size_t last_ = 0;
};

/// Reads p's challenge and answers it as a genuine client of this binary
/// would (it knows the secret), claiming `name`; returns the answer unsent.
fd::auth_msg genuine_auth(raw_peer& p, std::string name) {
  auto& rt = fd::runtime::instance();
  auto ch = p.recv_frame();
  REQUIRE(ch);
  auto c = fd::decode_frame<fd::challenge_msg>(fd::frame_kind::challenge, *ch);
  fd::auth_msg a;
  a.nonce = fd::random_nonce();
  a.role = std::uint8_t(fd::role::client);
  a.registry_hash = rt.registry_hash();
  a.build_id = rt.own_build_id();
  a.pid = ::getpid();
  a.host = "h";
  a.name = std::move(name);
  a.incarnation = 1;
  a.mac = fd::client_proof(rt.secret(), c.nonce, a, {});
  return a;
}

/// Authenticates like a genuine client of this binary (it knows the secret):
/// the "rogue" here is an authenticated peer that misbehaves afterwards.
void authenticate(raw_peer& p) {
  auto& rt = fd::runtime::instance();
  auto a = genuine_auth(p, "authenticated-test-client");
  REQUIRE(p.send(with_header(fd::frame(fd::frame_kind::auth, a))));
  auto ok = p.recv_frame();
  REQUIRE(ok);
  auto m = fd::decode_frame<fd::auth_ok_msg>(fd::frame_kind::auth_ok, *ok);
  REQUIRE(fd::mac_equal(m.mac, fd::server_proof(rt.secret(), a.nonce, m, {})));
  auto changed = m; // the proof covers the configuration and the frame MAC flag
  changed.config["heartbeat_timeout_ms"] = "86400000";
  REQUIRE_FALSE(fd::mac_equal(m.mac, fd::server_proof(rt.secret(), a.nonce, changed, {})));
  changed = m;
  changed.frame_mac ^= 1;
  REQUIRE_FALSE(fd::mac_equal(m.mac, fd::server_proof(rt.secret(), a.nonce, changed, {})));
}

/// Accepts one connection on `l` as a fake master would: sends a challenge,
/// then gives the stream and the client's answer (or the error) to `on_answer`.
template <class F>
void fake_master_accept(fd::listener& l, F on_answer) {
  l.async_accept([on_answer](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    auto sp = std::make_shared<fd::stream>(std::move(s));
    sp->async_send(fd::frame(fd::frame_kind::challenge, fd::challenge_msg{fd::random_nonce(), fd::protocol_version}),
                   [](std::error_code) {});
    sp->async_recv([sp, on_answer](std::error_code ec, fd::message m) { on_answer(sp, ec, std::move(m)); });
  });
}

/// Records the auth frame the runtime's genuine client handshake sends to a
/// fake server's challenge: a valid frame, bound to that challenge.
std::vector<std::byte> capture_auth_frame(const std::string& dir) {
  auto& rt = fd::runtime::instance();
  asio::io_context io;
  const std::string url = "ipc://" + dir + "/fake-master.sock";
  fd::listener l(io.get_executor(), url);
  std::vector<std::byte> captured;
  fake_master_accept(l, [&](const std::shared_ptr<fd::stream>& sp, std::error_code ec, fd::message m) {
    if (!ec) captured = std::move(m);
    sp->close();
    io.stop();
  });
  std::promise<void> client_done;
  asio::post(rt.executor(), [&] {
    rt.connect(url, fd::role::client, 0,
               [&](std::exception_ptr, std::shared_ptr<fd::peer_link> link, std::map<std::string, std::string>) {
                 if (link) link->close("test");
                 client_done.set_value();
               });
  });
  io.run_for(10s);
  REQUIRE(client_done.get_future().wait_for(10s) == std::future_status::ready);
  REQUIRE(captured.size() > 64);
  REQUIRE(captured[0] == std::byte(fd::frame_kind::auth));
  return captured;
}

std::int64_t rss_kib(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return -1;
}

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// ---------------------------------------------------------------- targets

/// Appends "pid x" to `path` (one line per call) after `ms` ms of work; returns x*x.
int slow_record_square(std::tuple<std::string, int, int> in) {
  auto& [path, x, ms] = in;
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  append_line(path, std::to_string(::getpid()) + " " + std::to_string(x));
  return x * x;
}

int square(int x) { return x * x; }
int ident(int x) { return x; }

/// What reading one byte of stdin gives: "eof", "data" or "error".
std::string stdin_state() {
  char c;
  auto n = ::read(0, &c, 1);
  return n == 0 ? "eof" : n > 0 ? "data" : "error";
}

void no_core_dump() {
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
}

/// x % 10 == 3: std::abort; x % 10 == 5: a write through a null pointer.
int crashy(int x) {
  if (x % 10 == 3) {
    no_core_dump();
    std::abort();
  }
  if (x % 10 == 5) {
    no_core_dump();
    volatile int* volatile p = nullptr;
    *p = x; // SIGSEGV (ASan/UBSan turn it into a report and an exit: dead all the same)
  }
  return 2 * x;
}

/// x == 7 leaks memory until something kills it (the test plays the OOM
/// killer). A safety cap ends it at 2 GiB with exit code 99 (then the test
/// fails: its killer did not act).
int leaky(int x) {
  if (x != 7) return x * x;
  std::vector<std::unique_ptr<char[]>> hog;
  for (std::size_t total = 0; total < (2u << 30); total += 4u << 20) {
    hog.emplace_back(new char[4u << 20]);
    std::memset(hog.back().get(), 1, 4u << 20);
    std::this_thread::sleep_for(2ms); // leak at ~2 GB/s at most: the killer keeps up
  }
  std::_Exit(99);
}

void sleep_forever() { std::this_thread::sleep_for(std::chrono::minutes(5)); }

/// Runs in a Process: becomes a master with a 3-worker Pool and a Process,
/// reports all their pids through `pid_file`, then waits to be killed.
void nested_master_many(std::string pid_file) {
  fiber::Pool pool{fiber::target<&ident>, {.processes = 3, .chunksize = 1}};
  std::vector<int> in(30);
  std::iota(in.begin(), in.end(), 0);
  auto deadline = steady::now() + 60s;
  while (pool.live_workers() < 3 && steady::now() < deadline) pool.map(in);
  fiber::Process p{fiber::target<&sleep_forever>};
  p.start();
  std::ofstream out(pid_file + ".tmp");
  for (auto pid : pool.worker_pids()) out << pid << "\n";
  out << p.pid().value_or(0) << "\n";
  out.close();
  std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
  std::this_thread::sleep_for(std::chrono::minutes(5));
}

/// Runs in a Process: lowers RLIMIT_NOFILE to (soft, hard), then starts a
/// Pool of `workers`; writes what happened to `report`.
void fd_limited_pool(std::tuple<std::string, int, int, unsigned> in) {
  auto& [report, soft, hard, workers] = in;
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = rlim_t(soft);
  if (hard > 0) lim.rlim_max = rlim_t(hard);
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    std::ofstream(report) << "setrlimit failed\n";
    return;
  }
  std::ostringstream out;
  try {
    fiber::Pool pool{fiber::target<&square>, {.processes = workers, .chunksize = 1}};
    std::vector<int> v(std::size_t(workers) * 4);
    std::iota(v.begin(), v.end(), 0);
    auto r = pool.map(v);
    auto deadline = steady::now() + 120s; // work starts with the first worker: wait for the rest
    while (pool.live_workers() < workers && steady::now() < deadline) std::this_thread::sleep_for(1ms);
    bool good = r.size() == v.size();
    for (std::size_t i = 0; i < r.size(); ++i) good = good && r[i] == v[i] * v[i];
    ::getrlimit(RLIMIT_NOFILE, &lim);
    out << (good ? "ok" : "wrong results") << " soft=" << lim.rlim_cur << " max=" << lim.rlim_max
        << " live=" << pool.live_workers() << "\n";
  } catch (const fiber::backend_error& e) {
    out << "backend_error children=" << fiber_test::children().size() << "\n" << e.what() << "\n";
  } catch (const std::exception& e) {
    out << "other " << e.what() << "\n";
  }
  std::ofstream(report) << out.str();
}

} // namespace

// ============================================================================

TEST_CASE("rogue peers on every listener: refused, the map completes, no task runs for them", "[security][rogue]") {
  auto& rt = fd::runtime::instance();
  auto dir = make_temp_dir();
  const auto calls = dir + "/calls";
  fiber::Pool pool{fiber::target<&slow_record_square>, {.processes = 2, .chunksize = 1}};
  // All workers up and working before the attack.
  pool.map(std::vector<std::tuple<std::string, int, int>>{{dir + "/warmup", 0, 0}, {dir + "/warmup", 1, 0}});
  REQUIRE(wait_until([&] { return pool.live_workers() == 2; }, 60s));
  const auto workers_before = sorted(pool.worker_pids());
  rt.listen_url("tcp://127.0.0.1:0"); // a second listener: the rogue tries every one
  const auto urls = rt.listener_urls();
  REQUIRE(urls.size() >= 2);

  const auto captured = capture_auth_frame(dir);
  const auto refused0 = rt.refused_peers_.load();

  std::vector<std::tuple<std::string, int, int>> in;
  for (int i = 0; i < 200; ++i) in.emplace_back(calls, i, 5);
  auto fut = std::async(std::launch::async, [&] { return pool.map(in); });

  std::uint64_t must_refuse = 0;
  std::vector<std::unique_ptr<raw_peer>> lingering; // closed by the master's 5 s handshake timeout
  std::mt19937 rng(8);
  auto random_bytes = [&](std::size_t n) {
    std::vector<std::byte> b(n);
    for (auto& x : b) x = std::byte(rng());
    return b;
  };
  for (const auto& url : urls) {
    INFO("listener " << url);
    // (a) garbage before the challenge, as the first frame
    {
      raw_peer p(url);
      REQUIRE(p.send(with_header(random_bytes(100))));
      CHECK(p.closed_within(3000));
      ++must_refuse;
    }
    // (b) garbage after the challenge; frames of every other kind instead of auth
    for (auto kind : {fd::frame_kind::heartbeat, fd::frame_kind::run, fd::frame_kind::tasks, fd::frame_kind::request,
                      fd::frame_kind::shutdown, fd::frame_kind::auth}) {
      raw_peer p(url);
      auto ch = p.recv_frame();
      REQUIRE(ch);
      CHECK((*ch)[0] == std::byte(fd::frame_kind::challenge));
      auto body = random_bytes(40);
      body[0] = std::byte(kind);
      p.send(with_header(body));
      CHECK(p.closed_within(3000));
      ++must_refuse;
    }
    // (c) random frames, some over the 4 KiB pre-authentication limit
    for (int i = 0; i < 30; ++i) {
      raw_peer p(url);
      std::size_t n = rng() % 2 ? rng() % 64 : rng() % (fd::max_auth_frame + 1000);
      auto body = random_bytes(n);
      if (n && rng() % 2) body[0] = std::byte(fd::frame_kind::auth);
      p.send(with_header(body));
      CHECK(p.closed_within(3000));
      ++must_refuse;
    }
    // (d) an oversized length header: refused at once, nothing allocated
    {
      auto rss0 = rss_kib(::getpid());
      raw_peer p(url);
      p.send(with_header({}, 512u << 20));
      auto t0 = steady::now();
      CHECK(p.closed_within(3000));
      CHECK(steady::now() - t0 < 3s); // not the 5 s handshake timeout
      CHECK(rss_kib(::getpid()) - rss0 < 256 * 1024);
      ++must_refuse;
    }
    // (e) truncated frames: one left open (the handshake timeout closes it),
    // one closed by the rogue itself
    {
      auto p = std::make_unique<raw_peer>(url);
      auto body = random_bytes(10);
      p->send(with_header(body, 100));
      lingering.push_back(std::move(p));
      raw_peer q(url);
      q.send(with_header(body, 100));
    }
    // (f) raw random bytes, no framing at all
    {
      auto p = std::make_unique<raw_peer>(url);
      p->send(random_bytes(64));
      lingering.push_back(std::move(p));
    }
    // (g) a captured valid auth frame replayed against a new challenge
    {
      raw_peer p(url);
      auto ch = p.recv_frame();
      REQUIRE(ch);
      REQUIRE(p.send(with_header(captured)));
      CHECK(p.closed_within(3000));
      ++must_refuse;
      // whatever it sends next goes nowhere
      p.send(with_header(fd::frame(fd::frame_kind::tasks, std::vector<fd::chunk_msg>{})));
    }
  }
  for (auto& p : lingering) CHECK(p->closed_within(8000));

  auto r = fut.get();
  REQUIRE(r.size() == in.size());
  bool all = true;
  for (int i = 0; i < 200; ++i) all = all && r[std::size_t(i)] == i * i;
  CHECK(all);
  CHECK(count_lines(calls) == in.size()); // every task ran once, none for a rogue
  CHECK(rt.refused_peers_.load() - refused0 >= must_refuse);
  CHECK(sorted(pool.worker_pids()) == workers_before); // the genuine links were untouched
  // A rogue sees its connection closed before the master's handler has run.
  CHECK(wait_until([&] { return rt.pending_handshakes() == 0; }, 5s));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a local worker's proof over its issued nonce: accepted without a challenge once, refused replayed",
          "[security][rogue]") {
  auto& rt = fd::runtime::instance();
  const auto url = rt.listen_url("ipc://");
  const auto refused0 = rt.refused_peers_.load();
  std::atomic<int> connected{0};
  std::shared_ptr<fd::worker_link> held; // runtime thread; the link stays open, as a worker's does
  // A worker the master expects, with the nonce a local spawn hands it.
  std::uint64_t id = 0;
  fd::nonce_t issued{};
  rt.sync([&] {
    id = rt.new_worker_id();
    auto spec = fd::worker_spec(*rt.launcher<fiber::backend::local>(), id, "issued-nonce-test");
    for (auto& [k, v] : spec.env)
      if (k == "FIBER_INTERNAL_WORKER_NONCE" && !fd::from_hex(v, issued)) issued = {}; // checked below
    rt.expect_worker(
        id, [&](std::shared_ptr<fd::worker_link> l) { ++connected, held = std::move(l); }, [](const std::string&) {});
    return 0;
  });
  REQUIRE(issued != fd::nonce_t{});
  auto proof = [&](const fd::nonce_t& n) {
    fd::auth_msg a;
    a.nonce = fd::random_nonce();
    a.role = std::uint8_t(fd::role::worker);
    a.worker_id = id;
    a.registry_hash = rt.registry_hash();
    a.build_id = rt.own_build_id();
    a.pid = ::getpid();
    a.name = "issued-nonce-test";
    a.mac = fd::client_proof(rt.secret(), n, a, {});
    return std::pair{a, fd::frame(fd::frame_kind::auth, a)};
  };
  // (a) over another nonce than the one issued: refused (the challenge
  // queued on accept may or may not leave before the close)
  {
    raw_peer p(url);
    REQUIRE(p.send(with_header(proof(fd::random_nonce()).second)));
    CHECK(p.closed_within(3000));
  }
  // (b) over the issued one, sent before reading the challenge: accepted
  auto [a, f] = proof(issued);
  {
    raw_peer p(url);
    REQUIRE(p.send(with_header(f)));
    auto ch = p.recv_frame();
    REQUIRE(ch);
    CHECK((*ch)[0] == std::byte(fd::frame_kind::challenge));
    auto ok = p.recv_frame();
    REQUIRE(ok);
    auto m = fd::decode_frame<fd::auth_ok_msg>(fd::frame_kind::auth_ok, *ok);
    CHECK(fd::mac_equal(m.mac, fd::server_proof(rt.secret(), a.nonce, m, {})));
    CHECK(wait_until([&] { return connected.load() == 1; }, 5s));
  }
  // (c) the same frame replayed while the worker is expected again: the
  // nonce is spent, so it is refused
  rt.sync([&] {
    if (held) held->close("test");
    held.reset();
    rt.expect_worker(
        id, [&](std::shared_ptr<fd::worker_link> l) { ++connected, l->close("test"); }, [](const std::string&) {});
    return 0;
  });
  {
    raw_peer p(url);
    REQUIRE(p.send(with_header(f)));
    CHECK(p.closed_within(3000));
  }
  rt.sync([&] {
    rt.forget_worker(id);
    return 0;
  });
  CHECK(connected.load() == 1);
  CHECK(rt.refused_peers_.load() - refused0 == 2);
}

TEST_CASE("run dir 0700, the secret in a memfd; the secret is in no worker's command line or environment",
          "[security]") {
  auto& rt = fd::runtime::instance();
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  pool.map(std::vector<int>{1, 2, 3, 4});
  REQUIRE(wait_until([&] { return pool.live_workers() == 2; }, 60s));
  fiber::Process proc{fiber::target<&sleep_forever>};
  proc.start();

  struct stat st {};
  REQUIRE(::stat(rt.run_dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(st.st_uid == ::getuid());
  // The secret lives in a memfd of this process, which only its user (and
  // root) can open through /proc/PID/fd; no file in the run dir.
  const auto own_fds = "/proc/" + std::to_string(::getpid()) + "/fd";
  CHECK(rt.secret_file().rfind(own_fds + "/", 0) == 0);
  CHECK(std::filesystem::read_symlink(rt.secret_file()).string().rfind("/memfd:fiber-secret", 0) == 0);
  CHECK(slurp(rt.secret_file()) == rt.secret());
  CHECK_FALSE(std::filesystem::exists(rt.run_dir() + "/secret"));
  REQUIRE(::stat(own_fds.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0500);
  CHECK(st.st_uid == ::getuid());
  CHECK(rt.secret().size() >= 64); // 256 bits from getrandom
  for (auto& url : rt.listener_urls())
    if (url.rfind("ipc://", 0) == 0) CHECK(url.rfind("ipc://" + rt.run_dir() + "/", 0) == 0);

  auto pids = pool.worker_pids();
  pids.push_back(proc.pid().value());
  for (auto pid : pids) {
    INFO("worker " << pid << (pid == pids.back() ? " (the Process)" : " (a pool worker)"));
    // posix_spawn returns while the child is still inside execve (its
    // arguments not yet mapped): wait for them.
    auto cmdline_of = [&] { return slurp("/proc/" + std::to_string(pid) + "/cmdline"); };
    CHECK(wait_until([&] { return !cmdline_of().empty(); }, 10s));
    auto cmdline = cmdline_of();
    auto environ_ = slurp("/proc/" + std::to_string(pid) + "/environ");
    CHECK_FALSE(cmdline.empty());
    CHECK(cmdline.find(rt.secret()) == std::string::npos);
    CHECK(environ_.find("FIBER_INTERNAL_SECRET_FILE=") != std::string::npos);
    CHECK(environ_.find(rt.secret()) == std::string::npos);
  }
  proc.kill();
  proc.join();
}

TEST_CASE("a SIGSTOPped worker is declared dead by missed heartbeats; its tasks rerun exactly once",
          "[security][faults]") {
  config_guard cfg{{"heartbeat_interval_ms", "200"}, {"heartbeat_timeout_ms", "1000"}};
  auto dir = make_temp_dir();
  const auto calls = dir + "/calls";
  fiber::Pool pool{fiber::target<&slow_record_square>, {.processes = 2, .chunksize = 1}};
  std::vector<std::tuple<std::string, int, int>> in;
  for (int i = 0; i < 300; ++i) in.emplace_back(calls, i, 10);
  auto fut = std::async(std::launch::async, [&] { return pool.map(in); });
  REQUIRE(wait_until([&] { return pool.live_workers() == 2 && count_lines(calls) >= 20; }, 60s));
  const auto victim = pool.worker_pids().at(0);
  REQUIRE(::kill(pid_t(victim), SIGSTOP) == 0);
  auto t0 = steady::now();
  // Dead within timeout + one interval (+ slack for slow sanitizer builds).
  CHECK(fiber_test::process_gone(victim, 10s));
  auto detected = std::chrono::duration<double>(steady::now() - t0).count();
  INFO("hung worker killed after " << detected << " s");
  CHECK(detected >= 0.9);
  CHECK(detected < 4.0);
  // Resuming it changes nothing: it was SIGKILLed and reaped, its link closed.
  ::kill(pid_t(victim), SIGCONT);
  auto r = fut.get();
  REQUIRE(r.size() == in.size());
  bool all = true;
  for (int i = 0; i < 300; ++i) all = all && r[std::size_t(i)] == i * i;
  CHECK(all);
  // Every input ran at least once; the victim's unfinished ones ran twice but
  // were delivered once (the map's results above).
  std::set<int> seen;
  std::ifstream log(calls);
  std::int64_t pid;
  int x;
  std::size_t by_victim = 0;
  while (log >> pid >> x) {
    seen.insert(x);
    by_victim += pid == victim;
  }
  CHECK(seen.size() == in.size());
  CHECK(by_victim > 0);
  CHECK(wait_until([&] { return pool.live_workers() == 2; }, 60s)); // replaced
  auto now_pids = pool.worker_pids();
  CHECK(std::find(now_pids.begin(), now_pids.end(), victim) == now_pids.end());
  std::filesystem::remove_all(dir);
}

TEST_CASE("default heartbeat settings detect a hung worker in about 2 s", "[security][faults]") {
  REQUIRE(fd::config_int("heartbeat_interval_ms") == 500);
  REQUIRE(fd::config_int("heartbeat_timeout_ms") == 2000);
  fiber::Pool pool{fiber::target<&square>, {.processes = 1}};
  CHECK(pool.apply(3) == 9);
  const auto victim = pool.worker_pids().at(0);
  REQUIRE(::kill(pid_t(victim), SIGSTOP) == 0);
  auto t0 = steady::now();
  CHECK(fiber_test::process_gone(victim, 10s));
  auto detected = std::chrono::duration<double>(steady::now() - t0).count();
  INFO("detected after " << detected << " s");
  CHECK(detected >= 1.9);
  CHECK(detected < 3.5); // timeout 2 s + at most one 0.5 s interval
  CHECK(pool.apply(4) == 16);
}

TEST_CASE("abort and segfault in a target are dead workers, not a dead pool", "[security][faults]") {
  fiber::Pool pool{fiber::target<&crashy>, {.processes = 2, .chunksize = 1, .max_retries = 1}};
  std::vector<fiber::async_result<int>> res;
  for (int i = 0; i < 20; ++i) res.push_back(pool.apply_async(i));
  int lost = 0;
  for (int i = 0; i < 20; ++i) {
    INFO("input " << i);
    if (i % 10 == 3 || i % 10 == 5) {
      CHECK_THROWS_AS(res[std::size_t(i)].get(), fiber::worker_lost);
      ++lost;
    } else {
      CHECK(res[std::size_t(i)].get() == 2 * i);
    }
  }
  CHECK(lost == 4);
  CHECK(pool.map(std::vector<int>{1, 2, 4}) == std::vector<int>{2, 4, 8}); // the pool lives on
}

// A task whose result left just before the next task killed its worker is
// done, not a victim of that crash: the job's end (seen through the
// backend) can overtake the result still unread in the link. With no
// retries, charging the finished task would fail it.
TEST_CASE("a result sent just before a crash counts whatever the master sees first", "[security][faults]") {
  fiber::Pool pool{fiber::target<&crashy>, {.processes = 2, .chunksize = 1, .max_retries = 0}};
  std::vector<int> in;
  for (int i = 0; i < 200; ++i) in.push_back(i % 2 ? 3 + 10 * i : 2 * i); // every other task aborts
  std::vector<fiber::async_result<int>> res;
  for (int x : in) res.push_back(pool.apply_async(x));
  int lost = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    INFO("input " << in[i]);
    if (in[i] % 10 == 3) {
      CHECK_THROWS_AS(res[i].get(), fiber::worker_lost);
      ++lost;
    } else {
      CHECK(res[i].get() == 2 * in[i]);
    }
  }
  CHECK(lost == 100);
}

TEST_CASE("a target that leaks until it is killed is a dead worker, not a dead pool", "[security][faults]") {
  fiber::Pool pool{fiber::target<&leaky>, {.processes = 2, .chunksize = 1, .max_retries = 1}};
  std::atomic<bool> stop{false};
  std::set<std::int64_t> killed; // the oom thread's until joined
  // The OOM killer, played by the test: SIGKILL a worker above 256 MiB.
  std::thread oom([&] {
    while (!stop) {
      for (auto pid : pool.worker_pids())
        if (!killed.count(pid) && rss_kib(pid) > 256 * 1024 && ::kill(pid_t(pid), SIGKILL) == 0) killed.insert(pid);
      std::this_thread::sleep_for(5ms); // pacing of the fault injector
    }
  });
  std::vector<fiber::async_result<int>> res;
  for (int i = 0; i < 12; ++i) res.push_back(pool.apply_async(i));
  for (int i = 0; i < 12; ++i) {
    INFO("input " << i);
    if (i == 7) CHECK_THROWS_AS(res[std::size_t(i)].get(), fiber::worker_lost);
    else CHECK(res[std::size_t(i)].get() == i * i);
  }
  stop = true;
  oom.join();
  CHECK(killed.size() == 2); // first run + one retry, both killed by the "OOM killer"
  CHECK(pool.apply(5) == 25);
}

TEST_CASE("too many workers for RLIMIT_NOFILE: soft limit raised, else backend_error before any job",
          "[security][limits]") {
  // About descriptors, not heartbeats: a child master starting 12 workers
  // on a loaded CI machine must not be declared dead meanwhile.
  config_guard patient{{"heartbeat_timeout_ms", "30000"}};
  auto dir = make_temp_dir();
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  SECTION("hard limit too low: a clear backend_error, no worker started") {
    auto report = dir + "/low";
    fiber::Process p{fiber::target<&fd_limited_pool>, std::tuple<std::string, int, int, unsigned>{report, 64, 64, 64}};
    p.start();
    p.join();
    CHECK(p.exitcode() == 0);
    auto text = slurp(report);
    INFO(text);
    CHECK(text.rfind("backend_error children=0\n", 0) == 0);
    CHECK(text.find("RLIMIT_NOFILE is 64 (hard limit 64)") != std::string::npos);
    CHECK(text.find("local backend, 64 workers") != std::string::npos);
  }
  SECTION("soft limit low, hard limit high enough: raised, the pool works") {
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < 200) {
      WARN("hard RLIMIT_NOFILE below 200: nothing to raise to");
      return;
    }
    auto report = dir + "/raise";
    fiber::Process p{fiber::target<&fd_limited_pool>, std::tuple<std::string, int, int, unsigned>{report, 40, 0, 12}};
    p.start();
    p.join();
    CHECK(p.exitcode() == 0);
    auto text = slurp(report);
    INFO(text);
    CHECK(text.rfind("ok soft=", 0) == 0);
    CHECK(text.find("soft=40 ") == std::string::npos);
    CHECK(text.find("live=12") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

struct TlsEcho {
  int twice(int x) const { return 2 * x; }
};
BOOST_DESCRIBE_STRUCT(TlsEcho, (), (twice))

TEST_CASE("TLS end to end: a Pool whose workers dial back over tls+tcp with a self-signed certificate; a manager "
          "process's reply line",
          "[security][tls]") {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    WARN("openssl not found: TLS test skipped");
    return;
  }
  auto dir = make_temp_dir();
  // Issued to the address workers dial (OpenSSL checks the URL host against it);
  // the same certificate is the CA, so both sides verify each other.
  REQUIRE(self_signed(dir, "127.0.0.1"));
  config_guard cfg{{"local_transport", "tls"},
                   {"tls_cert", dir + "/cert.pem"},
                   {"tls_key", dir + "/key.pem"},
                   {"tls_ca", dir + "/cert.pem"}};
  auto& rt = fd::runtime::instance();
  {
    fiber::Pool pool{fiber::target<&square>, {.processes = 2, .chunksize = 3}};
    std::vector<int> in(100);
    std::iota(in.begin(), in.end(), 0);
    auto r = pool.map(in);
    REQUIRE(r.size() == 100);
    CHECK(r[99] == 99 * 99);
    CHECK(wait_until([&] { return pool.live_workers() == 2; }, 60s));
    for (auto pid : pool.worker_pids()) {
      auto env = slurp("/proc/" + std::to_string(pid) + "/environ");
      CHECK(env.find("FIBER_INTERNAL_MASTER=tls+tcp://127.0.0.1:") != std::string::npos);
      CHECK(env.find("FIBER_TLS_CERT=" + dir + "/cert.pem") != std::string::npos);
    }
    std::string tls_url;
    for (auto& u : rt.listener_urls())
      if (u.rfind("tls+tcp://127.0.0.1:", 0) == 0) tls_url = u;
    REQUIRE_FALSE(tls_url.empty());
    // A plaintext peer gets no challenge out of the TLS listener.
    {
      raw_peer p("tcp://" + tls_url.substr(std::string("tls+tcp://").size()));
      p.send(with_header(bytes_of("hello, no TLS here")));
      CHECK_FALSE(p.recv_frame(1000).has_value());
    }
    CHECK(pool.apply(12) == 144);
  }
  { // a manager process dials its reply line over TLS too, read where the caller awaits
    fiber::RemoteManager<TlsEcho> m{{.processes = 1, .threads = 1}};
    auto r = m.make();
    CHECK(r.call<&TlsEcho::twice>(2) == 4);
    REQUIRE(wait_until([&] { return r.has_reply_line(); }, 30s));
    // The runtime thread held: the replies can come on the line only.
    std::promise<void> holding, release;
    asio::post(fd::runtime::instance().executor(), [&, held = release.get_future()] {
      holding.set_value();
      held.wait();
    });
    holding.get_future().wait();
    asio::io_context ctx;
    int sum = 0;
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
          for (int i = 1; i <= 10; ++i) sum += co_await r.async_call<&TlsEcho::twice>(i, asio::use_awaitable);
        },
        asio::detached);
    ctx.run_for(10s);
    const int while_held = sum;
    release.set_value();
    ctx.run();
    CHECK(while_held == 110);
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

TEST_CASE("tls name (child): a worker checks the master certificate's name", "[.][tls-name-child]") {
  auto dir = make_temp_dir();
  // Trusted (it is its own CA), but issued to another name than 127.0.0.1,
  // the address local workers dial: another service's certificate.
  REQUIRE(self_signed(dir, "fiber-elsewhere"));
  config_guard cfg{{"local_transport", "tls"},
                   {"tls_cert", dir + "/cert.pem"},
                   {"tls_key", dir + "/key.pem"},
                   {"tls_ca", dir + "/cert.pem"},
                   {"worker_output_dir", dir + "/out"}};
  {
    fiber::Process p{fiber::target<&square>, 3};
    p.start();
    p.join();
    CHECK(p.exitcode() == fd::exit_refused); // at once: no retries within start_timeout_s
    auto err = slurp(dir + "/out/" + p.name() + ".err");
    INFO(err);
    CHECK(err.find("'127.0.0.1'") != std::string::npos);
    CHECK(err.find("tls_server_name") != std::string::npos);
  }
  {
    config_guard named{{"tls_server_name", "fiber-elsewhere"}};
    fiber::Pool pool{fiber::target<&square>, {.processes = 1}};
    CHECK(pool.apply(7) == 49);
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

TEST_CASE("with tls_ca a worker checks the master certificate's name: the URL's host, or tls_server_name",
          "[security][tls]") {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    WARN("openssl not found: TLS test skipped");
    return;
  }
  // In a process of its own: a master's TLS listener keeps the certificate
  // it was made with, here an earlier test's.
  auto dir = make_temp_dir();
  const auto cmd = std::filesystem::read_symlink("/proc/self/exe").string() + " '[tls-name-child]' >" + dir +
                   "/child.log 2>&1";
  const int status = std::system(cmd.c_str());
  const auto log = slurp(dir + "/child.log");
  INFO(log);
  CHECK(status == 0);
  CHECK(log.find("All tests passed (7 assertions") != std::string::npos); // it ran (no match exits 0 too)
  std::filesystem::remove_all(dir);
}

/// A relay script of tests/ run as `python3 SCRIPT <dir>/port ARGS`, listening
/// on `host`, until this is destroyed (SIGKILL, then reaped); port() is the
/// port it listens on.
class relay_process {
public:
  relay_process(const std::string& dir, const std::string& script, const std::string& args,
                const std::string& host = "127.0.0.1") {
    const std::string here = __FILE__;
    // A process group of its own, killed whole (python3 may be a launcher).
    const auto start = "FIBER_TEST_RELAY_HOST=" + host + " setsid python3 " + here.substr(0, here.rfind('/')) + "/" +
                       script + " " + dir + "/port " + args + " >" + dir + "/relay.out 2>&1 & echo $! >" + dir +
                       "/relay.pid";
    std::filesystem::remove(dir + "/port");
    REQUIRE(std::system(start.c_str()) == 0);
    pid_ = std::atoi(slurp(dir + "/relay.pid").c_str());
    REQUIRE(wait_until([&] { return std::filesystem::exists(dir + "/port"); }, 30s));
    port_ = slurp(dir + "/port");
  }
  ~relay_process() {
    if (pid_ > 0 && ::kill(-pid_, SIGKILL) == 0) fiber_test::process_gone(pid_, 10s);
  }
  relay_process(const relay_process&) = delete;
  relay_process& operator=(const relay_process&) = delete;
  std::string port() const { return port_; }

private:
  int pid_ = 0;
  std::string port_;
};

/// An iptables DNAT rule in rig host `ns` (comment fiber-mitm): its dials to
/// `to` (host:port) reach `relay` (host:port) instead; removed when destroyed.
class dnat_rule {
public:
  dnat_rule(std::string ns, const std::string& to, const std::string& relay) : ns_(std::move(ns)) {
    const auto colon = to.rfind(':');
    rule_ = "OUTPUT -p tcp -d " + to.substr(0, colon) + " --dport " + to.substr(colon + 1) +
            " -j DNAT --to-destination " + relay + " -m comment --comment fiber-mitm";
    REQUIRE(std::system(("ip netns exec " + ns_ + " iptables -w -t nat -A " + rule_).c_str()) == 0);
  }
  ~dnat_rule() {
    (void)std::system(("ip netns exec " + ns_ + " iptables -w -t nat -D " + rule_ + " 2>/dev/null").c_str());
  }
  dnat_rule(const dnat_rule&) = delete;
  dnat_rule& operator=(const dnat_rule&) = delete;

private:
  std::string ns_, rule_;
};

/// How a relayed worker reaches the relay: on localhost, the worker dials the
/// relay's port; with `netns` (a rig host), the worker runs there and dials
/// the master's own address, which a DNAT rule there sends to the relay.
struct relay_path {
  std::string host = "127.0.0.1"; ///< the relay listens here
  std::string netns;
};

// A worker's dial through tests/tls_relay.py (the certificate and key in
// `relay_dir`) with `extra` environment; the relay's log and the worker's
// exit status and stderr.
struct relayed_dial {
  std::string relay_log, err;
  int status = -1;
};
relayed_dial dial_through_relay(const std::string& dir, const std::string& master_url, const std::string& extra,
                                const std::string& relay_dir, const relay_path& path = {}) {
  std::filesystem::remove(dir + "/relay.log");
  const auto master = master_url.substr(std::string("tls+tcp://").size());
  relay_process relay(dir, "tls_relay.py",
                      master + " " + relay_dir + "/cert.pem " + relay_dir + "/key.pem " + dir + "/relay.log",
                      path.host);
  std::optional<dnat_rule> dnat;
  if (!path.netns.empty()) dnat.emplace(path.netns, master, path.host + ":" + relay.port());
  relayed_dial out;
  const auto dial = path.netns.empty() ? "tls+tcp://127.0.0.1:" + relay.port() : master_url;
  const auto worker = (path.netns.empty() ? "" : "ip netns exec " + path.netns + " ") +
                      "env FIBER_INTERNAL_MASTER=" + dial +
                      " FIBER_INTERNAL_WORKER_ID=999 FIBER_INTERNAL_SECRET=" + fd::runtime::instance().secret() +
                      " FIBER_START_TIMEOUT_S=20 " + extra + " timeout -s KILL 60 " +
                      std::filesystem::read_symlink("/proc/self/exe").string() + " >/dev/null 2>" + dir + "/worker.err";
  out.status = std::system(worker.c_str());
  out.err = slurp(dir + "/worker.err");
  // The relay logs a connection when it ends (the worker has exited).
  REQUIRE(wait_until([&] { return !slurp(dir + "/relay.log").empty(); }, 10s));
  out.relay_log = slurp(dir + "/relay.log");
  return out;
}

// Issue 28: a TLS relay that terminates both sides. What follows fiber's
// TLS handshake is fiber's encrypted frames, not TLS records: a TLS relay
// reads nothing. A worker that pins the master's certificate (the
// kubernetes backend's default) refuses the relay's at once.
TEST_CASE("a TLS relay with its own certificate reads nothing; a worker that pins the master's refuses it",
          "[security][tls]") {
  if (std::system("command -v openssl >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1") != 0) {
    WARN("openssl or python3 not found: TLS relay test skipped");
    return;
  }
  auto dir = make_temp_dir();
  std::filesystem::create_directory(dir + "/relay");
  REQUIRE(self_signed(dir, "fiber-pinned"));
  REQUIRE(self_signed(dir + "/relay", "fiber-pinned")); // same name, another key
  config_guard cfg{{"tls_cert", dir + "/cert.pem"}, {"tls_key", dir + "/key.pem"}};
  // A listener of its own (127.0.0.2): one made by an earlier test keeps that test's certificate.
  const auto url = fd::runtime::instance().listen_url("tls+tcp://127.0.0.2:0");
  {
    INFO("unpinned: the relay completes both TLS handshakes, then can read no record; the worker gets no answer");
    auto r = dial_through_relay(dir, url, "FIBER_START_TIMEOUT_S=2", dir + "/relay");
    INFO(r.relay_log << r.err);
    REQUIRE(r.relay_log.rfind("relayed ", 0) == 0);
    CHECK(std::stoul(r.relay_log.substr(8)) == 0);
    CHECK(r.status != 0);
  }
  {
    INFO("pinned: the worker ends its TLS handshake with the relay; no byte crosses it");
    auto r = dial_through_relay(dir, url, "FIBER_TLS_CA=" + dir + "/cert.pem FIBER_TLS_SERVER_NAME=fiber-pinned",
                                dir + "/relay");
    INFO(r.relay_log << r.err);
    CHECK(r.relay_log.rfind("refused", 0) == 0);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == fd::exit_refused);
    CHECK(r.err.find("fiber-pinned") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

// Issue 28: with TLS that verifies nothing, a relay may terminate TLS on
// both sides and pass fiber's frames on, decrypted and encrypted again. The
// proofs cover each side's channel binding: the master refuses the client's
// proof, and nothing past the handshake crosses the relay.
TEST_CASE("a relay that terminates TLS on both sides and passes fiber's frames on fails the handshake",
          "[security][tls]") {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    WARN("openssl not found: TLS test skipped");
    return;
  }
  auto dir = make_temp_dir();
  std::filesystem::create_directory(dir + "/relay");
  REQUIRE(self_signed(dir, "fiber-master"));
  REQUIRE(self_signed(dir + "/relay", "fiber-master"));
  config_guard cfg{{"tls_cert", dir + "/cert.pem"}, {"tls_key", dir + "/key.pem"}};
  auto& rt = fd::runtime::instance();
  const auto master = rt.listen_url("tls+tcp://127.0.0.3:0"); // its own: earlier tests' keep their certificates
  const fd::handshake_identity me{rt.secret(), rt.own_build_id(), rt.registry_hash(), "relayed-client"};
  asio::io_context io;
  struct outcome {
    bool done = false;
    std::exception_ptr failed;
  };
  auto handshake_via = [&](const std::string& url, outcome& out) {
    fd::async_connect(io.get_executor(), url, {}, [&, url](std::error_code ec, fd::stream s) {
      REQUIRE_FALSE(ec);
      fd::client_handshake(std::make_shared<fd::stream>(std::move(s)), me, fd::role::client, 0, 1u << 20, std::nullopt,
                           [&](std::exception_ptr e, fd::stream st, std::map<std::string, std::string>) {
                             out = {true, e};
                             st.close();
                           });
    });
  };
  {
    INFO("control: the same client, dialing the master itself, gets in");
    outcome direct;
    handshake_via(master, direct);
    io.run_for(30s);
    REQUIRE(direct.done);
    CHECK_FALSE(direct.failed);
  }
  io.restart();
  fd::transport_options relay_cert;
  relay_cert.tls_cert_file = dir + "/relay/cert.pem";
  relay_cert.tls_key_file = dir + "/relay/key.pem";
  fd::listener front(io.get_executor(), "tls+tcp://127.0.0.1:0", relay_cert);
  std::vector<fd::frame_kind> to_worker, to_master; // what the relay read in clear
  std::function<void(std::shared_ptr<fd::stream>, std::shared_ptr<fd::stream>, std::vector<fd::frame_kind>&)> forward;
  forward = [&](std::shared_ptr<fd::stream> from, std::shared_ptr<fd::stream> to, std::vector<fd::frame_kind>& seen) {
    from->async_recv([&, from, to](std::error_code ec, fd::message m) {
      if (ec) return to->close();
      seen.push_back(fd::unframe(m).first);
      to->async_send(std::move(m), [](std::error_code) {});
      forward(from, to, seen);
    });
  };
  front.async_accept([&](std::error_code ec, fd::stream s) {
    REQUIRE_FALSE(ec);
    auto worker_side = std::make_shared<fd::stream>(std::move(s));
    fd::async_connect(io.get_executor(), master, {}, [&, worker_side](std::error_code ec2, fd::stream s2) {
      REQUIRE_FALSE(ec2);
      auto master_side = std::make_shared<fd::stream>(std::move(s2));
      forward(worker_side, master_side, to_master);
      forward(master_side, worker_side, to_worker);
    });
  });
  outcome relayed;
  handshake_via(front.url(), relayed);
  io.run_for(30s);
  front.close();
  REQUIRE(relayed.done);
  CHECK(relayed.failed);
  CHECK(to_worker == std::vector{fd::frame_kind::challenge}); // no auth_ok: no configuration, no task
  CHECK(to_master == std::vector{fd::frame_kind::auth});
  std::filesystem::remove_all(dir);
}

/// Sum of `v`.
std::int64_t sum_ints(std::vector<std::int32_t> v) { return std::accumulate(v.begin(), v.end(), std::int64_t(0)); }

/// Where relayed_launcher sends its first worker, and where its workers run.
struct relay_route {
  std::string relayed{}; ///< the URL the first worker launched dials instead of the master's (if not empty)
  std::string listen = "tcp://127.0.0.1:0";
  std::vector<std::string> first_prefix{}, rest_prefix{}; ///< put before argv (e.g. ip netns exec HOST)
  int launched = 0;
};
relay_route& route() {
  static relay_route r;
  return r;
}

/// Local jobs over route().listen whose first one dials the master through
/// route().relayed; the others dial it directly.
class relayed_launcher final : public fiber::backend::launcher {
public:
  explicit relayed_launcher(asio::any_io_executor ex) : local_(std::make_shared<fd::local_launcher>(std::move(ex))) {}
  std::string_view name() const noexcept override { return "relayed-local"; }
  fiber::backend::launcher_traits traits() const noexcept override { return {false, true, true, 1}; }
  std::string listen_url() override { return route().listen; }
  std::vector<fiber::backend::job> launch(const std::vector<fiber::backend::job_spec>& specs,
                                          std::vector<fiber::backend::exit_handler> on_exit) override {
    auto s = specs;
    for (auto& spec : s) {
      const bool first = route().launched++ == 0;
      for (auto& [k, v] : spec.env)
        if (k == "FIBER_INTERNAL_MASTER" && first && !route().relayed.empty()) v = route().relayed;
      const auto& prefix = first ? route().first_prefix : route().rest_prefix;
      spec.argv.insert(spec.argv.begin(), prefix.begin(), prefix.end());
    }
    return local_->launch(s, std::move(on_exit));
  }
  void cancel(const fiber::backend::job& j, int sig) override { local_->cancel(j, sig); }

private:
  std::shared_ptr<fd::local_launcher> local_;
};
struct relayed_local {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    return std::make_shared<relayed_launcher>(std::move(ex));
  }
};

/// What the workers whose output went to `out` wrote to stderr.
std::string workers_err(const std::string& out) {
  std::string all;
  for (auto& e : std::filesystem::directory_iterator(out))
    if (e.path().extension() == ".err") all += slurp(e.path().string());
  return all;
}

// Issue 28: after the handshake a man in the middle on plain TCP
// (tests/flip_relay.py) flips one bit in the middle of a task's arguments.
// With frame MACs the worker refuses the frame, its link closes and the task
// reruns on a worker that dials directly; without, the bit reaches the target.
TEST_CASE(
    "a relay that flips a bit of a task after the handshake: the link closes, the task reruns, the answer is right",
    "[security][mac]") {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) {
    WARN("python3 not found: relay test skipped");
    return;
  }
  auto dir = make_temp_dir();
  const auto url = fd::runtime::instance().listen_url("tcp://127.0.0.1:0"); // the listener relayed_launcher's jobs dial
  relay_process relay(dir, "flip_relay.py", url.substr(std::string("tcp://").size()) + " " + dir + "/relay.log");
  route() = {.relayed = "tcp://127.0.0.1:" + relay.port()};
  const std::vector<std::int32_t> ones(4096, 1);
  {
    INFO("frame MACs (the default): the worker refuses the frame; the task reruns on a direct link");
    config_guard cfg{{"worker_output_dir", dir + "/out"}};
    route().launched = 0;
    fiber::Pool<&sum_ints, relayed_local> pool{fiber::target<&sum_ints>, {.processes = 1}};
    CHECK(pool.apply(ones) == 4096);
    CHECK(route().launched >= 2); // the relayed worker died; a direct one ran the task
    CHECK(count_lines(dir + "/relay.log") == 1);
    const auto err = workers_err(dir + "/out");
    INFO(err);
    CHECK(err.find("failed its authentication tag") != std::string::npos);
  }
  {
    INFO("frame_mac = false: the flipped bit reaches the target");
    config_guard cfg{{"frame_mac", "false"}};
    route().launched = 0;
    fiber::Pool<&sum_ints, relayed_local> pool{fiber::target<&sum_ints>, {.processes = 1}};
    CHECK(pool.apply(ones) != 4096);
    CHECK(count_lines(dir + "/relay.log") == 2);
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

// ------------------------------------------- men in the middle on the rig
// Hidden [netns] cases (CTest: test_security_netns, CI's faults stage; root
// and tests/rigs/netns-up.sh). A relay sits where a man in the middle would:
// a DNAT rule in a rig host sends that host's dials to the master's address
// to the relay, which passes them on to the master.

constexpr const char* rig_master = "10.200.0.1"; // the root namespace on the rig's bridge

bool netns_rig() { return ::geteuid() == 0 && std::filesystem::exists("/run/netns/righost2"); }

/// A CA of its own (<dir>/ca.pem, ca.key) that issues a certificate to `cn`
/// in <dir>/<sub>/ (cert.pem, key.pem); false when openssl fails.
bool ca_issued(const std::string& dir, const std::string& sub, const std::string& cn) {
  const auto d = dir + "/" + sub;
  std::filesystem::create_directories(d);
  std::string cmd;
  if (!std::filesystem::exists(dir + "/ca.pem"))
    cmd = "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=fiber-test-ca -days 1 -keyout " + dir + "/ca.key -out " +
          dir + "/ca.pem >/dev/null 2>&1 && ";
  cmd += "openssl req -newkey rsa:2048 -nodes -subj /CN=" + cn + " -addext " + san_for(cn) + " -keyout " + d +
         "/key.pem -out " + d + "/req.pem >/dev/null 2>&1 && openssl x509 -req -copy_extensions copy -in " + d +
         "/req.pem -CA " + dir + "/ca.pem -CAkey " + dir + "/ca.key -CAcreateserial -days 1 -out " + d +
         "/cert.pem >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Issue 28: a TLS relay (tests/tls_relay.py: its own certificate, no check of
// the master's) between righost1 and the master. A worker that verifies the
// master with tls_ca refuses a certificate of another CA, and one of the
// right CA issued to another name; the relay gets no byte of fiber's
// handshake, so no task frame can cross it.
TEST_CASE("netns: TLS relays placed by DNAT before the master: a worker that verifies refuses them",
          "[.][netns][security][tls]") {
  if (!netns_rig()) FAIL("needs root and the rig's hosts: bash tests/rigs/netns-up.sh 3");
  auto dir = make_temp_dir();
  REQUIRE(ca_issued(dir, "master", rig_master));           // the name a worker checks: the URL's host
  REQUIRE(ca_issued(dir, "other", "fiber-other-service")); // the right CA, another name
  std::filesystem::create_directory(dir + "/own");
  REQUIRE(self_signed(dir + "/own", rig_master)); // the right name, another CA
  config_guard cfg{{"tls_cert", dir + "/master/cert.pem"}, {"tls_key", dir + "/master/key.pem"}};
  const auto url = fd::runtime::instance().listen_url(std::string("tls+tcp://") + rig_master + ":0");
  const relay_path path{rig_master, "righost1"};
  const auto verify = "FIBER_TLS_CA=" + dir + "/ca.pem";
  // TLS completed on both sides, then no TLS record: fiber's frames follow.
  auto read_nothing = [](const relayed_dial& r) {
    return r.relay_log.rfind("relayed ", 0) == 0 && std::stoul(r.relay_log.substr(8)) == 0 && r.status != 0;
  };
  {
    INFO("control: a worker that verifies nothing completes TLS with the relay, which then reads nothing");
    auto r = dial_through_relay(dir, url, "FIBER_START_TIMEOUT_S=2", dir + "/own", path);
    INFO(r.relay_log << r.err);
    CHECK(read_nothing(r));
  }
  {
    INFO("control: the master's own certificate and key (stolen) pass the check; the relay reads nothing");
    auto r = dial_through_relay(dir, url, verify + " FIBER_START_TIMEOUT_S=2", dir + "/master", path);
    INFO(r.relay_log << r.err);
    CHECK(read_nothing(r));
  }
  for (auto sub : {"own", "other"}) {
    INFO("the relay's certificate: " << sub << "; no byte crosses it");
    auto r = dial_through_relay(dir, url, verify, dir + "/" + sub, path);
    INFO(r.relay_log << r.err);
    CHECK(r.relay_log.rfind("refused", 0) == 0);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == fd::exit_refused);
    CHECK(r.err.find(std::string("'") + rig_master + "'") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

// Issue 28: tests/flip_relay.py between righost1 and the master flips one bit
// of the first task. The first worker runs on righost1; the link closes, the
// task reruns on a worker on righost2, which no rule diverts.
TEST_CASE("netns: a relay placed by DNAT flips a bit of a task: the link closes, the task reruns, the answer is right",
          "[.][netns][security][mac]") {
  if (!netns_rig()) FAIL("needs root and the rig's hosts: bash tests/rigs/netns-up.sh 3");
  auto dir = make_temp_dir();
  const std::string listen = std::string("tcp://") + rig_master + ":0";
  const auto master = fd::runtime::instance().listen_url(listen).substr(std::string("tcp://").size());
  relay_process relay(dir, "flip_relay.py", master + " " + dir + "/relay.log", rig_master);
  dnat_rule dnat("righost1", master, std::string(rig_master) + ":" + relay.port());
  route() = {.listen = listen,
             .first_prefix = {"ip", "netns", "exec", "righost1"},
             .rest_prefix = {"ip", "netns", "exec", "righost2"}};
  {
    config_guard cfg{{"worker_output_dir", dir + "/out"}};
    fiber::Pool<&sum_ints, relayed_local> pool{fiber::target<&sum_ints>, {.processes = 1}};
    CHECK(pool.apply(std::vector<std::int32_t>(4096, 1)) == 4096);
    CHECK(route().launched >= 2);
  }
  CHECK(slurp(dir + "/relay.log").rfind("flipped ", 0) == 0);
  const auto err = workers_err(dir + "/out");
  INFO(err);
  CHECK(err.find("failed its authentication tag") != std::string::npos);
  route() = {};
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

TEST_CASE("an authenticated peer's frame over max_message_size_mb drops its connection; the master is fine",
          "[security][limits]") {
  config_guard cfg{{"max_message_size_mb", "1"}};
  auto& rt = fd::runtime::instance();
  fiber::Pool pool{fiber::target<&square>, {.processes = 1}};
  CHECK(pool.apply(2) == 4);
  raw_peer p(rt.service_url());
  authenticate(p);
  // Under the limit: a request (for a service that does not exist) is answered.
  fd::request_msg req{1, 999999, 0, std::vector<std::byte>(512u << 10)};
  REQUIRE(p.send(with_header(fd::frame(fd::frame_kind::request, req))));
  auto rep = p.recv_frame();
  REQUIRE(rep);
  auto reply = fd::decode_frame<fd::reply_msg>(fd::frame_kind::reply, *rep);
  CHECK(reply.request_id == 1);
  CHECK(reply.status == fd::wire_status::error);
  // Over it: the connection is dropped as soon as the header is read.
  p.send(with_header({}, (1u << 20) + 1));
  CHECK(p.closed_within(3000));
  CHECK(pool.apply(3) == 9);
}

TEST_CASE("pending handshakes are bounded; the excess is dropped at once", "[security][limits]") {
  auto& rt = fd::runtime::instance();
  auto url = rt.service_url();
  auto refused0 = rt.refused_peers_.load();
  std::vector<std::unique_ptr<raw_peer>> peers;
  for (std::size_t i = 0; i < fd::max_pending_handshakes + 36; ++i) peers.push_back(std::make_unique<raw_peer>(url));
  std::size_t challenged = 0, dropped = 0;
  for (auto& p : peers) {
    if (p->recv_frame(3000)) ++challenged;
    else ++dropped;
  }
  CHECK(challenged == fd::max_pending_handshakes);
  CHECK(dropped == 36);
  CHECK(rt.refused_peers_.load() - refused0 >= 36);
  CHECK(rt.pending_handshakes() <= fd::max_pending_handshakes);
  for (auto& p : peers) CHECK(p->closed_within(8000)); // the rest time out after 5 s
  CHECK(wait_until([&] { return rt.pending_handshakes() == 0; }, 5s));
  fiber::Pool pool{fiber::target<&square>, {.processes = 1}};
  CHECK(pool.apply(5) == 25);
}

TEST_CASE("a client dropped because the pending handshakes are full dials again within connect_timeout_ms",
          "[security][limits]") {
  // 900 workers on three hosts fetching an object at once: their client
  // links found the table full, and the tasks failed with worker_lost.
  auto& rt = fd::runtime::instance();
  const auto url = rt.service_url();
  std::vector<std::unique_ptr<raw_peer>> peers; // challenged, then silent: the table stays full ~5 s
  for (std::size_t i = 0; i < fd::max_pending_handshakes; ++i) peers.push_back(std::make_unique<raw_peer>(url));
  for (auto& p : peers) REQUIRE(p->recv_frame(3000));
  REQUIRE(rt.pending_handshakes() == fd::max_pending_handshakes);
  std::promise<std::string> outcome;
  asio::post(rt.executor(), [&] {
    rt.connect(url, fd::role::client, 0,
               [&](std::exception_ptr e, std::shared_ptr<fd::peer_link> link, std::map<std::string, std::string>) {
                 if (link) link->close("test");
                 outcome.set_value(e ? fd::exception_text(e, "?") : "connected");
               });
  });
  auto f = outcome.get_future();
  REQUIRE(f.wait_for(30s) == std::future_status::ready);
  CHECK(f.get() == "connected");
}

TEST_CASE("master SIGKILLed: its pool workers and its Process all exit within 5 s", "[security][lifetime]") {
  auto dir = make_temp_dir();
  auto pid_file = dir + "/pids";
  fiber::Process master{fiber::target<&nested_master_many>, pid_file};
  master.start();
  REQUIRE(wait_until([&] { return std::filesystem::exists(pid_file); }, 120s));
  std::vector<std::int64_t> pids;
  std::ifstream in(pid_file);
  for (std::int64_t p; in >> p;) pids.push_back(p);
  REQUIRE(pids.size() == 4);
  for (auto p : pids) REQUIRE((p > 0 && fiber_test::process_exists(p)));
  auto t0 = steady::now();
  master.kill();
  master.join();
  for (auto p : pids) CHECK(fiber_test::process_gone(p, 5s));
  CHECK(steady::now() - t0 < 5s);
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

TEST_CASE("secret (child): a master that made its run directory reports where its secret is", "[.][secret-child]") {
  fiber::Pool pool{fiber::target<&square>, {.processes = 1}};
  REQUIRE(pool.apply(3) == 9); // the run directory and the secret exist now
  const std::string report = std::getenv("FIBER_TEST_REPORT");
  std::ofstream(report + ".tmp") << fd::runtime::instance().secret_file() << "\n" << fd::runtime::instance().run_dir();
  std::rename((report + ".tmp").c_str(), report.c_str());
  std::this_thread::sleep_for(std::chrono::minutes(5)); // until SIGKILLed
}

// Issue 28: a SIGKILLed master used to leave its secret in a file of its run
// directory in $TMPDIR; now it is a memfd of the master, gone with it.
TEST_CASE("master SIGKILLed: no copy of its secret is left behind", "[security][lifetime]") {
  auto dir = make_temp_dir();
  const auto start = "FIBER_TEST_REPORT=" + dir + "/secret-path " +
                     std::filesystem::read_symlink("/proc/self/exe").string() + " '[secret-child]' >" + dir +
                     "/child.log 2>&1 & echo $! >" + dir + "/child.pid";
  REQUIRE(std::system(start.c_str()) == 0);
  const int pid = std::atoi(slurp(dir + "/child.pid").c_str());
  REQUIRE(pid > 0);
  struct kill_guard {
    int pid;
    ~kill_guard() {
      if (::kill(pid, SIGKILL) == 0) fiber_test::process_gone(pid, 10s);
    }
  } guard{pid};
  const bool reported = wait_until([&] { return std::filesystem::exists(dir + "/secret-path"); }, 120s);
  INFO(slurp(dir + "/child.log"));
  REQUIRE(reported);
  std::istringstream paths(slurp(dir + "/secret-path"));
  std::string secret, run_dir;
  std::getline(paths, secret);
  std::getline(paths, run_dir);
  REQUIRE_FALSE(secret.empty());
  REQUIRE(std::filesystem::exists(secret));
  CHECK(slurp(secret).size() >= 64); // readable by this user while the master lives
  REQUIRE(::kill(pid, SIGKILL) == 0);
  REQUIRE(fiber_test::process_gone(pid, 10s));
  CHECK_FALSE(std::filesystem::exists(secret));
  if (run_dir.rfind("/tmp/fiber-", 0) == 0) std::filesystem::remove_all(run_dir); // its stale sockets
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

// The client's proof covers every identity field it claims: a relay that
// replays a proof cannot rename the worker or claim another process (issue 28).
TEST_CASE("a proof made for one identity admits no other: pid, host, name and incarnation are covered",
          "[security][handshake]") {
  auto& rt = fd::runtime::instance();
  const auto url = rt.listen_url("tcp://127.0.0.1:0");
  const auto refused0 = rt.refused_peers_.load();
  int edits = 0;
  for (int field = 0; field < 4; ++field) {
    raw_peer p(url);
    auto a = genuine_auth(p, "honest");
    if (field == 0) a.pid += 1;
    if (field == 1) a.host = "elsewhere";
    if (field == 2) a.name = "impostor";
    if (field == 3) a.incarnation = 2;
    REQUIRE(p.send(with_header(fd::frame(fd::frame_kind::auth, a))));
    auto reply = p.recv_frame(3000); // refused: the connection closes, no auth_ok
    CHECK_FALSE((reply && !reply->empty() && (*reply)[0] == std::byte(fd::frame_kind::auth_ok)));
    ++edits;
  }
  CHECK(wait_until([&] { return rt.refused_peers_.load() - refused0 >= std::uint64_t(edits); }, 5s));
}

TEST_CASE("a refused frame from a server not yet authenticated: one short line, no terminal escapes",
          "[security][handshake]") {
  auto& rt = fd::runtime::instance();
  auto dir = make_temp_dir();
  asio::io_context io;
  const std::string url = "ipc://" + dir + "/fake-master.sock";
  fd::listener l(io.get_executor(), url);
  std::string evil;
  while (evil.size() < 1'000'000) evil += "\x1b[2J\x1b]0;owned\x07\r\n";
  fake_master_accept(l, [&](const std::shared_ptr<fd::stream>& sp, std::error_code ec, fd::message) {
    REQUIRE_FALSE(ec);
    sp->async_send(fd::frame(fd::frame_kind::refused, fd::refused_msg{evil}), [sp](std::error_code) {});
  });
  std::promise<std::string> said;
  asio::post(rt.executor(), [&] {
    rt.connect(url, fd::role::client, 0,
               [&](std::exception_ptr e, std::shared_ptr<fd::peer_link> link, std::map<std::string, std::string>) {
                 if (link) link->close("test");
                 try {
                   if (e) std::rethrow_exception(e);
                   said.set_value("connected");
                 } catch (const fiber::handshake_error& h) {
                   said.set_value(h.what());
                 } catch (const std::exception& x) {
                   said.set_value(std::string("other error: ") + x.what());
                 }
               });
  });
  auto f = said.get_future();
  while (f.wait_for(0s) != std::future_status::ready && io.run_one_for(10s)) {
  }
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  const auto text = f.get();
  INFO(text.substr(0, 200));
  CHECK(text.size() <= fd::max_refusal_text + 32);
  CHECK(text.find_first_of("\x1b\x07\r\n") == std::string::npos);
  CHECK(text.starts_with("?[2J?]0;owned?"));
  CHECK(text.ends_with("(" + std::to_string(evil.size()) + " bytes)"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("lines about refused peers: at most one per 5 s, the next counting those left out", "[security][limits]") {
  auto& rt = fd::runtime::instance();
  const auto url = rt.service_url();
  std::mutex m;
  std::vector<std::string> lines;
  fiber::set_log_sink([&](const fiber::log_record& r) {
    if (r.message.find("refused a peer") == std::string_view::npos) return;
    std::lock_guard lk(m);
    lines.emplace_back(r.message);
  });
  struct restore {
    ~restore() { fiber::set_log_sink(nullptr); }
  } restore_sink;
  const auto t0 = steady::now();
  std::size_t not_closed = 0, made = 0;
  auto refuse_one = [&] {
    raw_peer p(url);
    REQUIRE(p.send(with_header({}, 512u << 20))); // far over the auth frame's bound
    if (!p.closed_within(3000)) ++not_closed;
    ++made;
  };
  // Peers keep coming (a burst of 100, then paced) until a line counts the
  // ones left out before it; none is made after that line is seen, since
  // what comes after it is counted by the next line, which nobody waits for.
  auto counting = [&] { // the first line that counts, or ""
    std::lock_guard lk(m);
    for (const auto& s : lines)
      if (s.find("more like it since the last") != std::string::npos) return s;
    return std::string();
  };
  while (counting().empty() && steady::now() - t0 < 30s) {
    refuse_one();
    if (made > 100) std::this_thread::sleep_for(20ms); // the attack's pace, not a wait for anything
  }
  const auto took = std::chrono::duration_cast<std::chrono::seconds>(steady::now() - t0).count();
  const auto line = counting();
  std::lock_guard lk(m);
  INFO(lines.size() << " lines in " << took << " s");
  CHECK(not_closed == 0);
  CHECK(lines.size() <= std::size_t(took / 5 + 2));
  REQUIRE(line.find("(and ") != std::string::npos);
  // Every refusal is a line or counted in one (earlier tests' may be too).
  std::size_t accounted = 0;
  for (const auto& l : lines)
    if (auto at = l.find("(and "); at != std::string::npos) accounted += 1 + std::stoul(l.substr(at + 5));
    else ++accounted;
  // The last peer's line may follow the close it saw (an oversized frame's
  // stream closes before its handler logs), and so be in no line yet.
  CHECK(accounted + 1 >= made);
}

TEST_CASE("local workers' stdin is /dev/null, not the master's", "[security][local]") {
  // The master's stdin: a pipe that stays open and silent (a terminal, a
  // job's input). A worker that read it would wait, or take the master's input.
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  const int saved = ::dup(0);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(p[0], 0) == 0);
  struct restore {
    int saved, w, r;
    ~restore() {
      ::dup2(saved, 0);
      ::close(saved);
      ::close(w); // a worker still reading gets EOF
      ::close(r);
    }
  } put_back{saved, p[1], p[0]};
  fiber::Pool pool{fiber::target<&stdin_state>, {.processes = 1}};
  auto r = pool.apply_async();
  REQUIRE(r.wait(30s));
  CHECK(r.get() == "eof");
  pool.close();
  pool.join();
}
