// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/trailing_seal.hpp
/// A big frame's tag computed while its payload is written, not before the
/// first byte leaves: tagging 512 MiB first held its writer (and the wire)
/// silent for longer than a heartbeat timeout (docs/RATIONALE.md).

#include <fiber/detail/frame_mac.hpp>

#include <algorithm>
#include <cstddef>
#include <span>

namespace fiber::detail {

/// Payloads of this many bytes and more are tagged as they are written.
inline constexpr std::size_t trailing_seal_threshold = std::size_t(4) << 20;

/// The tag of one frame whose payload is `a` then `b`, computed as the
/// writer reports the payload's bytes written; the tag, written last, is
/// ready once all of them are. Not thread-safe (the writer's). Example:
/// `s.begin(mac, msg, tail); ... if (s.written(n, tag)) /* write tag */`.
class trailing_seal {
public:
  /// Begins the next frame's tag on `mac`, in the frame's turn of its
  /// sequence. The payload's bytes must stay until written() is done.
  void begin(frame_mac& mac, std::span<const std::byte> a, std::span<const std::byte> b) {
    mac.begin_seal(a.size() + b.size());
    mac_ = &mac;
    parts_[0] = a;
    parts_[1] = b;
    fed_ = 0;
  }
  /// Whether a tag is being computed.
  bool active() const noexcept { return mac_ != nullptr; }

  /// The payload's first `n` bytes are written: tags them. True, with the
  /// tag in `tag` (and no longer active), once the whole payload is.
  bool written(std::size_t n, std::byte (&tag)[frame_tag_size]) {
    const std::size_t total = parts_[0].size() + parts_[1].size();
    n = std::min(n, total);
    while (fed_ < n) {
      const bool first = fed_ < parts_[0].size();
      const auto part = first ? parts_[0] : parts_[1];
      const std::size_t at = first ? fed_ : fed_ - parts_[0].size();
      const std::size_t k = std::min(part.size() - at, n - fed_);
      mac_->feed({const_cast<std::byte*>(part.data()) + at, k}); // read only: sealing
      fed_ += k;
    }
    if (fed_ < total) return false;
    mac_->finish_seal(tag);
    mac_ = nullptr;
    return true;
  }

private:
  frame_mac* mac_ = nullptr;
  std::span<const std::byte> parts_[2];
  std::size_t fed_ = 0;
};

} // namespace fiber::detail
