// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/log_writer.hpp
/// The default log sink's writer thread: records are queued (bounded; when
/// full they are dropped and counted) and written to stderr and the log file
/// off the caller's thread, so a full stderr pipe never blocks fiber's threads.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

namespace fiber::detail {

/// One writer per process (instance()); never destroyed, so records logged
/// during static destruction are still taken. Thread-safety: any thread.
class log_writer {
public:
  /// Queued bytes beyond which records are dropped.
  static constexpr std::size_t capacity = std::size_t(1) << 20;

  static log_writer& instance() {
    static auto* w = new log_writer; // leaked on purpose: usable until _exit
    return *w;
  }

  /// Queue `line` for stderr and `file_line` for `file` (if set). Never
  /// blocks on I/O. Once the process is exiting, waits (bounded) until it
  /// was written.
  void push(std::string line, std::string file_line, std::shared_ptr<std::FILE> file) {
    std::unique_lock lk(m_);
    restart_after_fork_locked();
    const std::size_t n = line.size() + file_line.size();
    if (queued_ + n > capacity) {
      ++dropped_;
      return;
    }
    queued_ += n;
    ++pushed_;
    q_.push_back({std::move(line), std::move(file_line), std::move(file), std::exchange(dropped_, 0)});
    start_locked();
    cv_.notify_one();
    if (exiting_) drain_locked(lk);
  }

  /// Runs `done` once every record queued so far was written: on the
  /// writer's thread, or inline when none is waiting. Never blocks; `done`
  /// must neither block nor log. Example: keep a socket open until the line
  /// saying why it closes is out (stream_state).
  void when_written(std::function<void()> done) {
    {
      std::lock_guard lk(m_);
      restart_after_fork_locked();
      if (started_ && written_ < pushed_) {
        waiters_.push_back({pushed_, std::move(done)});
        return;
      }
    }
    done();
  }

  /// The process is exiting: flush (bounded), and from now on each push
  /// waits for its record (a record logged during exit is not lost).
  void exiting() {
    std::unique_lock lk(m_);
    exiting_ = true;
    if (!exit_deadline_) exit_deadline_ = std::chrono::steady_clock::now() + exit_budget;
    drain_locked(lk);
  }

private:
  struct record {
    std::string line, file_line;
    std::shared_ptr<std::FILE> file;
    std::size_t dropped_before = 0; // records dropped just before this one
  };
  static constexpr auto exit_budget = std::chrono::seconds(2);

  log_writer() = default;

  void drain_locked(std::unique_lock<std::mutex>& lk) {
    if (!started_ || std::this_thread::get_id() == tid_) return;
    auto deadline = exit_deadline_.value_or(std::chrono::steady_clock::now() + exit_budget);
    idle_cv_.wait_until(lk, deadline, [&] { return q_.empty() && !busy_; });
  }

  void start_locked() {
    if (started_) return;
    started_ = true;
    owner_ = ::getpid();
    std::thread t([this] { run(); });
    tid_ = t.get_id();
    t.detach();
    std::atexit([] { log_writer::instance().exiting(); });
  }

  // fork() copies the queue but not the thread: the child starts its own.
  void restart_after_fork_locked() {
    if (!started_ || owner_ == ::getpid()) return;
    started_ = busy_ = exiting_ = false;
    exit_deadline_.reset();
    written_ = pushed_ - q_.size(); // the record the parent was writing is not the child's
  }

  void run() {
    std::unique_lock lk(m_);
    for (;;) {
      run_waiters(lk); // also those a fork left due
      cv_.wait(lk, [&] { return !q_.empty(); });
      auto r = std::move(q_.front());
      q_.pop_front();
      queued_ -= r.line.size() + r.file_line.size();
      busy_ = true;
      lk.unlock();
      write(r);
      lk.lock();
      busy_ = false;
      ++written_;
      if (q_.empty()) idle_cv_.notify_all();
    }
  }

  // Writer thread: the waiters whose records are all written, unlocked.
  void run_waiters(std::unique_lock<std::mutex>& lk) {
    std::vector<std::function<void()>> due;
    std::erase_if(waiters_, [&](auto& w) {
      if (w.first > written_) return false;
      due.push_back(std::move(w.second));
      return true;
    });
    if (due.empty()) return;
    lk.unlock();
    for (auto& f : due) f();
    lk.lock();
  }

  static void write(const record& r) {
    auto lost = r.dropped_before;
    std::string note = lost ? "fiber: " + std::to_string(lost) + " log records dropped\n" : std::string();
    if (r.file) { // the file first: a stderr nobody reads must not hold it back
      if (!note.empty()) std::fputs(note.c_str(), r.file.get());
      std::fwrite(r.file_line.data(), 1, r.file_line.size(), r.file.get());
      std::fflush(r.file.get());
    }
    write_all(2, note + r.line);
  }

  static void write_all(int fd, const std::string& s) {
    for (std::size_t off = 0; off < s.size();) {
      auto n = ::write(fd, s.data() + off, s.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      off += std::size_t(n);
    }
  }

  std::mutex m_;
  std::condition_variable cv_, idle_cv_;
  std::deque<record> q_;
  std::size_t queued_ = 0, dropped_ = 0;
  std::uint64_t pushed_ = 0, written_ = 0;                               // records, since the start
  std::vector<std::pair<std::uint64_t, std::function<void()>>> waiters_; // when_written's: pushed_ then, done
  bool started_ = false, busy_ = false, exiting_ = false;
  pid_t owner_ = -1;
  std::thread::id tid_;
  std::optional<std::chrono::steady_clock::time_point> exit_deadline_;
};

} // namespace fiber::detail
