// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/constant_time.hpp
/// Comparing secrets (MACs, tags) in time that does not depend on where they
/// differ, so a peer cannot learn a valid one byte by byte.

#include <cstddef>
#include <span>

namespace fiber::detail {

/// Whether `a` and `b` hold the same bytes; the time taken depends on their
/// sizes only. Example: `constant_time_equal(std::as_bytes(std::span(x)), tag)`.
inline bool constant_time_equal(std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = static_cast<unsigned char>(diff | std::to_integer<unsigned char>(a[i] ^ b[i]));
  return diff == 0;
}

} // namespace fiber::detail
