// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/frame_buffer.hpp
/// The read side of a framed stream: bytes from nng land in one 64 KiB
/// buffer (a frame too large for it gets a buffer of its own) and whole
/// frames `[u32 little-endian length][payload]` are cut out of it.

#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/bytes.hpp>

#include <nng/nng.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>

namespace fiber::detail {

/// Bytes of a frame's length header.
inline constexpr std::size_t frame_header_size = 4;

/// Little-endian length header of a frame whose payload is `n` bytes.
struct frame_header {
  explicit frame_header(std::uint32_t n) noexcept
      : bytes{std::byte(n), std::byte(n >> 8), std::byte(n >> 16), std::byte(n >> 24)} {}
  std::byte bytes[frame_header_size];
};

/// Holds what was read but not yet delivered. Many small frames arriving
/// together cost one read; a frame that does not fit is read straight into
/// its own message, allocated only once a receiver consumes (parse() with no
/// read in flight) and grown as its bytes arrive (big_step at a time), so no
/// read waits for the whole frame's memory to be cleared. Memory is bounded
/// by the buffer plus one frame of at most the stream's limit. Not
/// thread-safe: used by whoever holds the read side (the stream's executor,
/// or the thread it lent it to).
class frame_buffer {
public:
  static constexpr std::size_t capacity = 64 * 1024; ///< one read fills up to this
  static constexpr std::size_t big_step = 4u << 20;  ///< a big frame's message grows by this much at a time

  enum class parsed { frame, more, too_big };

  /// Moves the next whole frame into `m`. `max`: the largest frame accepted
  /// (a longer header is refused before anything is allocated).
  /// `read_in_flight`: a read into next_read()'s region is pending, so data
  /// may only be consumed, never moved.
  parsed parse(message& m, std::size_t max, bool read_in_flight) {
    if (big_) {
      if (big_fill_ < big_len_) return parsed::more;
      m = std::move(*big_);
      big_.reset();
      return parsed::frame;
    }
    const std::size_t avail = rend_ - rpos_;
    if (avail < frame_header_size) return parsed::more;
    const std::byte* p = rbuf_.get() + rpos_;
    const std::size_t len = std::size_t(p[0]) | std::size_t(p[1]) << 8 | std::size_t(p[2]) << 16 |
                            std::size_t(p[3]) << 24;
    if (len > max) return parsed::too_big;
    if (avail - frame_header_size >= len) {
      m.assign(p + frame_header_size, p + frame_header_size + len);
      rpos_ += frame_header_size + len;
      return parsed::frame;
    }
    if (frame_header_size + len > capacity && !read_in_flight) {
      big_.emplace(buffer_cache::instance().take(len)); // bounded by max above
      big_->clear();
      big_->reserve(len); // never moves while it grows
      big_len_ = len;
      big_fill_ = avail - frame_header_size;
      big_fed_ = 0;
      big_->resize(big_fill_);
      std::memcpy(big_->data(), p + frame_header_size, big_fill_);
      rpos_ = rend_ = 0;
    }
    return parsed::more;
  }

  /// Whether a read should be started: a big frame is incomplete, or the
  /// buffer has room (else it stays full until a receiver consumes).
  bool wants_read() const noexcept { return big_ ? big_fill_ < big_len_ : rend_ - rpos_ < capacity; }

  /// Where the next read lands: the rest of a big frame, or the buffer's free tail.
  nng_iov next_read() {
    if (big_) {
      read_big_ = true;
      if (big_->size() == big_fill_) big_->resize(std::min(big_len_, big_fill_ + big_step));
      return {big_->data() + big_fill_, big_->size() - big_fill_};
    }
    // Not zero-filled: a memset would fault in all 16 pages per connection
    // before a byte arrives; a handshake's few hundred bytes touch one.
    if (!rbuf_) rbuf_ = std::make_unique_for_overwrite<std::byte[]>(capacity);
    if (rpos_ == rend_) {
      rpos_ = rend_ = 0;
    } else if (capacity - rend_ < capacity / 4) { // tail short: move the rest down
      std::memmove(rbuf_.get(), rbuf_.get() + rpos_, rend_ - rpos_);
      rend_ -= rpos_;
      rpos_ = 0;
    }
    read_big_ = false;
    return {rbuf_.get() + rend_, capacity - rend_};
  }

  /// `n` bytes arrived where the last next_read() pointed.
  void commit(std::size_t n) noexcept { (read_big_ ? big_fill_ : rend_) += n; }

  /// The length of the big frame being read, or 0.
  std::size_t big_length() const noexcept { return big_ ? big_len_ : 0; }

  /// The bytes of the big frame being read that arrived since the last
  /// call, less its last `hold` bytes: so a check can follow the frame
  /// while its bytes are still in the caches. Empty when there are none.
  std::span<std::byte> fresh_big_bytes(std::size_t hold) noexcept {
    if (!big_ || big_len_ < hold) return {};
    const std::size_t upto = std::min(big_fill_, big_len_ - hold);
    if (upto <= big_fed_) return {};
    const std::span<std::byte> r(big_->data() + big_fed_, upto - big_fed_);
    big_fed_ = upto;
    return r;
  }

private:
  std::unique_ptr<std::byte[]> rbuf_;
  std::size_t rpos_ = 0, rend_ = 0;
  std::optional<message> big_;
  std::size_t big_len_ = 0, big_fill_ = 0; // the big frame's length, and its bytes read so far
  std::size_t big_fed_ = 0;                // and those fresh_big_bytes() gave out
  bool read_big_ = false;
};

} // namespace fiber::detail
