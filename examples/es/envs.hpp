// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file envs.hpp
/// Environments for the Evolution Strategies example: Gym's CartPole-v1 (pure
/// C++, for tests and quick runs) and a Gym Humanoid-v4-style task on MuJoCo
/// 2.2 with DeepMind's humanoid model. No fiber dependency.
///
/// Interface every environment offers (the rollout in es.hpp is a template
/// over it, so a new environment is one more class):
///   int obs_dim() const; int act_dim() const;
///   std::vector<float> act_low() const, act_high() const;   // [act_dim]
///   void reset(std::uint64_t seed, float* obs);              // obs: [obs_dim]
///   step_result step(float* act, float* obs);                // act: [act_dim], clipped in place
///   int max_steps() const;                                   // truncation (Gym's TimeLimit)

#include <mujoco/mujoco.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace es {

// ---------------------------------------------------------------------------
// Deterministic random numbers

/// SplitMix64 finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer.
/// Used as a counter-based generator, so every random quantity of a run is a
/// pure function of (seed, index) and never depends on which process made it.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Hash of a seed and up to three indices (order matters).
constexpr std::uint64_t hash_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0,
                                  std::uint64_t c = 0) noexcept {
  return mix64(mix64(mix64(mix64(seed) ^ a) ^ b) ^ c);
}

/// Small sequential generator (SplitMix64 stream) with uniform and normal draws.
struct rng {
  std::uint64_t state;
  explicit rng(std::uint64_t seed) : state{seed} {}
  std::uint64_t next() noexcept { return mix64(state++); }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return double(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Standard normal by Box–Muller (one of the pair; simplicity over speed here).
  double normal() noexcept {
    const double u1 = 1.0 - uniform(); // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

/// What one environment step returns.
struct step_result {
  double reward = 0;
  bool terminated = false; ///< the MDP ended (pole fell, humanoid fell); truncation is the caller's
};

// ---------------------------------------------------------------------------
// CartPole

/// Classic cart-pole balancing (Barto, Sutton & Anderson 1983, "Neuronlike
/// adaptive elements that can solve difficult learning control problems",
/// IEEE SMC 13(5)), with exactly the constants and explicit-Euler update of
/// Gym's `gym/envs/classic_control/cartpole.py` (CartPole-v1): g 9.8, cart
/// 1.0 kg, pole 0.1 kg, half-length 0.5 m, force ±10 N, tau 0.02 s; ends when
/// |x| > 2.4 or |theta| > 12°; reward 1 per step including the last; reset
/// state uniform in ±0.05; 500-step cap (v1's TimeLimit).
///
/// Observation [x, x_dot, theta, theta_dot] (float, as Gym returns float32);
/// the state is kept in double as Gym's numpy arrays are. The policy's single
/// continuous output is thresholded: action 1 (push right) iff output > 0.
class cartpole {
public:
  static constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1;
  static constexpr double total_mass = masspole + masscart;
  static constexpr double length = 0.5; // half the pole's length
  static constexpr double polemass_length = masspole * length;
  static constexpr double force_mag = 10.0, tau = 0.02;
  static constexpr double theta_threshold = 12 * 2 * M_PI / 360, x_threshold = 2.4;

  explicit cartpole(int max_steps = 500) : max_steps_{max_steps} {}

  int obs_dim() const { return 4; }
  int act_dim() const { return 1; }
  int max_steps() const { return max_steps_; }
  std::vector<float> act_low() const { return {-1.f}; }
  std::vector<float> act_high() const { return {1.f}; }

  void reset(std::uint64_t seed, float* obs) {
    rng r{seed};
    for (double& s : state) s = r.uniform(-0.05, 0.05);
    observe(obs);
  }

  /// Gym cartpole.py `step`: one Euler step of the cart-pole ODE.
  step_result step(float* act, float* obs) {
    const int action = act[0] > 0.f ? 1 : 0;
    auto& [x, x_dot, theta, theta_dot] = state;
    const double force = action == 1 ? force_mag : -force_mag;
    const double costheta = std::cos(theta), sintheta = std::sin(theta);
    const double temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass;
    const double thetaacc = (gravity * sintheta - costheta * temp) /
                            (length * (4.0 / 3.0 - masspole * costheta * costheta / total_mass));
    const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
    observe(obs);
    const bool terminated = x < -x_threshold || x > x_threshold || theta < -theta_threshold || theta > theta_threshold;
    return {1.0, terminated};
  }

  std::array<double, 4> state{}; ///< x [m], x_dot [m/s], theta [rad], theta_dot [rad/s]

private:
  void observe(float* obs) const {
    for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(state[i]);
  }
  int max_steps_;
};

// ---------------------------------------------------------------------------
// Humanoid

/// Default location of DeepMind's humanoid in Debian's libmujoco-samples.
inline const std::string default_humanoid_model = "/usr/share/mujoco/model/humanoid/humanoid.xml";

/// A MuJoCo model loaded once per process and shared read-only by every
/// environment (and thread) of that process: `mj_loadXML` parses and compiles
/// the XML (milliseconds), `mj_makeData` per environment is cheap.
inline std::shared_ptr<const mjModel> load_model(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const mjModel>> cache;
  std::lock_guard lock{mutex};
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  char error[1000] = "";
  mjModel* m = mj_loadXML(path.c_str(), nullptr, error, sizeof error);
  if (!m) throw std::runtime_error("cannot load MuJoCo model '" + path + "': " + error);
  std::shared_ptr<const mjModel> model{m, [](const mjModel* p) { mj_deleteModel(const_cast<mjModel*>(p)); }};
  cache.emplace(path, model);
  return model;
}

/// Gym Humanoid-v4-style locomotion task on DeepMind's humanoid model.
///
/// Model: `humanoid/humanoid.xml` from Debian's libmujoco-samples, i.e.
/// DeepMind's (Control Suite) humanoid — nq 28, nv 27, nu 21, 17 bodies incl.
/// the world, timestep 5 ms, ctrlrange ±1 with gears 20–120. This is NOT
/// Gym's `humanoid.xml` (nq 24, nv 23, nu 17, timestep 3 ms, ctrlrange ±0.4),
/// so returns and observation sizes are not comparable with published Gym
/// numbers: the observation here has 26+27+170+102+27+102 = 454 entries
/// (Gym's: 376), one control step lasts 5 × 5 ms = 25 ms (Gym's: 15 ms).
///
/// Task: the constants of Gymnasium's `gymnasium/envs/mujoco/humanoid_v4.py`
/// (HumanoidEnv, v4) and its MujocoEnv base:
///  - frame_skip 5; after the substeps `mj_rnePostConstraint` fills cacc,
///    cfrc_int and cfrc_ext (MuJoCo ≥ 2.0 computes them only on demand);
///  - observation = qpos[2:] (excluding the x, y of the root), qvel, cinert,
///    cvel, qfrc_actuator, cfrc_ext, all flattened, every body incl. the world;
///  - reward = forward_reward_weight 1.25 × (x of the centre of mass after −
///    before) / dt + healthy_reward 5 − ctrl_cost_weight 0.1 × Σ ctrl², with
///    the centre of mass the body-mass-weighted mean of `xipos`, dt =
///    frame_skip × timestep; v4 adds no contact cost to the reward;
///  - terminated when the torso height qpos[2] leaves healthy_z_range
///    (1.0, 2.0) (the last step still earns the healthy bonus, as in v4);
///    truncated after 1000 steps (the registered TimeLimit);
///  - reset: qpos0 and zero velocity plus uniform noise ±reset_noise_scale
///    0.01 on every qpos and qvel entry, then `mj_forward`.
/// Actions are clipped to the actuators' ctrlrange before they are applied
/// and before the control cost is computed.
///
/// Two action spaces (`humanoid_action`):
///  - `torque` (Gym's): the 21 actions are the motor commands `ctrl` ∈ ±1
///    (torque = gear × ctrl), held for the 5 substeps;
///  - `pd`: the actions a ∈ ±1 are joint targets q* = qpos0 + range · a
///    (clipped to the joint's range, rad); before every 5-ms substep a PD
///    controller sets ctrl = clip(kp (q* − q) − kd q̇, ±1) on each actuated
///    joint. The policy still acts every 25 ms, the feedback runs at 200 Hz.
///    The control cost is the substeps' mean of Σ ctrl². Source: Peng & van
///    de Panne 2017, "Learning Locomotion Skills Using DeepRL: Does the
///    Choice of Action Space Matter?" (SCA 2017, arXiv 1611.01055), whose
///    PD-target actions learn faster and more robustly than torques.
enum class action_space : std::uint8_t { torque, pd };

/// Action space of the humanoid and the PD controller's gains (pd only).
struct humanoid_action {
  action_space space = action_space::torque;
  float kp = 2.0f;    ///< ctrl per rad of target error (torque = gear × ctrl)
  float kd = 0.1f;    ///< ctrl per rad/s of joint velocity
  float range = 1.0f; ///< rad of target per unit of action
  friend bool operator==(const humanoid_action&, const humanoid_action&) = default;
};

class humanoid {
public:
  static constexpr int frame_skip = 5;
  static constexpr double forward_reward_weight = 1.25, healthy_reward = 5.0;
  static constexpr double ctrl_cost_weight = 0.1, reset_noise_scale = 1e-2;
  static constexpr double healthy_z_min = 1.0, healthy_z_max = 2.0;

  explicit humanoid(const std::string& model_path = default_humanoid_model, int max_steps = 1000,
                    humanoid_action action = {})
      : model_{load_model(model_path)}, data_{mj_makeData(model_.get())}, max_steps_{max_steps}, action_{action} {
    if (!data_) throw std::runtime_error("mj_makeData failed for " + model_path);
    const mjModel* m = model_.get();
    if (m->nq != 28 || m->nv != 27 || m->nu != 21)
      throw std::runtime_error("expected DeepMind's humanoid (nq 28, nv 27, nu 21) in " + model_path + ", got nq " +
                               std::to_string(m->nq) + ", nv " + std::to_string(m->nv) + ", nu " +
                               std::to_string(m->nu));
    for (int b = 0; b < m->nbody; ++b) total_mass_ += m->body_mass[b];
    for (int i = 0; i < m->nu; ++i) {
      const bool limited = m->actuator_ctrllimited[i];
      low_.push_back(limited ? float(m->actuator_ctrlrange[2 * i]) : -INFINITY);
      high_.push_back(limited ? float(m->actuator_ctrlrange[2 * i + 1]) : INFINITY);
      if (m->actuator_trntype[i] != mjTRN_JOINT)
        throw std::runtime_error("humanoid: actuator " + std::to_string(i) + " does not drive a joint");
      const int j = m->actuator_trnid[2 * i];
      joint_.push_back({m->jnt_qposadr[j], m->jnt_dofadr[j], m->qpos0[m->jnt_qposadr[j]],
                        m->jnt_limited[j] ? m->jnt_range[2 * j] : -INFINITY,
                        m->jnt_limited[j] ? m->jnt_range[2 * j + 1] : INFINITY});
    }
    ctrl_low_ = low_;
    ctrl_high_ = high_;
    if (action_.space == action_space::pd) { // PD actions are targets in ±1
      low_.assign(m->nu, -1.f);
      high_.assign(m->nu, 1.f);
    }
  }
  humanoid(const humanoid&) = delete;
  humanoid& operator=(const humanoid&) = delete;
  ~humanoid() { mj_deleteData(data_); }

  const mjModel* model() const { return model_.get(); }
  mjData* data() { return data_; }
  int obs_dim() const {
    const mjModel* m = model_.get();
    return (m->nq - 2) + m->nv + 10 * m->nbody + 6 * m->nbody + m->nv + 6 * m->nbody;
  }
  int act_dim() const { return model_->nu; }
  int max_steps() const { return max_steps_; }
  const humanoid_action& action() const { return action_; }
  std::vector<float> act_low() const { return low_; }
  std::vector<float> act_high() const { return high_; }
  /// Seconds of simulated time per environment step (25 ms here).
  double dt() const { return frame_skip * model_->opt.timestep; }

  void reset(std::uint64_t seed, float* obs) {
    const mjModel* m = model_.get();
    mj_resetData(m, data_); // also clears warm starts: a rollout never depends on the previous one
    rng r{seed};
    for (int i = 0; i < m->nq; ++i) data_->qpos[i] = m->qpos0[i] + r.uniform(-reset_noise_scale, reset_noise_scale);
    for (int i = 0; i < m->nv; ++i) data_->qvel[i] = r.uniform(-reset_noise_scale, reset_noise_scale);
    mj_forward(m, data_);
    observe(obs);
  }

  step_result step(float* act, float* obs) {
    const mjModel* m = model_.get();
    double ctrl_sq = 0;
    for (int i = 0; i < m->nu; ++i) act[i] = std::fmin(std::fmax(act[i], low_[i]), high_[i]);
    const double x_before = com_x();
    if (action_.space == action_space::torque) {
      for (int i = 0; i < m->nu; ++i) {
        data_->ctrl[i] = act[i];
        ctrl_sq += double(act[i]) * act[i];
      }
      for (int k = 0; k < frame_skip; ++k) mj_step(m, data_);
    } else {
      for (int k = 0; k < frame_skip; ++k) {
        for (int i = 0; i < m->nu; ++i) {
          const joint_ref& j = joint_[i];
          const double target = std::fmin(std::fmax(j.q0 + double(action_.range) * act[i], j.lo), j.hi);
          const double c = action_.kp * (target - data_->qpos[j.qpos]) - action_.kd * data_->qvel[j.dof];
          data_->ctrl[i] = std::fmin(std::fmax(c, double(ctrl_low_[i])), double(ctrl_high_[i]));
          ctrl_sq += data_->ctrl[i] * data_->ctrl[i] / frame_skip;
        }
        mj_step(m, data_);
      }
    }
    mj_rnePostConstraint(m, data_);
    const double x_after = com_x();
    observe(obs);
    const double z = data_->qpos[2];
    const bool healthy = z > healthy_z_min && z < healthy_z_max;
    const double reward = forward_reward_weight * (x_after - x_before) / dt() + healthy_reward -
                          ctrl_cost_weight * ctrl_sq;
    return {reward, !healthy};
  }

  /// x of the centre of mass: Σ body_mass·xipos / Σ body_mass (Gym's mass_center).
  double com_x() const {
    const mjModel* m = model_.get();
    double s = 0;
    for (int b = 0; b < m->nbody; ++b) s += m->body_mass[b] * data_->xipos[3 * b];
    return s / total_mass_;
  }

private:
  void observe(float* obs) const {
    const mjModel* m = model_.get();
    float* o = obs;
    auto put = [&](const mjtNum* src, int n) {
      for (int i = 0; i < n; ++i) *o++ = static_cast<float>(src[i]);
    };
    put(data_->qpos + 2, m->nq - 2);
    put(data_->qvel, m->nv);
    put(data_->cinert, 10 * m->nbody);
    put(data_->cvel, 6 * m->nbody);
    put(data_->qfrc_actuator, m->nv);
    put(data_->cfrc_ext, 6 * m->nbody);
  }

  struct joint_ref {
    int qpos, dof;     // addresses of the actuated joint
    double q0, lo, hi; // rest angle and range [rad]
  };

  std::shared_ptr<const mjModel> model_;
  mjData* data_;
  int max_steps_;
  humanoid_action action_;
  double total_mass_ = 0;
  std::vector<float> low_, high_;           // action bounds
  std::vector<float> ctrl_low_, ctrl_high_; // actuators' ctrlrange
  std::vector<joint_ref> joint_;
};

// ---------------------------------------------------------------------------
// Arm reaching (a cheap MuJoCo model)

/// Default location of DeepMind's 2-link, 6-muscle arm in Debian's libmujoco-samples.
inline const std::string default_arm_model = "/usr/share/mujoco/model/tendon_arm/arm26.xml";

/// Reaching with a muscle-driven arm: a cheap MuJoCo environment (a few
/// microseconds a step, against the humanoid's ~0.1 ms), for measuring what
/// stepping costs besides the physics.
///
/// Model: `tendon_arm/arm26.xml` of Debian's libmujoco-samples (2 hinge
/// joints, 6 muscles on spatial tendons, timestep 5 ms). Task, in the manner
/// of Gym's Reacher: a target drawn uniformly in the arm's reach at reset;
/// reward = − distance (m) from the forearm's tip to the target − 0.01 Σ
/// ctrl²; 2 substeps (10 ms) per step; truncated after 200 steps; never
/// terminated. Observation (14): qpos, qvel, the 6 muscle activations, tip
/// (x, y), target (x, y). Actions: the 6 muscle excitations ∈ [0, 1].
class arm_reach {
public:
  static constexpr int frame_skip = 2;

  explicit arm_reach(const std::string& model_path = default_arm_model, int max_steps = 200)
      : model_{load_model(model_path)}, data_{mj_makeData(model_.get())}, max_steps_{max_steps} {
    if (!data_) throw std::runtime_error("mj_makeData failed for " + model_path);
    const mjModel* m = model_.get();
    if (m->nq != 2 || m->nu != 6 || m->na != 6)
      throw std::runtime_error("expected the 2-link, 6-muscle arm (nq 2, nu 6, na 6) in " + model_path);
  }
  arm_reach(const arm_reach&) = delete;
  arm_reach& operator=(const arm_reach&) = delete;
  ~arm_reach() { mj_deleteData(data_); }

  int obs_dim() const { return 14; }
  int act_dim() const { return 6; }
  int max_steps() const { return max_steps_; }
  std::vector<float> act_low() const { return std::vector<float>(6, 0.f); }
  std::vector<float> act_high() const { return std::vector<float>(6, 1.f); }

  void reset(std::uint64_t seed, float* obs) {
    const mjModel* m = model_.get();
    mj_resetData(m, data_);
    rng r{seed};
    for (int i = 0; i < m->nq; ++i) data_->qpos[i] = r.uniform(0.1, 1.9); // inside the joints' 0..120°
    const double reach = r.uniform(0.3, 0.95), angle = r.uniform(0.0, M_PI);
    target_ = {reach * std::cos(angle), reach * std::sin(angle)};
    mj_forward(m, data_);
    observe(obs);
  }

  step_result step(float* act, float* obs) {
    const mjModel* m = model_.get();
    double ctrl_sq = 0;
    for (int i = 0; i < m->nu; ++i) {
      act[i] = std::fmin(std::fmax(act[i], 0.f), 1.f);
      data_->ctrl[i] = act[i];
      ctrl_sq += double(act[i]) * act[i];
    }
    for (int k = 0; k < frame_skip; ++k) mj_step(m, data_);
    observe(obs);
    const auto [x, y] = tip();
    return {-std::hypot(x - target_[0], y - target_[1]) - 0.01 * ctrl_sq, false};
  }

private:
  // The forearm's tip: 0.5 m along the last body's x axis.
  std::array<double, 2> tip() const {
    const int b = model_->nbody - 1;
    const mjtNum* p = data_->xpos + 3 * b;
    const mjtNum* r = data_->xmat + 9 * b;
    return {p[0] + 0.5 * r[0], p[1] + 0.5 * r[3]};
  }
  void observe(float* obs) const {
    const mjModel* m = model_.get();
    float* o = obs;
    for (int i = 0; i < m->nq; ++i) *o++ = float(data_->qpos[i]);
    for (int i = 0; i < m->nv; ++i) *o++ = float(data_->qvel[i]);
    for (int i = 0; i < m->na; ++i) *o++ = float(data_->act[i]);
    const auto [x, y] = tip();
    *o++ = float(x);
    *o++ = float(y);
    *o++ = float(target_[0]);
    *o++ = float(target_[1]);
  }

  std::shared_ptr<const mjModel> model_;
  mjData* data_;
  int max_steps_;
  std::array<double, 2> target_{};
};

} // namespace es
