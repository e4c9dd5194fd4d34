// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/async_command.hpp
/// Running a command without blocking the executor: its output read through
/// Asio, its exit seen by a child_watch, a deadline after which it is killed.

#include <fiber/backend/detail/child_watch.hpp>
#include <fiber/backend/detail/command.hpp>
#include <fiber/backend/detail/spawn.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <signal.h>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// Runs a command without blocking the executor: its stdout/stderr are read
/// through Asio, its exit is observed by a child_watch, and `done` runs once
/// on the executor. After `timeout` the child is SIGKILLed (squeue against a
/// dead controller retries for ~18 s).
class async_command : public std::enable_shared_from_this<async_command> {
public:
  using handler = std::function<void(command_result)>;

  /// Throws std::system_error when the command cannot be started.
  static std::shared_ptr<async_command> start(const asio::any_io_executor& ex, const spawn_request& r,
                                              std::chrono::milliseconds timeout, handler done) {
    auto c = spawn(r);
    auto self = std::shared_ptr<async_command>(new async_command(ex, std::move(done)));
    self->pid_ = c.pid;
    if (c.out) self->out_.emplace(ex, c.out.release());
    if (c.err) self->err_.emplace(ex, c.err.release());
    self->open_ = int(bool(self->out_)) + int(bool(self->err_));
    self->watch_ = child_watch::start(ex, c.pid, [w = std::weak_ptr<async_command>(self)](int st) {
      if (auto s = w.lock()) {
        s->res_.status = st;
        s->exited_ = true;
        s->maybe_finish();
      }
    });
    if (self->out_) self->read(*self->out_, self->res_.out);
    if (self->err_) self->read(*self->err_, self->res_.err);
    self->deadline_.expires_after(timeout);
    self->deadline_.async_wait([w = std::weak_ptr<async_command>(self)](std::error_code ec) {
      if (auto s = w.lock(); s && !ec && !s->finished_) {
        s->res_.timed_out = true;
        s->watch_->kill(SIGKILL);
      }
    });
    return self;
  }

  /// Kill and reap the child now; `done` is never called. Noexcept, bounded.
  void abort() noexcept {
    done_ = nullptr;
    finished_ = true;
    std::error_code ignored;
    deadline_.cancel();
    if (out_) out_->close(ignored);
    if (err_) err_->close(ignored);
    if (watch_) {
      watch_->kill(SIGKILL);
      watch_->detach_and_reap(std::chrono::milliseconds(100));
    }
  }

  bool finished() const noexcept { return finished_; }

private:
  async_command(const asio::any_io_executor& ex, handler done) : deadline_(ex), done_(std::move(done)) {}

  void read(asio::posix::stream_descriptor& d, std::string& buf) {
    d.async_read_some(asio::buffer(chunk_for(&d)),
                      [self = shared_from_this(), &d, &buf](std::error_code ec, std::size_t n) {
                        if (self->finished_) return;
                        buf.append(self->chunk_for(&d).data(), n);
                        if (ec) {
                          std::error_code ignored;
                          d.close(ignored);
                          --self->open_;
                          return self->maybe_finish();
                        }
                        self->read(d, buf);
                      });
  }

  std::array<char, 4096>& chunk_for(const asio::posix::stream_descriptor* d) {
    return out_ && d == &*out_ ? out_chunk_ : err_chunk_;
  }

  void maybe_finish() {
    if (finished_ || open_ > 0 || !exited_) return;
    finished_ = true;
    deadline_.cancel();
    if (auto h = std::exchange(done_, nullptr)) h(std::move(res_));
  }

  pid_t pid_ = -1;
  std::optional<asio::posix::stream_descriptor> out_, err_;
  std::array<char, 4096> out_chunk_{}, err_chunk_{};
  int open_ = 0;
  bool exited_ = false, finished_ = false;
  asio::steady_timer deadline_;
  std::shared_ptr<child_watch> watch_;
  command_result res_;
  handler done_;
};

} // namespace fiber::detail
