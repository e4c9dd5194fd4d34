// SPDX-License-Identifier: BSL-1.0
// Soak: a long run of Pool maps while a fault injector SIGKILLs and SIGSTOPs
// random workers. Checks that every result arrives exactly once and in its
// place, and that the master's resident memory and open file descriptors
// return to their level from before the soak (no leak per lost worker).
//
//   bench/soak [--seconds N] [--workers W] [--smoke]
//
// --smoke: 3 seconds. Exit status 1 on any violation. Tolerances, measured
// with the pool back at full strength: open fds at most 2 above the baseline
// (descriptors nng may open lazily; observed: 0); VmRSS at most
// 16 MiB + 10 % above it (allocator caches; observed: +0.25 MiB after 60 s).
// Heartbeats are 200 ms / 1000 ms so that stopped workers are found in ~1.2 s.
#include <fiber/fiber.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using steady = std::chrono::steady_clock;

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

/// (index, x) -> (index, mix(x)) after ~20 us of work.
std::pair<std::uint64_t, std::uint64_t> work(std::pair<std::uint64_t, std::uint64_t> in) {
  auto until = steady::now() + std::chrono::microseconds(20);
  std::uint64_t v = in.second;
  while (steady::now() < until) v = mix(v) | 1;
  (void)v;
  return {in.first, mix(in.second)};
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (auto* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n - 1; // the directory stream itself
}

char proc_state(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(in, s);
  auto p = s.rfind(')');
  return p == std::string::npos || p + 2 >= s.size() ? '?' : s[p + 2];
}

template <class Pool>
bool settle(Pool& pool, unsigned workers, std::chrono::seconds limit) {
  auto deadline = steady::now() + limit;
  while (steady::now() < deadline) {
    auto pids = pool.worker_pids();
    bool ok = pids.size() == workers && pool.live_workers() == workers;
    for (auto p : pids) ok = ok && proc_state(p) != 'T' && proc_state(p) != 't';
    if (ok) return true;
    std::this_thread::yield();
  }
  return false;
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  double seconds = 60;
  unsigned workers = 4;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") seconds = 3;
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--workers" && i + 1 < argc) workers = unsigned(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--seconds N] [--workers W] [--smoke]\n", argv[0]);
      return 2;
    }
  }
  fiber::set_config("heartbeat_interval_ms", "200");
  fiber::set_config("heartbeat_timeout_ms", "1000");
  fiber::set_log_level(fiber::log_level::error); // every fault is a warning: keep the output readable

  int violations = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "soak: VIOLATION: %s\n", what.c_str());
    ++violations;
  };

  fiber::Pool pool{fiber::target<&work>, {.processes = workers, .chunksize = 16, .max_retries = 1000000}};
  std::mt19937_64 rng(12345);
  std::uint64_t maps = 0, items = 0;

  // One round: 4000 items, by map (in place) or imap_unordered (each once).
  auto round = [&](bool ordered) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> in(4000);
    for (std::uint64_t i = 0; i < in.size(); ++i) in[i] = {i, rng()};
    if (ordered) {
      auto r = pool.map(in);
      if (r.size() != in.size()) return fail("map returned " + std::to_string(r.size()) + " results");
      for (std::size_t i = 0; i < r.size(); ++i)
        if (r[i].first != i || r[i].second != mix(in[i].second))
          return fail("map result " + std::to_string(i) + " is wrong");
    } else {
      std::vector<int> seen(in.size(), 0);
      for (auto [i, v] : pool.imap_unordered(in, 16)) {
        if (i >= in.size() || v != mix(in[i].second)) return fail("imap_unordered: wrong result");
        ++seen[i];
      }
      for (std::size_t i = 0; i < seen.size(); ++i)
        if (seen[i] != 1)
          return fail("imap_unordered: item " + std::to_string(i) + " delivered " + std::to_string(seen[i]) + " times");
    }
    ++maps;
    items += in.size();
  };

  // Baseline: every worker up, a few rounds done (lazy allocations made).
  for (int i = 0; i < 3; ++i) round(i % 2 == 0);
  if (!settle(pool, workers, std::chrono::seconds(60))) fail("workers did not all start");
  for (int i = 0; i < 3; ++i) round(i % 2 == 0);
  const long rss0 = rss_kib();
  const int fds0 = open_fds();

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> kills{0}, stops{0};
  std::thread injector([&] {
    std::mt19937 r(777);
    while (!stop) {
      auto pids = pool.worker_pids();
      if (!pids.empty()) {
        auto pid = pid_t(pids[r() % pids.size()]);
        if (r() % 10 < 7) {
          if (::kill(pid, SIGKILL) == 0) ++kills;
        } else if (::kill(pid, SIGSTOP) == 0) {
          ++stops;
        }
      }
      // pacing of the fault injector (100-400 ms between faults)
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + r() % 300));
    }
  });

  const auto t0 = steady::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  bool ordered = true;
  while (steady::now() < end && violations == 0) {
    round(ordered);
    ordered = !ordered;
  }
  stop = true;
  injector.join();
  const double soak_s = std::chrono::duration<double>(steady::now() - t0).count();

  // Stopped workers are found by heartbeats and replaced; then measure again.
  if (!settle(pool, workers, std::chrono::seconds(60))) fail("the pool did not recover its workers");
  for (int i = 0; i < 3; ++i) round(i % 2 == 0);
  if (!settle(pool, workers, std::chrono::seconds(60))) fail("the pool did not recover its workers");
  const long rss1 = rss_kib();
  const int fds1 = open_fds();

  std::printf("soak: %.1f s, %u workers, %llu maps, %llu items, %llu SIGKILLs, %llu SIGSTOPs\n", soak_s, workers,
              (unsigned long long)maps, (unsigned long long)items, (unsigned long long)kills.load(),
              (unsigned long long)stops.load());
  std::printf("soak: master VmRSS %ld KiB before, %ld KiB after (%+ld KiB); open fds %d before, %d after\n", rss0, rss1,
              rss1 - rss0, fds0, fds1);
  if (fds1 > fds0 + 2) fail("open fds grew from " + std::to_string(fds0) + " to " + std::to_string(fds1));
  if (rss1 > rss0 + 16 * 1024 + rss0 / 10)
    fail("VmRSS grew from " + std::to_string(rss0) + " KiB to " + std::to_string(rss1) + " KiB");
  if (kills.load() + stops.load() == 0 && seconds >= 1) fail("no fault was injected");
  std::printf("soak: %s\n", violations ? "FAILED" : "ok");
  return violations ? 1 : 0;
}
