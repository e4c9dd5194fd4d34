// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_wire.hpp
/// What a handle, the relay and a manager process say to each other about
/// remote objects. Handle → relay: runtime::request ops (`relay_op`),
/// payload `[u64 object][u64 method id][arguments]` for a call, `[u64 object]`
/// for a destroy. Relay → manager process: `frame_kind::object` + object_msg.
/// Manager process → relay: `frame_kind::object_reply` + reply_msg (ok: the
/// result's bytes; remote_error: the method threw; error: fiber refused).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fiber::detail {

/// Manager process operations (object_msg::op).
namespace object_op {
inline constexpr std::uint8_t make = 1, call = 2, destroy = 3, quit = 4;
/// fn_id: at most this many of the process's objects run at once (0: no
/// limit); sent once, before any other frame.
inline constexpr std::uint8_t threads = 5;
/// As `call`, but the reply goes on the process's reply line when the
/// method ran off the runtime thread (reply_line.hpp), else on the link.
inline constexpr std::uint8_t call_aside = 6;
} // namespace object_op

/// Relay service operations (runtime::request op codes).
namespace relay_op {
inline constexpr std::uint32_t call = 1, destroy = 2;
} // namespace relay_op

/// Master → manager process (`frame_kind::object`).
struct object_msg {
  std::uint8_t op = 0;
  std::uint64_t call_id = 0; ///< 0: no reply wanted
  std::uint64_t object_id = 0;
  std::uint64_t fn_id = 0; ///< ctor id (make) or method id (call)
  std::vector<std::byte> args;
};

} // namespace fiber::detail
