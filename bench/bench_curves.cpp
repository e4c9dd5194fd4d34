// SPDX-License-Identifier: BSL-1.0
// bench_curves: how a local Pool's costs grow with its number of workers
// (issue 22), for the plots bench/run_all.sh draws. For each N of
// --workers-list (default 1,2,4,...,4096): a Pool of N local workers is
// constructed and the bench waits until all N have connected (time to
// all-workers-up); then a map of --empty-tasks (default 1000000) empty tasks
// (automatic chunksize) and a map of max(20·N, 2000) tasks sleeping 1 ms
// (automatic chunksize; ideal N·1000 tasks/s) on the same Pool give tasks/s;
// the master's RSS is read once all are up and again after the maps. Once all
// are up, the master's CPU is read over --idle seconds (default 2) of nothing
// to do (heartbeats and bookkeeping: issue 31), and the workers' private
// memory (USS) and PSS and threads, medians over up to 32 of them, and all the workers' CPU
// together over the same window (flat: each worker's heartbeats; with
// --relay 1, the `relay` key, mostly the relaying worker's). Medians
// of --reps runs (default 3) per N; the Pool is terminated between runs. A
// size whose workers' threads or descriptors this host cannot hold reads
// "failed" with fiber's backend_error (which limit, how many needed).
// No baseline is run here: the mp.Pool figures of the same shapes are in
// bench_throughput and bench_overhead, the ideal is drawn from its formula.
//
// Writes one CSV line per N to --csv FILE (default: stdout only):
//   workers,up_s,empty_tasks_per_s,ms_tasks_per_s,ms_ideal_tasks_per_s,
//   master_rss_up_mib,master_rss_after_mib,worker_threads,master_idle_cpu_pct,
//   worker_uss_mib,worker_pss_mib,workers_idle_cpu_pct
// and one `ROW |` line per N for RESULTS.md's table.
//
//   bench_curves [--workers-list 1,2,...,4096] [--empty-tasks 1000000] [--reps 3] [--wait 240] [--idle 2]
//                [--relay 0|1] [--csv FILE] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

#include <ranges>
#include <sys/resource.h>
#include <thread>

namespace {
/// An empty task for us = 0, else one that sleeps us microseconds.
int work(int us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  return us + 1;
}

struct point {
  bool ok = false;
  std::string why;
  double up_s = NAN, empty_tps = NAN, ms_tps = NAN;
  double rss_up_mib = NAN, rss_after_mib = NAN;
  double idle_cpu_pct = NAN, worker_uss_mib = NAN, worker_pss_mib = NAN, workers_idle_cpu_pct = NAN;
  int threads = -1;
};

point run(unsigned n, int empty_tasks, double wait_s, double idle_s) {
  point p;
  try {
    auto t0 = bench::clk::now();
    fiber::Pool pool{fiber::target<&work>, {.processes = n}};
    while (pool.live_workers() < n) {
      if (bench::seconds_since(t0) > wait_s) {
        p.why = std::to_string(pool.live_workers()) + " of " + std::to_string(n) + " connected after " +
                bench::fmt("%.0f", wait_s) + " s";
        return p;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    p.up_s = bench::seconds_since(t0);
    p.rss_up_mib = double(bench::process_memory(0).rss) / 1024;
    auto pids = pool.worker_pids();
    {
      auto workers_cpu = [&] {
        double c = 0;
        for (auto pid : pids) c += bench::process_cpu_seconds(long(pid));
        return c;
      };
      const double c0 = bench::process_cpu_seconds(0), wc0 = workers_cpu();
      const auto w0 = bench::clk::now();
      std::this_thread::sleep_for(
          std::chrono::duration<double>(idle_s)); // the measured window, not a wait for an event
      const double c1 = bench::process_cpu_seconds(0), wc1 = workers_cpu(), wall = bench::seconds_since(w0);
      p.idle_cpu_pct = 100.0 * (c1 - c0) / wall;
      p.workers_idle_cpu_pct = 100.0 * (wc1 - wc0) / wall;
      // Medians: with --relay 1 one worker of the sample may be the relay.
      std::vector<double> uss, pss, threads;
      for (std::size_t i = 0; i < pids.size() && uss.size() < 32; i += std::max<std::size_t>(1, pids.size() / 32)) {
        auto m = bench::process_memory(long(pids[i]));
        if (m.uss < 0) continue;
        uss.push_back(double(m.uss) / 1024), pss.push_back(double(m.pss) / 1024);
        threads.push_back(bench::thread_count(long(pids[i])));
      }
      if (!uss.empty()) {
        p.worker_uss_mib = bench::median(uss), p.worker_pss_mib = bench::median(pss);
        p.threads = int(bench::median(threads));
      }
    }
    {
      std::vector<int> in(std::size_t(empty_tasks), 0);
      auto t1 = bench::clk::now();
      auto out = pool.map(in);
      p.empty_tps = empty_tasks / bench::seconds_since(t1);
      if (out.size() != in.size() || out.back() != 1) {
        p.why = "wrong map result";
        return p;
      }
    }
    {
      std::vector<int> in(std::max<std::size_t>(20u * n, 2000u), 1000);
      auto t1 = bench::clk::now();
      auto out = pool.map(in);
      p.ms_tps = double(in.size()) / bench::seconds_since(t1);
      if (out.size() != in.size() || out.back() != 1001) {
        p.why = "wrong map result (1 ms tasks)";
        return p;
      }
    }
    p.rss_after_mib = double(bench::process_memory(0).rss) / 1024;
    pool.terminate();
  } catch (const std::exception& e) {
    p.why = e.what();
    return p;
  }
  p.ok = true;
  return p;
}

std::vector<unsigned> parse_list(const std::string& s) {
  std::vector<unsigned> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (int n = std::atoi(x.c_str()); n > 0) v.push_back(unsigned(n));
  return v;
}
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  const auto list = parse_list(
      bench::opt(a, "--workers-list").value_or(a.smoke ? "1,2,4" : "1,2,4,8,16,32,64,128,256,512,1024,2048,4096"));
  const int empty_tasks = a.smoke ? 5000 : std::atoi(bench::opt(a, "--empty-tasks").value_or("1000000").c_str());
  const double wait_s = std::atof(bench::opt(a, "--wait").value_or(a.smoke ? "60" : "240").c_str());
  const double idle_s = std::atof(bench::opt(a, "--idle").value_or(a.smoke ? "0.5" : "2").c_str());
  const auto csv_path = bench::opt(a, "--csv");
  const bool relay = bench::opt(a, "--relay").value_or("0") == "1";
  if (relay) fiber::set_config("relay", "true"); // a host's workers share one link (the first relays)
  const std::string design = relay ? " (relay)" : "";
  if (!std::getenv("FIBER_LOG_LEVEL")) fiber::set_log_level(fiber::log_level::error);
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl); // the master keeps ~3 descriptors per worker
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  bench::header("bench_curves: a local Pool against its number of workers");
  std::printf("workers: %s  empty tasks=%d  reps=%d  relay=%d\n",
              bench::opt(a, "--workers-list").value_or("default").c_str(), empty_tasks, a.reps, int(relay));

  std::FILE* csv = nullptr;
  if (csv_path) {
    csv = std::fopen(csv_path->c_str(), "w");
    if (!csv) std::fprintf(stderr, "bench_curves: cannot write %s\n", csv_path->c_str());
  }
  const char* head = "workers,up_s,empty_tasks_per_s,ms_tasks_per_s,ms_ideal_tasks_per_s,master_rss_up_mib,"
                     "master_rss_after_mib,worker_threads,master_idle_cpu_pct,worker_uss_mib,worker_pss_mib,"
                     "workers_idle_cpu_pct\n";
  if (csv) std::fputs(head, csv);
  for (unsigned n : list) {
    std::vector<point> pts;
    std::string why;
    for (int rep = 0; rep < a.reps; ++rep) {
      auto p = run(n, empty_tasks, wait_s, idle_s);
      std::printf(
          "N=%u rep %d: %s all up %.3f s | empty %.3g tasks/s | 1 ms %.3g tasks/s (ideal %.3g) | master RSS "
          "%.1f / %.1f MiB | idle CPU master %.2f%%, workers %.2f%% | per worker %d threads, USS %.2f MiB, PSS %.2f "
          "MiB\n",
          n, rep + 1, p.ok ? "" : ("failed (" + p.why + ")").c_str(), p.up_s, p.empty_tps, p.ms_tps, 1000.0 * n,
          p.rss_up_mib, p.rss_after_mib, p.idle_cpu_pct, p.workers_idle_cpu_pct, p.threads, p.worker_uss_mib,
          p.worker_pss_mib);
      std::fflush(stdout);
      if (p.ok) pts.push_back(p);
      else why = p.why;
    }
    if (pts.empty()) {
      bench::row("curve: Pool of " + std::to_string(n) + " local workers" + design, "all up / tasks/s",
                 "failed: " + why, "-", "-", "-", "-");
      continue; // larger N will not do better, but say so for each
    }
    auto med = [&](double point::*m) {
      std::vector<double> x;
      for (auto& p : pts) x.push_back(p.*m);
      return bench::median(x);
    };
    const double up = med(&point::up_s), e = med(&point::empty_tps), ms = med(&point::ms_tps),
                 r0 = med(&point::rss_up_mib), r1 = med(&point::rss_after_mib), idle = med(&point::idle_cpu_pct),
                 uss = med(&point::worker_uss_mib), pss = med(&point::worker_pss_mib),
                 widle = med(&point::workers_idle_cpu_pct);
    if (csv) {
      std::fprintf(csv, "%u,%.4f,%.1f,%.1f,%.1f,%.2f,%.2f,%d,%.3f,%.3f,%.3f,%.3f\n", n, up, e, ms, 1000.0 * n, r0, r1,
                   pts[0].threads, idle, uss, pss, widle);
      std::fflush(csv);
    }
    bench::row("curve: Pool of " + std::to_string(n) + " local workers" + design,
               "all up s; empty / 1 ms tasks/s; master RSS MiB (median of " + std::to_string(pts.size()) + ")",
               bench::fmt("%.3f", up) + "; " + bench::fmt("%.3g", e) + " / " + bench::fmt("%.3g", ms) + "; " +
                   bench::fmt("%.1f", r1),
               "-", "1 ms tasks: " + bench::fmt("%.2f", ms / (1000.0 * n)) + " of ideal", "-", "-");
    bench::row("curve: Pool of " + std::to_string(n) + " local workers" + design + ", idle",
               "CPU % of one core, master / all workers; per worker: threads, USS / PSS MiB",
               bench::fmt("%.2f", idle) + "% / " + bench::fmt("%.2f", widle) + "%; " + std::to_string(pts[0].threads) +
                   ", " + bench::fmt("%.2f", uss) + " / " + bench::fmt("%.2f", pss),
               "-", "-", "-", "-");
  }
  if (csv) std::fclose(csv);
  return 0;
}
