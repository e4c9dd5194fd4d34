// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/host_segments.hpp
/// What the object store holds on this host, all processes of a run
/// together: every segment (a memfd named for the run) a process of this
/// user maps, counted once, and who maps them, read from /proc/PID/maps.

#include <fiber/detail/shared_segment.hpp>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fiber::detail {

/// The whole of a /proc file (its size reads 0), or "" when it cannot be read.
inline std::string read_proc_file(const std::string& path) {
  std::string s;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[16384];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0) s.append(buf, std::size_t(n));
  ::close(fd);
  return s;
}

/// What a run's segments take on this host: their data bytes, and the
/// processes that map them.
struct host_segment_use {
  std::uint64_t bytes = 0;
  std::vector<int> holders; ///< pids, ascending
};

/// The segments named `name` (a memfd's name) alive on this host (in this
/// PID namespace): those processes of this user map, each counted once, to
/// the page (every holder of a segment maps it). Reads /proc (about 17 µs a
/// process): never on fiber's runtime thread.
/// Example: `if (host_segments("fiber-object-1f2e").bytes + n > cap) …`
inline host_segment_use host_segments(const std::string& name) {
  constexpr std::uint64_t header = sizeof(segment_header); // not data
  const std::string tag = "/memfd:" + name + " ";
  std::map<unsigned long long, std::uint64_t> by_inode; // inode → data bytes (mapped, to the page)
  const uid_t me = ::geteuid();
  DIR* proc = ::opendir("/proc");
  host_segment_use use;
  if (!proc) return use;
  while (auto* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || st.st_uid != me) continue;
    const std::string maps = read_proc_file(dir + "/maps");
    if (maps.find(tag) != std::string::npos) use.holders.push_back(std::atoi(e->d_name));
    for (auto at = maps.find(tag); at != std::string::npos; at = maps.find(tag, at + 1)) {
      const auto line = maps.rfind('\n', at) + 1; // npos + 1 == 0
      std::uint64_t lo = 0, hi = 0;
      unsigned long long inode = 0;
      if (std::sscanf(maps.c_str() + line, "%" SCNx64 "-%" SCNx64 " %*s %*s %*s %llu", &lo, &hi, &inode) == 3 &&
          hi - lo >= header)
        by_inode[inode] = hi - lo - header;
    }
  }
  ::closedir(proc);
  for (auto& [inode, bytes] : by_inode) use.bytes += bytes;
  std::sort(use.holders.begin(), use.holders.end());
  return use;
}

} // namespace fiber::detail
