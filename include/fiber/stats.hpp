// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file stats.hpp
/// fiber::stats(): a snapshot of this process's runtime — each Pool's
/// workers by state and host, its tasks submitted, done, failed and rerun
/// (with their causes), its queue depth. The types are in
/// detail/stats_sources.hpp; docs/reference/stats.md is the reference.

#include <fiber/detail/runtime.hpp>
#include <fiber/detail/stats_sources.hpp>

namespace fiber {

/// A snapshot of this process's runtime: every live Pool made in this
/// process, oldest first (a Pool is live from its construction until it is
/// destroyed). The counters are kept on paths the runtime takes anyway, on
/// its thread; the snapshot is taken there (one round trip to the runtime
/// thread, O(workers + chunks) of the Pools). Thread-safety: any thread,
/// also the runtime's (a handler). Throws nothing but std::bad_alloc.
///
/// Example:
/// @code
/// for (const auto& p : fiber::stats().pools)
///   std::printf("%s: %llu of %llu tasks done\n", p.name.c_str(),
///               (unsigned long long)p.tasks.done, (unsigned long long)p.tasks.submitted);
/// @endcode
inline runtime_stats stats() {
  return detail::runtime::instance().sync([] { return detail::stats_sources::instance().collect(); });
}

} // namespace fiber
