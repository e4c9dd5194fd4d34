// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/shared_segment.hpp
/// One object's bytes in a sealed memfd, mapped read-only: the object
/// store's one copy per host. Processes of the same user on the host open it
/// through /proc/PID/fd/N; it goes with the last process holding it.

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/error.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fiber::detail {

/// What starts a segment: which object it holds, so that a /proc path whose
/// pid or fd was reused is never taken for it. 64 bytes: the data after it
/// is aligned for any arithmetic type.
struct segment_header {
  std::uint64_t magic = 0x7473626f72626966ull; // "fiberobj"
  std::uint64_t nonce = 0;                     ///< the object's random id
  std::uint64_t size = 0;                      ///< bytes of data after the header
  std::uint64_t complete = 0;                  ///< 1 once every byte is written
  std::uint64_t pad[4] = {};
};
static_assert(sizeof(segment_header) == 64);

/// A read-only mapping of a whole segment; unmapped when the last holder
/// goes. Any thread.
class segment_view {
public:
  segment_view(const std::byte* base, std::size_t total) noexcept : base_(base), total_(total) {}
  segment_view(const segment_view&) = delete;
  segment_view& operator=(const segment_view&) = delete;
  ~segment_view() { ::munmap(const_cast<std::byte*>(base_), total_); }

  /// The object's bytes (after the header).
  std::span<const std::byte> data() const noexcept {
    return {base_ + sizeof(segment_header), total_ - sizeof(segment_header)};
  }

private:
  const std::byte* base_;
  std::size_t total_;
};

/// Maps `fd`'s first `sizeof(segment_header) + size` bytes read-only,
/// through a read-only open of it: a shared mapping of a writable fd would
/// keep the segment from being sealed. Throws error when the kernel refuses
/// (the address space is full).
inline std::shared_ptr<const segment_view> map_segment(int fd, std::uint64_t size) {
  const std::size_t total = sizeof(segment_header) + std::size_t(size);
  unique_fd ro(::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC));
  void* p = ::mmap(nullptr, total, PROT_READ, MAP_SHARED, ro ? ro.get() : fd, 0);
  if (p == MAP_FAILED) throw error(std::string("fiber: cannot map an object store segment: ") + std::strerror(errno));
  return std::make_shared<const segment_view>(static_cast<const std::byte*>(p), total);
}

/// A segment being written (by put, or by the fetch of a copy), then sealed
/// and kept: its fd is what other processes on this host open. Move-only.
class shared_segment {
public:
  shared_segment() = default;
  /// A new memfd named `name` (for /proc) of `size` data bytes (0600: a
  /// memfd starts 0777; close-on-exec). Throws error when the kernel
  /// refuses (out of memory or fds).
  shared_segment(std::uint64_t nonce, std::uint64_t size, const std::string& name) {
    fd_ = unique_fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd_ || ::fchmod(fd_.get(), 0600) != 0 || ::ftruncate(fd_.get(), off_t(sizeof(segment_header) + size)) != 0)
      throw error(std::string("fiber: cannot make an object store segment of ") + std::to_string(size) +
                  " bytes: " + std::strerror(errno));
    segment_header h;
    h.nonce = nonce;
    h.size = size;
    if (::pwrite(fd_.get(), &h, sizeof h, 0) != ssize_t(sizeof h))
      throw error(std::string("fiber: cannot write an object store segment: ") + std::strerror(errno));
    size_ = size;
    nonce_ = nonce;
  }

  /// Writes `bytes` at data offset `at`. Throws error on a short write.
  void write(std::uint64_t at, std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      auto n = ::pwrite(fd_.get(), bytes.data() + done, bytes.size() - done, off_t(sizeof(segment_header) + at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw error(std::string("fiber: cannot write an object store segment: ") + std::strerror(errno));
      done += std::size_t(n);
    }
  }
  /// A writable mapping of the data, for writing it in place (put's
  /// serialization); unmapped when the result goes.
  std::shared_ptr<std::byte> map_writable() {
    const std::size_t total = sizeof(segment_header) + std::size_t(size_);
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    if (p == MAP_FAILED) throw error(std::string("fiber: cannot map an object store segment: ") + std::strerror(errno));
    return {static_cast<std::byte*>(p) + sizeof(segment_header), [p, total](std::byte*) { ::munmap(p, total); }};
  }

  /// Marks it complete and seals it against any further change.
  void seal() {
    const std::uint64_t one = 1;
    if (::pwrite(fd_.get(), &one, sizeof one, offsetof(segment_header, complete)) != ssize_t(sizeof one) ||
        ::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
      throw error(std::string("fiber: cannot seal an object store segment: ") + std::strerror(errno));
  }

  int fd() const noexcept { return fd_.get(); }
  std::uint64_t size() const noexcept { return size_; }
  std::uint64_t nonce() const noexcept { return nonce_; }
  explicit operator bool() const noexcept { return bool(fd_); }

private:
  unique_fd fd_;
  std::uint64_t size_ = 0, nonce_ = 0;
};

/// Maps the sealed, complete segment `f` if it is object `nonce` of `size`
/// bytes; nullptr otherwise. Never throws.
inline std::shared_ptr<const segment_view> map_sealed(int f, std::uint64_t nonce, std::uint64_t size) {
  struct stat st {};
  segment_header h;
  if (::fstat(f, &st) != 0 || std::uint64_t(st.st_size) != sizeof h + size ||
      ::fcntl(f, F_GET_SEALS) != (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) ||
      ::pread(f, &h, sizeof h, 0) != ssize_t(sizeof h) || h.magic != segment_header{}.magic || h.nonce != nonce ||
      h.size != size || h.complete != 1)
    return nullptr;
  try {
    return map_segment(f, size);
  } catch (const error&) {
    return nullptr;
  }
}

/// Opens another process's segment through /proc/`pid`/fd/`fd` and maps it
/// as map_sealed does; nullptr when it is not there (the process ended, the
/// fd was reused, it is another user's) or is not that object.
inline std::shared_ptr<const segment_view> open_segment(std::uint64_t pid, std::uint64_t fd, std::uint64_t nonce,
                                                        std::uint64_t size) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  unique_fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return f ? map_sealed(f.get(), nonce, size) : nullptr;
}

} // namespace fiber::detail
