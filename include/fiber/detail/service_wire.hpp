// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/service_wire.hpp
/// Requests to a service (a Queue broker, a Pipe relay, an object relay) and
/// their replies, each reply carrying a wire_status.

#include <fiber/detail/wire_status.hpp>

#include <cstdint>
#include <vector>

namespace fiber::detail {

/// A request: `op` of service `service_id` with its operands; the reply
/// carries the same `request_id`.
struct request_msg {
  std::uint64_t request_id = 0; ///< unique among this link's requests in flight
  std::uint64_t service_id = 0; ///< the runtime's id of the service
  std::uint32_t op = 0;         ///< the service's own operation code
  std::vector<std::byte> payload;
};

/// The answer to one request_msg.
struct reply_msg {
  std::uint64_t request_id = 0;
  wire_status status = wire_status::ok; ///< ok: payload is the result; else the failure (wire_status.hpp)
  std::vector<std::byte> payload;
};

} // namespace fiber::detail
