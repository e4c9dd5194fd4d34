// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file policy.hpp
/// Deterministic policies with all parameters in one flat `std::vector<float>`
/// (what ES perturbs and what travels in a Pool task), plus the observation
/// normalisation statistics. No fiber dependency.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "envs.hpp"

namespace es {

enum class policy_kind : std::uint8_t { linear, mlp };

/// Shape of a policy. An aggregate of serializable members: it travels in
/// every task and is stored in policy.bin.
struct policy_spec {
  policy_kind kind = policy_kind::mlp;
  std::int32_t obs_dim = 0;
  std::int32_t act_dim = 0;
  std::vector<std::int32_t> hidden; ///< hidden widths (mlp only), e.g. {64, 64}
  std::vector<float> act_low;       ///< [act_dim] actuator ctrlrange: outputs are clipped to it
  std::vector<float> act_high;      ///< [act_dim]
  /// The policy reads observation entries [0, inputs) (0: all obs_dim). The
  /// humanoid's first 53 are qpos[2:] and qvel, the proprioceptive state.
  std::int32_t inputs = 0;
};

/// Layer widths from input to output: obs_dim, hidden..., act_dim.
inline std::vector<std::int32_t> layer_sizes(const policy_spec& s) {
  std::vector<std::int32_t> sizes{s.inputs > 0 ? std::min(s.inputs, s.obs_dim) : s.obs_dim};
  if (s.kind == policy_kind::mlp) sizes.insert(sizes.end(), s.hidden.begin(), s.hidden.end());
  sizes.push_back(s.act_dim);
  return sizes;
}

/// Number of parameters: Σ over layers of in·out weights + out biases.
/// Layout per layer: W as [in][out] row-major (the inner loop of the forward
/// pass runs over `out` contiguously, which the compiler vectorises), then b [out].
inline std::size_t num_params(const policy_spec& s) {
  const auto sizes = layer_sizes(s);
  std::size_t n = 0;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) n += std::size_t(sizes[l]) * sizes[l + 1] + sizes[l + 1];
  return n;
}

/// Initial parameters, a pure function of the seed. Linear: zeros (as in ARS,
/// Mania et al. 2018). MLP: OpenAI es's `normc_initializer` (each unit's
/// incoming weight vector drawn normal and scaled to norm 1 for hidden layers,
/// 0.01 for the output layer, so initial actions are near zero), biases zero.
inline std::vector<float> init_params(const policy_spec& s, std::uint64_t seed) {
  std::vector<float> theta(num_params(s), 0.f);
  if (s.kind == policy_kind::linear) return theta;
  const auto sizes = layer_sizes(s);
  rng r{hash_seed(seed, 0x1a1f)};
  std::size_t at = 0;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    const int in = sizes[l], out = sizes[l + 1];
    const double norm = l + 2 == sizes.size() ? 0.01 : 1.0;
    std::vector<double> w(std::size_t(in) * out);
    for (double& x : w) x = r.normal();
    for (int j = 0; j < out; ++j) {
      double sq = 0;
      for (int i = 0; i < in; ++i) sq += w[std::size_t(i) * out + j] * w[std::size_t(i) * out + j];
      const double scale = norm / std::sqrt(sq);
      for (int i = 0; i < in; ++i) theta[at + std::size_t(i) * out + j] = float(w[std::size_t(i) * out + j] * scale);
    }
    at += std::size_t(in) * out + out; // biases stay zero
  }
  return theta;
}

/// Scratch buffers for `policy_act`, reused across steps (no allocation per step).
struct policy_workspace {
  std::vector<float> a, b;
};

/// Forward pass: action[act_dim] = policy(obs[obs_dim]); tanh between layers,
/// linear output clipped to [act_low, act_high]. `theta` has num_params(s) entries.
inline void policy_act(const policy_spec& s, const float* theta, const float* obs, float* action,
                       policy_workspace& ws) {
  const auto sizes = layer_sizes(s);
  const std::size_t max_width = *std::max_element(sizes.begin(), sizes.end());
  ws.a.resize(max_width);
  ws.b.resize(max_width);
  const float* x = obs;
  const float* p = theta;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    const int in = sizes[l], out = sizes[l + 1];
    const bool last = l + 2 == sizes.size();
    float* y = last ? action : ws.b.data();
    const float* bias = p + std::size_t(in) * out;
    std::copy(bias, bias + out, y);
    for (int i = 0; i < in; ++i) {
      const float xi = x[i];
      const float* row = p + std::size_t(i) * out;
      for (int j = 0; j < out; ++j) y[j] += xi * row[j];
    }
    p = bias + out;
    if (!last) {
      for (int j = 0; j < out; ++j) y[j] = std::tanh(y[j]);
      std::swap(ws.a, ws.b);
      x = ws.a.data();
    }
  }
  for (int j = 0; j < s.act_dim; ++j) action[j] = std::clamp(action[j], s.act_low[j], s.act_high[j]);
}

// ---------------------------------------------------------------------------
// Observation normalisation

/// Running observation statistics as in OpenAI es (`RunningStat`): count, sum
/// and sum of squares per entry, in double. Merging is a plain addition, so
/// stats gathered by many workers combine exactly as one pass would (up to
/// the order of the additions, which the master fixes: pair index order).
struct obs_stats {
  double count = 0;
  std::vector<double> sum;   ///< [obs_dim]
  std::vector<double> sumsq; ///< [obs_dim]

  bool empty() const { return count == 0; }
  void push(std::span<const float> obs) {
    if (sum.empty()) sum.assign(obs.size(), 0.0), sumsq.assign(obs.size(), 0.0);
    for (std::size_t i = 0; i < obs.size(); ++i) sum[i] += obs[i], sumsq[i] += double(obs[i]) * obs[i];
    count += 1;
  }
  void merge(const obs_stats& o) {
    if (o.empty()) return;
    if (sum.empty()) sum.assign(o.sum.size(), 0.0), sumsq.assign(o.sum.size(), 0.0);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += o.sum[i], sumsq[i] += o.sumsq[i];
    count += o.count;
  }
};

/// The normaliser a rollout applies: z = clip((obs − mean) / std, ±clip).
struct obs_normalizer {
  std::vector<float> mean; ///< [obs_dim]
  std::vector<float> std;  ///< [obs_dim]
};

/// OpenAI es: RunningStat starts with count = sumsq = eps = 1e-2 (mean 0, std 1)
/// and std = sqrt(max(var, 1e-2)), i.e. at least 0.1, so constant entries
/// (e.g. the world body's cinert) do not blow up.
inline obs_normalizer make_normalizer(const obs_stats& s, int obs_dim, double eps = 1e-2) {
  obs_normalizer n{std::vector<float>(obs_dim, 0.f), std::vector<float>(obs_dim, 1.f)};
  const double count = s.count + eps;
  for (int i = 0; i < obs_dim; ++i) {
    const double sum = s.empty() ? 0.0 : s.sum[i];
    const double sumsq = (s.empty() ? 0.0 : s.sumsq[i]) + eps;
    const double mean = sum / count;
    n.mean[i] = float(mean);
    n.std[i] = float(std::sqrt(std::max(sumsq / count - mean * mean, 1e-2)));
  }
  return n;
}

} // namespace es
