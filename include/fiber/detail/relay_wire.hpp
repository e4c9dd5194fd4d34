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
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// The bytes a relay_data frame adds to the worker's frame it carries: its
/// kind and the slot (relay_data_head).
inline constexpr std::size_t relay_overhead = sizeof(frame_kind) + sizeof(std::uint32_t);

/// relay → master: a worker authenticated at the relay, known from now on by `slot`.
struct relay_join_msg {
  std::uint32_t slot = 0;
  peer_identity peer; ///< as the relay's handshake with it established
};

/// Either way: the worker in `slot` is gone (relay → master: its link
/// ended), or must go (master → relay: close its link).
struct relay_leave_msg {
  std::uint32_t slot = 0;
  std::string reason;
};

/// The head of a relay_data frame, `[u8 relay_data][u32 slot]` as fiber
/// serializes them, followed by `inner` (the inner frame's first bytes,
/// copied; what follows them, e.g. a tail the transport gathers, follows
/// unchanged).
inline std::vector<std::byte> relay_data_head(std::uint32_t slot, std::span<const std::byte> inner = {}) {
  writer w;
  w.buffer().reserve(relay_overhead + inner.size());
  w.write(frame_kind::relay_data);
  w.write(slot);
  w.write_bytes(inner.data(), inner.size());
  return std::move(w.buffer());
}

/// The slot and inner frame of a relay_data body. Throws serialization_error
/// when the body is shorter than a slot and a frame kind.
inline std::pair<std::uint32_t, std::span<const std::byte>> split_relay_data(std::span<const std::byte> body) {
  if (body.size() < sizeof(std::uint32_t) + sizeof(frame_kind))
    throw serialization_error("fiber: a relay_data frame too short for a slot and a frame");
  reader r(body);
  const auto slot = r.read<std::uint32_t>();
  return {slot, body.subspan(r.position())};
}

/// Hands a relay frame to its handler: `on_data(slot, inner frame)`,
/// `on_join(relay_join_msg)` or `on_leave(relay_leave_msg)`. False, calling
/// none, for a frame of another kind. Throws serialization_error for a
/// malformed body. The one parser of the relay's frames, on both sides.
template <class OnData, class OnJoin, class OnLeave>
bool visit_relay_frame(frame_kind k, std::span<const std::byte> body, OnData&& on_data, OnJoin&& on_join,
                       OnLeave&& on_leave) {
  switch (k) {
  case frame_kind::relay_data: {
    auto [slot, inner] = split_relay_data(body);
    on_data(slot, inner);
    return true;
  }
  case frame_kind::relay_join: on_join(deserialize<relay_join_msg>(body)); return true;
  case frame_kind::relay_leave: on_leave(deserialize<relay_leave_msg>(body)); return true;
  default: return false;
  }
}

} // namespace fiber::detail
