// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/sched.hpp
/// Scheduling policy of fiber's I/O threads (Linux).
///
/// fiber's runtime thread and nng's threads (poller, task queues, timers,
/// resolver) run as SCHED_BATCH unless `io_threads_batch` is false. Linux's
/// wake-up preemption skips woken tasks whose policy is not SCHED_NORMAL
/// (kernel/sched/fair.c, check_preempt_wakeup_fair: batch tasks "do not
/// preempt non-idle tasks"). A worker's result wakes the master's I/O threads,
/// often on the worker's own core; as normal threads they preempted the
/// worker before its next task (docs/RATIONALE.md); as batch threads they run
/// on an idle core, or when the running task blocks or its slice ends. Processes fiber
/// starts get the policy of the thread that started the runtime, not the I/O
/// thread's, and so do the actor threads a manager starts.

#include <atomic>
#include <sched.h>
#include <spawn.h>

namespace fiber::detail {

/// The user's policy (SCHED_OTHER) once the runtime moved its threads to
/// SCHED_BATCH; -1 when it did not (children and actor threads then inherit
/// the policy of the thread that starts them, unchanged).
inline std::atomic<int>& user_policy() {
  static std::atomic<int> p{-1};
  return p;
}

/// The user's policy when the calling thread runs another one (an I/O
/// thread); -1 when there is nothing to restore.
inline int user_policy_to_restore() {
  int policy = user_policy();
  return policy >= 0 && ::sched_getscheduler(0) != policy ? policy : -1;
}

/// While alive, the calling thread runs as SCHED_BATCH, so that the threads it
/// creates inherit that policy; the destructor restores SCHED_OTHER. Does
/// nothing when the thread is not SCHED_OTHER (real-time, idle or already
/// batch: the user chose) or when `enabled` is false. Not thread-safe: one
/// scope per thread at a time.
class batch_policy_scope {
public:
  explicit batch_policy_scope(bool enabled) {
    sched_param p{};
    active_ = enabled && ::sched_getscheduler(0) == SCHED_OTHER && ::sched_setscheduler(0, SCHED_BATCH, &p) == 0;
    if (active_) user_policy() = SCHED_OTHER;
  }
  ~batch_policy_scope() {
    sched_param p{};
    if (active_) ::sched_setscheduler(0, SCHED_OTHER, &p);
  }
  batch_policy_scope(const batch_policy_scope&) = delete;
  batch_policy_scope& operator=(const batch_policy_scope&) = delete;

private:
  bool active_ = false;
};

/// Gives the calling thread the user's policy when the runtime moved its
/// threads to SCHED_BATCH: for threads that an I/O thread starts and that run
/// user code (a manager's actor threads).
inline void use_user_policy() {
  sched_param p{};
  if (int policy = user_policy_to_restore(); policy >= 0) ::sched_setscheduler(0, policy, &p);
}

/// Adds to `attr` (and `flags`, for posix_spawnattr_setflags) what makes a
/// child spawned from an I/O thread start with the user's policy.
inline void set_spawn_policy(posix_spawnattr_t& attr, short& flags) {
  const int policy = user_policy_to_restore();
  if (policy < 0) return;
  sched_param p{};
  posix_spawnattr_setschedpolicy(&attr, policy);
  posix_spawnattr_setschedparam(&attr, &p);
  flags |= POSIX_SPAWN_SETSCHEDULER;
}

} // namespace fiber::detail
