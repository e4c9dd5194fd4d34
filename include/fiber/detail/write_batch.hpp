// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/write_batch.hpp
/// The write side of a framed stream: messages queued while a write is in
/// flight leave together in one gather write; small parts are copied into
/// one buffer, large ones are referenced in place (or encrypted into a
/// buffer of the batch's, on TLS); a big frame is sealed (tagged, or
/// encrypted) as it is written (trailing_seal).

#include <fiber/detail/bytes.hpp>
#include <fiber/detail/completion.hpp>
#include <fiber/detail/frame_buffer.hpp>
#include <fiber/detail/frame_mac.hpp>
#include <fiber/detail/trailing_seal.hpp>

#include <nng/nng.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

namespace fiber::detail {

/// One queued message: `msg` then `tail` (not copied), as one frame;
/// `sealed`: followed by its tag (queued after frame MACs were enabled).
struct send_op {
  std::uint64_t id;
  message msg;
  shared_bytes tail;
  completion<std::error_code> done;
  bool sealed = false;
};

/// The frames of one nng_stream_send and how far it got. Headers and parts
/// below copy_threshold are coalesced into one buffer (never reallocated:
/// iov entries point into it); larger parts are gathered in place, so big
/// messages are never copied. Not thread-safe (the stream's executor).
class write_batch {
public:
  static constexpr std::size_t copy_threshold = 16 * 1024;  ///< smaller parts are coalesced
  static constexpr std::size_t coalesce_limit = 256 * 1024; ///< copied bytes per write
  static constexpr std::size_t max_iov = 8;                 ///< iov entries per write

  write_batch() { coalesce_.reserve(coalesce_limit); }

  /// Starts a new batch from the front of `q`: at least one message, then as
  /// many as fit the limits. Sealed messages get their tags from `mac`;
  /// with `encrypt`, every message is encrypted by it.
  void fill(std::deque<send_op>& q, frame_mac* mac, bool encrypt = false) {
    ops_.clear();
    iov_.clear();
    pos_ = 0;
    coalesce_.clear();
    written_ = 0;
    trailing_ = {};
    std::size_t ciphers = 0; // cipher_ buffers used
    std::erase_if(cipher_, [](const scratch_bytes& c) { return c.size() > keep_cipher; });
    std::size_t seg = 0; // start of the current coalesced segment
    auto close_segment = [&] {
      if (coalesce_.size() > seg) iov_.push_back({coalesce_.data() + seg, coalesce_.size() - seg});
      seg = coalesce_.size();
    };
    auto hold_tag = [&] { // the front op's tag in a segment of its own, the batch's last, filled by advance()
      close_segment();
      tag_at_ = coalesce_.size();
      coalesce_.resize(tag_at_ + frame_tag_size);
      ops_.push_back(std::move(q.front()));
      q.pop_front();
    };
    while (!q.empty()) {
      auto& op = q.front();
      const std::span<const std::byte> parts[2] = {op.msg, op.tail.bytes};
      const bool seal = (op.sealed || encrypt) && mac;
      const std::size_t payload = parts[0].size() + parts[1].size();
      const bool trailing = seal && payload >= trailing_seal_threshold; // sealed as written; its tag: the batch's end
      std::size_t add = frame_header_size + (seal ? frame_tag_size : 0),
                  iovs = 2 + trailing; // header ... closing segment
      if (seal && encrypt) {
        if (payload < copy_threshold) add += payload;
        else iovs += 2;
      } else {
        for (auto p : parts) {
          if (p.size() < copy_threshold) add += p.size();
          else iovs += 2; // the part, and the segment after it
        }
      }
      if (!ops_.empty() && (coalesce_.size() + add > coalesce_limit || iov_.size() + iovs > max_iov)) break;
      const frame_header hdr(static_cast<std::uint32_t>(parts[0].size() + parts[1].size() +
                                                        (seal ? frame_tag_size : 0)));
      coalesce_.insert(coalesce_.end(), hdr.bytes, hdr.bytes + frame_header_size);
      if (trailing) payload_at_ = iov_bytes() + (coalesce_.size() - seg);
      if (seal && encrypt) {
        std::byte tag[frame_tag_size];
        if (trailing) { // encrypted just ahead of the write; the tag in a segment of its own, held back
          close_segment();
          std::byte* c = cipher_for(ciphers++, payload);
          trailing_.begin(*mac, parts[0], parts[1], c);
          iov_.push_back({c, payload});
          hold_tag();
          break;
        }
        if (payload < copy_threshold) {
          const std::size_t at = coalesce_.size();
          coalesce_.resize(at + payload); // within its reserve: counted in `add`
          mac->encrypt({parts[0], parts[1]}, coalesce_.data() + at, tag);
        } else {
          close_segment();
          std::byte* c = cipher_for(ciphers++, payload);
          mac->encrypt({parts[0], parts[1]}, c, tag);
          iov_.push_back({c, payload});
        }
        coalesce_.insert(coalesce_.end(), tag, tag + frame_tag_size);
        ops_.push_back(std::move(q.front()));
        q.pop_front();
        continue;
      }
      for (auto p : parts) {
        if (p.size() < copy_threshold) {
          coalesce_.insert(coalesce_.end(), p.begin(), p.end());
        } else {
          close_segment();
          iov_.push_back({const_cast<std::byte*>(p.data()), p.size()});
        }
      }
      if (trailing) { // tagged once written; the tag in a segment of its own, held back
        trailing_.begin(*mac, parts[0], parts[1]);
        hold_tag();
        break;
      }
      if (seal) {
        std::byte tag[frame_tag_size];
        mac->seal({parts[0], parts[1]}, tag);
        coalesce_.insert(coalesce_.end(), tag, tag + frame_tag_size);
      }
      ops_.push_back(std::move(q.front()));
      q.pop_front();
    }
    close_segment();
    bytes_ = iov_bytes();
  }

  /// The part not written yet that may be written now (a big frame's
  /// ciphertext as far as it is encrypted, its tag once it is sealed); valid
  /// until the next call of a member.
  std::span<const nng_iov> pending() {
    view_.clear();
    std::size_t room = (trailing_.active() ? payload_at_ + trailing_.ready() : bytes_) - written_;
    for (std::size_t i = pos_; i < iov_.size() && room > 0; ++i) {
      view_.push_back(iov_[i]);
      view_.back().iov_len = std::min(room, iov_[i].iov_len);
      room -= view_.back().iov_len;
    }
    return view_;
  }
  /// Whether nothing of the batch has been written yet.
  bool untouched() const noexcept { return written_ == 0; }
  /// Bytes of the whole batch.
  std::size_t bytes() const noexcept { return bytes_; }

  /// `n` more bytes were written (nng may write part of the iov); true once
  /// the whole batch is. Throws fiber::error if a trailing tag fails.
  bool advance(std::size_t n) {
    written_ += n;
    if (trailing_.active() && written_ > payload_at_) {
      std::byte tag[frame_tag_size];
      if (trailing_.written(written_ - payload_at_, tag)) std::copy_n(tag, frame_tag_size, coalesce_.data() + tag_at_);
    }
    while (n > 0) {
      auto& v = iov_[pos_];
      const std::size_t k = std::min(n, v.iov_len);
      v.iov_buf = static_cast<char*>(v.iov_buf) + k;
      v.iov_len -= k;
      n -= k;
      if (v.iov_len == 0) ++pos_;
    }
    return pos_ == iov_.size();
  }

  /// Whether message `id` is part of this batch.
  bool contains(std::uint64_t id) const noexcept {
    for (auto& op : ops_)
      if (op.id == id) return true;
    return false;
  }

  /// The batch's messages, leaving it empty.
  std::vector<send_op> take() {
    auto done = std::move(ops_);
    ops_.clear();
    return done;
  }

private:
  std::size_t iov_bytes() const noexcept {
    std::size_t n = 0;
    for (auto& v : iov_) n += v.iov_len;
    return n;
  }

  // Storage for the `i`th encrypted large frame of the batch.
  std::byte* cipher_for(std::size_t i, std::size_t size) {
    if (i == cipher_.size()) cipher_.emplace_back();
    return cipher_[i].get(size);
  }

  std::vector<send_op> ops_;
  std::vector<nng_iov> iov_, view_; // the batch; what pending() offers of it
  std::size_t pos_ = 0, bytes_ = 0;
  std::vector<std::byte> coalesce_;
  std::size_t written_ = 0;    // bytes of the batch written
  trailing_seal trailing_;     // the last frame's tag, if big: its segment, the last, waits while active
  std::size_t payload_at_ = 0; // where its payload starts in the batch
  std::size_t tag_at_ = 0;     // where its tag goes in coalesce_
  // Encrypted large frames; kept for the next batches up to this size.
  static constexpr std::size_t keep_cipher = 8u << 20;
  std::vector<scratch_bytes> cipher_;
};

} // namespace fiber::detail
