// Workers behind a host's relay (detail/relay.hpp, relay_mux.hpp): a Pool's
// workers reach the master through one relay link, and a relay that dies
// loses no task and duplicates none.
#include "support.hpp"

#include <fiber/backend/local.hpp>
#include <fiber/config.hpp>
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
