// SPDX-License-Identifier: BSL-1.0
// Transport faults (issue 27, items 2-5): large frames and liveness,
// oversized messages, client-side waits on an owner that does not answer,
// pre-authentication slots. Every visible test here runs on the local
// backend and needs no rig (no root, no Slurm, no Docker). The hidden [netns]
// case needs root and the Slurm rig in its three-host shape
// (`bash tests/rigs/slurm-up.sh --nodes 3 --netns`): CTest runs it as
// test_faults_transport_netns (test_faults_transport.cmake).

#include <fiber/manager.hpp>
#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>
#include <fiber/synchronize.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstdint>
#include <future>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "support.hpp"

using namespace std::chrono_literals;
using fiber_test::config_scope;
using fiber_test::next;

namespace {

// A remote object whose method returns as many bytes as asked, or takes them.
struct Blob {
  std::string make(std::uint64_t n) const { return std::string(n, 'o'); }
  std::uint64_t take(std::string s) const { return s.size(); }
  std::int64_t pid() const { return ::getpid(); }
};
BOOST_DESCRIBE_STRUCT(Blob, (), (make, take, pid))

std::uint64_t size_of(std::string s) { return s.size(); }
std::string make_string(std::uint64_t n) { return std::string(n, 'r'); }
int transport_square(int x) { return x * x; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fiber::error& e) {
    return e.what();
  }
  return "no error";
}

// Holds `lock` while it tries to put a 2 MiB item into `q`; reports the
// outcome to `out`, then puts a small item (its link must still work), and
// releases the lock once `go` says so.
void put_big_holding(fiber::Lock lock, fiber::Queue<std::string> q, fiber::Queue<std::string> out,
                     fiber::Queue<int> go) {
  lock.acquire();
  try {
    q.put(std::string(2u << 20, 'q'));
    out.put("stored");
  } catch (const fiber::error& e) {
    out.put(e.what());
  }
  q.put("small");
  (void)go.get();
  lock.release();
}

// Makes a Queue and a Lock owned here, hands them to the master, and waits.
void own_and_wait(fiber::Queue<fiber::Queue<int>> qs, fiber::Queue<fiber::Lock> locks, fiber::Queue<int> go) {
  fiber::Queue<int> mine;
  fiber::Lock lock;
  qs.put(mine);
  locks.put(lock);
  (void)go.get();
}

// A 512 MiB argument to one worker, then a 512 MiB result from another,
// on the local backend under the configuration in force.
void check_512_mib_both_ways() {
  constexpr std::uint64_t big = 512ull << 20;
  fiber::Pool pool{fiber::target<&size_of>, {.processes = 1}};
  {
    std::string arg(big, 'a');
    CHECK(pool.apply(std::move(arg)) == big);
  }
  fiber::Pool maker{fiber::target<&make_string>, {.processes = 1}};
  CHECK(maker.apply(big).size() == big);
  pool.close();
  pool.join();
  maker.close();
  maker.join();
}

} // namespace

TEST_CASE("a 512 MiB argument and a 512 MiB result with heartbeat_timeout_ms=150 complete",
          "[faults][transport][large]") {
  config_scope cfg{{"heartbeat_interval_ms", "40"}, {"heartbeat_timeout_ms", "150"}};
  // Each transfer takes longer than 150 ms: before issue 27 every rerun
  // died the same way ("heartbeat missed") until the call failed. A miss
  // caused by a loaded machine may cost a rerun, not the call.
  check_512_mib_both_ways();
}

TEST_CASE("TLS: a 512 MiB argument and a 512 MiB result with heartbeat_timeout_ms=150 complete",
          "[faults][transport][large][tls]") {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) FAIL("needs the openssl command (scripts/setup.sh)");
  // Encrypting 512 MiB whole before its first byte left took longer than
  // the heartbeat timeout on this VM: every attempt died "heartbeat missed".
  std::string dir = "/tmp/fiber-tls-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()));
  REQUIRE(
      std::system(("openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
                   " -days 1 -keyout " +
                   dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1")
                      .c_str()) == 0);
  const auto cert = dir + "/cert.pem", key = dir + "/key.pem";
  config_scope cfg{{"heartbeat_interval_ms", "40"}, {"heartbeat_timeout_ms", "150"}, {"local_transport", "tls"},
                   {"tls_cert", cert.c_str()},      {"tls_key", key.c_str()},        {"tls_ca", cert.c_str()}};
  check_512_mib_both_ways();
  std::filesystem::remove_all(dir);
}

TEST_CASE("a worker's link to the master takes the master's max_message_size_mb, not the one it started with",
          "[faults][transport][oversize]") {
  // the worker's environment says 1 MiB; the master's configuration, which it applies, says 4
  ::setenv("FIBER_MAX_MESSAGE_SIZE_MB", "1", 1);
  config_scope cfg{{"max_message_size_mb", "4"}};
  fiber::Pool pool{fiber::target<&size_of>, {.processes = 1}};
  fiber::Pool maker{fiber::target<&make_string>, {.processes = 1}};
  constexpr std::uint64_t two_mib = 2u << 20;
  CHECK(pool.apply(std::string(two_mib, 'a')) == two_mib);
  CHECK(maker.apply(two_mib).size() == two_mib);
  ::unsetenv("FIBER_MAX_MESSAGE_SIZE_MB");
  pool.close();
  pool.join();
  maker.close();
  maker.join();
}

TEST_CASE("max_message_size_mb=1: a 2 MiB argument, result and Queue item each fail their own call",
          "[faults][transport][oversize]") {
  config_scope cfg{{"max_message_size_mb", "1"}};
  constexpr std::uint64_t two_mib = 2u << 20;

  SECTION("Pool argument and result: a clear error, the worker survives") {
    fiber::Pool pool{fiber::target<&size_of>, {.processes = 1}};
    fiber::Pool maker{fiber::target<&make_string>, {.processes = 1}};
    CHECK(pool.apply(std::string("warm")) == 4);
    CHECK(maker.apply(3).size() == 3);
    const auto pids = pool.worker_pids(), maker_pids = maker.worker_pids();
    REQUIRE(pids.size() == 1);
    REQUIRE(maker_pids.size() == 1);

    const auto arg_error = error_of([&] { (void)pool.apply(std::string(two_mib, 'a')); });
    CHECK_THAT(arg_error, Catch::Contains("max_message_size_mb = 1") && Catch::Contains("argument"));
    const auto result_error = error_of([&] { (void)maker.apply(two_mib); });
    CHECK_THAT(result_error, Catch::Contains("max_message_size_mb = 1") && Catch::Contains("result"));

    CHECK(pool.apply(std::string("after")) == 5);
    CHECK(maker.apply(5).size() == 5);
    CHECK(pool.worker_pids() == pids);
    CHECK(maker.worker_pids() == maker_pids);
    pool.close();
    pool.join();
    maker.close();
    maker.join();
  }

  SECTION("remote object: a call's argument and its return value, the manager process survives") {
    fiber::RemoteManager<Blob> m{{.processes = 1}};
    auto b = m.make();
    const auto pid = b.call<&Blob::pid>();
    CHECK_THAT(error_of([&] { (void)b.call<&Blob::take>(std::string(two_mib, 'a')); }),
               Catch::Contains("max_message_size_mb = 1"));
    CHECK_THAT(error_of([&] { (void)b.call<&Blob::make>(two_mib); }), Catch::Contains("max_message_size_mb = 1"));
    CHECK(b.call<&Blob::make>(3) == "ooo");
    CHECK(b.call<&Blob::pid>() == pid);
  }

  SECTION("Queue item: a clear error for the put, the putter's link and its Lock stay") {
    fiber::Lock lock;
    fiber::Queue<std::string> q, out;
    fiber::Queue<int> go;
    fiber::Process putter{fiber::target<&put_big_holding>, lock, q, out, go};
    putter.start();
    const auto outcome = next(out);
    CHECK_THAT(outcome, Catch::Contains("max_message_size_mb = 1"));
    CHECK(next(q) == "small");
    CHECK_FALSE(lock.acquire(300ms)); // still held by the putter
    go.put(1);
    putter.join();
    CHECK(putter.exitcode() == 0);
    CHECK(lock.acquire(10s));
    lock.release();
  }
}

TEST_CASE("timed Queue::get and Lock::acquire on a SIGSTOPped owner never contacted return in time",
          "[faults][transport][connect]") {
  // The owner's own link stays up meanwhile (a long heartbeat timeout), so
  // what ends the untimed get is the dial's bound.
  config_scope cfg{{"connect_timeout_ms", "1500"}, {"heartbeat_timeout_ms", "20000"}};
  fiber::Queue<fiber::Queue<int>> qs;
  fiber::Queue<fiber::Lock> locks;
  fiber::Queue<int> go;
  fiber::Process owner{fiber::target<&own_and_wait>, qs, locks, go};
  owner.start();
  auto q = next(qs);
  auto lock = next(locks);
  const auto pid = *owner.pid();
  REQUIRE(::kill(pid_t(pid), SIGSTOP) == 0);
  struct resume {
    std::int64_t pid;
    ~resume() { ::kill(pid_t(pid), SIGCONT); }
  } resume_owner{pid};

  // Run in threads with a deadline: without a bound they would block until
  // the owner is resumed (below, however the test ends).
  auto timed = [](auto f) {
    return std::async(std::launch::async, [f] {
      const auto t0 = std::chrono::steady_clock::now();
      const bool got = f();
      return std::make_pair(got, std::chrono::steady_clock::now() - t0);
    });
  };
  auto get = timed([&q] { return q.get(100ms).has_value(); });
  auto acq = timed([&lock] { return lock.acquire(100ms); });
  REQUIRE(get.wait_for(5s) == std::future_status::ready);
  REQUIRE(acq.wait_for(5s) == std::future_status::ready);
  auto [got, get_took] = get.get();
  auto [acquired, acq_took] = acq.get();
  CHECK_FALSE(got);
  CHECK_FALSE(acquired);
  CHECK(get_took < 100ms + 900ms);
  CHECK(acq_took < 100ms + 900ms);

  // An untimed get fails once the dial times out (connect_timeout_ms).
  auto untimed = std::async(std::launch::async, [&q] { return error_of([&q] { (void)q.get(); }); });
  REQUIRE(untimed.wait_for(10s) == std::future_status::ready);
  CHECK_THAT(untimed.get(), Catch::Contains("connect_timeout_ms"));

  ::kill(pid_t(pid), SIGCONT);
  go.put(1);
  owner.join();
  CHECK(owner.exitcode() == 0);
}

TEST_CASE("64 silent sockets on the master's port during Pool start: the map completes",
          "[faults][transport][preauth]") {
  const auto url = fiber::detail::runtime::instance().listen_url();
  REQUIRE(url.starts_with("ipc://"));
  const auto path = url.substr(6);
  std::vector<int> fds;
  struct closer {
    std::vector<int>& fds;
    ~closer() {
      for (int fd : fds) ::close(fd);
    }
  } close_all{fds};
  for (int i = 0; i < 64; ++i) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof sa.sun_path);
    path.copy(sa.sun_path, path.size());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  }
  REQUIRE(fiber_test::eventually([] { return fiber::detail::runtime::instance().pending_handshakes() >= 64; },
                                 std::chrono::seconds(10)));
  fiber::Pool pool{fiber::target<&transport_square>, {.processes = 4}};
  std::vector<int> in(100);
  for (int i = 0; i < 100; ++i) in[std::size_t(i)] = i;
  auto out = pool.map(in);
  REQUIRE(out.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(out[std::size_t(i)] == i * i);
  pool.close();
  pool.join();
}

namespace {

std::string shell_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

// Shapes both directions of every rig host's link to `rate` with a token
// bucket, and takes the qdiscs away again however the test ends.
struct shaped_links {
  explicit shaped_links(const std::string& rate) {
    for (int i = 1; i <= 3; ++i) {
      const auto h = std::to_string(i), tbf = " root tbf rate " + rate + " burst 1mb latency 100ms";
      devs.push_back("tc qdisc del dev rigv" + h + " root");
      REQUIRE(std::system(("tc qdisc replace dev rigv" + h + tbf).c_str()) == 0);
      devs.push_back("ip netns exec righost" + h + " tc qdisc del dev eth0 root");
      REQUIRE(std::system(("ip netns exec righost" + h + " tc qdisc replace dev eth0" + tbf).c_str()) == 0);
    }
  }
  ~shaped_links() {
    for (auto& d : devs) (void)std::system((d + " 2>/dev/null").c_str());
  }
  std::vector<std::string> devs;
};

bool no_faults_jobs() {
  return shell_output("squeue -h -o %j 2>/dev/null").find("fiberit-faults") == std::string::npos;
}

} // namespace

TEST_CASE("netns: a 512 MiB argument and result over links shaped to 800 Mbit/s, heartbeat_timeout_ms=150",
          "[.][netns][faults][transport][large]") {
  if (shell_output("sinfo -h -N -o %N 2>/dev/null").empty() || !std::filesystem::exists("/run/netns/righost3"))
    FAIL("needs root and the three-host rig: bash tests/rigs/slurm-up.sh --nodes 3 --netns");
  config_scope cfg{{"heartbeat_interval_ms", "40"}, {"heartbeat_timeout_ms", "150"}, {"slurm.poll_interval_ms", "200"}};
  constexpr std::uint64_t big = 512ull << 20;
  {
    shaped_links links("800mbit");
    fiber::Pool<&size_of, fiber::backend::slurm> pool{fiber::target<&size_of>,
                                                      {.processes = 1, .name = "fiberit-faults-arg"}};
    {
      std::string arg(big, 'a');
      CHECK(pool.apply(std::move(arg)) == big);
    }
    fiber::Pool<&make_string, fiber::backend::slurm> maker{fiber::target<&make_string>,
                                                           {.processes = 1, .name = "fiberit-faults-result"}};
    CHECK(maker.apply(big).size() == big);
    pool.close();
    pool.join();
    maker.close();
    maker.join();
  }
  CHECK(fiber_test::eventually(no_faults_jobs, std::chrono::seconds(20)));
}
