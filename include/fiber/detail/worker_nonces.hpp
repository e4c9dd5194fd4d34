// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/worker_nonces.hpp
/// One-time nonces a master issues to its local workers at spawn, so that a
/// worker proves itself at once instead of waiting for the challenge.

#include <fiber/detail/handshake.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fiber::detail {

/// The nonces issued and not spent yet, by worker id. Runtime thread only.
class worker_nonces {
public:
  /// A fresh nonce for worker `id` (hex, for its environment).
  /// Example: `env.emplace_back("FIBER_INTERNAL_WORKER_NONCE", nonces.issue(7));`
  std::string issue(std::uint64_t id) {
    auto n = random_nonce();
    issued_[id] = n;
    return to_hex(n);
  }

  /// Worker `id` will not connect (it ended, or was forgotten): its nonce goes.
  void forget(std::uint64_t id) { issued_.erase(id); }

  /// Whether `a` proves `secret` over this connection's `challenge` or, for
  /// a worker, over the nonce issued to it, which is spent then: a recorded
  /// proof cannot be replayed.
  bool verify(std::string_view secret, const auth_msg& a, const nonce_t& challenge, const channel_binding& tls) {
    auto it = role(a.role) == role::worker ? issued_.find(a.worker_id) : issued_.end();
    const bool ok = (it != issued_.end() && mac_equal(a.mac, client_proof(secret, it->second, a, tls))) ||
                    mac_equal(a.mac, client_proof(secret, challenge, a, tls));
    if (ok && it != issued_.end()) issued_.erase(it);
    return ok;
  }

private:
  std::unordered_map<std::uint64_t, nonce_t> issued_;
};

} // namespace fiber::detail
