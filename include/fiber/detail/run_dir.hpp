// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/run_dir.hpp
/// The run directory (0700, under $TMPDIR), where this machine's ipc://
/// sockets live, and where workers here read the run's secret: a memfd of
/// the process that made the directory (secret_fd.hpp).

#include <fiber/detail/secret_fd.hpp>
#include <fiber/error.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

namespace fiber::detail {

/// One process's view of the run directory: made by it (owned: removed at
/// its end), or its master's on this machine (adopted). Not thread-safe:
/// the runtime thread's, after construction.
class run_dir {
public:
  /// The directory's path; empty before make() or adopt().
  const std::string& path() const noexcept { return path_; }
  /// Where workers on this machine read the secret: "/proc/PID/fd/N".
  const std::string& secret_file() const noexcept { return secret_file_; }
  bool empty() const noexcept { return path_.empty(); }
  /// Whether this process made it (and removes it).
  bool owned() const noexcept { return owned_; }
  /// Where process `pid` of this machine listens on ipc://.
  std::string socket_path(std::int64_t pid) const { return path_ + "/p" + std::to_string(pid) + ".sock"; }

  /// A worker on its master's machine: the master's directory and secret file.
  void adopt(std::string path, std::string secret_file) {
    path_ = std::move(path);
    secret_file_ = std::move(secret_file);
  }

  /// A new 0700 directory under $TMPDIR, owned, and `secret` in a memfd.
  /// Throws backend_error.
  void make(const std::string& secret) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/fiber-XXXXXX";
    if (!::mkdtemp(tmpl.data())) // 0700
      throw backend_error("fiber: cannot create run directory " + tmpl + ": " + std::strerror(errno));
    path_ = std::move(tmpl);
    owned_ = true;
    keep_secret(secret);
  }

  /// Makes the directory again at its path if it was removed (by a tmp
  /// cleaner), and `secret`'s memfd if its file cannot be read; true when
  /// the directory was made again. Throws backend_error if the path now
  /// holds something that is not ours.
  bool restore(const std::string& secret) {
    bool remade = false;
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0) {
      if (errno != ENOENT || (::mkdir(path_.c_str(), 0700) != 0 && errno != EEXIST))
        throw backend_error("fiber: cannot recreate the run directory " + path_ + ": " + std::strerror(errno));
      if (::lstat(path_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
          (st.st_mode & 077) != 0)
        throw backend_error("fiber: the run directory " + path_ + " was removed and is now something not ours");
      remade = true;
    }
    if (::access(secret_file_.c_str(), F_OK) != 0) keep_secret(secret);
    return remade;
  }

  /// Removes the directory if this process made it. At exit.
  void remove_own() noexcept {
    if (!owned_) return;
    owned_ = false;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

private:
  // In memory: it goes with this process, however it ends.
  void keep_secret(const std::string& secret) {
    if (!mem_) mem_ = secret_fd(secret);
    secret_file_ = mem_.path();
  }

  std::string path_, secret_file_;
  secret_fd mem_; // the secret secret_file_ names, when this process made it
  bool owned_ = false;
};

} // namespace fiber::detail
