// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/service_state.hpp
/// What a handle to a service-backed object (Queue, Lock, Event, Value, ...)
/// holds: the service it names, created on first use, and, in the creating
/// process, the ownership that keeps the service alive while a handle exists.

#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/serialize.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace fiber::detail {

/// Keeps a service registered while a handle exists in the creating process;
/// the last one out runs `released` (on its own thread, at once), shuts the
/// service down (waiters get worker_lost with `gone`) and unregisters it
/// (later requests get fiber::error: no such object).
struct service_owner {
  service_owner(std::uint64_t id, std::shared_ptr<service> s, std::string gone, std::function<void()> released = {})
      : id(id), svc(std::move(s)), gone(std::move(gone)), released(std::move(released)) {}
  service_owner(const service_owner&) = delete;
  service_owner& operator=(const service_owner&) = delete;
  ~service_owner();

  std::uint64_t id;
  std::shared_ptr<service> svc;
  std::string gone;
  std::function<void()> released;
};

/// The services this process created for handles, so that a handle coming
/// back (deserialized here) keeps its service alive too. Any thread.
class local_services {
public:
  static local_services& instance() {
    static local_services s;
    return s;
  }
  void add(std::uint64_t id, std::string url, const std::shared_ptr<service_owner>& o) {
    std::lock_guard lk(m_);
    map_[id] = {std::move(url), o};
  }
  std::shared_ptr<service_owner> find(std::uint64_t id, const std::string& url) {
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
  std::unordered_map<std::uint64_t, std::pair<std::string, std::weak_ptr<service_owner>>> map_;
};

inline service_owner::~service_owner() {
  if (released) released();
  local_services::instance().erase_expired(id);
  auto& rt = runtime::instance();
  asio::post(rt.executor(), [s = std::move(svc), why = std::move(gone)] { s->shutdown(why); });
  rt.remove_service(id);
}

/// What every copy of one handle shares. The service is created on first
/// use (make(executor) on the runtime's executor), so that a
/// default-constructed handle about to be overwritten (deserialization
/// builds values empty first) costs nothing. Any thread.
class service_state {
public:
  using factory = std::function<std::shared_ptr<service>(asio::any_io_executor)>;

  /// A new object: its service starts in this process on first use; when
  /// the last handle here goes, `released` runs and waiters get
  /// worker_lost(`gone`).
  service_state(factory make, std::string gone, std::function<void()> released = {})
      : make_(std::move(make)), gone_(std::move(gone)), released_(std::move(released)) {}
  /// A handle read from bytes: names `r`; in the creating process it keeps
  /// the service alive like any local handle.
  explicit service_state(service_ref r) : ref_(std::move(r)) {
    keepalive_ = local_services::instance().find(ref_.id, ref_.url);
    std::call_once(once_, [] {});
  }
  service_state(const service_state&) = delete;
  service_state& operator=(const service_state&) = delete;

  const service_ref& ref() {
    std::call_once(once_, [this] {
      auto& rt = runtime::instance();
      auto s = make_(rt.executor());
      ref_.id = rt.add_service(s);
      ref_.url = rt.service_url();
      keepalive_ = std::make_shared<service_owner>(ref_.id, std::move(s), std::move(gone_), std::move(released_));
      local_services::instance().add(ref_.id, ref_.url, keepalive_);
      make_ = nullptr;
    });
    return ref_;
  }

  /// Serialization: the service's URL and id (starting it here if unused).
  void write(writer& w) {
    const auto& r = ref();
    w.write(r.url);
    w.write(r.id);
  }
  static service_ref read(reader& r) {
    service_ref ref;
    ref.url = r.read<std::string>();
    ref.id = r.read<std::uint64_t>();
    return ref;
  }

  /// True if both name the same service.
  static bool same(service_state& a, service_state& b) {
    if (&a == &b) return true;
    const auto &ra = a.ref(), &rb = b.ref();
    return ra.id == rb.id && ra.url == rb.url;
  }

private:
  std::once_flag once_;
  factory make_;
  std::string gone_;
  std::function<void()> released_;
  service_ref ref_;
  std::shared_ptr<service_owner> keepalive_; // set once (in call_once or the constructor)
};

} // namespace fiber::detail
