// SPDX-License-Identifier: BSL-1.0
// remote_mujoco — one learner stepping MuJoCo environments that live in
// other processes (fiber::RemoteManager), synchronously or EnvPool-style
// (act on the first M that return), against the same environments on an
// in-process thread pool. The stepping loops are written once (env_actors.hpp);
// the one-line change between the two is the handle type.
//
//   remote_mujoco [--env humanoid|arm] [--envs N] [--batch K] [--processes P]
//                 [--steps T] [--mode sync|async] [--recv M] [--smoke]
#include <fiber/fiber.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "env_actors.hpp"

struct options {
  std::string env = "humanoid", mode = "sync";
  int envs = 8, batch = 1, steps = 200;
  unsigned processes = 2;
  std::size_t recv = 0; // async: units per recv; 0 = half of them
};

template <class Env, class Handle>
es::rollout_stats run(std::vector<Handle>& units, const options& o) {
  auto pi = es::linear_policy::for_env<Env>(7);
  const std::size_t k = std::size_t(o.batch), m = o.recv ? o.recv : std::max<std::size_t>(1, units.size() / 2);
  return o.mode == "async" ? es::run_here(es::step_async<Env>(units, k, o.steps, m, pi, 1))
                           : es::run_here(es::step_sync<Env>(units, k, o.steps, pi, 1));
}

template <class Env>
int compare(const options& o, const char* name) {
  using unit = es::env_batch<Env>;
  const int units = o.envs / o.batch;
  asio::thread_pool pool(o.processes);
  std::vector<es::pooled<unit>> local;
  for (int u = 0; u < units; ++u) local.emplace_back(pool, std::make_shared<unit>(o.batch));
  auto l = run<Env>(local, o);

  // One thread a process, as the in-process pool has one a core: the
  // environments of a process step one after another, not all at once.
  fiber::RemoteManager<unit> manager{{.processes = o.processes, .threads = 1}};
  std::vector<fiber::Remote<unit>> remote;
  for (int u = 0; u < units; ++u) remote.push_back(manager.make(o.batch));
  auto r = run<Env>(remote, o);

  std::printf("%s, %d envs in %d units, %s: in-process pool (%u threads) %.0f steps/s, "
              "remote (%u processes) %.0f steps/s: %.2fx; %zu episodes\n",
              name, o.envs, units, o.mode.c_str(), o.processes, l.steps_per_second(), o.processes, r.steps_per_second(),
              r.steps_per_second() / l.steps_per_second(), r.episodes);
  const bool same = l.checksum == r.checksum;
  std::printf("same trajectories: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}

int main(int argc, char** argv) {
  // A reply is handled as it arrives, even while both cores step
  // environments (a batch-policy I/O thread would wait for one to free).
  fiber::set_config("io_threads_batch", "false");
  fiber::init(argc, argv);
  options o;
  bool smoke = false;
  CLI::App app{"remote_mujoco: MuJoCo environments as fiber actors"};
  app.add_option("--env", o.env)->check(CLI::IsMember({"humanoid", "arm"}));
  app.add_option("--envs", o.envs)->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "environments per actor (one call steps them all)")->check(CLI::PositiveNumber);
  app.add_option("--processes", o.processes)->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps)->check(CLI::PositiveNumber);
  app.add_option("--mode", o.mode)->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--recv", o.recv, "async: units the learner waits for before acting");
  app.add_flag("--smoke", smoke, "a tiny run of both modes (CI)");
  CLI11_PARSE(app, argc, argv);
  if (o.envs % o.batch) return std::fprintf(stderr, "--envs must be a multiple of --batch\n"), 2;
  if (smoke) {
    o.envs = 4, o.steps = 20;
    int rc = 0;
    for (auto mode : {"sync", "async"})
      o.mode = mode, rc |= compare<es::humanoid>(o, "humanoid") | compare<es::arm_reach>(o, "arm");
    return rc;
  }
  return o.env == "arm" ? compare<es::arm_reach>(o, "arm") : compare<es::humanoid>(o, "humanoid");
}
