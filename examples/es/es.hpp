// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file es.hpp
/// OpenAI-style Evolution Strategies (Salimans, Ho, Chen, Sidor & Sutskever
/// 2017, "Evolution Strategies as a Scalable Alternative to Reinforcement
/// Learning", arXiv 1703.03864; Algorithm 2 and sections 2.1–2.2), written so
/// the rollouts can be farmed out through any pool with a Python-style `map`:
/// `fiber::Pool` in main.cpp, the in-process `serial_pool` / `thread_pool`
/// below for tests and baselines. No fiber dependency.
///
/// Division of labour (as in the paper's Algorithm 2):
///  - master: owns θ, Adam state and observation statistics; each generation
///    it sends tasks {θ, σ, normaliser, generation seed, pair range}, gets
///    back per-pair returns and obs stats, ranks them, recomputes each
///    perturbation ε_i from the shared noise table and steps θ.
///  - worker (`evaluate_batch`): for each pair i of its range, draws the
///    offset of ε_i from the generation seed, evaluates θ + σε_i and θ − σε_i
///    (antithetic / mirrored sampling, section 2.2) and returns two scalars
///    per pair — the paper's point: communication is O(population), not O(|θ|).
///
/// Reproducibility: everything random is a pure function of (seed,
/// generation, pair index); results are placed by pair index, and every sum
/// over pairs runs in index order on the master. So a run's parameters are
/// bitwise identical whatever the number of workers, the batching or the
/// order in which tasks complete (same binary, same machine).

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fiber/object_store.hpp>

#include "envs.hpp"
#include "policy.hpp"

namespace es {

// ---------------------------------------------------------------------------
// Shared noise table

/// One large table of N(0, 1) floats, identical in every process because it
/// is a pure function of (seed, size); perturbation ε_i is the slice
/// [offset_i, offset_i + |θ|) with offset_i drawn from the generation's seed.
/// Only the offset — never ε_i itself — has to be known by the master
/// (Salimans et al. 2017, section 2.1 / Algorithm 2: "shared random seeds").
///
/// Size: OpenAI's es uses 250M floats (1 GB, `SharedNoiseTable`) for 166k
/// parameters. We use 2^25 = 33.5M floats (128 MiB per process): ~1000× the
/// humanoid MLP's 35k parameters, so two random slices overlap with
/// probability ~0.2% and are then shifted (hence nearly orthogonal) copies —
/// and it is generated in a fraction of a second by a counter-based generator
/// (SplitMix64 + Box–Muller, parallel over threads), so workers start fast.
class noise_table {
public:
  static constexpr std::uint64_t default_seed = 123;        // OpenAI es's
  static constexpr std::uint64_t default_size = 1ull << 25; // floats

  /// The table for (seed, size), built on first use in this process and kept
  /// for its lifetime (a function-local static map: one per worker process).
  static const noise_table& get(std::uint64_t seed = default_seed, std::uint64_t size = default_size) {
    static std::mutex mutex;
    static std::map<std::pair<std::uint64_t, std::uint64_t>, std::unique_ptr<noise_table>> tables;
    std::lock_guard lock{mutex};
    auto& t = tables[{seed, size}];
    if (!t) t.reset(new noise_table(seed, size));
    return *t;
  }

  std::size_t size() const { return data_.size(); }
  const float* data() const { return data_.data(); }

  /// Offset of perturbation `index` in the generation seeded `generation_seed`
  /// for a parameter vector of `dim` entries: uniform in [0, size − dim].
  std::size_t offset(std::uint64_t generation_seed, std::uint64_t index, std::size_t dim) const {
    if (dim > data_.size()) throw std::invalid_argument("noise table smaller than the parameter vector");
    return hash_seed(generation_seed, index, 0x0ff5e7) % (data_.size() - dim + 1);
  }
  std::span<const float> slice(std::size_t offset, std::size_t dim) const { return {data_.data() + offset, dim}; }

private:
  noise_table(std::uint64_t seed, std::uint64_t size) : data_(size) {
    // Entry pair (2k, 2k+1) is Box–Muller of two uniforms hashed from (seed, k):
    // any split of the index range over threads gives the same table.
    const std::size_t pairs = (size + 1) / 2;
    auto fill = [&](std::size_t lo, std::size_t hi) {
      for (std::size_t k = lo; k < hi; ++k) {
        const std::uint64_t h = hash_seed(seed, k);
        // Single precision is plenty for N(0,1) noise and ~3× faster to make.
        const float u1 = float((h >> 40) + 1) * 0x1.0p-24f;        // (0, 1]
        const float u2 = float((h >> 16) & 0xffffff) * 0x1.0p-24f; // [0, 1)
        const float r = std::sqrt(-2.f * std::log(u1));
        data_[2 * k] = r * std::cos(6.2831853f * u2);
        if (2 * k + 1 < size) data_[2 * k + 1] = r * std::sin(6.2831853f * u2);
      }
    };
    const std::size_t n = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < n; ++t) threads.emplace_back(fill, pairs * t / n, pairs * (t + 1) / n);
    fill(0, pairs / n);
    for (auto& t : threads) t.join();
  }
  std::vector<float> data_;
};

// ---------------------------------------------------------------------------
// Task and result: what travels through the Pool (aggregates of serializable
// members only — arithmetic, enums, std::string, std::vector — so fiber
// serializes them automatically).

enum class env_kind : std::uint8_t { cartpole, humanoid };

struct env_config {
  env_kind kind = env_kind::humanoid;
  std::string model_path = default_humanoid_model; ///< humanoid only
  std::int32_t max_steps = 0;                      ///< episode cap; 0: the env's own (500 / 1000)
  humanoid_action action{};                        ///< humanoid only: torques or PD targets
};

/// One Pool task: evaluate pairs [first, first + count) of a generation
/// (antithetic: θ ± σ ε_i each), or, when `evaluate`, `count` plain episodes
/// of θ itself (episode seeds from generation_seed and first + k).
struct task {
  env_config env;
  policy_spec policy;
  /// [num_params(policy)] current parameters, put once a generation: a task
  /// carries the reference, each host holds one copy (fiber::put).
  fiber::object_ref<std::vector<float>> theta;
  obs_normalizer normalizer; ///< [obs_dim] ×2, from the master's running stats
  float sigma = 0.02f;       ///< perturbation scale σ
  std::uint64_t noise_seed = noise_table::default_seed;
  std::uint64_t noise_size = noise_table::default_size;
  std::uint64_t generation_seed = 0;
  std::uint32_t first = 0;       ///< first pair (or episode) index
  std::uint32_t count = 0;       ///< pairs (or episodes) in this task
  double obs_sample_prob = 0.01; ///< chance that a step's observation feeds the stats
  float obs_clip = 5.f;          ///< normalised observations are clipped to ±obs_clip
  bool evaluate = false;
  /// 0: every pair starts from its own initial state; k > 0: pair i starts
  /// from state i mod k, so all pairs share k states (common random numbers
  /// across the population: ranks then compare policies, not lucky starts).
  std::uint32_t start_states = 0;
};

/// What `evaluate_batch` returns for one task. Index k refers to pair first + k.
struct batch_result {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  std::vector<double> returns_pos;        ///< [count] return of θ + σε
  std::vector<double> returns_neg;        ///< [count] return of θ − σε (empty when evaluate)
  std::vector<std::uint32_t> lengths_pos; ///< [count] episode lengths [steps]
  std::vector<std::uint32_t> lengths_neg; ///< [count]
  std::vector<obs_stats> obs;             ///< [count] raw-observation stats sampled in pair k's two rollouts
  double cpu_seconds = 0;                 ///< thread CPU time spent on the rollouts
  std::uint64_t steps = 0;                ///< environment steps taken
};

// ---------------------------------------------------------------------------
// Worker side

/// CPU seconds consumed by the calling thread (CLOCK_THREAD_CPUTIME_ID):
/// excludes time spent waiting, so Σ over tasks / workers / wall = efficiency.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct rollout_result {
  double ret = 0;
  std::uint32_t length = 0;
};

/// Scratch memory of one rollout, reused across rollouts of a thread.
struct rollout_buffers {
  std::vector<float> obs, z, act;
  policy_workspace ws;
};

/// One episode of policy θ on `env` from reset seed `env_seed`. Each raw
/// observation enters `stats` (when not null) with probability `obs_prob`.
template <class Env>
rollout_result rollout(Env& env, const policy_spec& spec, const float* theta, const obs_normalizer& norm,
                       float obs_clip, std::uint64_t env_seed, double obs_prob, rng& obs_rng, obs_stats* stats,
                       rollout_buffers& buf) {
  const int od = env.obs_dim();
  buf.obs.resize(od);
  buf.z.resize(od);
  buf.act.resize(env.act_dim());
  env.reset(env_seed, buf.obs.data());
  rollout_result r;
  const std::uint32_t cap = std::uint32_t(env.max_steps());
  while (r.length < cap) {
    if (stats && obs_prob > 0 && obs_rng.uniform() < obs_prob) stats->push(buf.obs);
    for (int i = 0; i < od; ++i) buf.z[i] = std::clamp((buf.obs[i] - norm.mean[i]) / norm.std[i], -obs_clip, obs_clip);
    policy_act(spec, theta, buf.z.data(), buf.act.data(), buf.ws);
    const step_result s = env.step(buf.act.data(), buf.obs.data());
    r.ret += s.reward;
    ++r.length;
    if (s.terminated) break;
  }
  return r;
}

namespace detail {
/// This thread's environment for `c`, created on first use and reused by
/// every later task (the MuJoCo model itself is shared per process).
template <class F>
decltype(auto) with_env(const env_config& c, F&& f) {
  if (c.kind == env_kind::cartpole) {
    thread_local cartpole env;
    env = cartpole{c.max_steps > 0 ? c.max_steps : 500};
    return f(env);
  }
  thread_local std::unique_ptr<humanoid> env;
  thread_local std::string path;
  thread_local int steps = -1;
  if (!env || path != c.model_path || steps != c.max_steps || !(env->action() == c.action)) {
    env = std::make_unique<humanoid>(c.model_path, c.max_steps > 0 ? c.max_steps : 1000, c.action);
    path = c.model_path;
    steps = c.max_steps;
  }
  return f(*env);
}
} // namespace detail

/// Observation and action sizes of an environment configuration.
inline std::pair<int, int> env_dims(const env_config& c) {
  return detail::with_env(c, [](auto& env) { return std::pair{env.obs_dim(), env.act_dim()}; });
}
/// A policy spec fitted to an environment (sizes and ctrlrange).
inline policy_spec make_policy_spec(const env_config& c, policy_kind kind, std::vector<std::int32_t> hidden,
                                    std::int32_t inputs = 0) {
  return detail::with_env(c, [&](auto& env) {
    if (inputs < 0 || inputs > env.obs_dim())
      throw std::invalid_argument("policy inputs must be in [0, " + std::to_string(env.obs_dim()) + "]");
    return policy_spec{
        kind,          env.obs_dim(),  env.act_dim(), kind == policy_kind::mlp ? hidden : std::vector<std::int32_t>{},
        env.act_low(), env.act_high(), inputs};
  });
}

/// Seed of the reset of pair `index`: both mirrored rollouts start from the
/// same state (common random numbers: the pair's difference measures ε, not luck).
inline std::uint64_t episode_seed(std::uint64_t generation_seed, std::uint64_t index, bool evaluate) {
  return hash_seed(generation_seed, index, evaluate ? 0xe7a1 : 0x5eed);
}

/// THE function the Pool runs: evaluates one task. Pure given its input
/// (plus the per-process noise table and environment caches).
inline batch_result evaluate_batch(const task& t) {
  const std::size_t dim = num_params(t.policy);
  const std::span<const float> theta = t.theta.get();
  if (theta.size() != dim) throw std::invalid_argument("task: theta has the wrong size for its policy");
  const noise_table* noise = t.evaluate ? nullptr : &noise_table::get(t.noise_seed, t.noise_size);
  return detail::with_env(t.env, [&](auto& env) {
    if (env.obs_dim() != t.policy.obs_dim || env.act_dim() != t.policy.act_dim)
      throw std::invalid_argument("task: policy does not fit the environment");
    thread_local rollout_buffers buf;
    thread_local std::vector<float> perturbed;
    const double cpu0 = thread_cpu_seconds();
    batch_result r;
    r.first = t.first;
    r.count = t.count;
    r.obs.resize(t.count);
    for (std::uint32_t k = 0; k < t.count; ++k) {
      const std::uint64_t i = std::uint64_t(t.first) + k;
      const std::uint64_t env_seed = episode_seed(t.generation_seed,
                                                  t.start_states && !t.evaluate ? i % t.start_states : i, t.evaluate);
      rng obs_rng{hash_seed(t.generation_seed, i, 0x0b5)};
      if (t.evaluate) {
        const auto res = rollout(env, t.policy, theta.data(), t.normalizer, t.obs_clip, env_seed, t.obs_sample_prob,
                                 obs_rng, &r.obs[k], buf);
        r.returns_pos.push_back(res.ret);
        r.lengths_pos.push_back(res.length);
        r.steps += res.length;
        continue;
      }
      const float* eps = noise->data() + noise->offset(t.generation_seed, i, dim);
      perturbed.resize(dim);
      for (const float sign : {1.f, -1.f}) {
        const float s = sign * t.sigma;
        for (std::size_t j = 0; j < dim; ++j) perturbed[j] = theta[j] + s * eps[j];
        const auto res = rollout(env, t.policy, perturbed.data(), t.normalizer, t.obs_clip, env_seed, t.obs_sample_prob,
                                 obs_rng, &r.obs[k], buf);
        (sign > 0 ? r.returns_pos : r.returns_neg).push_back(res.ret);
        (sign > 0 ? r.lengths_pos : r.lengths_neg).push_back(res.length);
        r.steps += res.length;
      }
    }
    r.cpu_seconds = thread_cpu_seconds() - cpu0;
    return r;
  });
}

// ---------------------------------------------------------------------------
// Master side

/// Centred ranks (OpenAI es `compute_centered_ranks`, fitness shaping of
/// section 2.1 / Wierstra et al. 2014): rank 0..n−1, mapped to [−0.5, 0.5].
/// Ties get their average rank (CartPole's many 500s then cancel exactly,
/// where argsort would rank equal returns by position and inject noise).
inline std::vector<double> centered_ranks(std::span<const double> x) {
  const std::size_t n = x.size();
  std::vector<double> y(n, 0.0);
  if (n < 2) return y;
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  for (std::size_t lo = 0; lo < n;) {
    std::size_t hi = lo + 1;
    while (hi < n && x[idx[hi]] == x[idx[lo]]) ++hi;
    const double rank = 0.5 * double(lo + hi - 1); // average of ranks lo..hi−1
    for (std::size_t k = lo; k < hi; ++k) y[idx[k]] = rank / double(n - 1) - 0.5;
    lo = hi;
  }
  return y;
}

/// Returns divided by their standard deviation (ARS V2's σ_R; the mean
/// cancels in the mirrored differences). All equal: zeros (no step).
inline std::vector<double> scaled_returns(std::span<const double> x) {
  const double n = double(x.size());
  double mean = 0, sq = 0;
  for (double v : x) mean += v;
  mean /= n;
  for (double v : x) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / n);
  std::vector<double> y(x.size(), 0.0);
  if (sd > 0)
    for (std::size_t k = 0; k < x.size(); ++k) y[k] = (x[k] - mean) / sd;
  return y;
}

/// Adam (Kingma & Ba 2015) exactly as OpenAI es's `optimizers.Adam`: minimises,
/// i.e. θ ← θ − a·m/(√v + ε) with a = lr·√(1−β2^t)/(1−β1^t).
struct adam {
  double lr = 0.01, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  std::vector<double> m, v;
  std::uint64_t t = 0;

  /// Applies one step for gradient `g` (of the loss) to θ; returns ‖step‖.
  double step(std::vector<float>& theta, std::span<const double> g) {
    if (m.empty()) m.assign(theta.size(), 0.0), v.assign(theta.size(), 0.0);
    ++t;
    const double a = lr * std::sqrt(1 - std::pow(beta2, double(t))) / (1 - std::pow(beta1, double(t)));
    double norm = 0;
    for (std::size_t j = 0; j < theta.size(); ++j) {
      m[j] = beta1 * m[j] + (1 - beta1) * g[j];
      v[j] = beta2 * v[j] + (1 - beta2) * g[j] * g[j];
      const double s = -a * m[j] / (std::sqrt(v[j]) + epsilon);
      theta[j] = float(theta[j] + s);
      norm += s * s;
    }
    return std::sqrt(norm);
  }
};

/// Hyperparameters of a run (defaults: OpenAI es's humanoid configuration
/// where it applies — σ 0.02, Adam lr 0.01, L2 0.005, obs prob 0.01).
struct es_config {
  env_config env;
  policy_kind policy = policy_kind::mlp;
  std::vector<std::int32_t> hidden{64, 64};
  std::uint32_t population = 256; ///< perturbations per generation (even: population/2 mirrored pairs)
  float sigma = 0.02f;
  double lr = 0.01;
  double l2 = 0.005; ///< L2 weight decay coefficient (added to the loss gradient)
  std::uint64_t seed = 0;
  std::uint32_t batch = 0;   ///< pairs per task; 0: automatic (see `auto_batch`)
  std::uint32_t workers = 1; ///< pool processes (for automatic batching and efficiency)
  std::uint64_t noise_seed = noise_table::default_seed;
  std::uint64_t noise_size = noise_table::default_size;
  double obs_sample_prob = 0.01;
  float obs_clip = 5.f; ///< OpenAI es clips normalised observations to ±5
  bool normalize_obs = true;
  std::uint32_t start_states = 0; ///< see task::start_states
  std::int32_t policy_inputs = 0; ///< see policy_spec::inputs
  /// Fitness shaping. ranks: centred ranks (OpenAI es). returns: returns
  /// divided by their standard deviation over the generation (ARS, Mania,
  /// Guy & Recht 2018, "Simple random search provides a competitive approach
  /// to reinforcement learning", arXiv 1803.07055, Algorithm 2 V2).
  enum class shaping : std::uint8_t { ranks, returns } fitness = shaping::ranks;
  /// adam: OpenAI es's Adam. sgd: θ ← θ − lr·(−g + l2·θ), ARS's plain step.
  enum class optimizer_kind : std::uint8_t { adam, sgd } optimizer = optimizer_kind::adam;
};

/// Pairs per task when the user gives none. A humanoid rollout takes
/// milliseconds: two pairs per task halve the tasks (each carries θ, 139 kB
/// for the default MLP) while leaving ≥ 16 tasks per worker, so both workers
/// stay busy to the end of a generation (episode lengths vary 50×); with
/// fewer tasks per worker it falls back to one pair. CartPole rollouts take
/// ~20 µs, so pairs are grouped into ~4 tasks per worker: messaging stays
/// negligible and the load still balances. Results are placed by pair
/// index, so the batch never changes what a run computes.
inline std::uint32_t auto_batch(const es_config& c) {
  const std::uint32_t pairs = c.population / 2;
  if (c.env.kind == env_kind::humanoid)
    return std::clamp<std::uint32_t>(pairs / (16 * std::max<std::uint32_t>(1, c.workers)), 1, 2);
  const std::uint32_t tasks = std::max<std::uint32_t>(1, 4 * c.workers);
  return std::max<std::uint32_t>(1, (pairs + tasks - 1) / tasks);
}

/// Everything the master carries from one generation to the next.
struct es_state {
  policy_spec spec;
  std::vector<float> theta;
  adam optimizer;
  obs_stats obs; ///< all observation samples so far
  std::uint64_t generation = 0;
  std::uint64_t timesteps = 0;
  std::uint64_t episodes = 0;
};

inline es_state make_state(const es_config& c) {
  es_state s;
  s.spec = make_policy_spec(c.env, c.policy, c.hidden, c.policy_inputs);
  s.theta = init_params(s.spec, c.seed);
  s.optimizer.lr = c.lr;
  return s;
}

inline obs_normalizer current_normalizer(const es_config& c, const es_state& s) {
  if (!c.normalize_obs) return {std::vector<float>(s.spec.obs_dim, 0.f), std::vector<float>(s.spec.obs_dim, 1.f)};
  return make_normalizer(s.obs, s.spec.obs_dim);
}

/// What one generation did (one line of output, one row of log.csv).
struct generation_report {
  std::uint64_t generation = 0;
  double mean_return = 0, max_return = 0, min_return = 0;
  double mean_length = 0;
  std::uint32_t max_length = 0;
  std::uint64_t steps = 0;     ///< env steps this generation
  std::uint64_t timesteps = 0; ///< env steps so far
  double cpu_seconds = 0;      ///< Σ rollout CPU seconds over tasks
  double wall_seconds = 0;     ///< this generation, master's clock
  double efficiency = 0;       ///< (cpu_seconds / workers) / wall_seconds
  double update_norm = 0;      ///< ‖Δθ‖
  double theta_norm = 0;       ///< ‖θ‖ after the update
  std::uint32_t tasks = 0;
};

/// A pool: `map(tasks, chunksize)` returns one batch_result per task (order
/// free: results are placed by their `first`). fiber::Pool<&evaluate_batch>
/// is one; so are serial_pool and thread_pool below.
template <class P>
concept es_pool = requires(P& p, const std::vector<task>& ts) {
  { p.map(ts, std::size_t{1}) } -> std::convertible_to<std::vector<batch_result>>;
};

/// The tasks of generation `s.generation` (pairs split into batches of `batch`).
inline std::vector<task> make_tasks(const es_config& c, const es_state& s, std::uint64_t generation_seed) {
  const std::uint32_t pairs = c.population / 2;
  const std::uint32_t batch = c.batch ? c.batch : auto_batch(c);
  const obs_normalizer norm = current_normalizer(c, s);
  const auto theta = fiber::put(s.theta);
  std::vector<task> tasks;
  for (std::uint32_t first = 0; first < pairs; first += batch) {
    tasks.push_back(task{c.env, s.spec, theta, norm, c.sigma, c.noise_seed, c.noise_size, generation_seed, first,
                         std::min(batch, pairs - first), c.normalize_obs ? c.obs_sample_prob : 0.0, c.obs_clip, false,
                         c.start_states});
  }
  return tasks;
}

/// One ES generation (Algorithm 2): farm pairs out, rank, estimate the
/// gradient, Adam step with L2 decay, merge obs stats. Deterministic.
template <es_pool Pool>
generation_report es_generation(const es_config& c, es_state& s, Pool& pool) {
  if (c.population < 2 || c.population % 2) throw std::invalid_argument("population must be even and ≥ 2");
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t gen_seed = hash_seed(c.seed, s.generation, 0x9e4);
  const std::uint32_t pairs = c.population / 2;
  const std::vector<task> tasks = make_tasks(c, s, gen_seed);
  std::vector<batch_result> results = pool.map(tasks, std::size_t{1});

  // Place by pair index: completion order and batching cannot matter.
  std::vector<double> ret(2 * std::size_t(pairs)); // [pos_0..pos_{n-1}, neg_0..neg_{n-1}]
  std::vector<std::uint32_t> len(2 * std::size_t(pairs));
  std::vector<const obs_stats*> pair_obs(pairs, nullptr);
  generation_report rep;
  rep.generation = s.generation;
  rep.tasks = std::uint32_t(tasks.size());
  std::vector<bool> seen(pairs, false);
  for (const batch_result& r : results) {
    if (std::uint64_t(r.first) + r.count > pairs || r.returns_pos.size() != r.count ||
        r.returns_neg.size() != r.count || r.lengths_pos.size() != r.count || r.lengths_neg.size() != r.count ||
        r.obs.size() != r.count)
      throw std::runtime_error("malformed batch_result");
    for (std::uint32_t k = 0; k < r.count; ++k) {
      const std::uint32_t i = r.first + k;
      if (seen[i]) throw std::runtime_error("pair evaluated twice");
      seen[i] = true;
      ret[i] = r.returns_pos[k];
      ret[pairs + i] = r.returns_neg[k];
      len[i] = r.lengths_pos[k];
      len[pairs + i] = r.lengths_neg[k];
      pair_obs[i] = &r.obs[k];
    }
    rep.cpu_seconds += r.cpu_seconds; // reporting only: never feeds θ
    rep.steps += r.steps;
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) throw std::runtime_error("a pair is missing");

  // Fitness shaping over all 2n returns, then g = Σ_i (F_i⁺ − F_i⁻) ε_i / (2n),
  // as OpenAI es (σ is folded into the learning rate), summed in index order.
  const std::vector<double> f = c.fitness == es_config::shaping::ranks ? centered_ranks(ret) : scaled_returns(ret);
  const std::size_t dim = s.theta.size();
  const noise_table& noise = noise_table::get(c.noise_seed, c.noise_size);
  std::vector<double> g(dim, 0.0);
  for (std::uint32_t i = 0; i < pairs; ++i) {
    const double w = f[i] - f[pairs + i];
    if (w == 0) continue;
    const float* eps = noise.data() + noise.offset(gen_seed, i, dim);
    for (std::size_t j = 0; j < dim; ++j) g[j] += w * eps[j];
  }
  // Adam minimises: feed it −g + l2·θ (OpenAI es: `optimizer.update(-g + l2coeff * theta)`).
  for (std::size_t j = 0; j < dim; ++j) g[j] = -g[j] / double(2 * pairs) + c.l2 * s.theta[j];
  if (c.optimizer == es_config::optimizer_kind::adam) {
    rep.update_norm = s.optimizer.step(s.theta, g);
  } else {
    double norm = 0;
    for (std::size_t j = 0; j < dim; ++j) {
      const double step = -c.lr * g[j];
      s.theta[j] = float(s.theta[j] + step);
      norm += step * step;
    }
    rep.update_norm = std::sqrt(norm);
  }
  double tn = 0;
  for (float x : s.theta) tn += double(x) * x;
  rep.theta_norm = std::sqrt(tn);

  for (std::uint32_t i = 0; i < pairs; ++i) s.obs.merge(*pair_obs[i]); // index order

  double sum_ret = 0, sum_len = 0;
  rep.max_return = -INFINITY;
  rep.min_return = INFINITY;
  for (std::size_t k = 0; k < ret.size(); ++k) {
    sum_ret += ret[k];
    sum_len += len[k];
    rep.max_return = std::max(rep.max_return, ret[k]);
    rep.min_return = std::min(rep.min_return, ret[k]);
    rep.max_length = std::max(rep.max_length, len[k]);
  }
  rep.mean_return = sum_ret / double(ret.size());
  rep.mean_length = sum_len / double(len.size());
  s.timesteps += rep.steps;
  s.episodes += ret.size();
  rep.timesteps = s.timesteps;
  ++s.generation;
  rep.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.efficiency = rep.wall_seconds > 0 ? rep.cpu_seconds / std::max<std::uint32_t>(1, c.workers) / rep.wall_seconds
                                        : 0;
  return rep;
}

/// Runs generations until `on_generation(report)` returns false.
template <es_pool Pool, class F>
void run_es(const es_config& c, es_state& s, Pool& pool, F&& on_generation) {
  while (true)
    if (!on_generation(es_generation(c, s, pool))) return;
}

/// Mean return and length of θ over `episodes` unperturbed episodes (seeded
/// by `seed`), farmed out `batch` episodes per task.
struct evaluation {
  std::vector<double> returns;
  std::vector<std::uint32_t> lengths;
};
template <es_pool Pool>
evaluation evaluate_policy(const env_config& env, const policy_spec& spec, const std::vector<float>& theta,
                           const obs_normalizer& norm, std::uint32_t episodes, std::uint64_t seed, Pool& pool,
                           std::uint32_t batch = 1, float obs_clip = 5.f) {
  std::vector<task> tasks;
  const auto theta_ref = fiber::put(theta);
  for (std::uint32_t first = 0; first < episodes; first += batch)
    tasks.push_back(task{env, spec, theta_ref, norm, 0.f, noise_table::default_seed, noise_table::default_size, seed,
                         first, std::min(batch, episodes - first), 0.0, obs_clip, true});
  auto results = pool.map(tasks, std::size_t{1});
  evaluation e{std::vector<double>(episodes), std::vector<std::uint32_t>(episodes)};
  for (const auto& r : results)
    for (std::uint32_t k = 0; k < r.count; ++k)
      e.returns[r.first + k] = r.returns_pos[k], e.lengths[r.first + k] = r.lengths_pos[k];
  return e;
}

// ---------------------------------------------------------------------------
// In-process pools (tests, baselines). Same shape as fiber::Pool<&f>.

/// Runs every task in the calling thread, in input order — or, with
/// `reverse`, last task first (tests use it to prove order independence).
template <auto F>
struct serial_pool {
  bool reverse = false;
  template <class Range>
  auto map(const Range& inputs, std::size_t = 1) {
    std::vector<decltype(F(*std::begin(inputs)))> out;
    std::vector<const std::ranges::range_value_t<Range>*> in;
    for (const auto& x : inputs) in.push_back(&x);
    if (reverse) std::reverse(in.begin(), in.end());
    for (const auto* x : in) out.push_back(F(*x));
    return out;
  }
};

/// `processes` threads pulling tasks from a shared counter (dynamic load
/// balancing, like a Pool with chunksize 1); results in input order. The
/// shared-memory baseline that fiber's efficiency is compared against.
template <auto F>
struct thread_pool {
  unsigned processes = 1;
  template <class Range>
  auto map(const Range& inputs, std::size_t = 1) {
    using R = decltype(F(*std::begin(inputs)));
    std::vector<const std::ranges::range_value_t<Range>*> in;
    for (const auto& x : inputs) in.push_back(&x);
    std::vector<R> out(in.size());
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto work = [&] {
      for (std::size_t k; (k = next++) < in.size();) {
        try {
          out[k] = F(*in[k]);
        } catch (...) {
          std::lock_guard lock{error_mutex};
          if (!error) error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 1; t < processes; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    if (error) std::rethrow_exception(error);
    return out;
  }
};

} // namespace es
