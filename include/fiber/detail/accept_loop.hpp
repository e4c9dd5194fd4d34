// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/accept_loop.hpp
/// Accepting on a listener until it closes: an accept that fails (no file
/// descriptor left, say) pauses accepting, 10 ms doubling to 1 s, logged at
/// most every 10 s; an exception from the handler is logged and accepting goes on.

#include <fiber/detail/listener.hpp>
#include <fiber/log.hpp>

#include <asio/error.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// One listener's accept loop; keeps itself alive while it runs. On the
/// listener's executor only.
class accept_loop : public std::enable_shared_from_this<accept_loop> {
public:
  using handler = std::function<void(stream)>;

  accept_loop(std::shared_ptr<listener> l, handler h)
      : l_(std::move(l)), h_(std::move(h)), timer_(l_->get_executor()) {}

  void start() { arm(); }

private:
  using clock = std::chrono::steady_clock;

  void arm() {
    try {
      l_->async_accept([self = shared_from_this()](std::error_code ec, stream s) { self->done(ec, std::move(s)); });
    } catch (const std::exception& e) { // e.g. out of memory: try again later
      failed(e.what());
    }
  }

  void done(std::error_code ec, stream s) {
    if (ec == asio::error::operation_aborted) return; // closed
    if (ec) return failed(ec.message());
    if (failures_ > 0) log(log_level::warning, "accepting on ", l_->url(), " again after ", failures_, " failures");
    failures_ = 0;
    pause_ = {};
    try {
      h_(std::move(s));
    } catch (const std::exception& e) {
      log(log_level::error, "dropped a connection accepted on ", l_->url(), ": ", e.what());
    } catch (...) {
      log(log_level::error, "dropped a connection accepted on ", l_->url(), ": unknown exception");
    }
    arm();
  }

  void failed(const std::string& why) {
    ++failures_;
    pause_ = std::clamp(pause_ * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    if (const auto now = clock::now(); failures_ == 1 || now - last_log_ >= std::chrono::seconds(10)) {
      last_log_ = now;
      log(log_level::warning, "cannot accept on ", l_->url(), " (", why, "; ", failures_,
          failures_ == 1 ? " failure" : " failures", "): pausing accepts up to 1 s");
    }
    timer_.expires_after(pause_);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->arm();
    });
  }

  std::shared_ptr<listener> l_;
  handler h_;
  asio::steady_timer timer_;
  std::chrono::milliseconds pause_{0};
  std::uint64_t failures_ = 0;
  clock::time_point last_log_{};
};

/// Accepts on `l` until it closes, each connection handed to `h`.
inline void start_accept_loop(std::shared_ptr<listener> l, accept_loop::handler h) {
  std::make_shared<accept_loop>(std::move(l), std::move(h))->start();
}

} // namespace fiber::detail
