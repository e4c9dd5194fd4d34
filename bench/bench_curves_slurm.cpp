// SPDX-License-Identifier: BSL-1.0
// bench_curves_slurm: time to all-workers-up of a Slurm-backed Pool against
// its number of workers (issue 22), for the plot bench/run_all.sh draws next
// to the local curve of bench_curves. For each N of --workers-list (default
// 1,2,4,8,16,24) and each launch mode of --modes (default array,srun):
//
//   array : one `sbatch --array=0-(N-1)` (slurm.launch_mode=array)
//   srun  : N `srun --jobid=... -n1 -N1 --exact` steps of an allocation of N
//           one-CPU tasks (`salloc --ntasks=N`; the bench re-runs itself under
//           salloc, as bench_pool_startup_slurm does)
//
// a Pool of N workers is constructed and timed to its first result and to
// all N connected; median of --reps (default 3). Between repetitions the
// Pool is closed and joined and its jobs are gone from squeue. Each (mode, N)
// runs in a child process (the launcher reads slurm.launch_mode once per
// process). On the `slurm-up.sh --nodes 3 --netns` rig (3 nodes of 8 CPUs:
// 24 one-CPU workers at most) the workers run on the three namespace hosts
// and dial 10.200.0.1 (listen_address); on a one-node rig, where they are.
//
// Writes `mode,workers,first_s,all_up_s` lines to --csv FILE.
//
//   bench_curves_slurm [--workers-list 1,2,4,8,16,24] [--modes array,srun] [--reps 3] [--csv FILE]
//                      [--require-rig] [--smoke]
// --smoke: N = 1 and 2, one repetition. No Slurm: says so, exits 0 (with --require-rig: 1).
#include "bench_util.hpp"

#include <fiber/backend/slurm.hpp>
#include <fiber/fiber.hpp>

#include <filesystem>
#include <thread>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

int ping(int x) { return x; }

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

/// Wait (bounded) until squeue lists no job named `name`.
bool wait_gone(const std::string& name) {
  for (auto deadline = bench::clk::now() + 60s; bench::clk::now() < deadline;) {
    auto out = bench::run_capture("squeue -h -n " + name + " -o %i 2>/dev/null");
    if (trim(out).empty()) return true;
    std::this_thread::sleep_for(50ms); // polling Slurm's state against a deadline
  }
  return false;
}

/// The measuring process: `reps` Pools of `workers` workers in `mode`.
int child(const std::string& mode, int reps, unsigned workers) {
  fiber::set_config("slurm.launch_mode", mode);
  fiber::set_config("slurm.poll_interval_ms", "200");
  fiber::set_log_level(fiber::log_level::error);
  const std::string name = "fibercurve-" + mode;
  std::vector<double> first, all;
  for (int i = 0; i < reps; ++i) {
    try {
      auto t0 = bench::clk::now();
      fiber::pool_options o;
      o.processes = workers;
      o.name = name;
      fiber::Pool<&ping, fiber::backend::slurm> pool{fiber::target<&ping>, o};
      if (pool.apply(7) != 7) {
        std::fprintf(stderr, "%s: wrong result\n", mode.c_str());
        return 1;
      }
      first.push_back(bench::seconds_since(t0));
      while (pool.live_workers() < workers && bench::seconds_since(t0) < 120) std::this_thread::sleep_for(2ms);
      if (pool.live_workers() < workers) {
        std::fprintf(stderr, "%s: only %u of %u workers connected within 120 s\n", mode.c_str(), pool.live_workers(),
                     workers);
        return 1;
      }
      all.push_back(bench::seconds_since(t0));
      pool.close(); // workers exit 0: no "Killed" report from srun
      pool.join();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", mode.c_str(), e.what());
      return 1;
    }
    if (mode != "srun" && !wait_gone(name)) std::fprintf(stderr, "%s: jobs still listed after 60 s\n", mode.c_str());
    std::printf("  %s N=%u rep %d: first result %.3f s, all up %.3f s\n", mode.c_str(), workers, i + 1, first.back(),
                all.back());
    std::fflush(stdout);
  }
  std::printf("RESULT %s %u %.4f %.4f\n", mode.c_str(), workers, bench::median(first), bench::median(all));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv); // in a worker: serves ping, never returns
  auto a = bench::parse_common(argc, argv);
  const bool require_rig = std::find(a.rest.begin(), a.rest.end(), "--require-rig") != a.rest.end();
  if (std::find(a.rest.begin(), a.rest.end(), "--child") != a.rest.end())
    return child(bench::opt(a, "--mode").value_or("array"), a.reps, a.workers);

  std::vector<unsigned> list;
  {
    std::stringstream ss(bench::opt(a, "--workers-list").value_or(a.smoke ? "1,2" : "1,2,4,8,16,24"));
    for (std::string x; std::getline(ss, x, ',');)
      if (int n = std::atoi(x.c_str()); n > 0) list.push_back(unsigned(n));
  }
  std::vector<std::string> modes;
  {
    std::stringstream ss(bench::opt(a, "--modes").value_or("array,srun"));
    for (std::string x; std::getline(ss, x, ',');)
      if (x == "array" || x == "srun" || x == "sbatch") modes.push_back(x);
  }
  bench::header("bench_curves_slurm: Slurm Pool, time to all-workers-up against workers");

  const std::string nodes = trim(bench::run_capture("timeout 10 sinfo -h -N -o '%N %c' 2>/dev/null"));
  if (nodes.empty()) {
    std::printf("skipped: no Slurm cluster answers (as root: bash tests/rigs/slurm-up.sh --nodes 3 --netns)\n");
    bench::row("curve: Slurm Pool, all-workers-up", "s", "skipped: no Slurm", "-", "-", "-", "n/a");
    return require_rig ? 1 : 0;
  }
  long cpus = 0;
  bool netns = false;
  {
    std::istringstream in(nodes);
    std::string n;
    long c;
    while (in >> n >> c) {
      cpus += c;
      netns = netns || n.rfind("righost", 0) == 0;
    }
  }
  std::printf("nodes: %s (%ld CPUs)%s\n", nodes.c_str(), cpus, netns ? "; netns rig: listen_address 10.200.0.1" : "");
  std::fflush(stdout);
  std::string env = netns ? "FIBER_LISTEN_ADDRESS=10.200.0.1 " : "";
  const auto self = fs::read_symlink("/proc/self/exe").string();

  std::FILE* csv = nullptr;
  if (auto p = bench::opt(a, "--csv")) {
    csv = std::fopen(p->c_str(), "w");
    if (csv) std::fputs("mode,workers,first_s,all_up_s\n", csv);
  }
  for (auto& m : modes) {
    for (unsigned n : list) {
      if (long(n) > cpus) {
        std::printf("%s N=%u: skipped, the cluster has %ld CPUs\n", m.c_str(), n, cpus);
        continue;
      }
      std::string cmd = env + "'" + self + "' --child --mode " + m + " --workers " + std::to_string(n) + " --reps " +
                        std::to_string(a.reps);
      if (m == "srun")
        cmd = "salloc --quiet --job-name=fibercurve-alloc --ntasks=" + std::to_string(n) + " -- /usr/bin/env " + cmd;
      auto out = bench::run_capture(cmd + " 2>&1");
      std::fputs(out.c_str(), stdout);
      if (m == "srun") {
        // salloc has returned; its allocation may still be completing
        for (int i = 0; i < 600 && !trim(bench::run_capture("squeue -h -n fibercurve-alloc -o %i 2>/dev/null")).empty();
             ++i)
          std::this_thread::sleep_for(100ms);
      }
      double first = bench::grab(out, R"(RESULT \w+ \d+ ([0-9.]+))"),
             all = bench::grab(out, R"(RESULT \w+ \d+ [0-9.]+ ([0-9.]+))");
      if (csv && !std::isnan(all)) {
        std::fprintf(csv, "%s,%u,%.4f,%.4f\n", m.c_str(), n, first, all);
        std::fflush(csv);
      }
      bench::row("curve: Slurm Pool of " + std::to_string(n) + " workers, " + m + (netns ? " (3 netns hosts)" : ""),
                 "construction → first result / all up, s (median of " + std::to_string(a.reps) + ")",
                 std::isnan(all) ? "failed (see log)" : bench::fmt("%.3f", first) + " / " + bench::fmt("%.3f", all),
                 "-", "-", "-", "-");
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
