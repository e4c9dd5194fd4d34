// SPDX-License-Identifier: BSL-1.0
// bench_slurm_startup: how long 8 Slurm-backed workers take to start, per
// launch mode of fiber::backend::slurm.
//
//   sbatch : 8 x `sbatch --parsable`            (launch_mode=sbatch)
//   array  : 1 x `sbatch --array=0-7`           (launch_mode=array)
//   srun   : 8 x `srun --jobid=$SLURM_JOB_ID`   (launch_mode=srun; the bench
//            re-runs itself under `salloc -c 8` when not inside an allocation)
//
// Measured: launch() call (submission, blocking) and submission -> all 8 job
// processes started (each writes CLOCK_REALTIME to a file as its first act;
// same machine, so one clock). Between repetitions every job is cancelled and
// the bench waits until squeue no longer lists them.
//
// Usage: bench_slurm_startup [--smoke] [--reps N] [--jobs N] [--mode sbatch|array|srun]...
// --smoke: one repetition; exits 0 with a notice when no Slurm is reachable.

#include "bench_slurm.hpp"

#include <fiber/backend/slurm.hpp>

#include <asio/io_context.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
namespace si = fiber::detail::slurm_impl;
using fiber::detail::slurm_launcher;
using fiber::detail::slurm_options;
using namespace std::chrono_literals;

namespace {

double now_realtime() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

using bench::slurm_reachable;
using bench::wait_gone;

struct sample {
  double submit_s = 0, all_running_s = 0;
};

std::optional<sample> one_run(slurm_options::mode mode, int jobs, const std::string& alloc) {
  char tmpl[] = "/tmp/fiber-bench-slurm-XXXXXX";
  if (!::mkdtemp(tmpl)) return std::nullopt;
  fs::path dir = tmpl;
  const std::string name = "fiber-bench";
  sample s;
  {
    asio::io_context ctx;
    slurm_options o;
    o.launch_mode = mode;
    o.poll_interval = 500ms;
    if (mode == slurm_options::mode::srun) o.allocation = alloc;
    auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);
    std::vector<fiber::backend::job_spec> specs;
    for (int i = 0; i < jobs; ++i) {
      fiber::backend::job_spec sp;
      sp.name = name;
      auto f = (dir / ("t" + std::to_string(i))).string();
      // date runs first: its stamp is when the job's process started
      sp.argv = {"/bin/sh", "-c", "date +%s.%N > " + f + ".tmp && mv " + f + ".tmp " + f + "; exec sleep 120"};
      sp.env = {{"FIBER_INTERNAL_WORKER_ID", std::to_string(i)}};
      sp.stdout_path = sp.stderr_path = "/dev/null"; // steps: slurmstepd's "CANCELLED" lines too
      specs.push_back(sp);
    }
    std::vector<fiber::backend::exit_handler> h(specs.size(), [](const fiber::backend::job_exit&) {});
    double t0 = now_realtime();
    try {
      l->launch(specs, h);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "launch failed: %s\n", e.what());
      fs::remove_all(dir);
      return std::nullopt;
    }
    s.submit_s = now_realtime() - t0;
    auto deadline = std::chrono::steady_clock::now() + 60s;
    double latest = 0;
    int seen = 0;
    while (seen < jobs && std::chrono::steady_clock::now() < deadline) {
      if (ctx.stopped()) ctx.restart();
      ctx.run_for(2ms);
      seen = 0;
      latest = 0;
      for (int i = 0; i < jobs; ++i) {
        std::ifstream in(dir / ("t" + std::to_string(i)));
        double t = 0;
        if (in >> t) ++seen, latest = std::max(latest, t);
      }
    }
    if (seen < jobs) {
      std::fprintf(stderr, "only %d of %d jobs started within 60 s\n", seen, jobs);
      fs::remove_all(dir);
      return std::nullopt;
    }
    s.all_running_s = latest - t0;
  } // ~slurm_launcher cancels everything
  if (mode != slurm_options::mode::srun) wait_gone(name);
  fs::remove_all(dir);
  return s;
}

const char* mode_name(slurm_options::mode m) {
  switch (m) {
  case slurm_options::mode::sbatch: return "sbatch";
  case slurm_options::mode::array: return "array";
  case slurm_options::mode::srun: return "srun";
  default: return "auto";
  }
}

void report(slurm_options::mode m, int jobs, std::vector<sample> v) {
  if (v.empty()) {
    std::printf("%-7s %d jobs: no successful run\n", mode_name(m), jobs);
    return;
  }
  auto med = [&](auto field) {
    std::vector<double> x;
    for (auto& s : v) x.push_back(s.*field);
    std::sort(x.begin(), x.end());
    return std::array<double, 3>{x.front(), x[x.size() / 2], x.back()};
  };
  auto a = med(&sample::submit_s), b = med(&sample::all_running_s);
  std::printf("%-7s %d jobs, %zu runs: launch() %.3f s median [%.3f..%.3f]; submission -> all running %.3f s "
              "median [%.3f..%.3f]\n",
              mode_name(m), jobs, v.size(), a[1], a[0], a[2], b[1], b[0], b[2]);
}

} // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  int reps = 5, jobs = 8;
  std::vector<slurm_options::mode> modes;
  std::vector<std::string> passthrough; // for the salloc re-run
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--jobs" && i + 1 < argc) jobs = std::atoi(argv[++i]);
    else if (a == "--mode" && i + 1 < argc) modes.push_back(slurm_options::parse_mode(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--smoke] [--reps N] [--jobs N] [--mode sbatch|array|srun]...\n", argv[0]);
      return 2;
    }
  }
  if (smoke) reps = 1;
  if (modes.empty()) modes = {slurm_options::mode::sbatch, slurm_options::mode::array, slurm_options::mode::srun};

  std::string why;
  if (!slurm_reachable(why, smoke ? 3s : 15s)) {
    std::printf("bench_slurm_startup: no Slurm cluster reachable (%s); nothing measured\n", why.c_str());
    return 0;
  }
  const char* alloc = std::getenv("SLURM_JOB_ID");
  for (auto m : modes) {
    if (m == slurm_options::mode::srun && !alloc) {
      // Re-run this binary as the master of a fresh allocation (salloc runs
      // it here, with SLURM_JOB_ID set).
      std::vector<std::string> cmd{"salloc",
                                   "--quiet",
                                   "--job-name=fiber-bench-alloc",
                                   "--cpus-per-task=" + std::to_string(jobs),
                                   "--",
                                   fs::read_symlink("/proc/self/exe").string(),
                                   "--mode",
                                   "srun",
                                   "--reps",
                                   std::to_string(reps),
                                   "--jobs",
                                   std::to_string(jobs)};
      fiber::detail::spawn_request r;
      r.argv = cmd;
      r.out = r.err = fiber::detail::stdio::inherit;
      auto res = fiber::detail::run(r, std::chrono::minutes(10));
      if (!res.ok()) std::printf("srun    (salloc run failed: %s)\n", res.describe().c_str());
      wait_gone("fiber-bench-alloc"); // leave no job behind, even a completing one
      continue;
    }
    std::vector<sample> v;
    for (int i = 0; i < reps; ++i)
      if (auto s = one_run(m, jobs, alloc ? alloc : "")) v.push_back(*s);
    report(m, jobs, v);
  }
  return 0;
}
