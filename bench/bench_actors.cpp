// SPDX-License-Identifier: BSL-1.0
// bench_actors: Remote<T> method calls (fiber's Manager / AsyncManager as
// typed actors) on a trivial object, Counter::add.
//
//  - 1:1 sync: one caller, one object, call<&Counter::add>(1) back to back.
//  - 1:1 async: one caller, one object, --async calls issued with call_async
//    (pipelined), then every get().
//  - n:n async: N caller threads, N objects in N manager processes, each
//    thread pipelines calls to its own object.
// Baselines: Ray 2.9's published microbenchmark (64-vCPU machine; quoted in
// issue 9: 1:1 sync 2.2k/s, 1:1 async 8.8k/s, n:n async 27k/s) and, measured
// in the same run, 1/RTT of raw nng REQ/REP over ipc (nng_pingpong.c).
// Targets: sync ≥ 0.8x 1/RTT(nng); async ≥ 3x Ray's 8.8k/s.
//
//   bench_actors [--reps 3] [--sync 5000] [--async 20000] [--n 2] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>
#include <fiber/manager.hpp>

#include <thread>

struct Counter {
  std::int64_t add(std::int64_t k) { return n_ += k; }
  std::int64_t n_ = 0;
};
BOOST_DESCRIBE_STRUCT(Counter, (), (add))

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  const int n_sync = a.smoke ? 50 : std::atoi(bench::opt(a, "--sync").value_or("5000").c_str());
  const int n_async = a.smoke ? 200 : std::atoi(bench::opt(a, "--async").value_or("20000").c_str());
  const unsigned N = a.smoke ? 2 : unsigned(std::atoi(bench::opt(a, "--n").value_or("2").c_str()));
  bench::header("bench_actors: Remote<T> calls");
  std::printf("sync calls=%d  async calls=%d  n:n N=%u  reps=%d\n", n_sync, n_async, N, a.reps);

  std::vector<double> sync_r, async_r, nn_r, nng_rtt;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto nng = bench::run_nng_pingpong(a.smoke ? 200 : 3000, 1000, 4, 1);
    nng_rtt.push_back(nng.req_ipc_median_us);
    {
      fiber::RemoteManager<Counter> mgr{{.processes = 1}};
      auto c = mgr.make();
      for (int i = 0; i < 100; ++i) c.call<&Counter::add>(0); // warm-up
      auto t0 = bench::clk::now();
      std::int64_t last = 0;
      for (int i = 0; i < n_sync; ++i) last = c.call<&Counter::add>(1);
      sync_r.push_back(n_sync / bench::seconds_since(t0));
      if (last != n_sync) std::fprintf(stderr, "bench_actors: sync count %lld\n", (long long)last);

      t0 = bench::clk::now();
      std::vector<fiber::remote_result<std::int64_t>> hs;
      hs.reserve(std::size_t(n_async));
      for (int i = 0; i < n_async; ++i) hs.push_back(c.call_async<&Counter::add>(1));
      for (auto& h : hs) last = h.get();
      async_r.push_back(n_async / bench::seconds_since(t0));
      if (last != n_sync + n_async) std::fprintf(stderr, "bench_actors: async count %lld\n", (long long)last);
    }
    {
      fiber::RemoteManager<Counter> mgr{{.processes = N}};
      std::vector<fiber::Remote<Counter>> objs;
      for (unsigned i = 0; i < N; ++i) objs.push_back(mgr.make());
      for (auto& o : objs)
        for (int i = 0; i < 20; ++i) o.call<&Counter::add>(0);
      const int per = n_async / int(N);
      auto t0 = bench::clk::now();
      std::vector<std::thread> ts;
      for (unsigned k = 0; k < N; ++k)
        ts.emplace_back([&, k] {
          std::vector<fiber::remote_result<std::int64_t>> hs;
          hs.reserve(std::size_t(per));
          for (int i = 0; i < per; ++i) hs.push_back(objs[k].call_async<&Counter::add>(1));
          for (auto& h : hs) (void)h.get();
        });
      for (auto& t : ts) t.join();
      nn_r.push_back(double(per) * N / bench::seconds_since(t0));
    }
    std::printf("rep %d: sync %.0f calls/s  async %.0f calls/s  %u:%u async %.0f calls/s | nng REQ/REP RTT %.1f us "
                "(1/RTT %.0f/s)\n",
                rep + 1, sync_r.back(), async_r.back(), N, N, nn_r.back(), nng_rtt.back(), 1e6 / nng_rtt.back());
    std::fflush(stdout);
  }
  double s = bench::median(sync_r), as = bench::median(async_r), nn = bench::median(nn_r),
         inv = 1e6 / bench::median(nng_rtt);
  bench::row("actors 1:1 sync", "calls/s", bench::fmt("%.0f", s), "1/RTT(nng REQ/REP): " + bench::fmt("%.0f", inv),
             bench::fmt("%.2fx", s / inv), "≥ 0.8x", bench::verdict(s / inv >= 0.8, !std::isnan(inv)));
  bench::row("actors 1:1 sync", "calls/s", bench::fmt("%.0f", s), "Ray 2.9 (published, 64 vCPU): 2200",
             bench::fmt("%.2fx", s / 2200), "-", "-");
  bench::row("actors 1:1 async (pipelined)", "calls/s", bench::fmt("%.0f", as), "Ray 2.9 (published): 8800",
             bench::fmt("%.2fx", as / 8800), "≥ 3x", bench::verdict(as / 8800 >= 3));
  bench::row("actors " + std::to_string(N) + ":" + std::to_string(N) + " async", "calls/s", bench::fmt("%.0f", nn),
             "Ray 2.9 n:n async (published): 27000", bench::fmt("%.2fx", nn / 27000), "-", "-");
  return 0;
}
