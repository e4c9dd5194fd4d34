// SPDX-License-Identifier: BSL-1.0
// bench_es_scale: the ES dry run of bench_objects (θ = 166,673 floats put
// once a generation, tasks of (object_ref, seed)) at scale across hosts
// (issue 31): --per-host P workers (default 300) on each of the three
// network-namespace hosts of `tests/rigs/netns-up.sh 3` (root; tcp:// over
// the rig's bridge, θ fetched once per host), against the same number of
// workers on one of those hosts in the same run (tcp:// too). Each
// task reads θ and spins --task-us of its thread's CPU time (default 2000,
// a short rollout), --per-worker tasks a worker per generation (default 4,
// automatic chunksize). Figure: efficiency = one host's generation time /
// three hosts' (medians over --rounds alternating rounds of --generations
// generations, the first of each Pool not counted). Target ≥ 0.95. On a
// 2-CPU machine the master runs on CPU 0 and every worker on CPU 1, in
// both modes alike (unpinned, 900 spinning workers starve the master: its
// handshakes and the workers' object fetches time out); the ratio is the
// figure. 900 workers on one CPU get a slice every few seconds (CFS: 3 ms
// each in turn): heartbeat_timeout_ms is 30 s and connect_timeout_ms 60 s
// in both modes, since the default 2 s would take starved workers for dead
// (FIBER_HEARTBEAT_TIMEOUT_MS overrides). Without the rig it says why and exits 0 (1 with
// --require-rig).
//
//   bench_es_scale [--per-host 300] [--task-us 2000] [--per-worker 4] [--generations 3] [--rounds 2]
//                  [--require-rig] [--smoke]
#include "bench_netns.hpp"
#include "bench_util.hpp"

#include <fiber/fiber.hpp>
#include <fiber/object_store.hpp>

#include <ctime>
#include <ranges>

namespace {

using floats = fiber::object_ref<std::vector<float>>;

std::int64_t task_ns = 2'000'000;

double thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

/// One "rollout": reads θ where the seed says, for task_ns of CPU time.
float rollout(std::pair<floats, std::uint64_t> in, std::int64_t ns) {
  const auto theta = in.first.get();
  const double t0 = thread_cpu_ns();
  float acc = 0;
  std::uint64_t i = in.second;
  while (thread_cpu_ns() - t0 < double(ns))
    for (int k = 0; k < 256; ++k) acc += theta[(i = i * 6364136223846793005u + 1) % theta.size()];
  return acc;
}

/// Median seconds a generation takes on a Pool of `workers` made by Backend.
template <class Backend>
double generations(unsigned workers, unsigned per_worker, int gens) {
  fiber::Pool<&rollout, Backend> pool{fiber::target<&rollout>, {.processes = workers}};
  auto t0 = bench::clk::now();
  while (pool.live_workers() < workers && bench::seconds_since(t0) < 240)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (pool.live_workers() < workers) throw std::runtime_error("not all workers came up");
  std::vector<float> theta(166673);
  std::vector<double> s;
  for (int g = 0; g <= gens; ++g) { // generation 0 warms up: not counted
    for (std::size_t i = 0; i < theta.size(); ++i) theta[i] = float((i + std::size_t(g)) % 1000) * 1e-3f;
    auto t = bench::clk::now();
    const auto ref = fiber::put(theta); // each generation has a new θ
    auto tasks = std::views::iota(0u, workers * per_worker) | std::views::transform([&](unsigned i) {
                   return std::tuple{std::pair{ref, std::uint64_t(g) << 32 | i}, task_ns};
                 });
    auto r = pool.starmap(tasks);
    if (r.size() != std::size_t(workers) * per_worker) throw std::runtime_error("wrong result count");
    if (g > 0) s.push_back(bench::seconds_since(t));
  }
  pool.terminate();
  return bench::median(s);
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  auto num = [&](const char* name, double dflt, double smoke) { return bench::opt_num(a, name, dflt, smoke); };
  const auto per_host = unsigned(num("--per-host", 300, 4));
  const auto per_worker = unsigned(num("--per-worker", 4, 2));
  const int gens = int(num("--generations", 3, 1)), rounds = int(num("--rounds", 2, 1));
  task_ns = std::int64_t(num("--task-us", 2000, 200) * 1000);
  const bool require_rig = std::ranges::count(a.rest, std::string("--require-rig")) > 0;
  bench::header("bench_es_scale: ES dry run, workers on three hosts against one");
  if (auto why = bench::netns::rig_missing(3); !why.empty()) {
    std::printf("skipped: %s (bash tests/rigs/netns-up.sh 3)\n", why.c_str());
    return require_rig ? 1 : 0;
  }
  const unsigned w = 3 * per_host;
  if (std::thread::hardware_concurrency() < 2 || !bench::netns::pin_this_process(0)) {
    std::printf("needs two CPUs this process may use\n");
    return 1;
  }
  bench::netns::place().worker_cpus = "1";
  if (!std::getenv("FIBER_HEARTBEAT_TIMEOUT_MS")) fiber::set_config("heartbeat_timeout_ms", "30000");
  if (!std::getenv("FIBER_CONNECT_TIMEOUT_MS")) fiber::set_config("connect_timeout_ms", "60000");
  std::printf("workers=%u (%u a host) tasks/generation=%u task=%lld us generations=%d rounds=%d\n", w, per_host,
              w * per_worker, (long long)task_ns / 1000, gens, rounds);
  std::vector<double> one, three;
  try {
    for (int r = 0; r < rounds; ++r) {
      bench::netns::place_on({1});
      one.push_back(generations<bench::netns::hosts_tcp>(w, per_worker, gens));
      bench::netns::place_on({1, 2, 3});
      three.push_back(generations<bench::netns::hosts_tcp>(w, per_worker, gens));
      std::printf("round %d: generation %.3f s on one host, %.3f s on three\n", r + 1, one.back(), three.back());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::printf("bench_es_scale: %s\n", e.what());
    return 1;
  }
  const double o = bench::median(one), t = bench::median(three);
  bench::row("ES dry run, " + std::to_string(w) + " workers on 3 hosts", "s a generation", bench::fmt("%.3f", t),
             "one host: " + bench::fmt("%.3f", o), bench::fmt("%.2fx", o / t), "≥ 0.95x",
             bench::verdict(o / t >= 0.95));
  return 0;
}
