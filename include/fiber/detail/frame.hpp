// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/frame.hpp
/// fiber's frames: one message on a connection is `[u8 frame_kind][body]`,
/// the body a fiber::serialize'd message struct.

#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

enum class frame_kind : std::uint8_t {
  challenge = 1,     ///< server → client: nonce
  auth = 2,          ///< client → server: proof, identity
  auth_ok = 3,       ///< server → client: proof, master's configuration
  refused = 4,       ///< server → client: reason; then close
  heartbeat = 5,     ///< both ways, when idle
  run = 10,          ///< master → Process worker: run one target, then exit
  tasks = 11,        ///< master → pool worker: chunks
  results = 12,      ///< pool worker → master: chunk results
  shutdown = 13,     ///< master → worker: exit now (late results are discarded)
  exiting = 14,      ///< worker → master: int32 status it exits with (sent for 129..192 only)
  initialize = 15,   ///< master → pool worker: run_msg of the Pool's initializer, before any task
  initialized = 16,  ///< pool worker → master: wire_status (+ the failure): the initializer ran
  request = 20,      ///< client → service owner
  reply = 21,        ///< service owner → client
  object = 30,       ///< master → manager worker: make/call/destroy a remote object
  object_reply = 31, ///< manager worker → master
  relay_join = 40,   ///< relay → master: relay_join_msg, a worker behind it authenticated
  relay_data = 41,   ///< either way: one frame to or from a worker behind a relay (relay_wire.hpp)
  relay_leave = 42,  ///< either way: relay_leave_msg, that worker's link ended, or must end
};

/// Who dials: a worker of the master's, a client of its services, a
/// host's relay carrying many workers' links in one, or a manager process's
/// second connection, its reply line (reply_line.hpp), bound to its link.
enum class role : std::uint8_t { worker = 1, client = 2, relay = 3, reply_line = 4 };

template <class Body>
std::vector<std::byte> frame(frame_kind k, const Body& body) {
  writer w;
  w.write(static_cast<std::uint8_t>(k));
  w.write(body);
  return w.release();
}

inline std::vector<std::byte> frame(frame_kind k) {
  writer w;
  w.write(static_cast<std::uint8_t>(k));
  return w.release();
}

/// Splits a frame into kind and body; throws serialization_error if empty.
inline std::pair<frame_kind, std::span<const std::byte>> unframe(std::span<const std::byte> f) {
  if (f.empty()) throw serialization_error("fiber: empty frame");
  return {static_cast<frame_kind>(f[0]), f.subspan(1)};
}

/// The decoder for incoming frames: a frame of kind `want` whose body is a
/// serialized Msg. Throws serialization_error for any other kind, for a body
/// that does not decode, or for trailing bytes (deserialize is bounded by
/// its input). The runtime and the frame fuzzer (tests/fuzz/fuzz_frame.cpp)
/// share it.
template <class Msg>
Msg decode_frame(frame_kind want, std::span<const std::byte> f) {
  auto [k, body] = unframe(f);
  if (k != want)
    throw serialization_error("fiber: expected frame kind " + std::to_string(int(want)) + ", got " +
                              std::to_string(int(k)));
  return deserialize<Msg>(body);
}

} // namespace fiber::detail
