// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file app.hpp
/// The `es` program minus its pool and its serializer: command line (CLI11),
/// the training loop with its stopping rules, one printed line and one CSV
/// row per generation, policy.bin, the gnuplot learning curve, and the
/// evaluation mode. main.cpp supplies fiber::Pool and fiber::serialize;
/// tests and baselines can supply in-process ones.

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "es.hpp"

namespace es {

/// Everything the command line sets.
struct app_options {
  std::string env = "humanoid";
  std::string model = default_humanoid_model;
  std::uint32_t population = 256;
  std::uint64_t generations = 0; ///< 0: no limit
  double time_budget = 0;        ///< seconds; 0: no limit
  float sigma = 0.02f;
  double lr = 0.01;
  double l2 = 0.005;
  unsigned workers = 0; ///< 0: the caller's default (fiber::cpu_count())
  std::uint64_t seed = 0;
  std::string policy = "mlp";
  std::vector<std::int32_t> hidden{64, 64};
  std::uint32_t batch = 0;
  std::string out = "es-out";
  std::string load;
  std::uint32_t evaluate = 0;
  std::optional<double> target_return;
  double obs_prob = 0.01;
  bool no_obs_norm = false;
  std::int32_t max_steps = 0;
  std::uint64_t noise_size = noise_table::default_size;
  std::uint32_t final_episodes = 8;
  bool threads = false;
  std::uint32_t start_states = 0;
  std::int32_t policy_inputs = 0;
  std::string fitness = "ranks";
  std::string optimizer = "adam";
  std::string action = "torque";
  humanoid_action pd{action_space::pd}; ///< gains of --action pd
};

/// Declares every flag on `cli`, bound to `o`.
inline void add_options(CLI::App& cli, app_options& o) {
  cli.add_option("--env", o.env, "environment")->check(CLI::IsMember({"cartpole", "humanoid"}))->capture_default_str();
  cli.add_option("--model", o.model, "MuJoCo XML of DeepMind's humanoid (libmujoco-samples)")->capture_default_str();
  cli.add_option("--population", o.population, "perturbations per generation (even: mirrored pairs)")
      ->check(CLI::Range(2u, 1u << 24))
      ->capture_default_str();
  cli.add_option("--generations", o.generations, "stop after N generations (0: no limit)");
  cli.add_option("--time-budget", o.time_budget, "stop before a generation would end past SECONDS (0: no limit)");
  cli.add_option("--sigma", o.sigma, "perturbation scale")->capture_default_str();
  cli.add_option("--lr", o.lr, "learning rate (Adam or SGD step size)")->capture_default_str();
  cli.add_option("--l2", o.l2, "L2 weight decay coefficient")->capture_default_str();
  cli.add_option("--workers", o.workers, "Pool processes (default: fiber::cpu_count())");
  cli.add_option("--seed", o.seed, "run seed: same seed, same parameters, whatever --workers")->capture_default_str();
  cli.add_option("--policy", o.policy, "policy class")->check(CLI::IsMember({"linear", "mlp"}))->capture_default_str();
  cli.add_option("--hidden", o.hidden, "MLP hidden widths, e.g. 64,64")->delimiter(',')->capture_default_str();
  cli.add_option("--batch", o.batch, "mirrored pairs per Pool task (0: automatic)");
  cli.add_option("--out", o.out, "output directory (log.csv, policy.bin, learning_curve.png)")->capture_default_str();
  cli.add_option("--load", o.load, "a saved policy.bin: evaluate it instead of training");
  cli.add_option("--evaluate", o.evaluate, "episodes to evaluate the --load'ed policy on (default 10)");
  cli.add_option("--target-return", o.target_return,
                 "stop once the mean population return reaches X (exit status 2 if it never does)");
  cli.add_option("--obs-prob", o.obs_prob, "probability that a step's observation feeds the normaliser")
      ->capture_default_str();
  cli.add_flag("--no-obs-norm", o.no_obs_norm, "do not normalise observations");
  cli.add_option("--max-steps", o.max_steps, "episode cap (0: the environment's, 500 / 1000)");
  cli.add_option("--noise-size", o.noise_size, "floats in the shared noise table")->capture_default_str();
  cli.add_option("--final-episodes", o.final_episodes, "episodes of the final policy evaluated at the end")
      ->capture_default_str();
  cli.add_option("--start-states", o.start_states,
                 "initial states shared by all pairs of a generation (0: one per pair)")
      ->capture_default_str();
  cli.add_option("--policy-inputs", o.policy_inputs,
                 "the policy reads the first N observation entries (0: all; humanoid: 53 = qpos[2:], qvel)")
      ->capture_default_str();
  cli.add_option("--fitness", o.fitness, "fitness shaping: centred ranks (OpenAI es) or returns / their std (ARS)")
      ->check(CLI::IsMember({"ranks", "returns"}))
      ->capture_default_str();
  cli.add_option("--optimizer", o.optimizer, "adam (OpenAI es) or sgd (ARS's plain step)")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  cli.add_option("--action", o.action, "humanoid action space: motor commands (Gym's) or PD joint targets")
      ->check(CLI::IsMember({"torque", "pd"}))
      ->capture_default_str();
  cli.add_option("--pd-kp", o.pd.kp, "--action pd: ctrl per rad of target error")->capture_default_str();
  cli.add_option("--pd-kd", o.pd.kd, "--action pd: ctrl per rad/s of joint velocity")->capture_default_str();
  cli.add_option("--pd-range", o.pd.range, "--action pd: rad of joint target per unit of action")
      ->capture_default_str();
  cli.add_flag("--threads", o.threads, "run rollouts on threads of this process instead of a fiber::Pool (baseline)");
}

/// policy.bin: everything needed to run the policy again (an aggregate, so
/// fiber::serialize writes it without any glue).
struct saved_policy {
  static constexpr const char* current_format = "fiber-es-policy-2"; // 2: env_config.action
  std::string format = current_format;
  env_config env;
  policy_spec spec;
  std::vector<float> theta;
  obs_normalizer normalizer;
  float obs_clip = 5.f;
  std::uint64_t seed = 0;
  std::uint64_t generation = 0;
  std::uint64_t timesteps = 0;
};

inline es_config make_config(const app_options& o, unsigned workers) {
  es_config c;
  c.env = env_config{o.env == "cartpole" ? env_kind::cartpole : env_kind::humanoid, o.model, o.max_steps,
                     o.action == "pd" ? o.pd : humanoid_action{}};
  c.policy = o.policy == "linear" ? policy_kind::linear : policy_kind::mlp;
  c.hidden = o.hidden;
  c.population = o.population;
  c.sigma = o.sigma;
  c.lr = o.lr;
  c.l2 = o.l2;
  c.seed = o.seed;
  c.batch = o.batch;
  c.workers = workers;
  c.noise_size = o.noise_size;
  c.obs_sample_prob = o.obs_prob;
  c.normalize_obs = !o.no_obs_norm;
  c.start_states = o.start_states;
  c.policy_inputs = o.policy_inputs;
  c.fitness = o.fitness == "returns" ? es_config::shaping::returns : es_config::shaping::ranks;
  c.optimizer = o.optimizer == "sgd" ? es_config::optimizer_kind::sgd : es_config::optimizer_kind::adam;
  return c;
}

inline std::string format_line(const generation_report& r) {
  char line[256];
  std::snprintf(
      line, sizeof line,
      "gen %4llu | return mean %8.1f max %8.1f | len %6.1f | steps %11llu | %7.2f s | %8.0f steps/s | eff %.3f",
      (unsigned long long)r.generation, r.mean_return, r.max_return, r.mean_length, (unsigned long long)r.timesteps,
      r.wall_seconds, double(r.steps) / r.wall_seconds, r.efficiency);
  return line;
}

inline const char* csv_header =
    "generation,elapsed_s,timesteps,episodes,mean_return,max_return,min_return,mean_length,max_length,"
    "gen_seconds,steps_per_s,cpu_seconds,efficiency,update_norm,theta_norm\n";

inline std::string csv_row(const generation_report& r, double elapsed, std::uint64_t episodes) {
  std::ostringstream s;
  s.precision(10);
  s << r.generation << ',' << elapsed << ',' << r.timesteps << ',' << episodes << ',' << r.mean_return << ','
    << r.max_return << ',' << r.min_return << ',' << r.mean_length << ',' << r.max_length << ',' << r.wall_seconds
    << ',' << double(r.steps) / r.wall_seconds << ',' << r.cpu_seconds << ',' << r.efficiency << ',' << r.update_norm
    << ',' << r.theta_norm << '\n';
  return s.str();
}

/// Renders DIR/learning_curve.png from DIR/log.csv with gnuplot; returns
/// false (after saying why) when gnuplot is missing or fails.
inline bool plot_learning_curve(const std::filesystem::path& dir, const std::string& title) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::cout << "gnuplot not found on PATH: skipping learning_curve.png (install gnuplot-nox)\n";
    return false;
  }
  const auto script = dir / "learning_curve.gp";
  std::ofstream gp{script};
  gp << "set datafile separator ','\n"
        "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1000,800 } "
        "else { set terminal png size 1000,800 }\n"
        "set output '"
     << (dir / "learning_curve.png").string()
     << "'\n"
        "set multiplot layout 2,1 title '"
     << title
     << "'\n"
        "set grid\nset key top left\nset xlabel 'wall-clock minutes'\n"
        "set ylabel 'episode return'\n"
        "plot '"
     << (dir / "log.csv").string()
     << "' using ($2/60):5 skip 1 with lines lw 2 title 'population mean', "
        "'' using ($2/60):6 skip 1 with lines title 'population max'\n"
        "set ylabel 'episode length [steps]'\n"
        "plot '"
     << (dir / "log.csv").string()
     << "' using ($2/60):8 skip 1 with lines lw 2 title 'mean episode length'\n"
        "unset multiplot\n";
  gp.close();
  const std::string cmd = "gnuplot '" + script.string() + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::cout << "gnuplot failed: skipping learning_curve.png\n";
    return false;
  }
  return true;
}

inline void write_file(const std::filesystem::path& p, std::span<const std::byte> bytes) {
  std::ofstream f{p, std::ios::binary | std::ios::trunc};
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

inline std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream f{p, std::ios::binary};
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::vector<char> c{std::istreambuf_iterator<char>(f), {}};
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

inline void print_evaluation(const evaluation& e, const char* what) {
  double r = 0, l = 0, r2 = 0;
  for (std::size_t k = 0; k < e.returns.size(); ++k)
    r += e.returns[k], r2 += e.returns[k] * e.returns[k], l += e.lengths[k];
  const double n = double(e.returns.size());
  std::printf("%s: %zu episodes, return %.1f ± %.1f, length %.1f\n", what, e.returns.size(), r / n,
              std::sqrt(std::max(0.0, r2 / n - (r / n) * (r / n))), l / n);
}

/// The program: train (or evaluate with --load) on `pool`, a PoolLike over
/// es::evaluate_batch with `workers` processes. `encode(saved_policy)` →
/// bytes and `decode(bytes)` → saved_policy are the policy file's codec.
template <es_pool Pool, class Encode, class Decode>
int run_app(const app_options& o, Pool& pool, unsigned workers, Encode&& encode, Decode&& decode,
            std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(),
            const std::function<void(const generation_report&)>& on_generation = {}) {
  namespace fs = std::filesystem;
  if (!o.load.empty()) {
    const saved_policy p = decode(read_file(o.load));
    if (p.format != saved_policy::current_format)
      throw std::runtime_error(o.load + ": policy format '" + p.format + "', this program reads '" +
                               saved_policy::current_format + "'");
    const std::uint32_t n = o.evaluate ? o.evaluate : 10;
    print_evaluation(evaluate_policy(p.env, p.spec, p.theta, p.normalizer, n, o.seed, pool, 1, p.obs_clip),
                     ("policy " + o.load).c_str());
    return 0;
  }
  if (o.population % 2) throw CLI::ValidationError("--population", "must be even (mirrored pairs)");
  if (o.generations == 0 && o.time_budget <= 0 && !o.target_return)
    throw CLI::ValidationError("--generations", "give --generations, --time-budget and/or --target-return");

  const es_config c = make_config(o, workers);
  es_state s = make_state(c);
  const fs::path dir{o.out};
  fs::create_directories(dir);
  std::ofstream log{dir / "log.csv", std::ios::trunc};
  log << csv_header;
  std::printf("ES on %s%s: %s policy, %zu parameters, obs %d, act %d | population %u, sigma %g, lr %g, l2 %g, "
              "%u workers, %u pairs/task, seed %llu\n",
              o.env.c_str(), c.env.kind == env_kind::humanoid && o.action == "pd" ? " (PD targets)" : "",
              o.policy.c_str(), s.theta.size(), s.spec.obs_dim, s.spec.act_dim, c.population, c.sigma, c.lr, c.l2,
              workers, c.batch ? c.batch : auto_batch(c), (unsigned long long)c.seed);
  std::fflush(stdout);

  auto save = [&] {
    saved_policy p{saved_policy::current_format,
                   c.env,
                   s.spec,
                   s.theta,
                   current_normalizer(c, s),
                   c.obs_clip,
                   c.seed,
                   s.generation,
                   s.timesteps};
    write_file(dir / "policy.bin", encode(p));
  };
  std::string stop_reason;
  bool reached = false;
  run_es(c, s, pool, [&](const generation_report& r) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::puts(format_line(r).c_str());
    std::fflush(stdout);
    log << csv_row(r, elapsed, s.episodes) << std::flush;
    if (on_generation) on_generation(r);
    if (s.generation % 10 == 0) save();
    if (o.target_return && r.mean_return >= *o.target_return) {
      char why[96];
      std::snprintf(why, sizeof why, "target return %g reached after %.1f s", *o.target_return, elapsed);
      stop_reason = why;
      return !(reached = true);
    }
    if (o.generations && s.generation >= o.generations) return stop_reason = "generation limit", false;
    // Stop before a generation that would end past the budget (estimated by the last one).
    if (o.time_budget > 0 && elapsed + r.wall_seconds > o.time_budget) return stop_reason = "time budget", false;
    return true;
  });
  save();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("stopped (%s): %llu generations, %llu timesteps, %.1f s\n", stop_reason.c_str(),
              (unsigned long long)s.generation, (unsigned long long)s.timesteps, elapsed);
  if (o.final_episodes)
    print_evaluation(evaluate_policy(c.env, s.spec, s.theta, current_normalizer(c, s), o.final_episodes,
                                     hash_seed(c.seed, 0xf1a1), pool, 1, c.obs_clip),
                     "final policy (unperturbed)");
  plot_learning_curve(dir, "ES on " + o.env + ", population " + std::to_string(c.population) + ", " +
                               std::to_string(workers) + (workers == 1 ? " worker" : " workers"));
  std::printf("log: %s\npolicy: %s\n", (dir / "log.csv").c_str(), (dir / "policy.bin").c_str());
  if (fs::exists(dir / "learning_curve.png")) std::printf("learning curve: %s\n", (dir / "learning_curve.png").c_str());
  if (o.target_return && !reached) {
    std::printf("target return %g NOT reached\n", *o.target_return);
    return 2; // scripts and CTest can tell
  }
  return 0;
}

} // namespace es
