// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/run_identity.hpp
/// Who this process is in its run: the run's secret, its name, its binary
/// and the proofs it presents in handshakes (handshake_identity).

#include <fiber/backend/detail/environment.hpp>
#include <fiber/detail/build_id.hpp>
#include <fiber/detail/handshake_session.hpp>
#include <fiber/detail/worker_env.hpp>
#include <fiber/error.hpp>
#include <fiber/target.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// This process's identity in its run. A master draws the run's secret; a
/// worker takes its master's (become_worker). Written before the runtime
/// serves anything, read on any thread after.
class run_identity {
public:
  /// A master's identity, or a worker's until become_worker: this
  /// executable, its build id, and a fresh secret unless it is a worker.
  run_identity() : build_id_(detail::build_id()), exe_(self_exe_path()), argv_{exe_} {
    if (!worker_environment().is_worker()) secret_ = to_hex(random_nonce());
  }

  /// The run's secret (hex).
  const std::string& secret() const { return secret_; }
  /// This executable's path (/proc/self/exe resolved at start).
  const std::string& executable() const { return exe_; }
  bool is_worker() const { return is_worker_; }
  /// "master", or the name a worker was started with.
  const std::string& name() const { return name_; }
  const std::string& build_id() const { return build_id_; }
  /// The arguments workers are started with (argv[0] replaced by executable()).
  std::vector<std::string>& argv() { return argv_; }
  /// The hash of the target registry, salted for a worker told to (tests of
  /// mismatched binaries).
  std::uint64_t registry_hash() const {
    auto h = registry::instance().hash();
    if (is_worker_)
      if (const auto& salt = worker_environment().registry_salt; !salt.empty()) h = fnv1a(salt.c_str(), h);
    return h;
  }
  /// What this process proves and compares in handshakes.
  handshake_identity handshake() const { return {secret_, build_id_, registry_hash(), name_}; }

  /// Becomes worker `name` of the run whose secret is `secret`; the nonce its
  /// master issued at its spawn, if any, is kept for its first link.
  void become_worker(std::string name, std::string secret) {
    is_worker_ = true;
    name_ = std::move(name);
    secret_ = std::move(secret);
    const auto& env = worker_environment();
    if (nonce_t v{}; !env.worker_nonce.empty() && from_hex(env.worker_nonce, v)) own_nonce_ = v;
  }
  /// The nonce issued at spawn, once: only the first link may use it.
  std::optional<nonce_t> take_own_nonce() { return std::exchange(own_nonce_, std::nullopt); }

private:
  static std::string self_exe_path() {
    try {
      return self_exe();
    } catch (const backend_error&) {
      return "/proc/self/exe";
    }
  }

  std::string secret_, name_ = "master", build_id_, exe_;
  std::vector<std::string> argv_;
  bool is_worker_ = false;
  std::optional<nonce_t> own_nonce_;
};

} // namespace fiber::detail
