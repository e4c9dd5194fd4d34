// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/bytes.hpp
/// The byte containers the transport hands around: a received frame
/// (`message`), bytes shared with their owner (`shared_bytes`), and storage
/// for bytes on their way out (`scratch_bytes`).

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

/// Storage written before it is read (a frame encrypted for the wire): not
/// zeroed, so a big one's pages are touched as it is written, not all before.
/// Not thread-safe. Example: `std::byte* p = s.get(n);`
class scratch_bytes {
public:
  /// At least `n` bytes; what they held before is lost when they grow.
  std::byte* get(std::size_t n) {
    if (n > size_) {
      data_ = std::make_unique_for_overwrite<std::byte[]>(n);
      size_ = n;
    }
    return data_.get();
  }
  /// Bytes held.
  std::size_t size() const noexcept { return size_; }

private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
};

} // namespace fiber::detail
