// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/heartbeat_wire.hpp
/// The heartbeat frame's body: the sender's period and, now and then, a ping
/// to echo or the echo of one, from which a master measures the round trip
/// of each link to a worker (docs/RATIONALE.md, "Round trips").

#include <fiber/detail/frame.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fiber::detail {

/// One heartbeat. A body of the period alone (4 bytes) is the common one.
struct heartbeat_msg {
  std::uint32_t period_ms = 0; ///< the sender's heartbeat period
  std::uint64_t ping = 0;      ///< nonzero: echo this back (the sender's steady clock, ns)
  std::uint64_t echo = 0;      ///< nonzero: a ping of the receiver's, echoed
  std::uint64_t held_ns = 0;   ///< how long that echo waited at its sender
};

/// The heartbeat frame of `h`. Example: `link.send(heartbeat_frame({500}))`.
inline std::vector<std::byte> heartbeat_frame(const heartbeat_msg& h) {
  writer w;
  w.write(static_cast<std::uint8_t>(frame_kind::heartbeat));
  w.write(h.period_ms);
  if (h.ping || h.echo) {
    w.write(h.ping);
    w.write(h.echo);
    w.write(h.held_ns);
  }
  return w.release();
}

/// Whether a heartbeat body carries a ping or an echo (more than the period):
/// a worker's main thread hands such a one to its runtime thread.
inline bool heartbeat_has_ping(std::span<const std::byte> body) noexcept { return body.size() > sizeof(std::uint32_t); }

/// Decodes a heartbeat body (an empty one is period 0); throws
/// serialization_error for any other length than 0, 4 or 28 bytes, and for
/// 28 bytes with neither a ping nor an echo (one encoding per value).
inline heartbeat_msg decode_heartbeat(std::span<const std::byte> body) {
  heartbeat_msg h;
  if (body.empty()) return h;
  reader r(body);
  h.period_ms = r.read<std::uint32_t>();
  if (r.remaining() != 0) {
    h.ping = r.read<std::uint64_t>();
    h.echo = r.read<std::uint64_t>();
    h.held_ns = r.read<std::uint64_t>();
    if (!h.ping && !h.echo) // one encoding per value: that is the period alone
      throw serialization_error("fiber: heartbeat: a long body with neither a ping nor an echo");
  }
  if (r.remaining() != 0) throw serialization_error("fiber: heartbeat: unexpected bytes after its body");
  return h;
}

} // namespace fiber::detail
