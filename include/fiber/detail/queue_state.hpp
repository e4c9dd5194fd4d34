// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/queue_state.hpp
/// What a Queue handle holds: the broker it names, and, in the creating
/// process, the ownership that keeps the broker alive while a handle exists.

#include <fiber/detail/broker.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/runtime.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Keeps a Queue's broker registered while a handle exists in the creating
/// process; the last one out shuts it down (waiters get fiber::error).
struct queue_owner {
  queue_owner(std::uint64_t id, std::shared_ptr<queue_broker> b) : id(id), broker(std::move(b)) {}
  queue_owner(const queue_owner&) = delete;
  queue_owner& operator=(const queue_owner&) = delete;
  ~queue_owner();

  std::uint64_t id;
  std::shared_ptr<queue_broker> broker;
};

/// Queues created by this process, so a handle that comes back (deserialized
/// here) keeps its broker alive too. Any thread.
class local_queues {
public:
  static local_queues& instance() {
    static local_queues q;
    return q;
  }
  void add(std::uint64_t id, std::string url, const std::shared_ptr<queue_owner>& o) {
    std::lock_guard lk(m_);
    map_[id] = {std::move(url), o};
  }
  std::shared_ptr<queue_owner> find(std::uint64_t id, const std::string& url) {
    std::lock_guard lk(m_);
    auto it = map_.find(id);
    if (it == map_.end() || it->second.first != url) return nullptr;
    return it->second.second.lock();
  }
  void erase_expired(std::uint64_t id) {
    std::lock_guard lk(m_);
    if (auto it = map_.find(id); it != map_.end() && it->second.second.expired()) map_.erase(it);
  }

private:
  std::mutex m_;
  std::unordered_map<std::uint64_t, std::pair<std::string, std::weak_ptr<queue_owner>>> map_;
};

inline queue_owner::~queue_owner() {
  local_queues::instance().erase_expired(id);
  auto& rt = runtime::instance();
  asio::post(rt.executor(), [b = std::move(broker)] {
    b->shutdown("fiber::Queue: the queue is gone (its last handle in the creating process was destroyed)");
  });
  rt.remove_service(id);
}

/// What every copy of one Queue handle shares. The broker is created on
/// first use, so that a default-constructed handle about to be overwritten
/// (deserialization builds values empty first) costs nothing.
struct queue_state {
  explicit queue_state(std::size_t maxsize) : maxsize(maxsize) {}
  queue_state(broker_ref r, std::size_t maxsize, std::shared_ptr<queue_owner> keep)
      : ref_(std::move(r)), maxsize(maxsize), keepalive(std::move(keep)) {
    std::call_once(once_, [] {});
  }

  const broker_ref& ref() {
    std::call_once(once_, [this] {
      auto& rt = runtime::instance();
      auto b = std::make_shared<queue_broker>(rt.executor(), maxsize);
      ref_.id = rt.add_service(b);
      ref_.url = rt.service_url();
      keepalive = std::make_shared<queue_owner>(ref_.id, std::move(b));
      local_queues::instance().add(ref_.id, ref_.url, keepalive);
    });
    return ref_;
  }

private:
  std::once_flag once_;
  broker_ref ref_;

public:
  const std::size_t maxsize;
  std::shared_ptr<queue_owner> keepalive; // set once (in call_once or the constructor)
};

} // namespace fiber::detail
