// SPDX-License-Identifier: BSL-1.0
// es_minimal: evolution strategies (Salimans et al. 2017, "Evolution Strategies
// as a Scalable Alternative to Reinforcement Learning", arXiv 1703.03864, Alg. 2)
// on CartPole with a linear policy, the episodes farmed out with fiber::Pool.
// The full lab (MuJoCo humanoid, MLP policies, logs, plots) is examples/es/.
//
//   ./es_minimal [generations]              # local workers
//   FIBER_BACKEND=slurm ./es_minimal        # the same binary on a Slurm cluster
#include <fiber/fiber.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

constexpr int obs_dim = 4;
using params = std::array<double, obs_dim + 1>; // weights and bias: push right if w·obs + b > 0

/// CartPole-v1 as Gym defines it (classic_control/cartpole.py): Euler steps of
/// 20 ms, +1 reward per step, the episode ends when the pole tilts past 12°,
/// the cart leaves ±2.4 m, or after 500 steps.
double cartpole_return(const params& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> start(-0.05, 0.05);
  double x = start(rng), x_dot = start(rng), th = start(rng), th_dot = start(rng);
  constexpr double g = 9.8, m_cart = 1.0, m_pole = 0.1, half_len = 0.5, force_mag = 10.0, dt = 0.02;
  double total = 0;
  for (int t = 0; t < 500; ++t) {
    const double act = p[0] * x + p[1] * x_dot + p[2] * th + p[3] * th_dot + p[4];
    const double f = act > 0 ? force_mag : -force_mag;
    const double cos_t = std::cos(th), sin_t = std::sin(th), m = m_cart + m_pole;
    const double tmp = (f + m_pole * half_len * th_dot * th_dot * sin_t) / m;
    const double th_acc = (g * sin_t - cos_t * tmp) / (half_len * (4.0 / 3.0 - m_pole * cos_t * cos_t / m));
    const double x_acc = tmp - m_pole * half_len * th_acc * cos_t / m;
    x += dt * x_dot;
    x_dot += dt * x_acc;
    th += dt * th_dot;
    th_dot += dt * th_acc;
    total += 1;
    if (std::abs(x) > 2.4 || std::abs(th) > 12 * 2 * M_PI / 360) break;
  }
  return total;
}

/// One task: a perturbation of the policy, evaluated mirrored (θ + σε and
/// θ − σε, the antithetic pair of the paper), on one episode seed. θ is put
/// once a generation: tasks carry its reference, not its bytes.
struct pair_task {
  fiber::object_ref<params> theta;
  std::uint64_t noise_seed; // ε is drawn from this seed: the master redraws it, never ships it
  double sigma;
  std::uint64_t episode_seed;
};
struct pair_result {
  double plus, minus;
};

params noise(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  params e;
  for (auto& v : e) v = n(rng);
  return e;
}

pair_result evaluate(pair_task t) {
  const params e = noise(t.noise_seed);
  params plus = t.theta.get(), minus = plus;
  for (std::size_t i = 0; i < plus.size(); ++i) {
    plus[i] += t.sigma * e[i];
    minus[i] -= t.sigma * e[i];
  }
  return {cartpole_return(plus, t.episode_seed), cartpole_return(minus, t.episode_seed)};
}

/// Centred ranks in [-0.5, 0.5] (the paper's fitness shaping).
std::vector<double> centred_ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t k = 0; k < order.size(); ++k) r[order[k]] = double(k) / double(v.size() - 1) - 0.5;
  return r;
}

int main(int argc, char** argv) {
  fiber::init(argc, argv); // in a worker, this runs tasks and never returns
  const int generations = argc > 1 ? std::stoi(argv[1]) : 30;
  const std::size_t pairs = 32;
  const double sigma = 0.1, learning_rate = 0.05;

  fiber::Pool pool{fiber::target<&evaluate>}; // one worker per CPU, or FIBER_BACKEND's
  params theta{};
  std::uint64_t next_seed = 1;
  double mean = 0;
  for (int gen = 0; gen < generations; ++gen) {
    const auto theta_ref = fiber::put(theta); // one copy per host, however many tasks read it
    std::vector<pair_task> tasks;
    for (std::size_t i = 0; i < pairs; ++i) tasks.push_back({theta_ref, next_seed++, sigma, std::uint64_t(gen)});
    std::vector<pair_result> results = pool.map(tasks); // in input order, whatever dies meanwhile

    std::vector<double> returns;
    for (auto& r : results) returns.insert(returns.end(), {r.plus, r.minus});
    const auto ranks = centred_ranks(returns);
    params step{};
    for (std::size_t i = 0; i < pairs; ++i) {
      const params e = noise(tasks[i].noise_seed);
      for (std::size_t j = 0; j < step.size(); ++j) step[j] += (ranks[2 * i] - ranks[2 * i + 1]) * e[j];
    }
    for (std::size_t j = 0; j < theta.size(); ++j) theta[j] += learning_rate / (double(pairs) * sigma) * step[j];

    mean = std::accumulate(returns.begin(), returns.end(), 0.0) / double(returns.size());
    std::printf("generation %2d  mean return %6.1f  best %5.0f\n", gen, mean,
                *std::max_element(returns.begin(), returns.end()));
  }
  const double final_return = cartpole_return(theta, 12345);
  std::printf("final policy: return %.0f of 500\n", final_return);
  return final_return >= 475 ? 0 : 1;
}
