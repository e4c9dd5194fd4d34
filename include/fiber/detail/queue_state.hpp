// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/queue_state.hpp
/// What a Queue handle holds: its broker (service_state.hpp), its bound,
/// whether close() was called, and the async puts it has in flight.

#include <fiber/detail/broker.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/pending_count.hpp>
#include <fiber/detail/service_state.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace fiber::detail {

/// What every copy of one Queue handle shares. Any thread.
struct queue_state {
  explicit queue_state(std::size_t maxsize)
      : svc([maxsize](asio::any_io_executor ex) { return std::make_shared<queue_broker>(std::move(ex), maxsize); },
            "fiber::Queue: the queue is gone (its last handle in the creating process was destroyed)"),
        maxsize(maxsize) {}
  queue_state(service_ref r, std::size_t maxsize) : svc(std::move(r)), maxsize(maxsize) {}

  const service_ref& ref() { return svc.ref(); }

  /// close() was called: puts and gets through this handle are refused.
  void check_open(const char* what) const {
    if (closed.load(std::memory_order_acquire))
      throw std::logic_error(std::string(what) + ": the queue is closed (close() was called on this handle)");
  }

  /// Counts an async put from its start to its broker's answer (join_thread).
  void put_started() { puts_.started(); }
  void put_done() { puts_.done(); }
  void wait_puts() { puts_.wait(); }

  service_state svc;
  const std::size_t maxsize;
  std::atomic<bool> closed{false};

private:
  pending_count puts_;
};

} // namespace fiber::detail
