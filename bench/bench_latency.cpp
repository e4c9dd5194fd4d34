// SPDX-License-Identifier: BSL-1.0
// bench_latency: one Pool.apply round trip (caller → worker → caller) of an
// empty task on a warm Pool of W workers: median and p99 over --trips trips
// after 100 warm-up trips. Baselines in the same run: raw nng REQ/REP 64 B
// round trip over ipc between two processes (nng_pingpong.c) and
// multiprocessing.Pool.apply (throughput.py). Targets: median ≤ 1.2x raw nng
// and ≤ mp.Pool.apply.
//
//   bench_latency [--workers 2] [--reps 5] [--trips 2000] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

namespace {
int f(int x) { return x + 1; }
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given && !a.smoke) a.reps = 5; // vCPU placement decides a run: more of them
  const unsigned W = a.workers;
  const int trips = a.smoke ? 100 : std::atoi(bench::opt(a, "--trips").value_or("2000").c_str());
  bench::header("bench_latency: one apply round trip");
  std::printf("W=%u  trips=%d  reps=%d\n", W, trips, a.reps);

  std::vector<double> f_med, f_p99, nng_med, nng_p99, mp_med, mp_p99;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto nng = bench::run_nng_pingpong(trips, a.smoke ? 1000 : 2000, 4, 1);
    nng_med.push_back(nng.req_ipc_median_us);
    nng_p99.push_back(nng.req_ipc_p99_us);
    auto py = bench::run_capture(bench::python() + " " + bench::peers_dir() + "/throughput.py --workers " +
                                 std::to_string(W) + " --lat-only --lat-n " + std::to_string(trips) +
                                 " --frameworks mp");
    mp_med.push_back(bench::grab(py, R"(mp latency median=([0-9.]+)us)"));
    mp_p99.push_back(bench::grab(py, R"(mp latency median=[0-9.]+us p99=([0-9.]+)us)"));

    fiber::Pool pool{fiber::target<&f>, {.processes = W}};
    std::vector<double> t;
    t.reserve(std::size_t(trips));
    for (int i = 0; i < trips + 100; ++i) {
      auto t0 = bench::clk::now();
      int r = pool.apply(i);
      double us = bench::seconds_since(t0) * 1e6;
      if (r != i + 1) std::fprintf(stderr, "bench_latency: bad result\n");
      if (i >= 100) t.push_back(us);
    }
    f_med.push_back(bench::median(t));
    f_p99.push_back(bench::quantile(t, 0.99));
    std::printf("rep %d: fiber apply median %.1f us p99 %.1f | nng REQ/REP ipc median %.1f p99 %.1f | "
                "mp.Pool.apply median %.1f p99 %.1f\n",
                rep + 1, f_med.back(), f_p99.back(), nng_med.back(), nng_p99.back(), mp_med.back(), mp_p99.back());
    std::fflush(stdout);
  }
  double fm = bench::median(f_med), fp = bench::median(f_p99), nm = bench::median(nng_med), np = bench::median(nng_p99),
         mm = bench::median(mp_med), mpp = bench::median(mp_p99);
  bench::row("latency (apply round trip)", "median µs", bench::fmt("%.1f", fm),
             "raw nng REQ/REP ipc: " + bench::fmt("%.1f", nm), bench::fmt("%.2fx", fm / nm), "≤ 1.2x",
             bench::verdict(fm / nm <= 1.2, !std::isnan(nm)));
  bench::row("latency (apply round trip)", "median µs", bench::fmt("%.1f", fm),
             "mp.Pool.apply: " + bench::fmt("%.1f", mm), bench::fmt("%.2fx", fm / mm), "≤ 1x",
             bench::verdict(fm / mm <= 1, !std::isnan(mm)));
  bench::row("latency (apply round trip)", "p99 µs", bench::fmt("%.1f", fp),
             "nng " + bench::fmt("%.1f", np) + ", mp.Pool.apply " + bench::fmt("%.1f", mpp),
             bench::fmt("%.2fx", fp / np) + " of nng", "-", "-");
  return 0;
}
