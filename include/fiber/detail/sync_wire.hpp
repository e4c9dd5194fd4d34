// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/sync_wire.hpp
/// The request protocol of the synchronization services (Lock, RLock,
/// Semaphore, BoundedSemaphore, Condition, Event, Barrier, Value/Array).
///
/// A request is [op_header: u64 wait id, i64 timeout ms (-1 forever, 0
/// now), u8 unused][u64 thread token] and the operation's arguments; the
/// reply is [u8 wait_tag] (broker_wire.hpp) and the result. (link, wait id)
/// names one waiting request; `cancel` is the brokers' own (queue_op::cancel,
/// a bare op_header), so broker_client's cancellation glue serves these too.
///  - acquire:    —                     → done | timeout | cancelled
///  - release:    —                     → done | misuse
///  - get_value:  —                     → done [u64 free permits]
///  - cond_wait:  [u64 condition token]  → done | timeout | cancelled, always
///                once the lock is held again (misuse: not held by the caller)
///  - notify:     [u64 condition token][u64 n, ~0: all] → done [u64 woken] | misuse
///  - abandon:    (wait id of an acquire or cond_wait that failed with its
///                link)                 → done; what it was granted, if anything, is given back
///  release, cond_wait and notify answer `revoked` to a process whose hold
///  was taken back when it was judged dead (fencing: it is not dead after
///  all, and must not release another's hold).
///  - set / clear / is_set (Event)     → done [u8 flag]
///  - wait (Event)                     → done | timeout | cancelled
///  - barrier_wait                     → done [u64 index] | broken | cancelled
///  - abort / reset                    → done
///  - barrier_state                    → done [u64 parties][u64 waiting][u8 broken]
///  - read:  [u64 index]               → done [element bytes] (Value/Array)
///  - write: [u64 index][element bytes] → done
/// Timeouts are the service's (a timer on the runtime thread), so a permit
/// is never granted and then dropped: the reply that grants it is the one
/// the caller reads, or the caller abandons it after losing its link, or the
/// caller is known dead (runtime::when_dead) and the service takes it back.

#include <fiber/detail/broker_wire.hpp>
#include <fiber/serialize.hpp>

#include <atomic>
#include <cstdint>
#include <vector>

namespace fiber::detail {

namespace sync_op {
inline constexpr std::uint32_t cancel = queue_op::cancel;
inline constexpr std::uint32_t acquire = 20, release = 21, get_value = 22, cond_wait = 23, notify = 24, abandon = 25;
inline constexpr std::uint32_t set = 30, clear = 31, is_set = 32, wait = 33;
inline constexpr std::uint32_t barrier_wait = 40, abort = 41, reset = 42, barrier_state = 43;
inline constexpr std::uint32_t read = 50, write = 51;
} // namespace sync_op

/// notify's `n` for notify_all.
inline constexpr std::uint64_t notify_all_n = ~std::uint64_t{0};

/// Names the calling thread within its process (an RLock's owner, a
/// Condition's waiter: (link, thread token) at the service). Never 0.
inline std::uint64_t this_thread_token() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t token = next++;
  return token;
}

/// The fixed part of every synchronization request.
struct sync_header {
  op_header h;
  std::uint64_t thread = 0;

  static sync_header read_from(reader& r) {
    sync_header s;
    s.h = op_header::read_from(r);
    s.thread = r.read<std::uint64_t>();
    return s;
  }
};

/// [op_header][u64 thread token][args...], in the name of thread `thread`.
template <class... A>
std::vector<std::byte> sync_payload_as(std::uint64_t thread, std::uint64_t wait, std::int64_t timeout,
                                       const A&... args) {
  writer w;
  op_header{wait, timeout, 0}.write_to(w);
  w.write(thread);
  (w.write(args), ...);
  return w.release();
}

/// The same in the name of the calling thread.
template <class... A>
std::vector<std::byte> sync_payload(std::uint64_t wait, std::int64_t timeout, const A&... args) {
  return sync_payload_as(this_thread_token(), wait, timeout, args...);
}

} // namespace fiber::detail
