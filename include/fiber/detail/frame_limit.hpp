// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/frame_limit.hpp
/// The one check that a message fits in a frame (max_message_size_mb), made
/// by its sender before anything is queued: an oversized message fails its
/// own call with a fiber::error naming its size and the limit; the link stays.

#include <fiber/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fiber::detail {

/// The most a frame adds around the payload it carries (kind, ids, lengths).
inline constexpr std::size_t frame_overhead = 64;

/// The message saying that `what` (e.g. "a task's result") of `bytes` does not fit.
inline std::string oversize_message(std::string_view what, std::size_t bytes) {
  const auto mb = config_int("max_message_size_mb");
  return "fiber: " + std::string(what) + ": " + std::to_string(bytes) +
         " bytes, more than a frame holds (max_message_size_mb = " + std::to_string(mb) + ", i.e. " +
         std::to_string(static_cast<unsigned long long>(mb) << 20) + " bytes less " + std::to_string(frame_overhead) +
         " for the frame's own fields); not sent";
}

/// Whether a payload of `bytes` fits in one frame. The limit is read only
/// for payloads near the smallest one allowed (1 MiB): small ones cost nothing.
inline bool fits_in_frame(std::size_t bytes) {
  constexpr std::size_t always_fits = (std::size_t(1) << 20) - frame_overhead;
  if (bytes <= always_fits) return true;
  const auto mb = config_int("max_message_size_mb");
  return mb > 0 && bytes + frame_overhead <= std::min<std::size_t>(static_cast<std::size_t>(mb) << 20, UINT32_MAX);
}

} // namespace fiber::detail
