// SPDX-License-Identifier: BSL-1.0
// bench_overhead: the Fiber paper's framework-overhead test (arXiv 2003.11164,
// section 4.1). n tasks that each sleep d are mapped (chunksize 1) over a Pool
// of W workers, n chosen so that the ideal time n·d/W is --ideal seconds; the
// figure is wall/ideal and the excess per task, (wall − ideal)/n, above an
// in-process C++ control (n/W sleeps of d back to back in this process, as
// overhead.py's "inline" row does for Python). Baseline in the same run:
// multiprocessing.Pool map(chunksize=1) and its own inline control, from
// bench/baselines/overhead.py, run once per repetition interleaved with
// fiber's (so both see the same load). Pools are warmed up before timing.
//
//   bench_overhead [--workers 2] [--reps 3] [--reps-1ms 9] [--ideal 2.0] [--durations 1,10,100] [--csv FILE] [--smoke]
//
// --csv FILE: one line per duration for run_all.sh's plot (overhead against
// task duration): d_ms,n,fiber_wall_ideal,mp_wall_ideal,control_wall_ideal,
// py_inline_wall_ideal,fiber_excess_us,mp_excess_us (excess: above its own
// control, median of the pairs). Durations under 1 ms get --reps runs, like
// those of 10 ms and more; only 1 <= d < 10 ms gets --reps-1ms.
//
// Target (issue 9): excess per 1 ms task ≤ 10 µs above the control.
//
// Also printed, as a figure free of the sleeps' timer noise: each task
// returns its worker's pid and CLOCK_MONOTONIC at entry and exit, and the
// worker's gap between two tasks (exit of one to entry of the next: result
// sent, next task read and decoded) is fiber's own time per task in a worker.
// With W workers busy, mean gap / W is its share of the excess per task.
#include "bench_tasks.hpp"
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

#include <algorithm>
#include <map>
#include <thread>

#include <time.h>
#include <unistd.h>

namespace {

using bench::sleep_task;
using bench::stamp;
using bench::worker_gaps;

struct sample {
  double wall, ideal;
  std::size_t n;
  double excess_us() const { return (wall - ideal) / double(n) * 1e6; }
};

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  // The 1 ms row is a difference of two ~2 s walls whose sleeps overshoot by
  // ~80–110 µs each on this VM, differently from run to run: it gets nine
  // fiber/control pairs by default (its median rides out a few disturbed
  // ones), the untargeted 10 and 100 ms rows three.
  const auto reps_1ms = bench::opt(a, "--reps-1ms");
  const int reps_short = a.smoke ? 1 : reps_1ms ? std::max(1, std::atoi(reps_1ms->c_str())) : a.reps_given ? a.reps : 9;
  double ideal_s = a.smoke ? 0.05 : std::atof(bench::opt(a, "--ideal").value_or("2.0").c_str());
  std::vector<double> durations_ms = {1, 10, 100};
  if (a.smoke) durations_ms = {1};
  if (auto d = bench::opt(a, "--durations")) {
    durations_ms.clear();
    std::stringstream ss(*d);
    for (std::string x; std::getline(ss, x, ',');) durations_ms.push_back(std::atof(x.c_str()));
  }
  const unsigned W = a.workers;
  bench::header("bench_overhead: tasks sleeping d, chunksize 1 (Fiber paper, section 4.1)");
  std::printf("W=%u  ideal=%.2f s  reps=%d (d < 10 ms: %d)\n", W, ideal_s, a.reps, reps_short);

  // [d] -> samples
  std::map<double, std::vector<sample>> fib, ctl, mp, py_inline;
  std::map<double, std::vector<double>> gap_median, gap_mean; // per repetition [µs]
  std::map<double, std::vector<double>> over_workers; // mean overshoot of one sleep in the workers, per repetition [µs]
  for (int rep = 0; rep < std::max(a.reps, reps_short); ++rep) {
    std::vector<double> active; // the durations this repetition runs
    for (double d : durations_ms)
      if (rep < (d >= 1 && d < 10 ? reps_short : a.reps)) active.push_back(d);
    if (active.empty()) break;
    std::string dlist;
    for (double d : active) dlist += (dlist.empty() ? "" : ",") + bench::fmt("%g", d / 1e3);
    // Baseline first, with no fiber worker alive.
    std::string py = bench::run_capture(bench::python() + " " + bench::peers_dir() + "/overhead.py --workers " +
                                        std::to_string(W) + " --reps 1 --ideal " + bench::fmt("%g", ideal_s) +
                                        " --durations " + dlist + " --frameworks inline,mp");
    for (double d : active) {
      std::size_t n = std::max<std::size_t>(W, std::size_t(std::llround(ideal_s * W / (d / 1e3))));
      double ideal = double(n) * d / 1e3 / W;
      auto key = bench::fmt("%g", d);
      double w_inline = bench::grab(py, "inline d=" + key + "ms n=\\d+ wall=([0-9.]+)s");
      double w_mp = bench::grab(py, "mp\\s+d=" + key + "ms n=\\d+ wall=([0-9.]+)s");
      py_inline[d].push_back({w_inline, ideal, n});
      mp[d].push_back({w_mp, ideal, n});
    }
    // The C++ control: n/W sleeps in this thread.
    for (double d : active) {
      std::size_t n = std::max<std::size_t>(W, std::size_t(std::llround(ideal_s * W / (d / 1e3))));
      double ideal = double(n) * d / 1e3 / W;
      int us = int(std::lround(d * 1e3));
      auto t0 = bench::clk::now();
      for (std::size_t i = 0; i < n / W; ++i) sleep_task(us);
      ctl[d].push_back({bench::seconds_since(t0), ideal, n});
    }
    {
      fiber::Pool pool{fiber::target<&sleep_task>, {.processes = W}};
      (void)pool.map(std::vector<int>(4 * W, 0), 1); // warm-up: every worker connected
      for (double d : active) {
        std::size_t n = std::max<std::size_t>(W, std::size_t(std::llround(ideal_s * W / (d / 1e3))));
        double ideal = double(n) * d / 1e3 / W;
        int us = int(std::lround(d * 1e3));
        std::vector<int> in(n, us);
        auto t0 = bench::clk::now();
        auto out = pool.map(in, 1);
        double wall = bench::seconds_since(t0);
        if (out.size() != n) std::fprintf(stderr, "bench_overhead: %zu results for %zu tasks\n", out.size(), n);
        fib[d].push_back({wall, ideal, n});
        const auto gaps = worker_gaps(out);
        double gap_sum = 0;
        for (double g : gaps) gap_sum += g;
        gap_median[d].push_back(bench::median(gaps));
        gap_mean[d].push_back(gaps.empty() ? 0.0 : gap_sum / double(gaps.size()));
        double over = 0;
        for (const stamp& x : out) over += x.out_us - x.in_us - us;
        over_workers[d].push_back(over / double(n));
        std::printf("rep %d d=%gms n=%zu: fiber %.3f s (%.3f)  C++ control %.3f s  mp.Pool %.3f s  py inline %.3f s"
                    "  worker gap median %.1f µs mean %.1f µs\n",
                    rep + 1, d, n, wall, wall / ideal, ctl[d].back().wall, mp[d].back().wall, py_inline[d].back().wall,
                    gap_median[d].back(), gap_mean[d].back());
        std::fflush(stdout);
      }
    }
  }

  auto med = [](const std::vector<sample>& v, auto f) {
    std::vector<double> x;
    for (auto& s : v) x.push_back(f(s));
    return bench::median(x);
  };
  auto ratio = [](const sample& s) { return s.wall / s.ideal; };
  auto excess = [](const sample& s) { return s.excess_us(); };

  std::FILE* csv = nullptr;
  if (auto p = bench::opt(a, "--csv")) {
    csv = std::fopen(p->c_str(), "w");
    if (csv)
      std::fputs(
          "d_ms,n,fiber_wall_ideal,mp_wall_ideal,control_wall_ideal,py_inline_wall_ideal,fiber_excess_us,mp_excess_us\n",
          csv);
  }
  std::printf("\n| d (ms) | n | fiber wall/ideal | C++ control | excess µs/task above control | mp.Pool wall/ideal | "
              "py inline | mp excess µs above its control |\n|---|---|---|---|---|---|---|---|\n");
  for (double d : durations_ms) {
    // Excess above the control, paired per repetition, then the median.
    std::vector<double> fx, mx;
    for (std::size_t i = 0; i < fib[d].size(); ++i) {
      fx.push_back(fib[d][i].excess_us() - ctl[d][i].excess_us());
      mx.push_back(mp[d][i].excess_us() - py_inline[d][i].excess_us());
    }
    double f_ex = bench::median(fx), m_ex = bench::median(mx);
    std::printf("| %g | %zu | %.3f | %.3f | %.1f | %.3f | %.3f | %.1f |\n", d, fib[d][0].n, med(fib[d], ratio),
                med(ctl[d], ratio), f_ex, med(mp[d], ratio), med(py_inline[d], ratio), m_ex);
    if (csv)
      std::fprintf(csv, "%g,%zu,%.4f,%.4f,%.4f,%.4f,%.2f,%.2f\n", d, fib[d][0].n, med(fib[d], ratio), med(mp[d], ratio),
                   med(ctl[d], ratio), med(py_inline[d], ratio), f_ex, m_ex);
    std::string name = "overhead " + bench::fmt("%g", d) + " ms, W=" + std::to_string(W);
    bench::row(name, "wall/ideal", bench::fmt("%.3f", med(fib[d], ratio)),
               "mp.Pool cs=1: " + bench::fmt("%.3f", med(mp[d], ratio)),
               bench::fmt("%.3f", med(fib[d], ratio) / med(mp[d], ratio)), "-", "-");
    bool is1 = d == 1;
    bench::row(name,
               "excess µs/task above control, median of " + std::to_string(fx.size()) +
                   " pairs (control: " + bench::fmt("%.1f", med(ctl[d], excess)) + " µs)",
               bench::fmt("%.1f", f_ex), "mp.Pool cs=1: " + bench::fmt("%.1f", m_ex) + " above its control",
               std::isnan(m_ex) ? "n/a" : bench::fmt("%+.1f µs", f_ex - m_ex), is1 ? "≤ 10 µs" : "-",
               is1 ? bench::verdict(f_ex <= 10) : "-");
    bench::row(name, "worker's gap between tasks, median (mean) µs; mean/W per task",
               bench::fmt("%.1f", bench::median(gap_median[d])) + " (" +
                   bench::fmt("%.1f", bench::median(gap_mean[d])) + "); " +
                   bench::fmt("%.1f", bench::median(gap_mean[d]) / W),
               "-", "-", "-", "-");
    // Excess above the control ≈ mean gap / W + (workers' overshoot − control's) / W.
    // The control's excess per task is its n/W sleeps' overshoot spread over n tasks.
    bench::row(name, "overshoot of one sleep, µs: in the workers / in the control",
               bench::fmt("%.1f", bench::median(over_workers[d])) + " / " + bench::fmt("%.1f", med(ctl[d], excess) * W),
               "-", "-", "-", "-");
  }
  if (csv) std::fclose(csv);
  return 0;
}
