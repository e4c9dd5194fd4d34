// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/actor.hpp
/// Actors for remote objects: a mailbox whose tasks run one at a time, in
/// order, on an elastic pool of threads (used in manager processes).

#include <fiber/detail/sched.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace fiber::detail {

class actor;

/// Threads that run actors. A thread is added whenever an actor becomes
/// runnable and no thread is idle, so objects never wait for each other (a
/// method that blocks holds one thread, not the pool), up to
/// max_actor_threads, or the limit the RemoteManager set
/// (manager_options::threads): past it, runnable actors wait for a thread,
/// in the order they became runnable. Threads idle for 30 s retire. Used
/// only in manager processes, which end with _Exit: threads are detached.
class actor_pool {
public:
  static constexpr std::size_t max_actor_threads = 512;

  static actor_pool& instance() {
    static auto* p = new actor_pool; // never destroyed: detached threads may still use it
    return *p;
  }

  /// At most `n` threads from now on (0: max_actor_threads). Threads above
  /// it finish what they run and retire.
  void limit(std::size_t n) {
    std::lock_guard lk(m_);
    limit_ = n == 0 ? max_actor_threads : std::min(n, max_actor_threads);
  }

  /// Makes `a` runnable. Throws fiber::error, with `a` not queued, when no
  /// thread runs actors and none can be started.
  void schedule(std::shared_ptr<actor> a) {
    std::unique_lock lk(m_);
    ready_.push_back(a);
    if (ready_.size() <= idle_) {
      lk.unlock();
      cv_.notify_one();
      return;
    }
    if (threads_ >= limit_) {
      if (limit_ == max_actor_threads && !std::exchange(warned_cap_, true))
        log(log_level::warning, "remote objects: all ", max_actor_threads, " threads are busy; calls wait for one");
      return;
    }
    ++threads_;
    try {
      std::thread([this] { run(); }).detach();
    } catch (const std::system_error& e) {
      if (--threads_ > 0) { // one of them will run it
        log(log_level::warning, "remote objects: cannot start a thread (", e.what(), "); calls wait for one of ",
            threads_, " threads");
        return;
      }
      ready_.erase(std::find(ready_.begin(), ready_.end(), a));
      throw error(std::string("fiber: cannot start a thread for remote objects: ") + e.what());
    }
  }

private:
  void run();

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<actor>> ready_;
  std::size_t idle_ = 0, threads_ = 0, limit_ = max_actor_threads;
  bool warned_cap_ = false;
};

/// A mailbox whose tasks run one at a time, in order, on pool threads.
class actor : public std::enable_shared_from_this<actor> {
public:
  /// Queues `f`. Throws fiber::error, with nothing queued, when no thread
  /// can run it (see actor_pool::schedule).
  void post(std::function<void()> f) {
    std::lock_guard lk(m_); // held while scheduling (the pool never calls back under its lock)
    box_.push_back(std::move(f));
    if (scheduled_) return;
    try {
      actor_pool::instance().schedule(shared_from_this());
      scheduled_ = true;
    } catch (...) {
      box_.pop_back();
      throw;
    }
  }

  /// Run a batch of tasks, then give the thread back (rescheduling if more wait).
  void run_some() {
    for (int n = 0; n < 64; ++n) {
      std::function<void()> f;
      {
        std::lock_guard lk(m_);
        if (box_.empty()) {
          scheduled_ = false;
          return;
        }
        f = std::move(box_.front());
        box_.pop_front();
      }
      try { // tasks answer their caller themselves; nothing may end this thread
        f();
      } catch (const std::exception& e) {
        log(log_level::error, "remote object task failed: ", e.what());
      } catch (...) {
        log(log_level::error, "remote object task failed with a non-standard exception");
      }
    }
    try { // fairness: others' turn; this thread is one that will run it
      actor_pool::instance().schedule(shared_from_this());
    } catch (const std::exception& e) {
      log(log_level::error, "remote objects: ", e.what());
    }
  }

  /// No task waits behind the one running now.
  bool nothing_queued() {
    std::lock_guard lk(m_);
    return box_.empty();
  }

private:
  std::mutex m_;
  std::deque<std::function<void()>> box_;
  bool scheduled_ = false;
};

inline void actor_pool::run() {
  use_user_policy(); // started from the runtime thread; methods are user code
  std::unique_lock lk(m_);
  for (;;) {
    if (threads_ > limit_) { // the limit was lowered
      --threads_;
      return;
    }
    if (ready_.empty()) {
      ++idle_;
      bool got = cv_.wait_for(lk, std::chrono::seconds(30), [&] { return !ready_.empty(); });
      --idle_;
      if (!got) {
        --threads_;
        return;
      }
    }
    auto a = std::move(ready_.front());
    ready_.pop_front();
    lk.unlock();
    a->run_some();
    a.reset();
    lk.lock();
  }
}

} // namespace fiber::detail
