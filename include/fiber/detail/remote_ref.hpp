// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/remote_ref.hpp
/// The handle side of remote objects: what a Remote<T> names, who owns the
/// object, the state of one call, and how a call reaches the relay.

#include <fiber/detail/call_table.hpp>
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
  std::weak_ptr<call_table> calls; // its RemoteManager's (try_call)
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

/// Decode a method's result (std::monostate for void).
template <class R>
R decode_result(std::span<const std::byte> bytes) {
  if constexpr (std::is_void_v<R>) {
    if (!bytes.empty()) throw serialization_error("fiber::Remote: unexpected bytes in a void result");
  } else {
    return fiber::deserialize<R>(bytes);
  }
}

/// Whether calls of `s` made in this process can be answered on its
/// process's reply line (call_table::has_line). Any thread.
inline bool has_reply_line(const remote_state& s) {
  if (!s.owner) return false;
  const auto t = s.owner->calls.lock();
  return t && t->has_line(s.ref.object);
}

/// Send one call; `done` runs on the runtime thread, or inline on this
/// one when the reply comes on a reply line read on `caller` (the
/// executor `done` completes a handler on; empty: none). Off the runtime
/// thread of the process that made the object, the call goes straight to
/// the object's process (call_table::try_call), else through the relay.
inline void send_call(const remote_state& s, std::vector<std::byte> payload, request_done done,
                      const asio::any_io_executor& caller = {}) {
  auto& rt = runtime::instance();
  if (s.owner && !rt.on_runtime_thread())
    if (auto t = s.owner->calls.lock(); t && t->try_call(payload, done, caller)) return;
  rt.request(s.ref.url, s.ref.service, relay_op::call, std::move(payload), std::move(done));
}

inline int next_manager_number() {
  static std::atomic<int> n{1};
  return n++;
}

} // namespace fiber::detail
