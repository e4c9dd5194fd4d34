// SPDX-License-Identifier: BSL-1.0
// bench_payload: large arguments and results. A stream of --tasks
// apply_async(echo, v), v a 1 MiB std::vector<float> (262144 floats) that the
// worker returns: each task moves 1 MiB to the worker and 1 MiB back. Figure:
// MiB moved per second between the two processes (arguments + results) on a
// Pool of one worker — two processes, as in the baseline. Baseline in the
// same run: raw nng PUSH/PULL of 1 MiB messages over ipc between two
// processes (nng_pingpong.c), MiB/s moved one way. Target ≥ 0.8x. Also shown,
// without a target: the same stream on --workers W (default 2) workers.
// --mib N: N MiB vectors instead (the baseline stays 1 MiB; no target), e.g.
// frames of 4 MiB and more, which are sealed as they are written; with
// FIBER_LOCAL_TRANSPORT=tls and FIBER_TLS_CERT/KEY/CA, over TLS.
//
//   bench_payload [--workers 2] [--reps 5] [--tasks 300] [--mib 1] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

namespace {
std::vector<float> echo(std::vector<float> v) { return v; }

// MiB moved per second (arguments + results) by `tasks` tasks on `workers` workers.
double run(unsigned workers, int tasks, const std::vector<float>& v) {
  fiber::Pool pool{fiber::target<&echo>, {.processes = workers}};
  for (unsigned i = 0; i < 2 * workers; ++i) (void)pool.apply(v); // warm-up: workers up, buffers grown
  auto t0 = bench::clk::now();
  std::vector<fiber::async_result<std::vector<float>>> hs;
  hs.reserve(std::size_t(tasks));
  for (int i = 0; i < tasks; ++i) hs.push_back(pool.apply_async(v));
  std::size_t bad = 0;
  for (auto& h : hs) bad += h.get() != v;
  double s = bench::seconds_since(t0);
  if (bad) std::fprintf(stderr, "bench_payload: %zu bad results\n", bad);
  return 2.0 * double(tasks) * double(v.size() * sizeof(float)) / double(1u << 20) / s;
}
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given && !a.smoke) a.reps = 5; // cheap, and it swings with the load: more runs
  const unsigned W = a.workers;
  const int tasks = a.smoke ? 8 : std::atoi(bench::opt(a, "--tasks").value_or("300").c_str());
  const int mib = std::atoi(bench::opt(a, "--mib").value_or("1").c_str());
  const auto what = std::to_string(mib) + " MiB vector<float>";
  bench::header(("bench_payload: " + what + " argument and result").c_str());
  std::printf("tasks=%d  reps=%d  (1 worker; also %u workers)\n", tasks, a.reps, W);

  const std::size_t floats = std::size_t(mib) * (1u << 20) / sizeof(float);
  std::vector<float> v(floats);
  for (std::size_t i = 0; i < floats; ++i) v[i] = float(i);
  std::vector<double> f1, fw, nng_mibs;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto nng = bench::run_nng_pingpong(a.smoke ? 50 : 100, 1000, a.smoke ? 20 : 500, 1);
    nng_mibs.push_back(nng.push_ipc_1m_mibs);
    f1.push_back(run(1, tasks, v));
    fw.push_back(run(W, tasks, v));
    std::printf("rep %d: fiber 1 worker %.0f MiB/s, %u workers %.0f MiB/s (arguments + results) | nng PUSH/PULL "
                "ipc 1 MiB %.0f MiB/s (one way)\n",
                rep + 1, f1.back(), W, fw.back(), nng_mibs.back());
    std::fflush(stdout);
  }
  double m1 = bench::median(f1), mw = bench::median(fw), nm = bench::median(nng_mibs);
  bench::row("payload (" + what + " argument and result), 1 worker", "MiB/s moved (arguments + results)",
             bench::fmt("%.0f", m1), "raw nng PUSH/PULL ipc 1 MiB: " + bench::fmt("%.0f", nm),
             bench::fmt("%.2fx", m1 / nm), mib == 1 ? "≥ 0.8x" : "-",
             mib == 1 ? bench::verdict(m1 / nm >= 0.8, !std::isnan(nm)) : "-");
  bench::row("payload, " + std::to_string(W) + " workers", "MiB/s moved (arguments + results)", bench::fmt("%.0f", mw),
             "raw nng PUSH/PULL ipc 1 MiB: " + bench::fmt("%.0f", nm), bench::fmt("%.2fx", mw / nm), "-", "-");
  return 0;
}
