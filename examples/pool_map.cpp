// SPDX-License-Identifier: BSL-1.0
// pool_map: estimate pi with a fiber::Pool, the way you would with
// multiprocessing.Pool — then kill a worker mid-map and get the same answer.
//
//   ./pool_map [samples-per-task] [tasks]
//   FIBER_BACKEND=slurm ./pool_map      # the same binary on a Slurm cluster
#include <fiber/fiber.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

// A task: any free function whose argument and result are serializable.
struct batch {
  std::uint64_t seed;
  std::uint64_t samples;
};

std::uint64_t hits_in_circle(batch b) {
  std::mt19937_64 rng(b.seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uint64_t hits = 0;
  for (std::uint64_t i = 0; i < b.samples; ++i) {
    double x = u(rng), y = u(rng);
    hits += x * x + y * y <= 1.0;
  }
  return hits;
}

int main(int argc, char** argv) {
  fiber::init(argc, argv); // in a worker, this runs tasks and never returns

  const std::uint64_t samples = argc > 1 ? std::stoull(argv[1]) : 2'000'000;
  const std::size_t tasks = argc > 2 ? std::stoul(argv[2]) : 64;
  std::vector<batch> work;
  for (std::size_t i = 0; i < tasks; ++i) work.push_back({i + 1, samples});

  fiber::Pool pool{fiber::target<&hits_in_circle>, {.processes = fiber::cpu_count()}};

  // map: results in input order, like multiprocessing.Pool.map.
  auto hits = pool.map(work);
  double total = double(std::accumulate(hits.begin(), hits.end(), std::uint64_t{0}));
  std::printf("pi ~ %.6f  (%zu tasks on %u workers)\n", 4.0 * total / double(samples * tasks), tasks, pool.processes());

  // imap_unordered: results as they finish. Kill a worker halfway: fiber
  // replaces it and reruns its tasks, and every result still arrives once.
  std::size_t seen = 0;
  std::uint64_t sum = 0;
  for (std::uint64_t h : pool.imap_unordered(work)) {
    if (++seen == tasks / 2)
      if (auto pids = pool.worker_pids(); !pids.empty()) ::kill(pid_t(pids.front()), SIGKILL);
    sum += h;
  }
  std::printf("again after killing a worker: %zu results, same total: %s\n", seen, double(sum) == total ? "yes" : "no");
  return double(sum) == total ? 0 : 1;
}
