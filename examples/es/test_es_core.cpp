// SPDX-License-Identifier: BSL-1.0
// Tests of the ES example's pure core (envs.hpp, policy.hpp, es.hpp): no
// fiber needed — rollouts run on the in-process serial_pool / thread_pool.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <type_traits>

#include "es.hpp"

using namespace es;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

es_config cartpole_config(std::uint64_t seed = 7) {
  es_config c;
  c.env.kind = env_kind::cartpole;
  c.policy = policy_kind::linear;
  c.population = 64;
  c.seed = seed;
  c.noise_size = 1 << 20; // small table: tests build it in milliseconds
  c.obs_sample_prob = 0.05;
  return c;
}

} // namespace

// The Pool ships these: fiber serialises aggregates automatically (Boost.PFR).
static_assert(std::is_aggregate_v<task> && std::is_aggregate_v<batch_result>);
static_assert(std::is_aggregate_v<env_config> && std::is_aggregate_v<policy_spec>);
static_assert(std::is_aggregate_v<obs_stats> && std::is_aggregate_v<obs_normalizer>);

TEST_CASE("cartpole follows Gym's cartpole.py step by step", "[env]") {
  cartpole env;
  env.state = {0.01, 0.02, 0.03, 0.04};
  float obs[4];
  float right[1] = {0.5f}, left[1] = {-0.5f};
  // Reference values: Gym's equations evaluated in float64 (as its numpy state is).
  const double expected[3][4] = {
      {0.0104, 0.21467919574755523, 0.030799999999999998, -0.24306871796000809},
      {0.014693583914951104, 0.019131151051807987, 0.025938625640799837, 0.059167999939416599},
      {0.015076206935987263, -0.17635292104612768, 0.027121985639588168, 0.35992057137841382}};
  float* actions[3] = {right, left, left};
  for (int t = 0; t < 3; ++t) {
    const step_result r = env.step(actions[t], obs);
    CHECK(r.reward == 1.0);
    CHECK_FALSE(r.terminated);
    for (int i = 0; i < 4; ++i) {
      CHECK(env.state[i] == Approx(expected[t][i]).epsilon(1e-14).margin(1e-16));
      CHECK(obs[i] == float(env.state[i]));
    }
  }
}

TEST_CASE("cartpole terminates past 12 degrees and 2.4 m, resets within ±0.05", "[env]") {
  cartpole env;
  float obs[4], a[1] = {1.f};
  env.state = {0, 0, 0.2094, 1.0}; // 12° = 0.20944 rad: one step of θ̇ = 1 crosses it
  CHECK(env.step(a, obs).terminated);
  env.state = {2.399, 1.0, 0, 0};
  CHECK(env.step(a, obs).terminated);
  env.reset(42, obs);
  for (float o : obs) CHECK(std::abs(o) <= 0.05f);
  float obs2[4];
  env.reset(42, obs2);
  CHECK(std::memcmp(obs, obs2, sizeof obs) == 0);
}

TEST_CASE("humanoid: DeepMind's model, Humanoid-v4 observation, reward and termination", "[env][mujoco]") {
  humanoid env;
  const mjModel* m = env.model();
  REQUIRE(m->nq == 28);
  REQUIRE(m->nv == 27);
  REQUIRE(m->nu == 21);
  REQUIRE(m->opt.timestep == 0.005);
  CHECK(env.obs_dim() == 26 + 27 + 10 * m->nbody + 6 * m->nbody + 27 + 6 * m->nbody);
  CHECK(env.obs_dim() == 454); // 17 bodies incl. the world
  CHECK(env.dt() == Approx(0.025));

  std::vector<float> obs(env.obs_dim()), act(env.act_dim(), 0.f);
  env.reset(3, obs.data());
  CHECK(obs[0] == Approx(1.5).margin(0.011)); // torso z = qpos[2], ±0.01 reset noise
  for (int i = 0; i < m->nq; ++i) CHECK(std::abs(env.data()->qpos[i] - m->qpos0[i]) <= 0.01);

  // Reward: healthy 5 − 0.1·Σctrl² (actions clipped to ctrlrange ±1 first) + 1.25·Δx_com/dt.
  std::fill(act.begin(), act.end(), 3.f);
  const double x0 = env.com_x();
  const step_result r = env.step(act.data(), obs.data());
  const double forward = 1.25 * (env.com_x() - x0) / env.dt();
  for (float a : act) CHECK(a == 1.f);
  // com_x() after the step equals Gym's xy_position_after only up to the
  // xipos staleness of mj_step; allow a loose margin on the forward term.
  CHECK(r.reward == Approx(5.0 - 0.1 * 21 + forward).margin(0.5));
  CHECK_FALSE(r.terminated);

  // With zero torque the humanoid falls: terminated once torso z < 1.0, well before 1000 steps.
  env.reset(3, obs.data());
  std::fill(act.begin(), act.end(), 0.f);
  int steps = 0;
  bool contact_force = false;
  step_result s;
  do {
    s = env.step(act.data(), obs.data());
    ++steps;
    for (int i = 0; i < 6 * m->nbody; ++i) contact_force |= obs[env.obs_dim() - 6 * m->nbody + i] != 0.f;
    if (!s.terminated) CHECK(env.data()->qpos[2] > 1.0);
  } while (!s.terminated && steps < 1000);
  CHECK(s.terminated);
  CHECK(env.data()->qpos[2] <= 1.0);
  CHECK(steps < 100);
  CHECK(contact_force);                                  // cfrc_ext is filled (mj_rnePostConstraint)
  CHECK(s.reward == Approx(5.0 + 1.25 * 0).margin(5.0)); // the terminal step still earns the healthy bonus
}

TEST_CASE("humanoid PD actions: targets around the rest pose, a PD controller every substep", "[env][mujoco]") {
  const humanoid_action pd{action_space::pd, 2.f, 0.1f, 1.f};
  humanoid env{default_humanoid_model, 1000, pd};
  humanoid torque_env;
  const mjModel* m = env.model();
  CHECK(env.act_low() == std::vector<float>(21, -1.f));
  CHECK(env.act_high() == std::vector<float>(21, 1.f));
  std::vector<float> obs(env.obs_dim()), act(env.act_dim(), 0.f);

  std::fill(act.begin(), act.end(), 0.25f);
  // Every substep commands ctrl = clip(kp (q* − q) − kd q̇, ±1), q* = qpos0 +
  // range · a clipped to the joint's range: replaying that by hand on a copy
  // of the state gives the same state, bit for bit.
  env.reset(5, obs.data());
  mjData* ref = mj_makeData(m);
  mj_copyData(ref, m, env.data());
  env.step(act.data(), obs.data());
  for (int k = 0; k < humanoid::frame_skip; ++k) {
    for (int i = 0; i < m->nu; ++i) {
      const int j = m->actuator_trnid[2 * i];
      const double target = std::clamp(m->qpos0[m->jnt_qposadr[j]] + 0.25, m->jnt_range[2 * j],
                                       m->jnt_range[2 * j + 1]);
      ref->ctrl[i] = std::clamp(
          2.0 * (target - ref->qpos[m->jnt_qposadr[j]]) - double(0.1f) * ref->qvel[m->jnt_dofadr[j]], -1.0, 1.0);
    }
    mj_step(m, ref);
  }
  for (int i = 0; i < m->nq; ++i) CHECK(ref->qpos[i] == env.data()->qpos[i]);
  for (int i = 0; i < m->nu; ++i) CHECK(ref->ctrl[i] == env.data()->ctrl[i]);
  mj_deleteData(ref);

  // Action 0 holds the rest pose: the humanoid lands stiffly and topples
  // later than it collapses under zero torque from the same start.
  auto length = [&](humanoid& e, std::uint64_t seed) {
    e.reset(seed, obs.data());
    std::vector<float> zero(e.act_dim(), 0.f);
    int n = 0;
    while (n < 1000 && !e.step(zero.data(), obs.data()).terminated) ++n;
    return n;
  };
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    const int held = length(env, seed), limp = length(torque_env, seed);
    INFO("seed " << seed << ", zero action: PD " << held << " steps, torque " << limp << " steps");
    CHECK(held > limp + 10);
  }
}

TEST_CASE("policies: flat parameters, tanh MLP, clipping", "[policy]") {
  policy_spec lin{policy_kind::linear, 454, 21, {}, std::vector<float>(21, -1.f), std::vector<float>(21, 1.f)};
  CHECK(num_params(lin) == 454 * 21 + 21);
  policy_spec mlp{policy_kind::mlp, 454, 21, {64, 64}, std::vector<float>(21, -1.f), std::vector<float>(21, 1.f)};
  CHECK(num_params(mlp) == 454 * 64 + 64 + 64 * 64 + 64 + 64 * 21 + 21);
  CHECK(init_params(mlp, 1) == init_params(mlp, 1));
  CHECK(init_params(mlp, 1) != init_params(mlp, 2));

  // 2 → 2 → 1 by hand. Layout per layer: W[in][out], then b[out].
  policy_spec tiny{policy_kind::mlp, 2, 1, {2}, {-0.5f}, {0.5f}};
  const std::vector<float> theta{0.1f, 0.2f,  0.3f, 0.4f, 0.01f, 0.02f, // W1, b1
                                 0.5f, -0.6f, 0.05f};                   // W2, b2
  REQUIRE(theta.size() == num_params(tiny));
  const float x[2] = {1.f, -2.f};
  const double h0 = std::tanh(0.1 * 1 + 0.3 * -2 + 0.01), h1 = std::tanh(0.2 * 1 + 0.4 * -2 + 0.02);
  float a[1];
  policy_workspace ws;
  policy_act(tiny, theta.data(), x, a, ws);
  CHECK(a[0] == Approx(0.5 * h0 - 0.6 * h1 + 0.05).epsilon(1e-6));
  const float big[2] = {100.f, -100.f};
  std::vector<float> t2 = theta;
  t2[6] = -50.f; // h0 = tanh(−20) = −1: output +50.6
  policy_act(tiny, t2.data(), big, a, ws);
  CHECK(a[0] == 0.5f); // clipped to act_high
}

TEST_CASE("centred ranks map to [-0.5, 0.5] and average ties", "[es]") {
  CHECK(centered_ranks(std::vector<double>{10, 30, 20}) == std::vector<double>{-0.5, 0.5, 0.0});
  const auto t = centered_ranks(std::vector<double>{500, 500, 3, 7});
  CHECK(t[0] == t[1]);
  CHECK(t[0] == Approx(2.5 / 3 - 0.5));
  CHECK(t[2] == -0.5);
  CHECK(t[3] == Approx(1.0 / 3 - 0.5));
  double sum = 0;
  for (double v : centered_ranks(std::vector<double>{4, 1, 9, 9, 9, 2, 0})) sum += v;
  CHECK(sum == Approx(0.0).margin(1e-12));
}

TEST_CASE("shared noise table: deterministic, standard normal, built once per process", "[es]") {
  const noise_table& a = noise_table::get(5, 1 << 20);
  const noise_table& b = noise_table::get(5, 1 << 20);
  CHECK(&a == &b);
  double s = 0, s2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a.data()[i], s2 += double(a.data()[i]) * a.data()[i];
  CHECK(s / a.size() == Approx(0).margin(0.005));
  CHECK(s2 / a.size() == Approx(1).margin(0.01));
  const noise_table& c = noise_table::get(6, 1 << 20);
  CHECK(std::memcmp(a.data(), c.data(), 1024) != 0);
  const std::size_t o = a.offset(99, 3, 1000);
  CHECK(o == a.offset(99, 3, 1000));
  CHECK(o + 1000 <= a.size());
}

TEST_CASE("obs stats merged per pair equal a single pass", "[es]") {
  rng r{1};
  std::vector<std::vector<float>> xs(1000, std::vector<float>(7));
  for (auto& x : xs)
    for (float& v : x) v = float(r.normal() * 3 + 1);
  obs_stats single, merged, part;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    single.push(xs[k]);
    part.push(xs[k]);
    if (k % 37 == 36) merged.merge(part), part = {};
  }
  merged.merge(part);
  merged.merge(obs_stats{}); // empty stats merge as nothing
  REQUIRE(merged.count == single.count);
  for (int i = 0; i < 7; ++i) {
    CHECK(merged.sum[i] == Approx(single.sum[i]).epsilon(1e-12));
    CHECK(merged.sumsq[i] == Approx(single.sumsq[i]).epsilon(1e-12));
  }
  const obs_normalizer n = make_normalizer(single, 7);
  for (int i = 0; i < 7; ++i) {
    CHECK(n.mean[i] == Approx(1).margin(0.3));
    CHECK(n.std[i] == Approx(3).margin(0.3));
  }
  // Integer-valued data: every partial sum is exact, so merging is bitwise equal.
  obs_stats a, b, c;
  for (int k = 0; k < 100; ++k) {
    const std::vector<float> x{float(k % 7), float(k * 3 % 11)};
    a.push(x);
    (k < 40 ? b : c).push(x);
  }
  b.merge(c);
  CHECK(bitwise_equal(a.sum, b.sum));
  CHECK(bitwise_equal(a.sumsq, b.sumsq));
}

// --- ES on a quadratic: a pool target that scores θ ± σε by f(x) = −|x − x*|².
namespace {
const std::vector<float> x_star{0.5f, -0.3f, 0.8f, 0.1f, -0.7f, 0.2f, 0.0f, 0.4f, -0.2f, 0.6f};

batch_result quadratic_batch(const task& t) {
  const noise_table& noise = noise_table::get(t.noise_seed, t.noise_size);
  const std::span<const float> theta = t.theta.get();
  const std::size_t dim = theta.size();
  batch_result r;
  r.first = t.first;
  r.count = t.count;
  r.obs.resize(t.count);
  for (std::uint32_t k = 0; k < t.count; ++k) {
    const float* eps = noise.data() + noise.offset(t.generation_seed, t.first + k, dim);
    for (const float sign : {1.f, -1.f}) {
      double f = 0;
      for (std::size_t j = 0; j < dim; ++j) {
        const double d = theta[j] + sign * t.sigma * eps[j] - x_star[j];
        f -= d * d;
      }
      (sign > 0 ? r.returns_pos : r.returns_neg).push_back(f);
      (sign > 0 ? r.lengths_pos : r.lengths_neg).push_back(1);
    }
  }
  return r;
}
/// Euclidean distance from θ to the quadratic's minimum x_star.
double distance_to_x_star(const std::vector<float>& theta) {
  double d = 0;
  for (std::size_t j = 0; j < theta.size(); ++j) d += (theta[j] - x_star[j]) * (theta[j] - x_star[j]);
  return std::sqrt(d);
}
} // namespace

TEST_CASE("antithetic ES with centred ranks and Adam converges on a quadratic", "[es]") {
  es_config c;
  c.population = 40;
  c.sigma = 0.05f;
  c.lr = 0.02;
  c.l2 = 0;
  c.noise_size = 1 << 20;
  es_state s;
  s.spec = policy_spec{policy_kind::linear, 9, 1, {}, {-1.f}, {1.f}}; // 10 parameters
  s.theta.assign(num_params(s.spec), 0.f);
  s.optimizer.lr = c.lr;
  serial_pool<&quadratic_batch> pool;
  auto dist = [&] { return distance_to_x_star(s.theta); };
  const double d0 = dist();
  for (int g = 0; g < 300; ++g) es_generation(c, s, pool);
  CHECK(d0 > 1.4);
  CHECK(dist() < 0.05);
}

TEST_CASE("ARS-style shaping (returns / std) with plain SGD converges on the quadratic", "[es]") {
  const auto z = scaled_returns(std::vector<double>{1, 3});
  CHECK(z == std::vector<double>{-1.0, 1.0});
  CHECK(scaled_returns(std::vector<double>{2, 2, 2}) == std::vector<double>{0, 0, 0});
  es_config c;
  c.population = 40;
  c.sigma = 0.05f;
  c.lr = 0.1;
  c.l2 = 0;
  c.noise_size = 1 << 20;
  c.fitness = es_config::shaping::returns;
  c.optimizer = es_config::optimizer_kind::sgd;
  es_state s;
  s.spec = policy_spec{policy_kind::linear, 9, 1, {}, {-1.f}, {1.f}};
  s.theta.assign(num_params(s.spec), 0.f);
  serial_pool<&quadratic_batch> pool;
  auto dist = [&] { return distance_to_x_star(s.theta); };
  const double d0 = dist();
  for (int g = 0; g < 300; ++g) es_generation(c, s, pool);
  CHECK(s.optimizer.t == 0); // Adam untouched
  CHECK(dist() < 0.1 * d0);
}

TEST_CASE("policy inputs: the policy reads only the first N observation entries", "[policy]") {
  policy_spec all{policy_kind::linear, 4, 1, {}, {-10.f}, {10.f}};
  policy_spec two = all;
  two.inputs = 2;
  CHECK(num_params(all) == 5);
  CHECK(num_params(two) == 3);
  const std::vector<float> theta{1.f, 1.f, 0.5f}; // W = [1, 1], b = 0.5
  policy_workspace ws;
  float a = 0;
  const float obs1[4] = {1, 2, 100, -100}, obs2[4] = {1, 2, -7, 3};
  policy_act(two, theta.data(), obs1, &a, ws);
  CHECK(a == 3.5f);
  policy_act(two, theta.data(), obs2, &a, ws);
  CHECK(a == 3.5f);
  const env_config h{env_kind::humanoid, default_humanoid_model, 0};
  CHECK(num_params(make_policy_spec(h, policy_kind::linear, {}, 53)) == 53 * 21 + 21);
  CHECK_THROWS_AS(make_policy_spec(h, policy_kind::linear, {}, 455), std::invalid_argument);
}

TEST_CASE("same seed, same parameters: 1 vs 3 workers, any batching and completion order", "[es][repro]") {
  // CartPole, 5 generations (the test), plus a short humanoid run (MuJoCo in threads).
  for (const env_kind kind : {env_kind::cartpole, env_kind::humanoid}) {
    es_config c = cartpole_config();
    c.env.kind = kind;
    if (kind == env_kind::humanoid)
      c.env.max_steps = 30, c.population = 12, c.policy = policy_kind::mlp, c.hidden = {16, 16};
    const int generations = kind == env_kind::humanoid ? 2 : 5;

    es_state one = make_state(c);
    serial_pool<&evaluate_batch> serial; // 1 worker, automatic batching
    c.workers = 1;
    for (int g = 0; g < generations; ++g) es_generation(c, one, serial);

    es_config c3 = c;
    c3.workers = 3;
    c3.batch = 1; // different task boundaries
    es_state three = make_state(c3);
    thread_pool<&evaluate_batch> threads{3}; // three workers racing
    for (int g = 0; g < generations; ++g) es_generation(c3, three, threads);

    es_config c5 = c;
    c5.batch = 5;
    es_state rev = make_state(c5);
    serial_pool<&evaluate_batch> reversed{true}; // results arrive last task first
    for (int g = 0; g < generations; ++g) es_generation(c5, rev, reversed);

    CHECK(one.generation == std::uint64_t(generations));
    CHECK(one.theta != make_state(c).theta); // it did learn something
    CHECK(bitwise_equal(one.theta, three.theta));
    CHECK(bitwise_equal(one.theta, rev.theta));
    CHECK(bitwise_equal(one.obs.sum, three.obs.sum));
    CHECK(bitwise_equal(one.obs.sumsq, rev.obs.sumsq));
    CHECK(one.timesteps == three.timesteps);
  }
}

TEST_CASE("ES solves CartPole: mean population return >= 475 well within 60 s", "[es][learn]") {
  for (const std::uint64_t seed : {1, 2, 3}) {
    es_config c = cartpole_config(seed);
    es_state s = make_state(c);
    serial_pool<&evaluate_batch> pool;
    const auto t0 = std::chrono::steady_clock::now();
    double best = 0;
    while (best < 475 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds{60} && s.generation < 300)
      best = std::max(best, es_generation(c, s, pool).mean_return);
    INFO("seed " << seed << ": generation " << s.generation);
    CHECK(best >= 475);
    // The unperturbed policy balances for the whole episode.
    const auto e = evaluate_policy(c.env, s.spec, s.theta, current_normalizer(c, s), 5, 11, pool);
    for (auto len : e.lengths) CHECK(len >= 475);
  }
}

TEST_CASE("evaluation tasks run unperturbed episodes", "[es]") {
  es_config c = cartpole_config();
  const es_state s = make_state(c);
  serial_pool<&evaluate_batch> pool;
  const auto a = evaluate_policy(c.env, s.spec, s.theta, current_normalizer(c, s), 4, 5, pool, 3);
  const auto b = evaluate_policy(c.env, s.spec, s.theta, current_normalizer(c, s), 4, 5, pool, 1);
  CHECK(a.returns.size() == 4);
  CHECK(a.returns == b.returns);
  CHECK(a.lengths == b.lengths);
}

TEST_CASE("start_states: pairs share initial states (common random numbers)", "[es]") {
  es_config c = cartpole_config();
  const es_state s = make_state(c);
  std::vector<task> tasks = make_tasks(c, s, 123);
  task t = tasks.front();
  t.sigma = 0; // θ itself: returns then depend on the start state only
  t.count = 6;
  t.start_states = 2;
  const batch_result r = evaluate_batch(t);
  for (std::uint32_t k = 2; k < 6; ++k) CHECK(r.returns_pos[k] == r.returns_pos[k % 2]);
  t.start_states = 0;
  const batch_result own = evaluate_batch(t);
  CHECK(own.returns_pos != r.returns_pos);
}
