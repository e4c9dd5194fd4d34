// SPDX-License-Identifier: BSL-1.0
// bench_sync: synchronization across processes (synchronize.hpp).
//  - Lock acquire+release from another process: a child Process acquires and
//    releases a fiber::Lock created by the master, --trips times after 200
//    warm-up pairs; median and p99 of one pair. Baseline in the same run: a
//    multiprocessing Manager().Lock() (the cross-machine equivalent: a lock
//    in a manager process behind a proxy) used the same way by a child
//    (baselines/sync.py). Target: median ≤ 0.5x.
//  - the same pair in the creating process (informational).
//  - Barrier of 2 processes: the master and a child wait on a fiber::Barrier{2}
//    --cycles times; mean time per cycle, against multiprocessing.Barrier(2)
//    between a parent and a child (baselines/sync.py).
//
//   bench_sync [--reps 3] [--trips 3000] [--cycles 2000] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

namespace {

void lock_trips(fiber::Lock lock, int n, fiber::Queue<std::vector<double>> out) {
  for (int i = 0; i < 200; ++i) {
    lock.acquire();
    lock.release();
  }
  std::vector<double> t;
  t.reserve(std::size_t(n));
  for (int i = 0; i < n; ++i) {
    auto t0 = bench::clk::now();
    lock.acquire();
    lock.release();
    t.push_back(bench::seconds_since(t0) * 1e6);
  }
  out.put({bench::median(t), bench::quantile(t, 0.99)});
}

void barrier_cycles(fiber::Barrier bar, int n) {
  for (int i = 0; i < n; ++i) (void)bar.wait();
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  const int trips = a.smoke ? 200 : std::atoi(bench::opt(a, "--trips").value_or("3000").c_str());
  const int cycles = a.smoke ? 200 : std::atoi(bench::opt(a, "--cycles").value_or("2000").c_str());
  const int warm = 100;
  bench::header("bench_sync: Lock and Barrier across processes");
  std::printf("trips=%d  cycles=%d  reps=%d\n", trips, cycles, a.reps);

  std::vector<double> f_med, f_p99, f_local, f_bar, mp_med, mp_p99, mp_bar;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto py = bench::run_capture(bench::python() + " " + bench::peers_dir() + "/sync.py --trips " +
                                 std::to_string(trips) + " --cycles " + std::to_string(cycles));
    mp_med.push_back(bench::grab(py, R"(mp manager lock acquire\+release median=([0-9.]+)us)"));
    mp_p99.push_back(bench::grab(py, R"(mp manager lock acquire\+release median=[0-9.]+us p99=([0-9.]+)us)"));
    mp_bar.push_back(bench::grab(py, R"(mp barrier2 cycle mean=([0-9.]+)us)"));

    fiber::Lock lock;
    fiber::Queue<std::vector<double>> out;
    {
      fiber::Process p{fiber::target<&lock_trips>, lock, trips, out};
      p.start();
      auto r = out.get();
      p.join();
      f_med.push_back(r.at(0));
      f_p99.push_back(r.at(1));
    }
    std::vector<double> local;
    for (int i = 0; i < trips; ++i) {
      auto t0 = bench::clk::now();
      lock.acquire();
      lock.release();
      local.push_back(bench::seconds_since(t0) * 1e6);
    }
    f_local.push_back(bench::median(local));

    fiber::Barrier bar{2};
    {
      fiber::Process p{fiber::target<&barrier_cycles>, bar, cycles + warm};
      p.start();
      for (int i = 0; i < warm; ++i) (void)bar.wait();
      auto t0 = bench::clk::now();
      for (int i = 0; i < cycles; ++i) (void)bar.wait();
      f_bar.push_back(bench::seconds_since(t0) / cycles * 1e6);
      p.join();
    }
    std::printf("rep %d: fiber Lock from a child median %.1f us p99 %.1f, in its creator %.1f us, Barrier(2) cycle "
                "%.1f us | mp Manager().Lock() median %.1f p99 %.1f, mp.Barrier(2) cycle %.1f us\n",
                rep + 1, f_med.back(), f_p99.back(), f_local.back(), f_bar.back(), mp_med.back(), mp_p99.back(),
                mp_bar.back());
    std::fflush(stdout);
  }
  const double fm = bench::median(f_med), fp = bench::median(f_p99), fl = bench::median(f_local),
               fb = bench::median(f_bar), mm = bench::median(mp_med), mp = bench::median(mp_p99),
               mb = bench::median(mp_bar);
  bench::row("sync: Lock acquire+release from another process", "median µs", bench::fmt("%.1f", fm),
             "mp Manager().Lock(): " + bench::fmt("%.1f", mm), bench::fmt("%.2fx", fm / mm), "≤ 0.5x",
             bench::verdict(fm / mm <= 0.5, !std::isnan(mm)));
  bench::row("sync: Lock acquire+release from another process", "p99 µs", bench::fmt("%.1f", fp),
             "mp Manager().Lock(): " + bench::fmt("%.1f", mp), bench::fmt("%.2fx", fp / mp), "-", "-");
  bench::row("sync: Lock acquire+release in its creating process", "median µs", bench::fmt("%.1f", fl), "-", "-", "-",
             "-");
  bench::row("sync: Barrier of 2 processes", "µs per cycle (mean)", bench::fmt("%.1f", fb),
             "mp.Barrier(2): " + bench::fmt("%.1f", mb), bench::fmt("%.2fx", fb / mb), "-", "-");
  return 0;
}
