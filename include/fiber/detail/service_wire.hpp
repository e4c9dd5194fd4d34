// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/service_wire.hpp
/// Requests to a service (a Queue broker, a Pipe relay, an object relay) and
/// their replies, each reply carrying a wire_status.

#include <fiber/detail/wire_status.hpp>

#include <cstdint>
#include <vector>

namespace fiber::detail {

struct request_msg {
  std::uint64_t request_id = 0;
  std::uint64_t service_id = 0;
  std::uint32_t op = 0;
  std::vector<std::byte> payload;
};

struct reply_msg {
  std::uint64_t request_id = 0;
  wire_status status = wire_status::ok; ///< ok: payload is the result; else the failure (wire_status.hpp)
  std::vector<std::byte> payload;
};

} // namespace fiber::detail
