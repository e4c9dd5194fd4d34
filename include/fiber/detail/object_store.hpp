// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_store.hpp
/// This process's object store: the objects it put, the copies it fetched
/// or opened on its host, the bound on their memory, and the fetch itself.

#include <fiber/config.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/object_source.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service_state.hpp>
#include <fiber/detail/shared_segment.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

namespace fiber::detail {

/// What an object reference carries: the owner's source service, which
/// object (a random nonce), its size, its type, and where on the owner's
/// host its segment is opened.
struct object_id {
  service_ref source;
  std::uint64_t nonce = 0, size = 0, type = 0;
  std::string host;              ///< the owner's host_key()
  std::uint64_t pid = 0, fd = 0; ///< its segment: /proc/pid/fd/fd there
};

/// This machine as the object store sees it: processes with the same key
/// can open each other's segments. The boot and the network namespace
/// count, so that the network-namespace rig's hosts are hosts.
inline const std::string& host_key() {
  static const std::string key = [] {
    std::string k;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> k;
    for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/pid"}) {
      char buf[64] = {};
      auto n = ::readlink(ns, buf, sizeof buf - 1);
      k += ":" + std::string(buf, n > 0 ? std::size_t(n) : 0);
    }
    return k;
  }();
  return key;
}

/// The process's object store. Any thread; the fetch blocks its caller,
/// never the runtime thread.
class object_store {
public:
  /// One object this process can read: its mapping, and its decoded value
  /// once a reader of a non-contiguous type made it.
  struct entry {
    std::shared_ptr<const segment_view> view;
    std::shared_ptr<const void> value;
    std::uint64_t held = 0; ///< bytes counted against the bound (put or fetched here)
    std::uint64_t last_use = 0;
    bool owned = false; ///< put by this process: never evicted
  };
  using opened = std::pair<std::shared_ptr<const segment_view>, std::shared_ptr<const void>>;

  static object_store& instance() {
    static object_store s;
    return s;
  }

  /// The bound in bytes (object_store_mb).
  static std::uint64_t bound() { return std::uint64_t(config_int("object_store_mb")) << 20; }

  /// Makes room for `size` more bytes held here, evicting fetched copies no
  /// reference uses, least recently used first. Throws error naming
  /// object_store_mb when that is not enough.
  void reserve(std::uint64_t size, const char* what) {
    std::lock_guard lk(m_);
    reserve_locked(size, what);
  }

  /// Gives back what reserve() took, for a put that failed after it.
  void unreserve(std::uint64_t size) {
    std::lock_guard lk(m_);
    held_ -= size;
  }

  /// A segment this process put: `view` readable here at once, held until drop().
  void add_owned(std::uint64_t nonce, std::shared_ptr<const segment_view> view, std::uint64_t size) {
    std::lock_guard lk(m_);
    entries_[nonce] = entry{std::move(view), nullptr, size, ++clock_, true};
  }

  /// The owner dropped `nonce` (or, in the owner, its last handle went):
  /// forget it here; mappings references still hold stay until they go.
  void drop(std::uint64_t nonce) {
    std::lock_guard lk(m_);
    if (auto it = entries_.find(nonce); it != entries_.end()) {
      held_ -= it->second.held;
      entries_.erase(it);
    }
    copies_.erase(nonce);
  }

  /// The entry of `id`, opened on the owner's host or fetched from its
  /// source (waiting on the calling thread). Throws worker_lost (the owner
  /// is gone), error (the bound; the source refused), std::logic_error on
  /// fiber's runtime thread.
  opened open(const object_id& id) {
    std::shared_ptr<blocking_result<std::monostate>> wait;
    bool fetch = false;
    {
      std::lock_guard lk(m_);
      if (auto e = find_locked(id.nonce)) return *e;
      if (runtime::instance().on_runtime_thread())
        throw std::logic_error("fiber::object_ref::get: the first get of an object in a process waits for it, which "
                               "fiber's runtime thread must not (e.g. in a completion handler): call it elsewhere");
      auto& w = fetching_[id.nonce];
      if (!w) w = std::make_shared<blocking_result<std::monostate>>(), fetch = true;
      wait = w;
    }
    if (!fetch) {
      wait->get();
      std::lock_guard lk(m_);
      if (auto e = find_locked(id.nonce)) return *e;
      throw worker_lost("fiber: the object was dropped by its owner while it was read");
    }
    std::exception_ptr failed;
    try {
      load(id);
    } catch (...) {
      failed = std::current_exception();
    }
    {
      std::lock_guard lk(m_);
      fetching_.erase(id.nonce);
    }
    wait->set(nullptr); // waiters look again; the failure is this caller's
    if (failed) std::rethrow_exception(failed);
    std::lock_guard lk(m_);
    if (auto e = find_locked(id.nonce)) return *e;
    throw worker_lost("fiber: the object was dropped by its owner while it was read");
  }

  /// Keeps `value`, decoded from `nonce`, for later readers in this process;
  /// returns the one kept (another thread's, if it was first).
  std::shared_ptr<const void> keep_value(std::uint64_t nonce, std::shared_ptr<const void> value) {
    std::lock_guard lk(m_);
    auto it = entries_.find(nonce);
    if (it == entries_.end()) return value;
    if (!it->second.value) it->second.value = std::move(value);
    return it->second.value;
  }

  /// Bytes held here against the bound; objects known here.
  std::uint64_t held_bytes() const {
    std::lock_guard lk(m_);
    return held_;
  }
  std::size_t size() const {
    std::lock_guard lk(m_);
    return entries_.size();
  }

private:
  std::optional<opened> find_locked(std::uint64_t nonce) {
    auto it = entries_.find(nonce);
    if (it == entries_.end()) return std::nullopt;
    it->second.last_use = ++clock_;
    return opened{it->second.view, it->second.value};
  }

  void reserve_locked(std::uint64_t size, const char* what) {
    const auto cap = bound();
    while (held_ + size > cap) {
      auto victim = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->second.held && !it->second.owned && it->second.view.use_count() == 1 &&
            (!it->second.value || it->second.value.use_count() == 1) &&
            (victim == entries_.end() || it->second.last_use < victim->second.last_use))
          victim = it;
      if (victim == entries_.end())
        throw error(std::string("fiber: ") + what + " of " + std::to_string(size) +
                    " bytes does not fit in the object store: " + std::to_string(held_) + " of " + std::to_string(cap) +
                    " bytes are in use (object_store_mb = " + std::to_string(cap >> 20) +
                    "; raise it, or drop object references)");
      held_ -= victim->second.held;
      copies_.erase(victim->first);
      entries_.erase(victim);
    }
    held_ += size;
  }

  // Opens the owner's segment on its host, else fetches a copy; adds the entry.
  void load(const object_id& id) {
    if (id.host == host_key())
      if (auto v = open_segment(id.pid, id.fd, id.nonce, id.size)) {
        attach(id, false);
        std::lock_guard lk(m_);
        entries_[id.nonce] = entry{std::move(v), nullptr, 0, ++clock_};
        return;
      }
    attach(id, true); // worker_lost here if the owner is gone
    reserve(id.size, "a copy of an object");
    try {
      auto view = fetch(id);
      std::lock_guard lk(m_);
      entries_[id.nonce] = entry{std::move(view), nullptr, id.size, ++clock_};
    } catch (...) {
      std::lock_guard lk(m_);
      held_ -= id.size;
      throw;
    }
  }

  // Asks the source to tell this process when the object goes: waited for
  // before a fetch (its failure is the fetch's), fire and forget otherwise.
  void attach(const object_id& id, bool wait) {
    auto& rt = runtime::instance();
    auto payload = serialize(std::pair{rt.service_url(), listener_id()});
    if (!wait)
      return rt.request(id.source.url, id.source.id, store_attach, std::move(payload),
                        [n = id.nonce](std::exception_ptr e, auto) {
                          if (e) instance().drop(n);
                        });
    wait_on_runtime<std::vector<std::byte>>("fiber::object_ref::get", [&](auto cb) {
      rt.request(id.source.url, id.source.id, store_attach, std::move(payload), cb);
    });
  }

  // Reads the object from its source in pieces, a few in flight, into a new
  // segment here.
  std::shared_ptr<const segment_view> fetch(const object_id& id) {
    shared_segment seg(id.nonce, id.size);
    const std::uint64_t piece = std::min<std::uint64_t>(std::uint64_t(8) << 20,
                                                        (std::uint64_t(config_int("max_message_size_mb")) << 20) / 2);
    constexpr std::size_t window = 4;
    auto& rt = runtime::instance();
    using result = blocking_result<std::vector<std::byte>>;
    std::deque<std::pair<std::uint64_t, std::shared_ptr<result>>> flight;
    std::uint64_t next = 0;
    auto issue = [&] {
      const auto n = std::min(piece, id.size - next);
      auto r = std::make_shared<result>();
      rt.request(id.source.url, id.source.id, store_read, serialize(std::pair{next, n}),
                 [r](std::exception_ptr e, std::vector<std::byte> p) { r->set(std::move(e), std::move(p)); });
      flight.emplace_back(next, std::move(r));
      next += n;
    };
    while (next < id.size && flight.size() < window) issue();
    while (!flight.empty()) {
      auto [at, r] = std::move(flight.front());
      flight.pop_front();
      auto bytes = r->take();
      seg.write(at, bytes);
      if (next < id.size) issue();
    }
    seg.seal();
    auto view = map_segment(seg.fd(), id.size);
    std::lock_guard lk(m_);
    copies_[id.nonce] = std::move(seg); // its fd: for a later reader on this host
    return view;
  }

  // This process's drop listener, made on first use.
  std::uint64_t listener_id() {
    std::lock_guard lk(m_);
    if (!listener_) listener_ = runtime::instance().add_service(std::make_shared<drops>());
    return listener_;
  }

  struct drops final : service {
    void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
      if (op != store_drop) return reply(wire_status::error, failure_payload("fiber: unknown object store operation"));
      const auto nonce = deserialize<std::uint64_t>(payload);
      instance().drop(nonce);
      reply(wire_status::ok, {});
    }
  };

  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, entry> entries_;
  std::unordered_map<std::uint64_t, shared_segment> copies_;
  std::unordered_map<std::uint64_t, std::shared_ptr<blocking_result<std::monostate>>> fetching_;
  std::uint64_t held_ = 0, clock_ = 0, listener_ = 0;
};

} // namespace fiber::detail
