// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file stats.hpp
/// fiber::stats(): a snapshot of this process's runtime — each Pool's and
/// RemoteManager's workers by state and host, tasks (calls) and their
/// failures by cause, bytes and round trips of their links, each Process,
/// the services' depths, the object store's use. The types are in
/// detail/stats_sources.hpp; docs/reference/stats.md is the reference.

#include <fiber/detail/runtime.hpp>
#include <fiber/detail/stats_sources.hpp>

#include <algorithm>

namespace fiber {

/// A snapshot of this process's runtime: every live Pool and RemoteManager
/// made in this process, oldest first (live from construction until
/// destroyed), the Processes started here whose handle lives, the services
/// and the object store. The counters are kept on paths the runtime takes
/// anyway, on its thread; the snapshot is taken there (one round trip to
/// the runtime thread, O(workers + chunks) of the groups). Thread-safety: any thread,
/// also the runtime's (a handler). Throws nothing but std::bad_alloc.
///
/// Example:
/// @code
/// for (const auto& p : fiber::stats().pools)
///   std::printf("%s: %llu of %llu tasks done\n", p.name.c_str(),
///               (unsigned long long)p.tasks.done, (unsigned long long)p.tasks.submitted);
/// @endcode
inline runtime_stats stats() {
  auto& rt = detail::runtime::instance();
  return rt.sync([&rt] {
    auto out = detail::stats_sources::instance().collect();
    rt.add_to(out);
    if (auto probe = detail::object_store_probe().load()) out.object_store = probe();
    std::sort(out.backends.begin(), out.backends.end(), [](auto& a, auto& b) { return a.name < b.name; });
    return out;
  });
}

} // namespace fiber
