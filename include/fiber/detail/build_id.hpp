// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/build_id.hpp
/// The GNU build id of the running executable: what the handshake compares
/// so that a worker running another binary is refused.

#include <fiber/detail/handshake.hpp>

#include <cstdint>
#include <cstring>
#include <elf.h>
#include <link.h>
#include <string>
#include <sys/stat.h>

namespace fiber::detail {

/// GNU build id of the main executable (hex), or a fallback naming the file.
inline std::string build_id() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        auto& s = *static_cast<std::string*>(out);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          auto* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          auto* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            auto* name = p + sizeof(ElfW(Nhdr));
            auto* desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              s = to_hex({reinterpret_cast<const std::uint8_t*>(desc), n->n_descsz});
              return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1; // the first object is the main program
      },
      &id);
  if (id.empty()) {
    struct stat st {};
    ::stat("/proc/self/exe", &st);
    id = "size-" + std::to_string(st.st_size) + "-mtime-" + std::to_string(st.st_mtime);
  }
  return id;
}

} // namespace fiber::detail
