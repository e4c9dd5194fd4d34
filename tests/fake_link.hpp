// SPDX-License-Identifier: BSL-1.0
#pragma once
// A link that records the frames sent on it and hands test-made frames to
// its reader: the fake under Pool scheduler and service host tests.

#include <fiber/detail/worker_link.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fiber_test {

struct fake_link : fiber::detail::worker_link {
  asio::any_io_executor ex;                 // where its close handler is posted
  fiber::detail::peer_identity who;         // what peer() says
  std::uint64_t number = 1;                 // what id() says
  message_handler on_message;               // set by start(), cleared by close()
  close_handler on_close;                   // set by start(), taken by close()
  std::vector<std::vector<std::byte>> sent; // whole frames, tails appended
  bool closed_ = false;

  void start(message_handler m, close_handler c) override {
    on_message = std::move(m);
    on_close = std::move(c);
  }
  void send(std::vector<std::byte> f, fiber::detail::shared_bytes tail, std::function<void()> on_sent) override {
    f.insert(f.end(), tail.bytes.begin(), tail.bytes.end());
    sent.push_back(std::move(f));
    if (on_sent) on_sent();
  }
  void close(const std::string& reason) override {
    if (std::exchange(closed_, true)) return;
    if (auto h = std::move(on_close)) asio::post(ex, [h, reason] { h(reason); });
    on_message = nullptr;
  }
  bool closed() const noexcept override { return closed_; }
  const fiber::detail::peer_identity& peer() const noexcept override { return who; }
  std::uint64_t id() const noexcept override { return number; }

  // Hands frame `f` to the reader, as if it had arrived.
  void receive(std::vector<std::byte> f) {
    auto [k, body] = fiber::detail::unframe(f);
    on_message(k, body, f);
  }
};

} // namespace fiber_test
