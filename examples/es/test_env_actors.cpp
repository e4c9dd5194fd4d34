// SPDX-License-Identifier: BSL-1.0
// MuJoCo environments as fiber actors (env_actors.hpp): the stepping loops
// give the same trajectories locally and remotely, synchronously and
// asynchronously; a killed environment process fails exactly its handles,
// and new environments carry on.
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include <csignal>

#include "env_actors.hpp"

namespace {

template <class Env, class Handle>
es::rollout_stats stepped(std::vector<Handle>& units, std::size_t k, bool async, const es::linear_policy& pi) {
  return async ? es::run_here(es::step_async<Env>(units, k, 30, 1, pi, 5))
               : es::run_here(es::step_sync<Env>(units, k, 30, pi, 5));
}

template <class Env>
void same_trajectories(std::size_t k) {
  using unit = es::env_batch<Env>;
  const auto pi = es::linear_policy::for_env<Env>(3);
  asio::thread_pool pool(2);
  std::vector<es::pooled<unit>> local;
  for (int u = 0; u < 4; ++u) local.emplace_back(pool, std::make_shared<unit>(int(k)));
  fiber::RemoteManager<unit> manager{{.processes = 2, .threads = 1}}; // two units a process, one at a time
  std::vector<fiber::Remote<unit>> remote;
  for (int u = 0; u < 4; ++u) remote.push_back(manager.make(int(k)));
  const auto reference = stepped<Env>(local, k, false, pi);
  REQUIRE(reference.steps == 4 * k * 30);
  for (bool async : {false, true}) {
    INFO((async ? "async" : "sync"));
    auto l = stepped<Env>(local, k, async, pi);
    auto r = stepped<Env>(remote, k, async, pi);
    for (auto& e : r.failed) CHECK_FALSE(e);
    CHECK(l.checksum == reference.checksum);
    CHECK(r.checksum == reference.checksum);
    CHECK(r.steps == reference.steps);
    CHECK(r.episodes == reference.episodes);
  }
}

} // namespace

TEST_CASE("remote and in-process, sync and async: the same trajectories (humanoid)", "[envs]") {
  same_trajectories<es::humanoid>(1);
}

TEST_CASE("remote and in-process, sync and async: the same trajectories (arm, batches of 3)", "[envs]") {
  same_trajectories<es::arm_reach>(3);
}

TEST_CASE("a SIGKILLed environment process fails exactly its handles; new environments carry on", "[envs]") {
  using unit = es::env_batch<es::humanoid>;
  const auto pi = es::linear_policy::for_env<es::humanoid>(3);
  fiber::RemoteManager<unit> manager{{.processes = 2, .threads = 1}}; // as the example and the bench make them
  std::vector<fiber::Remote<unit>> units;
  std::vector<std::vector<float>> obs;
  for (int u = 0; u < 4; ++u) {
    units.push_back(manager.make(1));
    obs.push_back(units.back().call<&unit::reset>(std::uint64_t(u)));
  }
  for (int t = 0; t < 10; ++t) // mid-episode
    for (std::size_t u = 0; u < units.size(); ++u) obs[u] = units[u].call<&unit::step>(pi.act(obs[u])).obs;
  const auto pids = manager.pids();
  REQUIRE(pids.size() == 2);
  ::kill(pid_t(pids[0]), SIGKILL);
  std::vector<std::size_t> lost;
  for (std::size_t u = 0; u < units.size(); ++u) {
    try {
      (void)units[u].call<&unit::step>(pi.act(obs[u]));
    } catch (const fiber::worker_lost&) {
      lost.push_back(u);
    }
  }
  // Objects are spread evenly: the killed process held two of the four.
  REQUIRE(lost.size() == 2);
  for (auto u : lost) units[u] = manager.make(1);
  auto again = es::run_here(es::step_sync<es::humanoid>(units, 1, 20, pi, 9));
  for (auto& e : again.failed) CHECK_FALSE(e);
  CHECK(again.steps == 4 * 20);
}
