// Workers behind a host's relay (detail/relay.hpp, relay_mux.hpp): a Pool's
// workers reach the master through one relay link, and a relay that dies
// loses no task and duplicates none.
#include "fake_link.hpp"
#include "support.hpp"

#include <fiber/backend/local.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/relay_mux.hpp>
#include <fiber/detail/worker_spec.hpp>
#include <fiber/pool.hpp>

#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
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

/// A relay job started through the local backend, as a backend would start
/// one on each host; killed (SIGKILL) and waited for when the test ends.
class relay_job {
public:
  relay_job() {
    std::string d = "/tmp/fiber-relay-XXXXXX";
    REQUIRE(::mkdtemp(d.data()));
    dir_ = d;
    url_ = "ipc://" + dir_ + "/relay.sock";
    auto& rt = fiber::detail::runtime::instance();
    rt.sync([&] {
      launcher_ = rt.launcher<fiber::backend::local>();
      auto spec = fiber::detail::relay_spec(*launcher_, "relay-1", url_);
      job_ = launcher_->launch({spec}, {[this](const fiber::backend::job_exit& x) {
                                 std::lock_guard lk(m_);
                                 exit_ = x;
                                 cv_.notify_all();
                               }})
                 .at(0);
    });
    // Up once it listens (it dials the master first).
    REQUIRE(fiber_test::eventually([&] { return std::filesystem::exists(dir_ + "/relay.sock"); }));
  }
  ~relay_job() {
    kill();
    std::filesystem::remove_all(dir_);
  }

  const std::string& url() const { return url_; }
  std::int64_t pid() const { return job_.pid; }

  /// SIGKILLs the relay and waits for the backend's report of its end.
  void kill() {
    auto& rt = fiber::detail::runtime::instance();
    rt.sync([&] { launcher_->cancel(job_, 9); });
    std::unique_lock lk(m_);
    cv_.wait_for(lk, std::chrono::seconds(30), [&] { return exit_.has_value(); });
  }

private:
  std::string dir_, url_;
  std::shared_ptr<fiber::backend::launcher> launcher_;
  fiber::backend::job job_;
  std::mutex m_;
  std::condition_variable cv_;
  std::optional<fiber::backend::job_exit> exit_;
};

/// relay_url for the duration of a test.
struct relay_config {
  explicit relay_config(const std::string& url) { fiber::set_config("relay_url", url); }
  ~relay_config() { fiber::set_config("relay_url", ""); }
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
                           fd::relay_join(7, fd::peer_identity{fd::role::worker, 42, 1234, "hostA", "w42", 9})));
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
                           fd::relay_join(8, fd::peer_identity{fd::role::worker, 43, 1, "hostA", "w43", 1})));
  relay->receive(fd::frame(fd::frame_kind::relay_join,
                           fd::relay_join(9, fd::peer_identity{fd::role::worker, 44, 2, "hostA", "w44", 1})));
  REQUIRE(joined.size() == 3);
  CHECK(joined[1]->id() != joined[2]->id()); // each a link of its own to the services too
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

TEST_CASE("relay: a Pool's workers join the master through their host's relay", "[relay]") {
  relay_job relay;
  relay_config cfg(relay.url());
  auto& rt = fiber::detail::runtime::instance();
  const auto joined = rt.relayed_workers_.load();
  {
    fiber::Pool pool{fiber::target<&square>, {.processes = 3}};
    std::vector<int> in(1000);
    for (int i = 0; i < 1000; ++i) in[std::size_t(i)] = i;
    auto r = pool.map(in, 1); // a frame per task, through the relay
    REQUIRE(r.size() == 1000);
    for (int i = 0; i < 1000; ++i) CHECK(r[std::size_t(i)] == i * i);
    CHECK(rt.relayed_workers_.load() - joined == 3);
  }
}

TEST_CASE("relay: SIGKILL of the relay during a map loses no task and duplicates none", "[relay][resilience]") {
  auto relay = std::make_unique<relay_job>();
  relay_config cfg(relay->url());
  auto& rt = fiber::detail::runtime::instance();
  const auto joined = rt.relayed_workers_.load();
  fiber::Pool pool{fiber::target<&slow_square>, {.processes = 3, .max_retries = 10}};
  const int n = 3000;
  std::vector<int> in(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) in[std::size_t(i)] = i;
  std::map<int, int> seen; // result -> times
  int got = 0;
  for (int v : pool.imap_unordered(in, 1)) {
    ++seen[v];
    if (++got == n / 4) {
      CHECK(rt.relayed_workers_.load() - joined == 3); // all three came through it
      relay->kill();
    }
  }
  CHECK(got == n);
  CHECK(seen.size() == std::size_t(n));
  bool once = true;
  for (int i = 0; i < n; ++i) once = once && seen[i * i] == 1;
  CHECK(once);
}
