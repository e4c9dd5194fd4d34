// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file env_actors.hpp
/// MuJoCo environments as fiber actors, and the learner's two stepping loops
/// written once for any handle with `async_call<&T::m>(arg, token)`: remote
/// objects (`fiber::Remote<env_batch<Env>>`) or in-process ones on a thread
/// pool (`pooled<T>`: EnvPool's design, Weng et al. 2022, arXiv 2206.10558).
///  - `env_batch<Env>`: K environments stepped in one call (EnvPool's batch),
///    resetting themselves when an episode ends (Gym's vector environments);
///  - `step_sync`: every unit steps, the learner awaits all, acts, repeats;
///  - `step_async`: the learner acts on the first M units that return while
///    the others keep simulating (EnvPool's send/recv with batch_size M).
/// Each environment's trajectory depends only on its seed and its own
/// observations, so every loop, local or remote, gives the same trajectories.

#include "envs.hpp"

#include "../async_gather.hpp"

#include <boost/describe/class.hpp>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/channel.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/thread_pool.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace es {

/// One step of K environments: what env_batch::step returns.
struct batch_step {
  std::vector<float> obs;         ///< [K × obs_dim]: next observations (the reset one where done)
  std::vector<float> reward;      ///< [K]
  std::vector<std::uint8_t> done; ///< [K]: 1 where an episode ended at this step (terminated or truncated)
};

/// K environments of type Env in one object: a remote object of fiber (an
/// actor: its calls run one at a time) or a local one. Environment i's e-th
/// episode starts from seed hash_seed(seed, i, e).
template <class Env>
class env_batch {
public:
  env_batch() : env_batch(1) {}
  explicit env_batch(int k) {
    for (int i = 0; i < k; ++i) envs_.push_back(std::make_unique<Env>());
    t_.assign(std::size_t(k), 0);
    episode_.assign(std::size_t(k), 0);
  }

  /// Resets every environment (episode 0 of `seed`); returns [K × obs_dim].
  std::vector<float> reset(std::uint64_t seed) {
    seed_ = seed;
    std::vector<float> obs(envs_.size() * std::size_t(obs_dim()));
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      t_[i] = 0;
      episode_[i] = 0;
      envs_[i]->reset(hash_seed(seed_, i, 0), obs.data() + i * std::size_t(obs_dim()));
    }
    return obs;
  }

  /// Steps every environment with its actions ([K × act_dim], clipped to
  /// the action space); an environment whose episode ends resets itself.
  batch_step step(std::vector<float> actions) {
    const auto k = envs_.size(), od = std::size_t(obs_dim()), ad = std::size_t(act_dim());
    if (actions.size() != k * ad) throw std::invalid_argument("env_batch::step: expected K x act_dim actions");
    batch_step out{std::vector<float>(k * od), std::vector<float>(k), std::vector<std::uint8_t>(k)};
    for (std::size_t i = 0; i < k; ++i) {
      float* obs = out.obs.data() + i * od;
      const auto r = envs_[i]->step(actions.data() + i * ad, obs);
      out.reward[i] = float(r.reward);
      const bool done = r.terminated || ++t_[i] >= envs_[i]->max_steps();
      out.done[i] = done;
      if (done) {
        t_[i] = 0;
        envs_[i]->reset(hash_seed(seed_, i, ++episode_[i]), obs);
      }
    }
    return out;
  }

  int obs_dim() const { return envs_.front()->obs_dim(); }
  int act_dim() const { return envs_.front()->act_dim(); }

  BOOST_DESCRIBE_CLASS(env_batch, (), (reset, step), (), ())

private:
  std::vector<std::unique_ptr<Env>> envs_;
  std::vector<int> t_;
  std::vector<std::uint64_t> episode_;
  std::uint64_t seed_ = 0;
};

/// The learner's policy: a fixed random linear map squashed into the action
/// bounds, a = low + (high − low)(tanh(W o) + 1)/2 — the stepping is the point.
class linear_policy {
public:
  template <class Env>
  static linear_policy for_env(std::uint64_t seed) {
    Env e;
    return linear_policy(e.obs_dim(), e.act_dim(), e.act_low(), e.act_high(), seed);
  }
  linear_policy(int obs_dim, int act_dim, std::vector<float> low, std::vector<float> high, std::uint64_t seed)
      : od_(obs_dim),
        ad_(act_dim),
        low_(std::move(low)),
        high_(std::move(high)),
        w_(std::size_t(obs_dim) * std::size_t(act_dim)) {
    rng r{seed};
    const double scale = 0.5 / std::sqrt(double(obs_dim));
    for (auto& x : w_) x = float(scale * r.normal());
  }
  int obs_dim() const { return od_; }
  int act_dim() const { return ad_; }

  /// Actions of K environments ([K × act_dim]) from their observations ([K × obs_dim]).
  std::vector<float> act(const std::vector<float>& obs) const {
    const std::size_t k = obs.size() / std::size_t(od_);
    std::vector<float> a(k * std::size_t(ad_));
    for (std::size_t e = 0; e < k; ++e)
      for (int j = 0; j < ad_; ++j) {
        float z = 0;
        const float* o = obs.data() + e * std::size_t(od_);
        const float* w = w_.data() + std::size_t(j) * std::size_t(od_);
        for (int i = 0; i < od_; ++i) z += w[i] * o[i];
        a[e * std::size_t(ad_) + std::size_t(j)] =
            low_[std::size_t(j)] + (high_[std::size_t(j)] - low_[std::size_t(j)]) * (std::tanh(z) + 1.f) / 2.f;
      }
    return a;
  }

private:
  int od_, ad_;
  std::vector<float> low_, high_, w_;
};

/// A local object behind the interface of fiber::Remote's async_call (one
/// argument + completion token): the call runs on a thread pool, the handler
/// on its associated executor. With a pool of C threads this is EnvPool's
/// design — the control that remote stepping is measured against.
template <class T>
class pooled {
public:
  pooled(asio::thread_pool& pool, std::shared_ptr<T> obj) : pool_(&pool), obj_(std::move(obj)) {}

  template <auto M, class Arg, class Token>
  auto async_call(Arg&& arg, Token&& token) const {
    using R = std::remove_cvref_t<std::invoke_result_t<decltype(M), T&, std::remove_cvref_t<Arg>>>;
    return asio::async_initiate<Token, void(std::exception_ptr, R)>(
        [obj = obj_, pool = pool_](auto handler, std::remove_cvref_t<Arg> a) {
          auto work = asio::make_work_guard(asio::get_associated_executor(handler));
          asio::post(*pool, [obj, a = std::move(a), h = std::move(handler), work = std::move(work)]() mutable {
            std::exception_ptr e;
            R r{};
            try {
              r = ((*obj).*M)(std::move(a));
            } catch (...) {
              e = std::current_exception();
            }
            auto ex = work.get_executor();
            asio::dispatch(ex, [h = std::move(h), e, r = std::move(r)]() mutable { std::move(h)(e, std::move(r)); });
          });
        },
        token, std::forward<Arg>(arg));
  }

private:
  asio::thread_pool* pool_;
  std::shared_ptr<T> obj_;
};

/// What a stepping loop did. `checksum[g]` sums environment g's
/// observations and rewards over its trajectory (g = unit × K + i): equal
/// checksums, equal trajectories. `failed[u]`: why unit u stopped early
/// (e.g. fiber::worker_lost: its process died), else null.
struct rollout_stats {
  std::size_t steps = 0; ///< environment steps
  double seconds = 0;
  std::size_t episodes = 0;
  double reward_sum = 0;
  std::vector<double> checksum;
  std::vector<std::exception_ptr> failed;
  double steps_per_second() const { return seconds > 0 ? double(steps) / seconds : 0; }
};

namespace detail {
// Records unit u's step (or reset) result in `st`.
inline void record(rollout_stats& st, std::size_t u, std::size_t k, std::size_t od, const batch_step& r) {
  for (std::size_t i = 0; i < k; ++i) {
    double s = r.reward[i];
    for (std::size_t j = 0; j < od; ++j) s += r.obs[i * od + j];
    st.checksum[u * k + i] += s;
    st.reward_sum += r.reward[i];
    st.episodes += r.done[i];
  }
  st.steps += k;
}

// Sends a synchronous round's step to a unit, its callback `f` run where
// that is cheapest. A Remote with a reply line: on the learner's executor,
// so fiber reads the reply on the learner's thread and its runtime thread is
// not woken. Otherwise (a pooled object, a Remote without a line): where
// the reply arrives, the round's last posting to the learner: one wake a
// round, as EnvPool's recv (docs/RATIONALE.md, "The third wake").
template <class Env, class Handle, class Executor, class F>
void send_step(const Handle& h, std::vector<float> acts, const Executor& ex, F f) {
  if constexpr (requires { h.has_reply_line(); })
    if (h.has_reply_line())
      return h.template async_call<&env_batch<Env>::step>(std::move(acts), asio::bind_executor(ex, std::move(f)));
  h.template async_call<&env_batch<Env>::step>(std::move(acts), std::move(f));
}

// Resets every unit (unit u with seed + u); the units that fail are marked.
template <class Env, class Handle>
asio::awaitable<std::vector<std::vector<float>>> reset_all(std::vector<Handle>& units, std::uint64_t seed,
                                                           rollout_stats& st) {
  std::vector<std::exception_ptr> errors(units.size());
  auto obs = co_await async_gather<std::vector<float>>(
      units.size(),
      [&](std::size_t u, auto cb) {
        units[u].template async_call<&env_batch<Env>::reset>(
            seed + u, [cb = std::move(cb), &errors, u](std::exception_ptr e, std::vector<float> o) mutable {
              errors[u] = e;
              cb(nullptr, std::move(o));
            });
      },
      asio::use_awaitable);
  st.failed = std::move(errors);
  co_return obs;
}
} // namespace detail

/// Synchronous stepping: `steps` rounds in which every unit (K environments
/// each) steps once and the learner awaits all before acting again. A unit
/// whose call fails stops (its error in `failed`); the others go on.
template <class Env, class Handle>
asio::awaitable<rollout_stats> step_sync(std::vector<Handle>& units, std::size_t k, int steps, const linear_policy& pi,
                                         std::uint64_t seed) {
  rollout_stats st;
  st.checksum.assign(units.size() * k, 0.0);
  auto obs = co_await detail::reset_all<Env>(units, seed, st);
  auto ex = co_await asio::this_coro::executor;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < steps; ++t) {
    std::vector<std::vector<float>> acts(units.size());
    for (std::size_t u = 0; u < units.size(); ++u)
      if (!st.failed[u]) acts[u] = pi.act(obs[u]);
    auto res = co_await async_gather<batch_step>(
        units.size(),
        [&](std::size_t u, auto cb) {
          if (st.failed[u]) return cb(nullptr, batch_step{});
          detail::send_step<Env>(units[u], std::move(acts[u]), ex,
                                 [cb = std::move(cb), &st, u](std::exception_ptr e, batch_step r) mutable {
                                   if (e) st.failed[u] = e;
                                   cb(nullptr, std::move(r));
                                 });
        },
        asio::use_awaitable);
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (st.failed[u]) continue;
      detail::record(st, u, k, std::size_t(pi.obs_dim()), res[u]);
      obs[u] = std::move(res[u].obs);
    }
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  co_return st;
}

/// Asynchronous stepping (EnvPool's send/recv): every unit is sent its
/// actions; the learner waits for the first `m` units that return, acts for
/// them alone and sends again, while the others keep simulating. Each unit
/// steps exactly `steps` times (so trajectories equal step_sync's). A unit
/// whose call fails stops (its error in `failed`); the others go on.
template <class Env, class Handle>
asio::awaitable<rollout_stats> step_async(std::vector<Handle>& units, std::size_t k, int steps, std::size_t m,
                                          const linear_policy& pi, std::uint64_t seed) {
  rollout_stats st;
  st.checksum.assign(units.size() * k, 0.0);
  auto obs = co_await detail::reset_all<Env>(units, seed, st);
  auto ex = co_await asio::this_coro::executor;
  // Completions run on this coroutine's executor: one thread, no locks.
  asio::experimental::channel<void(asio::error_code, std::size_t)> returned(ex, units.size());
  std::vector<batch_step> res(units.size());
  std::vector<int> left(units.size(), steps);
  std::size_t in_flight = 0;
  auto send = [&](std::size_t u) {
    ++in_flight;
    units[u].template async_call<&env_batch<Env>::step>(
        pi.act(obs[u]), asio::bind_executor(ex, [&, u](std::exception_ptr e, batch_step r) {
          if (e) st.failed[u] = e;
          res[u] = std::move(r);
          returned.try_send(asio::error_code{}, u);
        }));
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t u = 0; u < units.size(); ++u)
    if (!st.failed[u] && steps > 0) send(u);
  while (in_flight > 0) {
    std::vector<std::size_t> batch;
    for (std::size_t n = std::min(m, in_flight); batch.size() < n;)
      batch.push_back(co_await returned.async_receive(asio::use_awaitable));
    in_flight -= batch.size();
    for (auto u : batch) {
      if (st.failed[u]) continue;
      detail::record(st, u, k, std::size_t(pi.obs_dim()), res[u]);
      obs[u] = std::move(res[u].obs);
      if (--left[u] > 0) send(u);
    }
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  co_return st;
}

/// Runs a stepping loop to its end on this thread, on an io_context of its
/// own, and returns what it did: `run_here(step_sync<Env>(units, ...))`.
/// Every call the loop makes has completed when it returns.
template <class Awaitable>
rollout_stats run_here(Awaitable loop) {
  asio::io_context ctx;
  auto fut = asio::co_spawn(ctx, std::move(loop), asio::use_future);
  ctx.run();
  return fut.get();
}

} // namespace es
