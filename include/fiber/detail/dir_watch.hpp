// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/dir_watch.hpp
/// Noticing without polling that a directory, or something in it, was removed
/// or renamed (inotify, watched by Asio): how the runtime learns that a tmp
/// cleaner removed its run directory.

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <sys/inotify.h>
#include <unistd.h>

namespace fiber::detail {

/// Calls `changed` on the executor, at most once per 50 ms, after entries of
/// the directory or the directory itself were removed or renamed. What
/// changed is for `changed` to look at. Executor only.
class dir_watch : public std::enable_shared_from_this<dir_watch> {
public:
  /// nullptr when inotify is not available (e.g. the user's instances are used up).
  static std::shared_ptr<dir_watch> start(const asio::any_io_executor& ex, std::string dir,
                                          std::function<void()> changed) {
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return nullptr;
    auto w = std::shared_ptr<dir_watch>(new dir_watch(ex, fd, std::move(dir), std::move(changed)));
    w->rewatch();
    w->wait();
    return w;
  }

  /// Watches the directory at the path again (after it was made anew).
  void rewatch() noexcept {
    (void)::inotify_add_watch(fd_.native_handle(), dir_.c_str(),
                              IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
  }

  void stop() noexcept {
    std::error_code ignored;
    timer_.cancel();
    fd_.close(ignored);
  }

private:
  dir_watch(const asio::any_io_executor& ex, int fd, std::string dir, std::function<void()> changed)
      : fd_(ex, fd), timer_(ex), dir_(std::move(dir)), changed_(std::move(changed)) {}

  void wait() {
    fd_.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](std::error_code ec) {
      if (ec) return;
      char events[4096];
      while (::read(self->fd_.native_handle(), events, sizeof events) > 0) {
      }
      if (!self->pending_) {
        self->pending_ = true; // a removal comes as a burst of events: act once it is over
        self->timer_.expires_after(std::chrono::milliseconds(50));
        self->timer_.async_wait([self](std::error_code ec) {
          self->pending_ = false;
          if (!ec && self->fd_.is_open()) self->changed_();
        });
      }
      self->wait();
    });
  }

  asio::posix::stream_descriptor fd_;
  asio::steady_timer timer_;
  std::string dir_;
  std::function<void()> changed_;
  bool pending_ = false;
};

} // namespace fiber::detail
