// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker/output.hpp
/// The docker backend's output relay: containers' output written to the
/// master's stdout/stderr or worker_output_dir files by a thread of its own,
/// through a bounded buffer that drops (and counts) when full, so a reader
/// that stalls never blocks the runtime thread.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace fiber::detail::docker {

/// Writes output to sinks from one thread (see the file comment). Sinks are
/// numbered: 1 and 2 are this process's stdout and stderr; open() adds
/// files. Thread-safety: every member may be called from any thread.
class output_relay {
public:
  /// `limit`: bytes waiting to be written at most; more is dropped.
  explicit output_relay(std::size_t limit = std::size_t(8) << 20) : s_(std::make_shared<state>(limit)) {}
  output_relay(const output_relay&) = delete;
  output_relay& operator=(const output_relay&) = delete;
  /// Writes what is queued for up to 1 s, then leaves the thread to finish
  /// (or to stay blocked on a reader that never reads) on its own.
  ~output_relay() {
    {
      std::lock_guard g(s_->m);
      s_->stop = true;
    }
    s_->cv.notify_all();
    if (!s_->worker.joinable()) return;
    std::unique_lock lk(s_->m);
    if (s_->cv.wait_for(lk, std::chrono::seconds(1), [&] { return s_->finished; })) {
      lk.unlock();
      s_->worker.join();
    } else {
      s_->worker.detach();
    }
  }

  /// A sink appending to `path` (created 0600), opened by the relay's thread
  /// (a fifo's open may block). Never blocks.
  int open(std::string path) {
    std::lock_guard g(s_->m);
    const int id = s_->next_id++;
    s_->queue.push_back({id, op::open, std::move(path)});
    wake_locked();
    return id;
  }

  /// Queues `bytes` for sink `id`; drops them (counted) when the buffer is full. Never blocks.
  void write(int id, std::string_view bytes) {
    if (bytes.empty()) return;
    std::lock_guard g(s_->m);
    if (s_->queued + bytes.size() > s_->limit) {
      s_->dropped += bytes.size();
      return;
    }
    s_->queued += bytes.size();
    s_->queue.push_back({id, op::write, std::string(bytes)});
    wake_locked();
  }

  /// Closes sink `id` once what was queued for it is written. Never blocks.
  void close(int id) {
    if (id <= 2) return;
    std::lock_guard g(s_->m);
    s_->queue.push_back({id, op::close, {}});
    wake_locked();
  }

  /// Bytes dropped so far because the buffer was full.
  std::uint64_t dropped() const {
    std::lock_guard g(s_->m);
    return s_->dropped;
  }
  /// Bytes waiting to be written.
  std::size_t queued() const {
    std::lock_guard g(s_->m);
    return s_->queued;
  }

private:
  enum class op { open, write, close };
  struct item {
    int sink;
    op what;
    std::string data; // open: the path; write: the bytes
  };
  struct state {
    explicit state(std::size_t l) : limit(l) {}
    mutable std::mutex m;
    std::condition_variable cv;
    std::deque<item> queue;
    std::size_t limit, queued = 0;
    std::uint64_t dropped = 0;
    int next_id = 3;
    bool stop = false, finished = false;
    std::thread worker;
  };

  // The thread starts with the first item: a launcher whose containers print nothing costs none.
  void wake_locked() {
    if (!s_->worker.joinable()) s_->worker = std::thread([s = s_] { run(*s); });
    s_->cv.notify_all();
  }

  static void run(state& s) {
    std::map<int, int> fds{{1, 1}, {2, 2}};
    std::unique_lock lk(s.m);
    for (;;) {
      s.cv.wait(lk, [&] { return s.stop || !s.queue.empty(); });
      if (s.queue.empty()) break; // stopping, all written
      auto it = std::move(s.queue.front());
      s.queue.pop_front();
      lk.unlock();
      if (it.what == op::open) {
        fds[it.sink] = ::open(it.data.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      } else if (auto f = fds.find(it.sink); f != fds.end()) {
        if (it.what == op::write) write_all(f->second, it.data);
        else {
          if (f->second >= 0) ::close(f->second);
          fds.erase(f);
        }
      }
      lk.lock();
      if (it.what == op::write) s.queued -= it.data.size();
    }
    for (auto& [id, fd] : fds)
      if (id > 2 && fd >= 0) ::close(fd);
    s.finished = true;
    s.cv.notify_all();
  }

  static void write_all(int fd, std::string_view bytes) {
    while (fd >= 0 && !bytes.empty()) {
      auto n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      bytes.remove_prefix(std::size_t(n));
    }
  }

  std::shared_ptr<state> s_;
};

} // namespace fiber::detail::docker
