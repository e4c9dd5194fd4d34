// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/frame_check.hpp
/// The read side of frame MACs: checks (and on TLS decrypts) each frame's
/// tag, following a big frame's bytes as they arrive so that they are
/// checked while still in the caches.

#include <fiber/detail/bytes.hpp>
#include <fiber/detail/frame_buffer.hpp>
#include <fiber/detail/frame_mac.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

namespace fiber::detail {

/// Off until enable(); then every frame cut out of the read buffer must
/// end in the tag of the next frame under the key. Not thread-safe: used
/// by whoever holds the stream's read side.
class frame_check {
public:
  /// From now on frames carry tags under `key` (encrypted, with `decrypt`).
  /// Throws fiber::error if the library refuses the key.
  void enable(const session_key& key, bool decrypt) {
    mac_ = std::make_unique<frame_mac>(key);
    decrypt_ = decrypt;
  }
  bool on() const noexcept { return mac_ != nullptr; }
  /// Bytes a tag adds to a frame on this side.
  std::size_t tag_size() const noexcept { return mac_ ? frame_tag_size : 0; }

  /// Feeds the big frame's bytes that arrived since the last call (after
  /// each read into `buf`).
  void follow(frame_buffer& buf) {
    if (!mac_) return;
    const auto fresh = buf.fresh_big_bytes(frame_tag_size);
    if (fresh.empty()) return;
    if (!following_) {
      mac_->begin(decrypt_, buf.big_length() - frame_tag_size);
      following_ = true;
      followed_ = 0;
    }
    mac_->feed(fresh);
    followed_ += fresh.size();
  }

  /// Whether the whole frame `m` ends in its tag; if so strips it (and
  /// leaves `m` decrypted). When false, nothing after `m` may be read.
  bool check(message& m) {
    if (!mac_) return true;
    if (m.size() < frame_tag_size) return false;
    const auto body = std::span<std::byte>(m).first(m.size() - frame_tag_size);
    const auto tag = std::span<const std::byte>(m).last(frame_tag_size);
    bool ok;
    if (std::exchange(following_, false)) { // begun as its bytes arrived
      mac_->feed(body.subspan(followed_));
      ok = mac_->finish(tag);
    } else {
      ok = decrypt_ ? mac_->decrypt(body, tag) : mac_->open(body, tag);
    }
    if (ok) m.resize(body.size());
    return ok;
  }

private:
  std::unique_ptr<frame_mac> mac_;
  bool decrypt_ = false;
  bool following_ = false;   // mac_ has begun the big frame being read
  std::size_t followed_ = 0; // and was fed this many of its bytes
};

} // namespace fiber::detail
