// SPDX-License-Identifier: BSL-1.0
// The Pool's scheduler (detail/pool_scheduler.hpp) on fakes: a worker_host and a
// launcher that start nothing, links that record frames. Worker deaths,
// splits, late duplicates, retirement and join, in microseconds.
#include <fiber/detail/pool_scheduler.hpp>

#include "fake_link.hpp"

#include <catch2/catch.hpp>

#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <cstdint>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace d = fiber::detail;

struct fake_link final : fiber_test::fake_link {
  // The chunks sent so far: (chunk id, the ints they hold).
  std::vector<std::pair<std::uint64_t, std::vector<int>>> tasks() const {
    std::vector<std::pair<std::uint64_t, std::vector<int>>> out;
    for (auto& f : sent) {
      auto [k, body] = d::unframe(f);
      if (k != d::frame_kind::tasks) continue;
      for (auto& c : d::decode_tasks_view(body)) {
        fiber::reader r(c.args);
        std::vector<int> v;
        for (std::uint32_t i = 0; i < c.count; ++i) v.push_back(r.read<int>());
        out.emplace_back(c.chunk_id, std::move(v));
      }
    }
    return out;
  }
  bool told_to_shut_down() const {
    for (auto& f : sent)
      if (d::unframe(f).first == d::frame_kind::shutdown) return true;
    return false;
  }
};

// A results frame for chunk `id`: each value ok.
std::vector<std::byte> results_frame(std::uint64_t id, const std::vector<int>& values) {
  fiber::writer w;
  for (int v : values) {
    d::write_item_ok(w);
    w.write(v);
  }
  auto blob = w.release();
  auto f = d::results_frame_head(id, blob.size());
  f.insert(f.end(), blob.begin(), blob.end());
  return f;
}

// Delivers a results frame through `handler` (a link's, kept or current).
void answer(const fake_link::message_handler& handler, std::uint64_t id, const std::vector<int>& values) {
  auto f = results_frame(id, values);
  auto [k, body] = d::unframe(f);
  handler(k, body, f);
}

struct fake_host final : d::worker_host {
  explicit fake_host(asio::io_context& io) : io_(io) {}
  asio::io_context& io_;
  std::uint64_t next_ = 1;
  std::vector<std::uint64_t> launched;
  std::map<std::uint64_t, connect_handler> expected;
  std::map<std::uint64_t, std::shared_ptr<fake_link>> links;

  asio::any_io_executor executor() override { return io_.get_executor(); }
  std::uint64_t new_worker_id() override { return next_++; }
  fiber::backend::job_spec worker_spec(fiber::backend::launcher&, std::uint64_t id, const std::string& name,
                                       const fiber::resources&) override {
    launched.push_back(id);
    fiber::backend::job_spec s;
    s.name = name;
    return s;
  }
  void expect_worker(std::uint64_t id, connect_handler c, refuse_handler) override { expected[id] = std::move(c); }
  std::size_t expected_workers() const override { return expected.size(); }
  void forget_worker(std::uint64_t id) override { expected.erase(id); }
  void worker_connected(std::uint64_t, const d::peer_identity&) override {}
  void worker_link_lost(std::uint64_t, const std::string&) override {}
  void worker_ended(std::uint64_t, const std::string&) override {}

  // Worker `id` dials in.
  std::shared_ptr<fake_link> connect(std::uint64_t id) {
    auto l = std::make_shared<fake_link>();
    l->ex = io_.get_executor();
    l->who.worker_id = id;
    l->number = id;
    links[id] = l;
    auto h = std::move(expected.at(id));
    expected.erase(id);
    h(l);
    return l;
  }
  // Every launched worker not connected yet dials in.
  void connect_all() {
    while (!expected.empty()) connect(expected.begin()->first);
  }
};

struct fake_launcher final : fiber::backend::launcher {
  std::vector<fiber::backend::exit_handler> exits; // by job index
  fiber::backend::launcher_traits traits_{};
  fiber::backend::launcher_traits traits() const noexcept override { return traits_; }
  std::vector<std::pair<std::size_t, int>> cancels;

  std::string_view name() const noexcept override { return "fake"; }
  std::string listen_url() override { return "ipc:///nowhere"; }
  std::vector<fiber::backend::job> launch(const std::vector<fiber::backend::job_spec>& specs,
                                          std::vector<fiber::backend::exit_handler> on_exit) override {
    std::vector<fiber::backend::job> jobs;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      fiber::backend::job j;
      j.id = std::to_string(exits.size());
      jobs.push_back(j);
      exits.push_back(std::move(on_exit[i]));
    }
    return jobs;
  }
  void cancel(const fiber::backend::job& j, int signal) override { cancels.emplace_back(std::stoul(j.id), signal); }
};

// One scheduler on fakes, and what its one call received.
struct rig {
  asio::io_context io;
  fake_host host{io};
  std::shared_ptr<fake_launcher> launcher = std::make_shared<fake_launcher>();
  std::shared_ptr<d::pool_scheduler> core;
  std::shared_ptr<d::pool_job> job = std::make_shared<d::pool_job>();
  std::map<std::uint64_t, std::vector<int>> results; // by call sequence number
  std::map<std::uint64_t, std::string> failures;
  int deliveries = 0;

  explicit rig(d::pool_settings s) {
    s.name = "test";
    job->on_chunk = [this](std::uint64_t seq, std::uint32_t items, d::shared_bytes bytes) {
      ++deliveries;
      fiber::reader r(bytes.bytes);
      for (std::uint32_t i = 0; i < items; ++i) {
        if (auto e = d::read_item(r)) results[seq].push_back(-1);
        else results[seq].push_back(r.read<int>());
      }
    };
    job->on_chunk_failed = [this](std::uint64_t seq, std::exception_ptr e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        failures[seq] = x.what();
      }
    };
    core = std::make_shared<d::pool_scheduler>(std::move(s), launcher, host);
    core->start();
  }
  ~rig() {
    core->shutdown(true, [] {});
    settle();
  }

  // Submits call item `seq`: one chunk of `values`.
  void submit(std::uint64_t seq, const std::vector<int>& values) {
    d::chunk_input c;
    c.seq = seq;
    c.msg.target_id = 42;
    c.msg.count = std::uint32_t(values.size());
    fiber::writer w;
    for (int v : values) {
      w.write(v);
      c.ends.push_back(std::uint32_t(w.size()));
    }
    c.msg.args = w.release();
    std::vector<d::chunk_input> chunks;
    chunks.push_back(std::move(c));
    core->submit(job, std::move(chunks));
  }
  // Runs what is ready (posted close handlers, ...).
  void settle() {
    io.restart();
    io.poll();
  }
  // Worker `id`'s job ends (exit status `code`).
  void end_job(std::uint64_t id, int code = 0) {
    const auto index = std::size_t(std::find(host.launched.begin(), host.launched.end(), id) - host.launched.begin());
    auto h = std::move(launcher->exits.at(index));
    REQUIRE(h);
    fiber::backend::job_exit ex;
    ex.code = code;
    h(ex);
    settle();
  }
};

d::pool_settings settings(unsigned processes, unsigned maxtasksperchild = 0) {
  d::pool_settings s;
  s.processes = processes;
  s.max_retries = 3;
  s.prefetch = 2;
  s.maxtasksperchild = maxtasksperchild;
  return s;
}

} // namespace

TEST_CASE("pool_scheduler: a dead worker's chunk reruns on its successor", "[pool_scheduler]") {
  rig r(settings(1));
  REQUIRE(r.host.launched.size() == 1);
  auto a = r.host.connect(r.host.launched[0]);
  r.submit(0, {5});
  auto sent = a->tasks();
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].second == std::vector<int>{5});

  a->close("killed"); // the link ends, then the job
  r.settle();
  r.end_job(r.host.launched[0], -9);
  REQUIRE(r.host.launched.size() == 2); // a successor
  auto b = r.host.connect(r.host.launched[1]);
  auto rerun = b->tasks();
  REQUIRE(rerun.size() == 1);
  CHECK(rerun[0] == sent[0]); // the same chunk
  answer(b->on_message, rerun[0].first, {10});
  r.settle();
  CHECK(r.results[0] == std::vector<int>{10});
  CHECK(r.deliveries == 1);
  CHECK(r.failures.empty());
}

TEST_CASE("pool_scheduler: a dead worker's chunk of several tasks is split into single tasks", "[pool_scheduler]") {
  rig r(settings(1));
  auto a = r.host.connect(r.host.launched[0]);
  r.submit(0, {1, 2, 3});
  REQUIRE(a->tasks().size() == 1);
  a->close("killed");
  r.settle();
  r.end_job(r.host.launched[0], -9);
  auto b = r.host.connect(r.host.launched.at(1));
  auto parts = b->tasks();
  REQUIRE(parts.size() == 2); // the credit window: prefetch chunks at a time
  for (std::size_t i = 0; i < 3; ++i) {
    auto now = b->tasks();
    REQUIRE(now.size() > i);
    CHECK(now[i].second.size() == 1);
    CHECK(r.deliveries == 0); // the call gets the chunk whole, once
    answer(b->on_message, now[i].first, {now[i].second[0] * 2});
    r.settle();
  }
  CHECK(r.results[0] == std::vector<int>{2, 4, 6});
  CHECK(r.deliveries == 1);
}

TEST_CASE("pool_scheduler: a late duplicate result is dropped", "[pool_scheduler]") {
  rig r(settings(2));
  REQUIRE(r.host.launched.size() == 2);
  auto a = r.host.connect(r.host.launched[0]);
  auto b = r.host.connect(r.host.launched[1]);
  r.submit(0, {7});
  auto& holder = a->tasks().empty() ? b : a;
  auto& other = a->tasks().empty() ? a : b;
  const auto chunk = holder->tasks().at(0).first;
  auto late = holder->on_message; // a frame already read when the link ended
  holder->close("heartbeat timeout");
  r.settle(); // rerun on the other worker
  REQUIRE(other->tasks().size() == 1);
  CHECK(other->tasks()[0].first == chunk);
  answer(late, chunk, {99}); // from a worker that no longer holds it
  r.settle();
  CHECK(r.deliveries == 0);
  answer(other->on_message, chunk, {14});
  r.settle();
  answer(late, chunk, {99}); // and once the chunk is done
  r.settle();
  CHECK(r.results[0] == std::vector<int>{14});
  CHECK(r.deliveries == 1);
}

TEST_CASE("pool_scheduler: a worker retires after maxtasksperchild tasks", "[pool_scheduler]") {
  rig r(settings(1, 1));
  auto a = r.host.connect(r.host.launched[0]);
  r.submit(0, {1});
  r.submit(1, {2});
  r.host.connect_all();            // successors launched ahead of need
  REQUIRE(a->tasks().size() == 1); // its one task, no more
  answer(a->on_message, a->tasks()[0].first, {10});
  r.settle();
  CHECK(a->told_to_shut_down());
  r.host.connect_all();
  std::shared_ptr<fake_link> next;
  for (auto& [id, l] : r.host.links)
    if (l != a && !l->tasks().empty()) next = l;
  REQUIRE(next);
  REQUIRE(next->tasks().size() == 1);
  CHECK(next->tasks()[0].second == std::vector<int>{2});
  answer(next->on_message, next->tasks()[0].first, {20});
  r.settle();
  CHECK(r.results[0] == std::vector<int>{10});
  CHECK(r.results[1] == std::vector<int>{20});
}

TEST_CASE("pool_scheduler: join waits for outstanding work, then for the workers", "[pool_scheduler]") {
  rig r(settings(1));
  auto a = r.host.connect(r.host.launched[0]);
  r.submit(0, {3});
  bool done = false;
  r.core->shutdown(false, [&] { done = true; });
  r.settle();
  CHECK_FALSE(done);
  CHECK_FALSE(a->told_to_shut_down()); // its task runs on
  answer(a->on_message, a->tasks().at(0).first, {6});
  r.settle();
  CHECK(r.results[0] == std::vector<int>{6});
  CHECK(a->told_to_shut_down());
  CHECK_FALSE(done); // its job has not ended yet
  r.end_job(r.host.launched[0]);
  CHECK(done);
}

TEST_CASE("pool_scheduler: each chunk goes to the worker holding the fewest, then the lowest id", "[pool_scheduler]") {
  rig r(settings(3)); // a credit window of 2 chunks (prefetch) until results come
  r.host.connect_all();
  REQUIRE(r.host.links.size() == 3);
  std::vector<std::shared_ptr<fake_link>> w;
  for (auto& [id, l] : r.host.links) w.push_back(l);
  auto values = [](const fake_link& l) {
    std::vector<int> v;
    for (auto& [cid, items] : l.tasks()) v.insert(v.end(), items.begin(), items.end());
    return v;
  };
  for (int seq = 0; seq < 6; ++seq) r.submit(std::uint64_t(seq), {seq});
  r.settle();
  CHECK(values(*w[0]) == std::vector<int>{0, 3});
  CHECK(values(*w[1]) == std::vector<int>{1, 4});
  CHECK(values(*w[2]) == std::vector<int>{2, 5});

  // Every window is full: the next chunk waits for a result, then goes to
  // the worker that sent it.
  r.submit(6, {6});
  r.settle();
  CHECK(values(*w[0]).size() + values(*w[1]).size() + values(*w[2]).size() == 6);
  answer(w[1]->on_message, w[1]->tasks()[0].first, {1});
  r.settle();
  CHECK(values(*w[1]) == std::vector<int>{1, 4, 6});
  CHECK(r.results[1] == std::vector<int>{1});
}

TEST_CASE("pool_scheduler: the descriptors asked for are a link and the launcher's fds_per_job a worker, and one "
          "handshake table",
          "[pool_scheduler][limits]") {
  // Under a hard RLIMIT_NOFILE that holds 400 workers at 2 descriptors each
  // (and 64 handshakes) but not at 3: the Pool starts. Before, every worker
  // was counted at 3, so 10,000 remote workers needed 30,000 descriptors.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::size_t open = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
      while (auto* e = ::readdir(dir)) open += e->d_name[0] != '.';
      ::closedir(dir);
    }
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = rlim_t(open + 32 + d::max_pending_handshakes + 2 * 400 + 50);
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(3);
    try {
      rig r(settings(400));
      ::_exit(r.host.launched.size() == 400 ? 0 : 2);
    } catch (const fiber::backend_error&) {
      ::_exit(1);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0); // 1: refused; 2: not all launched
}
