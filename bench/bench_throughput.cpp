// SPDX-License-Identifier: BSL-1.0
// bench_throughput: empty-task throughput of a Pool of W workers.
//
//  - chunked: map of f(x) = x + 1 over 4M ints with the automatic chunksize
//    (Python's rule: ~4 chunks per worker); baseline multiprocessing.Pool
//    map(chunksize=10000) over range(4M) (throughput.py). Target ≥ 2x.
//  - unchunked: a stream of 100k apply_async(f, i), then every get(); the
//    baseline is multiprocessing.Pool map(chunksize=1) over range(100k)
//    (throughput.py, the same one-message-per-task regime); target ≥ 1.5x.
//    Raw nng PUSH/PULL 64 B msg/s (nng_pingpong.c) is shown as the
//    transport's one-way message rate.
//
// Each repetition runs the peers first (no fiber worker alive), then fiber.
//   bench_throughput [--workers 2] [--reps 3] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

#include <ranges>

namespace {
int f(int x) { return x + 1; }
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  const unsigned W = a.workers;
  const double scale = a.smoke ? 0.005 : 1.0;
  const int n_big = int(4000000 * scale), n_one = int(100000 * scale);
  bench::header("bench_throughput: empty tasks, chunked map and apply_async stream");
  std::printf("W=%u  chunked n=%d (automatic chunksize)  unchunked n=%d  reps=%d\n", W, n_big, n_one, a.reps);

  std::vector<double> f_big, f_one, mp_big, mp_one, nng64;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto py = bench::run_capture(bench::python() + " " + bench::peers_dir() + "/throughput.py --workers " +
                                 std::to_string(W) + " --reps 1 --lat-n 10 --frameworks mp --scale " +
                                 bench::fmt("%g", scale));
    mp_one.push_back(bench::grab(py, R"(mp chunksize=1 n=\d+ tasks/s=\[([0-9.]+)\])"));
    mp_big.push_back(bench::grab(py, R"(mp chunksize=10000 n=\d+ tasks/s=\[([0-9.]+)\])"));
    auto nng = bench::run_nng_pingpong(a.smoke ? 50 : 200, a.smoke ? 2000 : 20000, a.smoke ? 4 : 20, 1);
    nng64.push_back(nng.push_ipc_64_msgs);

    fiber::Pool pool{fiber::target<&f>, {.processes = W}};
    (void)pool.map(std::vector<int>(4 * W, 0), 1); // warm-up: every worker connected
    {
      auto t0 = bench::clk::now();
      auto out = pool.map(std::views::iota(0, n_big));
      double s = bench::seconds_since(t0);
      if (out.size() != std::size_t(n_big) || out.back() != n_big) std::fprintf(stderr, "bench_throughput: bad map\n");
      f_big.push_back(n_big / s);
    }
    f_one.push_back(n_one / bench::apply_stream(pool, n_one, "bench_throughput"));
    std::printf("rep %d: chunked fiber %.0f/s  mp(cs=10000) %.0f/s | unchunked fiber %.0f/s  mp(cs=1) %.0f/s  "
                "nng PUSH/PULL 64B %.0f msg/s\n",
                rep + 1, f_big.back(), mp_big.back(), f_one.back(), mp_one.back(), nng64.back());
    std::fflush(stdout);
  }
  double fb = bench::median(f_big), mb = bench::median(mp_big), fo = bench::median(f_one), mo = bench::median(mp_one),
         nn = bench::median(nng64);
  bench::row("throughput, chunked (4M ints, auto chunksize)", "tasks/s", bench::fmt("%.3g", fb),
             "mp.Pool cs=10000: " + bench::fmt("%.3g", mb), bench::fmt("%.2fx", fb / mb), "≥ 2x",
             bench::verdict(fb / mb >= 2, !std::isnan(mb)));
  bench::row("throughput, unchunked (apply_async stream)", "tasks/s", bench::fmt("%.3g", fo),
             "mp.Pool cs=1: " + bench::fmt("%.3g", mo), bench::fmt("%.2fx", fo / mo), "≥ 1.5x",
             bench::verdict(fo / mo >= 1.5, !std::isnan(mo)));
  bench::row("throughput, unchunked (apply_async stream)", "tasks/s", bench::fmt("%.3g", fo),
             "raw nng PUSH/PULL 64 B: " + bench::fmt("%.3g", nn) + " msg/s", bench::fmt("%.2fx", fo / nn), "-", "-");
  return 0;
}
