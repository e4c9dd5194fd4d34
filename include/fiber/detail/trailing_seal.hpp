// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/trailing_seal.hpp
/// A big frame sealed while it is written, not before its first byte leaves:
/// its tag over the bytes written (or its ciphertext, a few MiB ahead of the
/// write), the tag last. Sealing 512 MiB first held its writer (and the wire)
/// silent past a heartbeat timeout (docs/RATIONALE.md).

#include <fiber/detail/frame_mac.hpp>

#include <algorithm>
#include <cstddef>
#include <span>

namespace fiber::detail {

/// Payloads of this many bytes and more are sealed as they are written.
inline constexpr std::size_t trailing_seal_threshold = std::size_t(4) << 20;

/// The seal of one frame whose payload is `a` then `b`, made as the writer
/// reports the payload's bytes written: in clear, they are tagged once
/// written; encrypted, they are encrypted into `out` up to
/// `encrypt_ahead` bytes before the write reaches them. The tag, written
/// last, is ready once every byte is fed. Not thread-safe (the writer's).
/// Example: `s.begin(mac, msg, tail); write(s.ready()); if (s.written(n, tag)) write(tag);`
class trailing_seal {
public:
  /// Payload bytes encrypted ahead of the write.
  static constexpr std::size_t encrypt_ahead = std::size_t(4) << 20;

  /// Begins the next frame's seal on `mac`, in the frame's turn of its
  /// sequence; with `out` (the payload's size), encrypted into it. The
  /// payload's bytes (and `out`) must stay until written() is done.
  /// Throws fiber::error if the library fails.
  void begin(frame_mac& mac, std::span<const std::byte> a, std::span<const std::byte> b, std::byte* out = nullptr) {
    mac.begin_seal(a.size() + b.size());
    mac_ = &mac;
    parts_[0] = a;
    parts_[1] = b;
    out_ = out;
    fed_ = 0;
    if (out_) feed_to(std::min(total(), encrypt_ahead));
  }
  /// Whether a frame is being sealed.
  bool active() const noexcept { return mac_ != nullptr; }
  /// The payload's bytes that may be written now: all in clear, those
  /// encrypted when encrypting.
  std::size_t ready() const noexcept { return out_ ? fed_ : total(); }

  /// The payload's first `n` bytes are written: seals on. True, with the
  /// tag in `tag` (and no longer active), once every byte is sealed.
  /// Throws fiber::error if the library fails.
  bool written(std::size_t n, std::byte (&tag)[frame_tag_size]) {
    n = std::min(n, total());
    if (!out_) feed_to(n);
    else if (fed_ - n < encrypt_ahead / 2) feed_to(std::min(total(), n + encrypt_ahead));
    if (fed_ < total()) return false;
    mac_->finish_seal(tag);
    mac_ = nullptr;
    return true;
  }

private:
  std::size_t total() const noexcept { return parts_[0].size() + parts_[1].size(); }

  void feed_to(std::size_t n) {
    while (fed_ < n) {
      const bool first = fed_ < parts_[0].size();
      const auto part = first ? parts_[0] : parts_[1];
      const std::size_t at = first ? fed_ : fed_ - parts_[0].size();
      const std::size_t k = std::min(part.size() - at, n - fed_);
      if (out_) mac_->encrypt_piece(part.subspan(at, k), out_ + fed_);
      else mac_->feed({const_cast<std::byte*>(part.data()) + at, k}); // read only: sealing
      fed_ += k;
    }
  }

  frame_mac* mac_ = nullptr;
  std::span<const std::byte> parts_[2];
  std::byte* out_ = nullptr;
  std::size_t fed_ = 0;
};

} // namespace fiber::detail
