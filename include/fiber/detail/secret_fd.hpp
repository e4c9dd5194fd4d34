// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/secret_fd.hpp
/// The run's secret in memory (memfd_create): processes of the same user
/// open it through /proc/PID/fd/N, and it goes with its process, also when
/// that is SIGKILLed (no file left in $TMPDIR).

#include <fiber/error.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace fiber::detail {

/// Owns one sealed memfd holding a secret. Move-only.
class secret_fd {
public:
  secret_fd() noexcept = default;
  /// A new memfd holding `secret`, sealed against writes and resizing; not
  /// inherited (close-on-exec). Throws backend_error when the kernel refuses.
  explicit secret_fd(std::string_view secret) {
    fd_ = ::memfd_create("fiber-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    const bool ok = fd_ >= 0 && ::write(fd_, secret.data(), secret.size()) == ssize_t(secret.size()) &&
                    ::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0;
    if (!ok) {
      const int e = errno;
      reset();
      throw backend_error(std::string("fiber: cannot keep the run's secret in memory (memfd_create): ") +
                          std::strerror(e));
    }
  }
  secret_fd(secret_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  secret_fd& operator=(secret_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~secret_fd() { reset(); }

  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Where other processes of this user open it: "/proc/<this pid>/fd/<fd>".
  std::string path() const { return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_); }

private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

} // namespace fiber::detail
