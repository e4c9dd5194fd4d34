// SPDX-License-Identifier: BSL-1.0
// remote_envs — the PPO-style rollout loop of Fiber's paper (Zhi et al.,
// "Fiber: A Platform for Efficient Development and Distributed Training for
// Reinforcement Learning and Population-Based Methods", arXiv 2003.11164),
// with N CartPole environments stepped in parallel in manager processes.
//
// The loop is written once, as a coroutine over "environment handles" that
// offer `async_call<&CartPole::step>(action, token)`. Run it on local objects
// (`Local<CartPole>`, this file) or on remote ones (`fiber::Remote<CartPole>`)
// — the one-line change:
//
//     auto envs = make_local(n, work_us);              // before
//     auto envs = make_remote(manager, n, work_us);    // after
//
// Each step sends one call per environment and co_awaits all of them
// together; a trivial linear policy picks the actions; the "learner" only
// computes discounted returns (what PPO's advantage estimation would start
// from) — the point is the stepping, as in the paper's PPO experiment.
//
// Usage: remote_envs [--envs N] [--processes P] [--steps T] [--iters K]
//                    [--work-us W] [--smoke]
//   --work-us W  adds W microseconds of CPU work to every step. CartPole
//                itself costs well under a microsecond, far less than one
//                message between processes: remote stepping pays off only for
//                environments that are expensive to step (physics engines,
//                emulators), which W stands in for.
//   --smoke      a tiny, fast run (CI).

#include <fiber/fiber.hpp>
#include <fiber/manager.hpp>

#include "async_gather.hpp"

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numbers>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// ---- the environment ----------------------------------------------------------

using Obs = std::array<double, 4>; // x, x_dot, theta, theta_dot

struct Step {
  Obs obs{}; ///< next observation (already reset when done)
  double reward = 0;
  bool done = false;         ///< the episode ended at this step (and the env was reset)
  double episode_return = 0; ///< when done: the finished episode's return
};

/// CartPole-v1: the cart-pole balancing task of Barto, Sutton & Anderson
/// ("Neuronlike adaptive elements that can solve difficult learning control
/// problems", IEEE SMC 1983), with the constants and explicit-Euler update of
/// OpenAI Gym's classic_control/cartpole.py. Episodes end when the pole tips
/// past 12 degrees or the cart leaves ±2.4, and are truncated at 500 steps
/// (v1's TimeLimit). Resets itself when an episode ends (like Gym's vector
/// environments), so one call per step suffices.
class CartPole {
public:
  explicit CartPole(double work_us = 0) : work_us_(work_us) {}

  Obs reset(std::uint64_t seed) {
    rng_.seed(seed);
    return restart();
  }

  Step step(int action) {
    constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1, total_mass = masspole + masscart;
    constexpr double length = 0.5, polemass_length = masspole * length, force_mag = 10.0, tau = 0.02;
    constexpr double theta_threshold = 12 * 2 * std::numbers::pi / 360, x_threshold = 2.4;
    burn();
    auto& [x, x_dot, theta, theta_dot] = s_;
    const double force = action == 1 ? force_mag : -force_mag;
    const double costheta = std::cos(theta), sintheta = std::sin(theta);
    const double temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass;
    const double thetaacc = (gravity * sintheta - costheta * temp) /
                            (length * (4.0 / 3.0 - masspole * costheta * costheta / total_mass));
    const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x += tau * x_dot;
    x_dot += tau * xacc;
    theta += tau * theta_dot;
    theta_dot += tau * thetaacc;
    ++t_;
    ret_ += 1.0;
    const bool terminated = x < -x_threshold || x > x_threshold || theta < -theta_threshold || theta > theta_threshold;
    Step out{s_, 1.0, terminated || t_ >= 500, 0};
    if (out.done) {
      out.episode_return = ret_;
      out.obs = restart();
    }
    return out;
  }

private:
  Obs restart() {
    std::uniform_real_distribution<double> u(-0.05, 0.05);
    for (auto& v : s_) v = u(rng_);
    t_ = 0;
    ret_ = 0;
    return s_;
  }

  // Stand-in for an expensive simulator: CPU work, not sleep.
  void burn() const {
    if (work_us_ <= 0) return;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(work_us_);
    while (std::chrono::steady_clock::now() < until) {
    }
  }

  double work_us_;
  Obs s_{};
  int t_ = 0;
  double ret_ = 0;
  std::mt19937_64 rng_{0};

  BOOST_DESCRIBE_CLASS(CartPole, (), (reset, step), (), ())
};

// ---- local objects behind the same interface --------------------------------------

/// A local object with Remote's async_call interface (one argument + token):
/// the call runs right away on the caller's thread, so the loop below runs
/// unchanged — and sequentially.
template <class T>
class Local {
public:
  explicit Local(std::shared_ptr<T> obj) : obj_(std::move(obj)) {}

  template <auto M, class Arg, class Token>
  auto async_call(Arg&& arg, Token&& token) const {
    using R = std::remove_cvref_t<std::invoke_result_t<decltype(M), T&, Arg>>;
    return asio::async_initiate<Token, void(std::exception_ptr, R)>(
        [obj = obj_](auto handler, std::remove_cvref_t<Arg> a) {
          std::exception_ptr e;
          R r{};
          try {
            r = ((*obj).*M)(a);
          } catch (...) {
            e = std::current_exception();
          }
          std::move(handler)(e, std::move(r));
        },
        token, std::forward<Arg>(arg));
  }

private:
  std::shared_ptr<T> obj_;
};

// ---- the rollout loop (identical for local and remote environments) ---------------------

struct Report {
  std::size_t steps = 0;
  double seconds = 0;
  std::size_t episodes = 0;
  double return_sum = 0;
  double checksum = 0; // of every observation: local and remote must agree
};

int policy(const Obs& o) { return 3.0 * o[2] + o[3] > 0 ? 1 : 0; } // push toward the falling side

template <class Handle>
asio::awaitable<Report> rollout(std::vector<Handle>& envs, int steps, int iters) {
  Report rep;
  const auto n = envs.size();
  // Reset all environments in parallel, seeds 0..n-1.
  auto obs = co_await async_gather<Obs>(
      n,
      [&](std::size_t i, auto cb) { envs[i].template async_call<&CartPole::reset>(std::uint64_t(i), std::move(cb)); },
      asio::use_awaitable);
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) {
    std::vector<std::vector<double>> rewards(n), dones(n);
    for (int t = 0; t < steps; ++t) {
      std::vector<int> actions(n);
      for (std::size_t i = 0; i < n; ++i) actions[i] = policy(obs[i]);
      auto res = co_await async_gather<Step>(
          n, [&](std::size_t i, auto cb) { envs[i].template async_call<&CartPole::step>(actions[i], std::move(cb)); },
          asio::use_awaitable);
      for (std::size_t i = 0; i < n; ++i) {
        obs[i] = res[i].obs;
        rewards[i].push_back(res[i].reward);
        dones[i].push_back(res[i].done ? 1.0 : 0.0);
        for (double v : obs[i]) rep.checksum += v;
        if (res[i].done) {
          ++rep.episodes;
          rep.return_sum += res[i].episode_return;
        }
      }
      rep.steps += n;
    }
    // The learner's share of a PPO iteration would start here: discounted
    // returns per environment (gamma 0.99), cut at episode ends.
    for (std::size_t i = 0; i < n; ++i) {
      double g = 0;
      for (int t = steps - 1; t >= 0; --t) g = rewards[i][t] + 0.99 * g * (1.0 - dones[i][t]);
      rep.checksum += g * 1e-9;
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  co_return rep;
}

// The io_context outlives the manager (see main): completions are posted to
// it from fiber's runtime thread, which must never find it destroyed.
template <class Handle>
Report run(asio::io_context& ctx, std::vector<Handle>& envs, int steps, int iters) {
  ctx.restart();
  auto fut = asio::co_spawn(ctx, rollout(envs, steps, iters), asio::use_future);
  ctx.run();
  return fut.get();
}

std::vector<Local<CartPole>> make_local(int n, double work_us) {
  std::vector<Local<CartPole>> envs;
  for (int i = 0; i < n; ++i) envs.emplace_back(std::make_shared<CartPole>(work_us));
  return envs;
}

std::vector<fiber::Remote<CartPole>> make_remote(fiber::RemoteManager<CartPole>& m, int n, double work_us) {
  std::vector<fiber::Remote<CartPole>> envs;
  for (int i = 0; i < n; ++i) envs.push_back(m.make(work_us));
  return envs;
}

void print(const char* what, const Report& r) {
  std::printf("%-34s %7zu steps in %6.3f s = %9.0f steps/s, %4zu episodes, mean return %6.1f\n", what, r.steps,
              r.seconds, double(r.steps) / r.seconds, r.episodes, r.episodes ? r.return_sum / double(r.episodes) : 0.0);
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  int n = 8, steps = 128, iters = 5;
  double work_us = 200;
  unsigned processes = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "remote_envs: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--envs") n = std::atoi(next());
    else if (a == "--processes") processes = unsigned(std::atoi(next()));
    else if (a == "--steps") steps = std::atoi(next());
    else if (a == "--iters") iters = std::atoi(next());
    else if (a == "--work-us") work_us = std::atof(next());
    else if (a == "--smoke") n = 2, steps = 20, iters = 2, work_us = 0, processes = 2;
    else {
      std::fprintf(stderr,
                   "usage: remote_envs [--envs N] [--processes P] [--steps T] [--iters K] [--work-us W] [--smoke]\n");
      return 2;
    }
  }
  if (n < 1 || steps < 1 || iters < 1) {
    std::fprintf(stderr, "remote_envs: --envs, --steps and --iters must be positive\n");
    return 2;
  }
  if (processes == 0) processes = std::min<unsigned>(unsigned(n), fiber::cpu_count());
  std::printf("remote_envs: %d CartPole-v1 envs, %d iterations x %d steps, +%.0f us of work per step, %u CPUs\n", n,
              iters, steps, work_us, fiber::cpu_count());

  asio::io_context ctx; // the loop's thread: this one

  auto local = make_local(n, work_us);
  auto lr = run(ctx, local, steps, iters);
  print("local objects (this thread):", lr);

  fiber::RemoteManager<CartPole> manager{{.processes = processes}};
  auto remote = make_remote(manager, n, work_us);
  auto rr = run(ctx, remote, steps, iters);
  char what[64];
  std::snprintf(what, sizeof what, "remote objects (%u processes):", processes);
  print(what, rr);

  const bool same = lr.checksum == rr.checksum && lr.episodes == rr.episodes;
  std::printf("same trajectories: %s; speed-up %.2fx\n", same ? "yes" : "NO", (lr.seconds / rr.seconds));
  return same ? 0 : 1;
}
