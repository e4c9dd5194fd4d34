// SPDX-License-Identifier: BSL-1.0
// bench_envs: co_await remote env.step() against stepping in-process (issue
// 33). One learner steps N MuJoCo environments that live in 2 manager
// processes (fiber::RemoteManager, examples/es/env_actors.hpp), and, in the
// same run, the same environments on an in-process thread pool of 2 threads
// — EnvPool's design (Weng et al. 2022, arXiv 2206.10558), the physical
// limit on the same cores: the control. Both run the same loops:
//
//  - sync: every unit steps, the learner awaits all, acts, repeats;
//  - async (EnvPool's send/recv): the learner acts on the first half of the
//    units that return while the others keep simulating;
//  - units of K = 1 environment, or K = N/2 (one unit per process: one call
//    steps K environments, EnvPool's batch).
//
// Models: DeepMind's humanoid (the ES example's task, ~0.1 ms a step) and a
// 2-link muscle arm (a few µs a step; Debian's libmujoco-samples has no
// hopper or ant). Rows: environment steps/s, fiber/control (the median of
// the ratios of pairs of runs, their least and greatest after it), and the
// per-step overhead (fiber's wall time per step minus the control's).
// Targets: humanoid ≥ 0.9x, arm with batching ≥ 0.8x; across the network
// namespace hosts (workers in righost1 and righost2, tests/rigs/netns-up.sh;
// root) ≥ 0.8x. EnvPool's published figures (Ant-v3, other hardware) are
// printed beside them, not compared.
//
//   bench_envs [--reps 3] [--seconds 1.0] [--model humanoid|arm] [--n 8] [--smoke]
#include "../examples/es/env_actors.hpp"
#include "bench_netns.hpp"
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

#include <algorithm>
#include <map>
#include <string>

namespace {

constexpr unsigned cores = 2; // processes of fiber, threads of the control

struct config {
  std::size_t n, k;
  bool async;
  int steps; // per environment
};

template <class Env, class Handle>
double steps_per_second(std::vector<Handle>& units, const config& c, const es::linear_policy& pi) {
  auto st = c.async ? es::run_here(es::step_async<Env>(units, c.k, c.steps, std::max<std::size_t>(1, units.size() / 2),
                                                       pi, 1))
                    : es::run_here(es::step_sync<Env>(units, c.k, c.steps, pi, 1));
  for (auto& e : st.failed)
    if (e) std::rethrow_exception(e);
  return st.steps_per_second();
}

/// What one configuration measured: medians of steps/s, and fiber/control
/// of each pair of runs (the VM's neighbours move both figures of a pair
/// alike, and a pair's order alternates, so a drift cancels).
struct figures {
  double control, fiber, ratio, ratio_min, ratio_max;
};

/// `reps` pairs of runs, control and fiber, interleaved.
template <class Env, class Manager>
figures measure(Manager& manager, asio::thread_pool& pool, const config& c, int reps) {
  using unit = es::env_batch<Env>;
  const auto pi = es::linear_policy::for_env<Env>(7);
  std::vector<es::pooled<unit>> local;
  std::vector<fiber::Remote<unit>> remote;
  for (std::size_t u = 0; u < c.n / c.k; ++u) {
    local.emplace_back(pool, std::make_shared<unit>(int(c.k)));
    remote.push_back(manager.make(int(c.k)));
  }
  // Warm-up: the first calls grow buffers and wake the processes.
  auto warm = c;
  warm.steps = std::max(2, c.steps / 10);
  steps_per_second<Env>(local, warm, pi);
  steps_per_second<Env>(remote, warm, pi);
  std::vector<double> l, r, q;
  for (int i = 0; i < reps; ++i) {
    if (i % 2 == 0) {
      l.push_back(steps_per_second<Env>(local, c, pi));
      r.push_back(steps_per_second<Env>(remote, c, pi));
    } else {
      r.push_back(steps_per_second<Env>(remote, c, pi));
      l.push_back(steps_per_second<Env>(local, c, pi));
    }
    q.push_back(r.back() / l.back());
  }
  return {bench::median(l), bench::median(r), bench::median(q), *std::min_element(q.begin(), q.end()),
          *std::max_element(q.begin(), q.end())};
}

std::string overhead(double fiber, double control) {
  return bench::fmt("%.0f steps/s", fiber) + bench::fmt(" (%+.1f us/step)", 1e6 / fiber - 1e6 / control);
}

/// A row for every configuration of one model.
template <class Env, class Backend = fiber::backend::from_env>
void model_rows(const std::string& name, const std::string& where, double seconds_per_run, double rate_guess,
                const std::vector<std::size_t>& ns, int reps, double target, bool target_needs_batch) {
  fiber::RemoteManager<es::env_batch<Env>, Backend> manager{{.processes = cores, .threads = 1}};
  asio::thread_pool pool(cores);
  for (auto n : ns) {
    std::vector<std::size_t> ks{1};
    if (n / cores > 1) ks.push_back(n / cores); // one unit per process
    for (auto k : ks)
      for (bool async : {false, true}) {
        const int steps = std::max(5, int(rate_guess * seconds_per_run / double(n)));
        const config c{n, k, async, steps};
        const auto f = measure<Env>(manager, pool, c, reps);
        const double ratio = f.ratio;
        const bool has_target = !target_needs_batch || k > 1;
        char fig[160];
        std::snprintf(fig, sizeof fig, "%s%s N=%zu K=%zu %s steps/s", name.c_str(), where.c_str(), n, k,
                      async ? "async" : "sync");
        bench::row("envs", fig, overhead(f.fiber, f.control), bench::fmt("%.0f (in-process pool)", f.control),
                   bench::fmt("%.2fx", ratio) + bench::fmt(" (%.2f", f.ratio_min) + bench::fmt("-%.2f)", f.ratio_max),
                   has_target ? bench::fmt(">= %.1fx", target) : "-",
                   has_target ? bench::verdict(ratio >= target) : "-");
      }
  }
}

} // namespace

int main(int argc, char** argv) {
  fiber::set_config("io_threads_batch", "false"); // as remote_mujoco (docs/RATIONALE.md)
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  const double seconds = std::stod(bench::opt(a, "--seconds").value_or(a.smoke ? "0.05" : "1.0"));
  bench::header("bench_envs: MuJoCo environments in 2 processes vs an in-process pool of 2 threads");
  std::vector<std::size_t> ns = a.smoke ? std::vector<std::size_t>{2, 4} : std::vector<std::size_t>{2, 8, 32, 128};
  if (auto n = bench::opt(a, "--n")) ns = {std::size_t(std::stoul(*n))}; // one N only
  const auto model = bench::opt(a, "--model").value_or("all");
  if (model == "all" || model == "humanoid")
    model_rows<es::humanoid>("humanoid", "", seconds, 6000, ns, a.reps, 0.9, false);
  if (model == "all" || model == "arm") model_rows<es::arm_reach>("arm", "", seconds, 150000, ns, a.reps, 0.8, true);
  if (model != "all" && model != "hosts") {
  } else if (auto why = bench::netns::rig_missing(2); why.empty()) {
    bench::netns::place_on({1, 2});
    const std::vector<std::size_t> hn = a.smoke ? std::vector<std::size_t>{4} : std::vector<std::size_t>{8, 32};
    model_rows<es::humanoid, bench::netns::hosts_tcp>("humanoid", " across hosts", seconds, 6000, hn, a.reps, 0.8,
                                                      false);
  } else {
    std::printf("# across hosts: not run (%s; bash tests/rigs/netns-up.sh 3 as root)\n", why.c_str());
  }
  // EnvPool's own table (benchmark/README.md, envpool 0.6.0, Ant-v3, FPS x
  // frame_skip 5): another machine, another model — for scale only.
  bench::row("envs", "EnvPool published: Ant-v3, 2 threads, i7-8750H laptop", "-", "sync 30,410 / async 41,280 FPS",
             "-", "-", "-");
  bench::row("envs", "EnvPool published: Ant-v3, 16 threads, Ryzen 9 5950X", "-", "async 478,846 FPS", "-", "-", "-");
  return 0;
}
