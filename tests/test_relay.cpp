// Workers behind a host's relay (detail/relay.hpp, relay_mux.hpp): a Pool's
// workers elect one of them to relay and reach the master through its link,
// and a relay that dies loses no task and duplicates none.
#include "fake_link.hpp"
#include "support.hpp"

#include <fiber/config.hpp>
#include <fiber/detail/relay_mux.hpp>
#include <fiber/detail/worker_spec.hpp>
#include <fiber/pool.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

namespace {

int square(int x) { return x * x; }

int slow_square(int x) {
  // a task long enough for the relay to die while some run
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return x * x;
}

/// Runs in a worker: a Pool of its own, whose workers dial this worker.
long long nested_sum(int n) {
  fiber::Pool pool{fiber::target<&square>, {.processes = 2}};
  std::vector<int> in(static_cast<std::size_t>(n));
  std::iota(in.begin(), in.end(), 0);
  long long sum = 0;
  for (int v : pool.map(in, 1)) sum += v;
  return sum;
}

/// The pid of the process listening at this run's relay name (relay_name),
/// from /proc/net/unix and the processes' sockets; 0 if none.
pid_t relay_pid() {
  const std::string name = "@" + fiber::detail::relay_name().substr(std::string("abstract://").size());
  std::ifstream unix_sockets("/proc/net/unix");
  std::string line, inode;
  while (std::getline(unix_sockets, line)) {
    std::istringstream in(line);
    std::string num, ref, proto, flags, type, st, ino, path;
    in >> num >> ref >> proto >> flags >> type >> st >> ino >> path;
    if (path == name && flags == "00010000") inode = ino; // listening
  }
  if (inode.empty()) return 0;
  const std::string target = "socket:[" + inode + "]";
  for (const auto& p : std::filesystem::directory_iterator("/proc")) {
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(p.path() / "fd", ec))
      if (std::filesystem::read_symlink(f.path(), ec).string() == target)
        return pid_t(std::stol(p.path().filename().string()));
  }
  return 0;
}

/// The `relay` key for the duration of a test.
struct relay_config {
  relay_config() { fiber::set_config("relay", "true"); }
  ~relay_config() { fiber::set_config("relay", "false"); }
};

} // namespace

TEST_CASE("relay_mux: joins become worker links; frames, leaves and the relay's end reach them", "[relay]") {
  namespace fd = fiber::detail;
  asio::io_context io;
  auto relay = std::make_shared<fiber_test::fake_link>();
  relay->ex = io.get_executor();
  relay->who = fd::peer_identity{fd::role::relay, 0, 77, "hostA", "relay-a", 1};
  std::vector<std::shared_ptr<fd::worker_link>> joined;
  auto mux = std::make_shared<fd::relay_mux>(io.get_executor(), relay,
                                             [&](std::shared_ptr<fd::worker_link> w) { joined.push_back(w); });
  mux->start();
  relay->receive(fd::frame(fd::frame_kind::relay_join,
                           fd::relay_join_msg{7, fd::peer_identity{fd::role::worker, 42, 1234, "hostA", "w42", 9}}));
  REQUIRE(joined.size() == 1);
  auto w = joined[0];
  CHECK(w->peer().worker_id == 42);
  CHECK(w->peer().pid == 1234);
  CHECK(w->peer().incarnation == 9);
  std::vector<std::pair<fd::frame_kind, std::vector<std::byte>>> got;
  std::optional<std::string> closed;
  w->start([&](fd::frame_kind k, std::span<const std::byte> body,
               fd::message&) { got.emplace_back(k, std::vector<std::byte>(body.begin(), body.end())); },
           [&](const std::string& why) { closed = why; });

  // Up: a worker's frame, wrapped.
  const auto inner = fd::frame(fd::frame_kind::results, std::uint32_t(5));
  auto up = fd::relay_data_head(7, inner);
  relay->receive(up);
  REQUIRE(got.size() == 1);
  CHECK(got[0].first == fd::frame_kind::results);
  CHECK(fiber::deserialize<std::uint32_t>(got[0].second) == 5);
  // To a slot nobody holds: dropped.
  relay->receive(fd::relay_data_head(8, inner));
  CHECK(got.size() == 1);

  // Down: the worker link's frame and tail travel as one relay_data frame.
  const std::vector<std::byte> tail{std::byte(1), std::byte(2), std::byte(3)};
  w->send(fd::frame(fd::frame_kind::tasks), fd::shared_bytes{nullptr, tail});
  REQUIRE(relay->sent.size() == 1);
  auto [slot, carried] = fd::split_relay_data(fd::unframe(relay->sent[0]).second);
  CHECK(slot == 7);
  CHECK(carried.size() == 4);
  CHECK(carried[0] == std::byte(fd::frame_kind::tasks));

  // A short relay_data frame is malformed: serialization_error (the link drops it).
  CHECK_THROWS_AS(relay->receive({std::byte(fd::frame_kind::relay_data), std::byte(7)}), fiber::serialization_error);

  // Closing the worker link asks the relay to close the worker's.
  w->close("killed by its Pool");
  io.run();
  io.restart();
  REQUIRE(closed);
  CHECK(*closed == "killed by its Pool");
  REQUIRE(relay->sent.size() == 2);
  auto leave = fd::decode_frame<fd::relay_leave_msg>(fd::frame_kind::relay_leave, relay->sent[1]);
  CHECK(leave.slot == 7);
  CHECK(mux->workers() == 0);

  // A leave from the relay closes a link without a word back; the relay's end closes the rest.
  relay->receive(fd::frame(fd::frame_kind::relay_join,
                           fd::relay_join_msg{8, fd::peer_identity{fd::role::client, 43, 1, "hostA", "w43", 1}}));
  relay->receive(fd::frame(fd::frame_kind::relay_join,
                           fd::relay_join_msg{9, fd::peer_identity{fd::role::worker, 44, 2, "hostA", "w44", 1}}));
  REQUIRE(joined.size() == 3);
  CHECK(joined[1]->peer().r == fd::role::worker); // a relay carries workers only, whatever it says
  CHECK(joined[1]->id() != joined[2]->id());      // each a link of its own to the services too
  std::vector<std::string> ends;
  for (auto i : {1, 2}) joined[std::size_t(i)]->start({}, [&](const std::string& why) { ends.push_back(why); });
  relay->receive(fd::frame(fd::frame_kind::relay_leave, fd::relay_leave_msg{8, "connection closed"}));
  relay->close("connection reset");
  io.run();
  REQUIRE(ends.size() == 2);
  CHECK(ends[0] == "connection closed");
  CHECK(ends[1].find("relay relay-a lost") != std::string::npos);
  CHECK(relay->sent.size() == 2); // no leave went back for either
  CHECK(joined[2]->closed());
}

TEST_CASE("relay: a Pool's workers elect one relay on their host and join the master through it", "[relay]") {
  relay_config cfg;
  auto& rt = fiber::detail::runtime::instance();
  const auto joined = rt.relayed_workers_.load();
  {
    fiber::Pool pool{fiber::target<&square>, {.processes = 6}};
    std::vector<int> in(1000);
    for (int i = 0; i < 1000; ++i) in[std::size_t(i)] = i;
    auto r = pool.map(in, 1); // a frame per task, through the relay
    REQUIRE(r.size() == 1000);
    for (int i = 0; i < 1000; ++i) CHECK(r[std::size_t(i)] == i * i);
    // Started at once, they raced for the name: one won and dialled the
    // master; the others join through it (the map may end before the last).
    CHECK(fiber_test::eventually([&] { return rt.relayed_workers_.load() - joined >= 5; }));
    CHECK(rt.relayed_workers_.load() - joined == 5);
    CHECK(relay_pid() > 0);
  }
}

TEST_CASE("relay: SIGKILL of the relaying worker during a map loses no task and duplicates none",
          "[relay][resilience]") {
  relay_config cfg;
  auto& rt = fiber::detail::runtime::instance();
  const auto joined = rt.relayed_workers_.load();
  fiber::Pool pool{fiber::target<&slow_square>, {.processes = 3, .max_retries = 10}};
  const int n = 3000;
  std::vector<int> in(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) in[std::size_t(i)] = i;
  std::map<int, int> seen; // result -> times
  int got = 0;
  pid_t killed = 0;
  for (int v : pool.imap_unordered(in, 1)) {
    ++seen[v];
    if (++got == n / 4) {
      // The other two come through it.
      CHECK(fiber_test::eventually([&] { return rt.relayed_workers_.load() - joined >= 2; }));
      CHECK(rt.relayed_workers_.load() - joined == 2);
      killed = relay_pid();
      REQUIRE(killed > 0);
      ::kill(killed, SIGKILL);
    }
  }
  CHECK(got == n);
  CHECK(seen.size() == std::size_t(n));
  bool once = true;
  for (int i = 0; i < n; ++i) once = once && seen[i * i] == 1;
  CHECK(once);
  // The replacements elected a relay of their own.
  CHECK(rt.relayed_workers_.load() - joined >= 3);
  CHECK(relay_pid() != killed);
}

TEST_CASE("relay: a Pool inside the relaying worker gets its own workers", "[relay]") {
  relay_config cfg;
  // Alone on its host, the outer worker finds no relay and becomes the
  // relay; its own Pool's workers dial it at its own socket, and must reach
  // that Pool, not the outer master through the relay.
  fiber::Pool outer{fiber::target<&nested_sum>, {.processes = 1}};
  auto r = outer.apply_async(100);
  REQUIRE(r.wait(std::chrono::seconds(60)));
  CHECK(r.get() == 328350); // the squares of 0..99
}
