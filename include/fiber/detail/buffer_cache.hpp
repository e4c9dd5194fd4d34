// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/buffer_cache.hpp
/// A small per-process cache of large byte buffers: glibc unmaps freed large
/// blocks, and faulting fresh zeroed pages in costs more than copying them.

#include <fiber/detail/bytes.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Recycles the storage of large byte buffers (received frames, results)
/// within a process. glibc returns large blocks to the kernel when they are
/// freed (munmap, or a heap trim), so every fresh 1 MiB frame costs 256
/// page faults and the zeroing of 256 pages — more than copying it. A few
/// buffers (at most max_buffers, max_bytes in all) are kept instead; take()
/// hands out the smallest that fits. Thread-safe.
class buffer_cache {
public:
  static constexpr std::size_t min_capacity = 64 * 1024; ///< smaller ones: malloc does well
  static constexpr std::size_t max_buffers = 4;
  static constexpr std::size_t max_bytes = 16u << 20;

  /// An empty cache (tests); fiber itself uses instance().
  buffer_cache() = default;

  /// Never destroyed: usable from any thread until the process ends.
  static buffer_cache& instance() {
    static buffer_cache* c = new buffer_cache;
    return *c;
  }

  /// An empty message with capacity for at least `n` bytes.
  message take(std::size_t n) {
    message m;
    if (n >= min_capacity) {
      std::lock_guard lk(m_);
      std::size_t best = bufs_.size();
      for (std::size_t i = 0; i < bufs_.size(); ++i) {
        const std::size_t c = bufs_[i].capacity();
        if (c >= n && c / 4 <= n && (best == bufs_.size() || c < bufs_[best].capacity())) best = i;
      }
      if (best != bufs_.size()) {
        m = std::move(bufs_[best]);
        bufs_.erase(bufs_.begin() + std::ptrdiff_t(best));
        bytes_ -= m.capacity();
        return m;
      }
    }
    // Rounded up, so that buffers for sizes a few bytes apart (a frame and
    // the results in it) can stand in for each other.
    m.reserve(n < min_capacity ? n : (n + min_capacity - 1) / min_capacity * min_capacity);
    return m;
  }

  /// Keeps `m`'s storage for a later take() if it is large and there is
  /// room; otherwise it is freed as usual.
  void give(message&& m) {
    const std::size_t c = m.capacity();
    if (c < min_capacity || c > max_bytes) return;
    message keep = std::move(m);
    keep.clear();
    std::lock_guard lk(m_);
    if (bufs_.size() < max_buffers && bytes_ + c <= max_bytes) {
      bytes_ += c;
      bufs_.push_back(std::move(keep));
    } else if (!bufs_.empty() && bufs_.front().capacity() < c) {
      bytes_ += c - bufs_.front().capacity(); // replace the oldest
      bufs_.front() = std::move(keep);
    }
  }

private:
  std::mutex m_;
  std::vector<message> bufs_;
  std::size_t bytes_ = 0;
};

/// `m` shared read-only; its storage goes back to `cache` (which must outlive
/// every copy) when the last owner lets go.
inline std::shared_ptr<const message> share_recycled(message&& m, buffer_cache& cache = buffer_cache::instance()) {
  return std::shared_ptr<const message>(new message(std::move(m)), [&cache](const message* p) {
    cache.give(std::move(*const_cast<message*>(p)));
    delete p;
  });
}

} // namespace fiber::detail
