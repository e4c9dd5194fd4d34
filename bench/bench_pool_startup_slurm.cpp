// SPDX-License-Identifier: BSL-1.0
// bench_pool_startup_slurm: issue 7's measure — a fiber::Pool of 8 Slurm
// workers, from construction to its first result, per launch mode:
//
//   sbatch : one `sbatch --parsable` per worker     (slurm.launch_mode=sbatch)
//   array  : one `sbatch --array=0-7`               (slurm.launch_mode=array)
//   srun   : one `srun --jobid=$SLURM_JOB_ID` step per worker (inside an
//            allocation; the bench re-runs itself under `salloc` for it)
//
// bench_slurm_startup measures the launcher alone (submission -> job process
// started); this one measures what a user waits for through fiber's public
// API: Pool construction (submission) -> first `apply` result (the first
// worker started, dialled back, authenticated and ran a task), and -> all
// workers connected. Between repetitions the pool is closed and joined (its
// workers exit) and its jobs are gone from squeue.
//
// The launcher reads slurm.launch_mode once per process, so each mode runs in
// a child process (this binary again with --child).
//
// Usage: bench_pool_startup_slurm [--smoke] [--reps N] [--workers N] [--mode sbatch|array|srun]...
// --smoke: one repetition per mode; exits 0 with a notice when no Slurm is reachable.

#include "bench_slurm.hpp"

#include <fiber/backend/slurm.hpp>
#include <fiber/fiber.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
namespace si = fiber::detail::slurm_impl;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

int ping(int x) { return x; }

using bench::slurm_reachable;
using bench::wait_gone;

double secs(clk::duration d) { return std::chrono::duration<double>(d).count(); }

struct sample {
  double construct = 0, first = 0, all = 0;
};

std::array<double, 3> min_med_max(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return {x.front(), x[x.size() / 2], x.back()};
}

/// The measuring process: `reps` pools of `workers` workers in mode `mode`.
int child(const std::string& mode, int reps, unsigned workers) {
  fiber::set_config("slurm.launch_mode", mode);
  const std::string name = "fiberbench-" + mode;
  std::vector<sample> v;
  for (int i = 0; i < reps; ++i) {
    sample s;
    try {
      auto t0 = clk::now();
      fiber::pool_options o;
      o.processes = workers;
      o.name = name;
      fiber::Pool<&ping, fiber::backend::slurm> pool{fiber::target<&ping>, o};
      s.construct = secs(clk::now() - t0);
      if (pool.apply(7) != 7) {
        std::fprintf(stderr, "%s: wrong result\n", mode.c_str());
        return 1;
      }
      s.first = secs(clk::now() - t0);
      auto deadline = clk::now() + 120s;
      while (pool.live_workers() < workers && clk::now() < deadline) std::this_thread::sleep_for(2ms);
      if (pool.live_workers() < workers) {
        std::fprintf(stderr, "%s: only %u of %u workers connected within 120 s\n", mode.c_str(), pool.live_workers(),
                     workers);
        return 1;
      }
      s.all = secs(clk::now() - t0);
      pool.close(); // workers exit 0: no "Killed" report from srun
      pool.join();
    } catch (const std::exception& e) { // ~Pool has cancelled its jobs
      std::fprintf(stderr, "%s: %s\n", mode.c_str(), e.what());
      return 1;
    }
    if (mode != "srun" && !wait_gone(name)) std::fprintf(stderr, "%s: jobs still listed after 60 s\n", mode.c_str());
    v.push_back(s);
  }
  auto pick = [&](double sample::*f) {
    std::vector<double> x;
    for (auto& s : v) x.push_back(s.*f);
    return min_med_max(x);
  };
  auto c = pick(&sample::construct), f = pick(&sample::first), a = pick(&sample::all);
  std::printf("%-6s Pool(%u), %zu runs: construction -> first result %.3f s median [%.3f..%.3f]; "
              "-> all %u connected %.3f s [%.3f..%.3f]; constructor %.3f s [%.3f..%.3f]\n",
              mode.c_str(), workers, v.size(), f[1], f[0], f[2], workers, a[1], a[0], a[2], c[1], c[0], c[2]);
  std::fflush(stdout);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv); // in a worker: serves ping, never returns
  bool smoke = false, is_child = false;
  int reps = 5;
  unsigned workers = 8;
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--child") is_child = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--workers" && i + 1 < argc) workers = unsigned(std::max(1, std::atoi(argv[++i])));
    else if (a == "--mode" && i + 1 < argc) {
      modes.push_back(argv[++i]);
      if (modes.back() != "sbatch" && modes.back() != "array" && modes.back() != "srun") {
        std::fprintf(stderr, "unknown mode %s\n", modes.back().c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--smoke] [--reps N] [--workers N] [--mode sbatch|array|srun]...\n", argv[0]);
      return 2;
    }
  }
  if (smoke) reps = 1;
  if (is_child) return child(modes.at(0), reps, workers);
  if (modes.empty()) modes = {"sbatch", "array", "srun"};

  std::string why;
  if (!slurm_reachable(why, smoke ? 3s : 15s)) {
    std::printf("bench_pool_startup_slurm: no Slurm cluster reachable (%s); nothing measured\n", why.c_str());
    return 0;
  }
  const bool in_allocation = std::getenv("SLURM_JOB_ID") != nullptr;
  const auto self = fs::read_symlink("/proc/self/exe").string();
  int rc = 0;
  for (auto& m : modes) {
    std::vector<std::string> cmd{
        self, "--child", "--mode", m, "--reps", std::to_string(reps), "--workers", std::to_string(workers)};
    if (m == "srun" && !in_allocation) {
      // The master of a fresh allocation of `workers` CPUs (salloc runs it
      // here, with SLURM_JOB_ID set); each worker is a one-CPU step of it.
      cmd.insert(cmd.begin(), {"salloc", "--quiet", "--job-name=fiberbench-alloc", "--nodes=1", "--ntasks=1",
                               "--cpus-per-task=" + std::to_string(workers), "--"});
    }
    fiber::detail::spawn_request r;
    r.argv = cmd;
    r.out = r.err = fiber::detail::stdio::inherit;
    auto res = fiber::detail::run(r, std::chrono::minutes(10));
    if (!res.ok()) {
      std::printf("%-6s failed (%s)\n", m.c_str(), res.describe().c_str());
      rc = 1;
    }
    if (m == "srun" && !in_allocation) wait_gone("fiberbench-alloc"); // leave no job behind, even a completing one
  }
  return rc;
}
