// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/secret_fd.hpp
/// The run's secret in memory (memfd_create): processes of the same user
/// open it through /proc/PID/fd/N, and it goes with its process, also when
/// that is SIGKILLed (no file left in $TMPDIR).

#include <fiber/backend/detail/unique_fd.hpp>
#include <fiber/error.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

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
  explicit secret_fd(std::string_view secret) : fd_(::memfd_create("fiber-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING)) {
    const int fd = fd_.get();
    if (fd < 0 || ::write(fd, secret.data(), secret.size()) != ssize_t(secret.size()) ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
      throw backend_error(std::string("fiber: cannot keep the run's secret in memory (memfd_create): ") +
                          std::strerror(errno));
  }

  explicit operator bool() const noexcept { return bool(fd_); }
  /// Where other processes of this user open it: "/proc/<this pid>/fd/<fd>".
  std::string path() const { return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_.get()); }

private:
  unique_fd fd_;
};

} // namespace fiber::detail
