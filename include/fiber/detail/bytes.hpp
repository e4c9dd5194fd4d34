// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/bytes.hpp
/// The byte containers the transport hands around: a received frame
/// (`message`) and bytes shared with their owner (`shared_bytes`).

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace fiber::detail {

/// A whole frame's payload, as one contiguous buffer.
using message = std::vector<std::byte>;

/// Bytes a frame refers to without a copy of its own: `bytes` stays valid
/// while `owner` lives (e.g. a Pool chunk's arguments, kept for reruns, or a
/// received frame that results point into).
struct shared_bytes {
  std::shared_ptr<const void> owner;
  std::span<const std::byte> bytes;
};

} // namespace fiber::detail
