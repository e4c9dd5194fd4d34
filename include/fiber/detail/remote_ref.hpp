// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/remote_ref.hpp
/// The handle side of remote objects: what a Remote<T> names, who owns the
/// object, the state of one call, and how a call reaches the relay.

#include <fiber/detail/object_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
#include <atomic>
#include <condition_variable>

namespace fiber::detail {

/// Names one object: the relay's process URL, the relay's service id, the object id.
struct remote_ref {
  std::string url;
  std::uint64_t service = 0;
  std::uint64_t object = 0;
};

/// Owns an object on behalf of the process that made it: the last owning
/// handle gone, the object is destroyed.
struct object_owner {
  explicit object_owner(remote_ref r) : ref(std::move(r)) {}
  object_owner(const object_owner&) = delete;
  object_owner& operator=(const object_owner&) = delete;
  ~object_owner();
  remote_ref ref;
};

/// Objects made by this process, so that a handle that comes back here
/// (deserialized) owns the object too. Any thread.
class local_objects {
public:
  static local_objects& instance() {
    static local_objects o;
    return o;
  }
  void add(const std::shared_ptr<object_owner>& o) {
    std::lock_guard lk(m_);
    map_[{o->ref.service, o->ref.object}] = {o->ref.url, o};
  }
  std::shared_ptr<object_owner> find(const remote_ref& r) {
    std::lock_guard lk(m_);
    auto it = map_.find({r.service, r.object});
    if (it == map_.end() || it->second.first != r.url) return nullptr;
    return it->second.second.lock();
  }
  void erase_expired(const remote_ref& r) {
    std::lock_guard lk(m_);
    if (auto it = map_.find({r.service, r.object}); it != map_.end() && it->second.second.expired()) map_.erase(it);
  }

private:
  std::mutex m_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<std::string, std::weak_ptr<object_owner>>> map_;
};

inline object_owner::~object_owner() {
  local_objects::instance().erase_expired(ref);
  writer w;
  w.write(ref.object);
  runtime::instance().request(ref.url, ref.service, relay_op::destroy, w.release(), [](std::exception_ptr, auto) {});
}

/// What every copy of one Remote handle shares.
struct remote_state {
  remote_ref ref;
  std::shared_ptr<object_owner> owner; // set in the process that made the object
};

/// An error as plain data. Results cross from fiber's runtime thread to the
/// caller's as this, and the caller throws a fresh exception built from it:
/// an exception object is then never shared between threads (its reference
/// count lives in uninstrumented libstdc++, so ThreadSanitizer could not see
/// the hand-over, and no thread may drop the last reference to an exception
/// another is reading).
struct error_info {
  enum class kind : std::uint8_t { none, remote, worker_lost, eof, serialization, timeout, backend, handshake, other };
  kind k = kind::none;
  std::string type;    ///< remote: the remote exception's type name
  std::string message; ///< remote: its what(); otherwise what()

  explicit operator bool() const noexcept { return k != kind::none; }

  template <class E>
  static bool as(const std::exception& x, kind k, error_info& i) {
    if (!dynamic_cast<const E*>(&x)) return false;
    i = {k, {}, x.what()};
    return true;
  }

  static error_info from(std::exception_ptr e) {
    error_info i;
    if (!e) return i;
    try {
      std::rethrow_exception(e);
    } catch (const remote_error& x) {
      i = {kind::remote, x.type_name(), x.message()};
    } catch (const std::exception& x) {
      // The first that matches, in catch-clause order (derived types first).
      if (!(as<worker_lost>(x, kind::worker_lost, i) || as<eof_error>(x, kind::eof, i) ||
            as<serialization_error>(x, kind::serialization, i) || as<timeout_error>(x, kind::timeout, i) ||
            as<backend_error>(x, kind::backend, i) || as<handshake_error>(x, kind::handshake, i)))
        i = {kind::other, {}, x.what()};
    } catch (...) {
      i = {kind::other, {}, "fiber: unknown exception"};
    }
    return i;
  }

  [[noreturn]] void raise() const {
    switch (k) {
    case kind::remote: throw remote_error(type, message);
    case kind::worker_lost: throw worker_lost(message);
    case kind::eof: throw eof_error(message);
    case kind::serialization: throw serialization_error(message);
    case kind::timeout: throw timeout_error(message);
    case kind::backend: throw backend_error(message);
    case kind::handshake: throw handshake_error(message);
    default: throw error(message);
    }
  }

  /// A new exception_ptr (nullptr for none), made on the calling thread.
  std::exception_ptr make() const {
    if (k == kind::none) return nullptr;
    try {
      raise();
    } catch (...) {
      return std::current_exception();
    }
  }
};

/// Result of one call_async, filled on the runtime thread.
struct remote_call_state {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  error_info error;
  std::vector<std::byte> bytes;
};

/// Decode a method's result (std::monostate for void).
template <class R>
R decode_result(std::span<const std::byte> bytes) {
  if constexpr (std::is_void_v<R>) {
    if (!bytes.empty()) throw serialization_error("fiber::Remote: unexpected bytes in a void result");
  } else {
    return fiber::deserialize<R>(bytes);
  }
}

/// Send one call; `done` runs on the runtime thread.
inline void send_call(const remote_ref& r, std::vector<std::byte> payload, request_done done) {
  runtime::instance().request(r.url, r.service, relay_op::call, std::move(payload), std::move(done));
}

inline int next_manager_number() {
  static std::atomic<int> n{1};
  return n++;
}

} // namespace fiber::detail
