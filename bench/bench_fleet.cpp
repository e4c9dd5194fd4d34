// SPDX-License-Identifier: BSL-1.0
// bench_fleet: one real master with --workers N (default 10,000) emulated
// workers attached. --generators G processes (default 4) each hold N/G worker
// links that speak the real protocol over real TCP sockets (handshake with
// its own identity, heartbeats, tasks, results; bench_fleet.hpp); a backend
// hands them the Pool's job specs. Reports (issue 31's targets):
//  - all N accepted, and the time until they are;
//  - the idle master's CPU over --idle seconds (default 10), % of one core
//    (target ≤ 5 %), and its RSS (target ≤ 1 GiB);
//  - the time of one fiber::stats() snapshot of the idle fleet (median of 21);
//  - unchunked dispatch: --tasks (default 200,000) apply_async of an empty
//    task, then every get() (target ≥ 100,000 tasks/s);
//  - --vanish V (default 1,000) workers dropped at once (links closed, no
//    goodbye; their jobs report SIGKILL) a quarter into an imap_unordered of
//    --tasks tasks: every result arrives exactly once and the map completes.
// Each generator dials at most --window (default 16) handshakes at a time and
// retries a refused one as a worker does. RLIMIT_NOFILE goes to its hard limit.
// --relay 1: each generator is its workers' host relay instead (one link to
// the master carries them all; relay_wire.hpp), and half-way through the
// map one relay dies too (its link closed; its workers report SIGKILL).
//
//   bench_fleet [--workers 10000] [--generators 4] [--window 16] [--idle 10]
//               [--tasks 200000] [--vanish 1000] [--wait 300] [--relay 0|1] [--smoke]
#include "bench_fleet.hpp"
#include "bench_util.hpp"

#include <ranges>
#include <sys/resource.h>

namespace {
int f(int x) { return x + 1; }

} // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "--generator")
    return fleet::generator_main(std::stoul(argv[2]), std::string(argv[3]) == "1");
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  auto num = [&](const char* name, double dflt, double smoke) { return bench::opt_num(a, name, dflt, smoke); };
  const auto n = unsigned(num("--workers", 10000, 200));
  const auto gens = std::size_t(num("--generators", 4, 2));
  const auto window = std::size_t(num("--window", 16, 16));
  const double idle_s = num("--idle", 10, 1), wait_s = num("--wait", 300, 60);
  const int tasks = int(num("--tasks", 200000, 4000));
  const auto vanish = std::size_t(num("--vanish", 1000, 40));
  const bool relay = num("--relay", 0, 0) != 0;
  const std::string design = relay ? "fleet (relays): " : "fleet: ";
  bench::header(relay ? "bench_fleet: one master, emulated workers behind one relay link per generator"
                      : "bench_fleet: one master, emulated workers over real TCP links");
  std::printf(
      "workers=%u generators=%zu window=%zu idle=%.0fs tasks=%d vanish=%zu relay=%d heartbeat_interval_ms=%lld\n", n,
      gens, window, idle_s, tasks, vanish, int(relay), (long long)fiber::detail::config_int("heartbeat_interval_ms"));
  std::fflush(stdout);

  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  fleet::start(gens, fiber::detail::self_exe(), window, relay);
  int rc = 0;
  try {
    auto t0 = bench::clk::now();
    fiber::Pool<&f, fleet::backend> pool{fiber::target<&f>, {.processes = n}};
    unsigned live = 0;
    while ((live = pool.live_workers()) < n && bench::seconds_since(t0) < wait_s)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double up_s = bench::seconds_since(t0);
    std::printf("%u of %u workers accepted at %.2f s\n", live, n, up_s);
    std::fflush(stdout);
    bench::row(design + "workers accepted", "workers", std::to_string(live), "-", "-", std::to_string(n),
               bench::verdict(live == n));
    bench::row(design + "all accepted", "s", bench::fmt("%.2f", up_s), "-", "-", "-", "-");
    if (live < n) throw std::runtime_error("not all workers were accepted");

    // Idle: heartbeats and bookkeeping only.
    const double c0 = bench::process_cpu_seconds(0);
    std::vector<double> g0;
    for (auto& p : fleet::state().procs) g0.push_back(bench::process_cpu_seconds(p.pid));
    auto i0 = bench::clk::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
    const double wall = bench::seconds_since(i0), master_pct = 100 * (bench::process_cpu_seconds(0) - c0) / wall;
    double gen_pct = 0;
    for (std::size_t g = 0; g < g0.size(); ++g)
      gen_pct += 100 * (bench::process_cpu_seconds(fleet::state().procs[g].pid) - g0[g]) / wall;
    const long rss_idle = bench::process_memory(0).rss;
    bench::row(design + "idle master CPU", "% of a core", bench::fmt("%.1f", master_pct),
               "generators: " + bench::fmt("%.1f", gen_pct) + " %", "-", "≤ 5 %", bench::verdict(master_pct <= 5));
    bench::row(design + "master RSS, idle", "MiB", bench::fmt("%.0f", rss_idle / 1024.0), "-", "-", "≤ 1024",
               bench::verdict(rss_idle <= 1024 * 1024));

    // A snapshot of the runtime with every worker attached (issue 32: cheap
    // enough to poll): median of 21.
    {
      std::vector<double> t;
      std::size_t listed = 0;
      for (int i = 0; i < 21; ++i) {
        auto s0 = bench::clk::now();
        const auto st = fiber::stats();
        t.push_back(bench::seconds_since(s0));
        listed = st.pools.empty() ? 0 : st.pools.front().workers.size();
      }
      std::ranges::sort(t);
      std::printf("fiber::stats(): %zu workers listed, median %.2f ms\n", listed, 1e3 * t[t.size() / 2]);
      bench::row(design + "fiber::stats() snapshot, idle", "ms", bench::fmt("%.2f", 1e3 * t[t.size() / 2]),
                 std::to_string(listed) + " workers listed", "-", "-", "-");
    }

    // Unchunked dispatch.
    {
      const double m0 = bench::process_cpu_seconds(0);
      double gc0 = 0;
      for (auto& p : fleet::state().procs) gc0 += bench::process_cpu_seconds(p.pid);
      const double d_s = bench::apply_stream(pool, tasks, "bench_fleet"), rate = tasks / d_s;
      double gc1 = 0;
      for (auto& p : fleet::state().procs) gc1 += bench::process_cpu_seconds(p.pid);
      std::printf("dispatch: %.2f s; master CPU %.0f %% of a core, generators %.0f %%\n", d_s,
                  100 * (bench::process_cpu_seconds(0) - m0) / d_s, 100 * (gc1 - gc0) / d_s);
      bench::row(design + "unchunked dispatch (apply_async stream)", "tasks/s", bench::fmt("%.3g", rate), "-", "-",
                 "≥ 100000", bench::verdict(rate >= 100000));
    }

    // A share of the fleet vanishes during a map.
    {
      std::vector<int> seen(std::size_t(tasks), 0);
      int got = 0;
      auto v0 = bench::clk::now();
      for (int r : pool.imap_unordered(std::views::iota(0, tasks))) {
        if (r < 1 || r > tasks) throw std::runtime_error("result out of range");
        ++seen[std::size_t(r - 1)];
        if (++got == tasks / 4) fleet::vanish(vanish);
        if (relay && got == tasks / 2) fleet::drop_relay(0);
      }
      const double s = bench::seconds_since(v0);
      const auto missing = std::size_t(std::ranges::count(seen, 0));
      const auto twice = std::size_t(std::ranges::count_if(seen, [](int c) { return c > 1; }));
      std::printf("imap_unordered of %d with %zu vanishing: %.2f s, %zu missing, %zu duplicated, %u live after\n",
                  tasks, vanish, s, missing, twice, pool.live_workers());
      bench::row(design + std::to_string(vanish) + " vanish" + (relay ? ", then a relay," : "") + " during a map",
                 "results lost / duplicated", std::to_string(missing) + " / " + std::to_string(twice), "-", "-",
                 "0 / 0", bench::verdict(missing == 0 && twice == 0));
      if (missing || twice) rc = 1;
    }
    bench::row(design + "master RSS, after", "MiB", bench::fmt("%.0f", bench::process_memory(0).rss / 1024.0), "-", "-",
               "≤ 1024", bench::verdict(bench::process_memory(0).rss <= 1024 * 1024));
    pool.terminate();
  } catch (const std::exception& e) {
    std::printf("bench_fleet: %s\n", e.what());
    rc = 1;
  }
  fleet::stop();
  return rc;
}
