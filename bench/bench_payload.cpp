// bench_payload: large arguments and results. A stream of --tasks
// apply_async(echo, v) with v a 1 MiB std::vector<float> (262144 floats); the
// worker returns it, so every task carries 1 MiB each way. Figure: MiB/s of
// arguments (= MiB/s of results) over the whole stream, W workers. Baseline in
// the same run: raw nng PUSH/PULL of 1 MiB messages over ipc between two
// processes (nng_pingpong.c), which moves 1 MiB one way per message. Target
// ≥ 0.8x.
//
//   bench_payload [--workers 2] [--reps 3] [--tasks 300] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

namespace {
std::vector<float> echo(std::vector<float> v) { return v; }
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  const unsigned W = a.workers;
  const int tasks = a.smoke ? 8 : std::atoi(bench::opt(a, "--tasks").value_or("300").c_str());
  constexpr std::size_t floats = (1u << 20) / sizeof(float);
  bench::header("bench_payload: 1 MiB vector<float> argument and result");
  std::printf("W=%u  tasks=%d  reps=%d\n", W, tasks, a.reps);

  std::vector<float> v(floats);
  for (std::size_t i = 0; i < floats; ++i) v[i] = float(i);
  std::vector<double> f_mibs, nng_mibs;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto nng = bench::run_nng_pingpong(a.smoke ? 50 : 100, 1000, a.smoke ? 20 : 500, 1);
    nng_mibs.push_back(nng.push_ipc_1m_mibs);

    fiber::Pool pool{fiber::target<&echo>, {.processes = W}};
    for (unsigned i = 0; i < 2 * W; ++i) (void)pool.apply(v); // warm-up: workers up, buffers grown
    auto t0 = bench::clk::now();
    std::vector<fiber::async_result<std::vector<float>>> hs;
    hs.reserve(std::size_t(tasks));
    for (int i = 0; i < tasks; ++i) hs.push_back(pool.apply_async(v));
    std::size_t bad = 0;
    for (auto& h : hs) {
      auto r = h.get();
      bad += r.size() != floats || r[floats - 1] != v[floats - 1];
    }
    double s = bench::seconds_since(t0);
    if (bad) std::fprintf(stderr, "bench_payload: %zu bad results\n", bad);
    f_mibs.push_back(tasks / s);
    std::printf("rep %d: fiber %.0f MiB/s each way | nng PUSH/PULL ipc 1 MiB %.0f MiB/s one way\n", rep + 1,
                f_mibs.back(), nng_mibs.back());
    std::fflush(stdout);
  }
  double fm = bench::median(f_mibs), nm = bench::median(nng_mibs);
  bench::row("payload (1 MiB vector<float> arg + result)", "MiB/s each way", bench::fmt("%.0f", fm),
             "raw nng PUSH/PULL ipc 1 MiB: " + bench::fmt("%.0f", nm), bench::fmt("%.2fx", fm / nm), "≥ 0.8x",
             bench::verdict(fm / nm >= 0.8, !std::isnan(nm)));
  return 0;
}
