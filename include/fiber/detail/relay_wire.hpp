// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/relay_wire.hpp
/// What a host's relay and the master say about the workers behind it: a
/// worker joined (its identity), a frame to or from one of them, one left.

#include <fiber/detail/frame.hpp>
#include <fiber/detail/handshake_session.hpp>
#include <fiber/serialize.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// The bytes a relay_data frame adds to the worker's frame it carries.
inline constexpr std::size_t relay_overhead = 5;

/// relay → master: a worker authenticated at the relay, known from now on by `slot`.
struct relay_join_msg {
  std::uint32_t slot = 0;
  std::uint64_t worker_id = 0;
  std::int64_t pid = 0;
  std::string host, name;
  std::uint64_t incarnation = 0;
};

/// Either way: the worker in `slot` is gone (relay → master: its link
/// ended), or must go (master → relay: close its link).
struct relay_leave_msg {
  std::uint32_t slot = 0;
  std::string reason;
};

/// The identity a join carries, as the master's worker_link reports it.
inline peer_identity relay_peer(const relay_join_msg& j) {
  return peer_identity{role::worker, j.worker_id, j.pid, j.host, j.name, j.incarnation};
}

/// The join of the worker authenticated as `p` into `slot`.
inline relay_join_msg relay_join(std::uint32_t slot, const peer_identity& p) {
  return relay_join_msg{slot, p.worker_id, p.pid, p.host, p.name, p.incarnation};
}

/// The head of a relay_data frame, `[u8 relay_data][u32 slot,
/// little-endian]`, followed by `inner` (the inner frame's first bytes,
/// copied; what follows them, e.g. a tail the transport gathers, follows
/// unchanged).
inline std::vector<std::byte> relay_data_head(std::uint32_t slot, std::span<const std::byte> inner = {}) {
  std::vector<std::byte> f(1 + 4 + inner.size());
  f[0] = std::byte(frame_kind::relay_data);
  for (int i = 0; i < 4; ++i) f[1 + i] = std::byte((slot >> (8 * i)) & 0xff);
  if (!inner.empty()) std::memcpy(f.data() + 5, inner.data(), inner.size());
  return f;
}

/// The slot and inner frame of a relay_data body. Throws serialization_error
/// when the body is shorter than a slot and a frame kind.
inline std::pair<std::uint32_t, std::span<const std::byte>> split_relay_data(std::span<const std::byte> body) {
  if (body.size() < 5) throw serialization_error("fiber: a relay_data frame too short for a slot and a frame");
  std::uint32_t slot = 0;
  for (int i = 0; i < 4; ++i) slot |= std::uint32_t(std::to_integer<std::uint8_t>(body[i])) << (8 * i);
  return {slot, body.subspan(4)};
}

} // namespace fiber::detail
