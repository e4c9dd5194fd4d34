// SPDX-License-Identifier: BSL-1.0
// bench_startup: how long until work can run.
//
//  - Pool of 8 local workers: construction → first apply result (median of
//    --reps; the Pool is terminated between repetitions, untimed).
//    Target (issue 9): ≤ 20 ms.
//  - Process start() + join() of an empty target (median of --procs).
//    Baselines in the same run: multiprocessing.Process start+join with the
//    fork start method (pyspawn.py) and posix_spawn of /bin/true + waitpid
//    (spawn.c). fiber's Process is posix_spawn of this executable, its
//    dynamic loading and static initialisation, the authenticated handshake
//    and the run message. Target (issue 22): ≤ 1.5x mp fork. The rows say
//    "(FIBER_STATIC_DEPS=ON)" when this binary was built with that option
//    (run_all.sh runs both builds).
//
//   bench_startup [--reps 5] [--procs 30] [--pool-workers 8] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

namespace {
int f(int x) { return x + 1; }
void noop() {}
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given && !a.smoke) a.reps = 5;
  const unsigned pool_workers = a.smoke ? 2
                                        : unsigned(std::atoi(bench::opt(a, "--pool-workers").value_or("8").c_str()));
  const int procs = a.smoke ? 3 : std::atoi(bench::opt(a, "--procs").value_or("30").c_str());
  bench::header("bench_startup: Pool construction to first result; Process start+join");
  std::printf("pool workers=%u  reps=%d  processes=%d\n", pool_workers, a.reps, procs);

  // Baselines first.
  double mp_fork = NAN, spawn_us = NAN;
  {
    auto py = bench::run_capture(bench::python() + " " + bench::peers_dir() + "/pyspawn.py --n " +
                                 std::to_string(a.smoke ? 5 : 200) + " --n-spawn 1");
    mp_fork = bench::grab(py, R"(\[fork\s*\] median\s+([0-9.]+) us)");
    if (auto bin = bench::peer_binary("spawn")) {
      auto out = bench::run_capture(*bin + " " + std::to_string(a.smoke ? 20 : 500));
      spawn_us = bench::grab(out, R"(posix_spawn /bin/true\s+median\s+([0-9.]+) us)");
    }
  }

  std::vector<double> pool_ms, first_worker_ms;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto t0 = bench::clk::now();
    fiber::Pool pool{fiber::target<&f>, {.processes = pool_workers}};
    double ctor = bench::seconds_since(t0) * 1e3;
    int r = pool.apply(1);
    double first = bench::seconds_since(t0) * 1e3;
    if (r != 2) std::fprintf(stderr, "bench_startup: bad result\n");
    while (pool.live_workers() < pool_workers) std::this_thread::yield();
    double all = bench::seconds_since(t0) * 1e3;
    pool_ms.push_back(first);
    std::printf("rep %d: Pool(%u) constructed in %.1f ms, first result at %.1f ms, all %u connected at %.1f ms\n",
                rep + 1, pool_workers, ctor, first, pool_workers, all);
    std::fflush(stdout);
    pool.terminate();
  }

  std::vector<double> proc_us;
  for (int i = 0; i < procs + 2; ++i) {
    auto t0 = bench::clk::now();
    fiber::Process p{fiber::target<&noop>};
    p.start();
    p.join();
    double us = bench::seconds_since(t0) * 1e6;
    if (p.exitcode() != 0) std::fprintf(stderr, "bench_startup: process exit %d\n", p.exitcode().value_or(-1));
    if (i >= 2) proc_us.push_back(us);
  }
  double pm = bench::median(pool_ms), prm = bench::median(proc_us);
  std::printf("Process start+join: median %.0f us p99 %.0f us | mp fork %.0f us | posix_spawn /bin/true %.0f us\n", prm,
              bench::quantile(proc_us, 0.99), mp_fork, spawn_us);

  const std::string link = bench::linkage();
  bench::row("startup, Pool of " + std::to_string(pool_workers) + " local workers" + link,
             "construction → first result, ms", bench::fmt("%.1f", pm), "-", "-", "≤ 20 ms", bench::verdict(pm <= 20));
  bench::row("startup, Process start+join" + link, "ms", bench::fmt("%.2f", prm / 1e3),
             "mp fork start+join: " + bench::fmt("%.2f", mp_fork / 1e3), bench::fmt("%.2fx", prm / mp_fork), "≤ 1.5x",
             bench::verdict(prm / mp_fork <= 1.5, !std::isnan(mp_fork)));
  bench::row("startup, Process start+join" + link, "ms", bench::fmt("%.2f", prm / 1e3),
             "posix_spawn /bin/true: " + bench::fmt("%.2f", spawn_us / 1e3), bench::fmt("%.2fx", prm / spawn_us), "-",
             "-");
  return 0;
}
