// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_store.hpp
/// This process's object store: the objects it put, the copies it fetched
/// or opened on its host, the bound on their memory, and the fetch itself.

#include <fiber/config.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/handshake.hpp>
#include <fiber/detail/host_evict.hpp>
#include <fiber/detail/host_lock.hpp>
#include <fiber/detail/host_segments.hpp>
#include <fiber/detail/host_share.hpp>
#include <fiber/detail/object_source.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service_state.hpp>
#include <fiber/detail/shared_segment.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#include <asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

namespace fiber::detail {

/// What an object reference carries: the owner's source service, which
/// object (a random nonce), its size, its type, and where on the owner's
/// host its segment is opened.
struct object_id {
  service_ref source;
  std::uint64_t nonce = 0, size = 0, type = 0;
  std::uint64_t host = 0;        ///< the owner's host_key()
  std::uint64_t pid = 0, fd = 0; ///< its segment: /proc/pid/fd/fd there
};

/// This machine as the object store sees it: processes with the same key
/// can open each other's segments. The boot and the network namespace
/// count, so that the network-namespace rig's hosts are hosts.
inline std::uint64_t host_key() {
  static const std::uint64_t key = [] {
    std::string k;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> k;
    for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/pid"}) {
      char buf[64] = {};
      auto n = ::readlink(ns, buf, sizeof buf - 1);
      k += ":" + std::string(buf, n > 0 ? std::size_t(n) : 0);
    }
    return fnv1a(k);
  }();
  return key;
}

/// What a reader holds of an object: its mapping, its decoded value once a
/// reader of a non-contiguous type made it, and a token whose count says
/// whether any reference in this process uses it.
struct opened_object {
  std::shared_ptr<const segment_view> view;
  std::shared_ptr<const void> value;
  std::shared_ptr<const void> users;
};

/// The process's object store. Any thread; the fetch blocks its caller,
/// never the runtime thread.
class object_store {
public:
  static object_store& instance() {
    static object_store s;
    static const bool probed = (object_store_probe().store(&usage_of_instance), true);
    (void)probed;
    return s;
  }

  /// This process's use of the store (fiber::stats()). Any thread.
  object_store_stats usage() const {
    std::lock_guard lk(m_);
    return {entries_.size(), held_, bound(), fetched().load()};
  }
  static object_store_stats usage_of_instance() { return instance().usage(); }

  /// The name of this run's segments' memfds: "fiber-object-" and a tag
  /// derived from the run's secret (which it does not reveal).
  static const std::string& segment_name() {
    static const std::string name = [] {
      const auto mac = hmac(runtime::instance().secret(), std::as_bytes(std::span(std::string_view("object store"))));
      return "fiber-object-" + to_hex(std::span(mac).first(8));
    }();
    return name;
  }

  /// The bound in bytes (object_store_mb).
  static std::uint64_t bound() { return std::uint64_t(config_int("object_store_mb")) << 20; }

  /// Makes room for `size` more bytes on this host (all processes'
  /// segments: host_segments) and in this process: evicts the copies no
  /// reference here uses, least recently used first, then asks the run's
  /// other processes on the host to evict theirs (host_evict). Returns the
  /// host's lock, taken first: hold it until the new segment is mapped, so
  /// that the next reserve on the host counts it. Throws error naming
  /// object_store_mb when there is no room. Reads /proc and waits for the
  /// lock: never on the runtime thread.
  [[nodiscard]] host_lock reserve(std::uint64_t size, const char* what) {
    host_lock lock(segment_name() + "-lock", on_host_lock_wait());
    if (auto& f = on_host_locked()) f();
    auto host = host_segments(segment_name());
    for (bool asked = false;; asked = true) {
      std::vector<entry> gone; // destroyed unlocked
      {
        std::lock_guard lk(m_);
        if (make_room_locked(size, gone, host.bytes)) {
          held_ += size;
          return lock;
        }
        if (asked)
          throw error(std::string("fiber: ") + what + " of " + std::to_string(size) +
                      " bytes does not fit in this host's object store: " +
                      std::to_string(std::max(host.bytes, held_)) + " of " + std::to_string(bound()) +
                      " bytes are in use, " + std::to_string(held_) + " by this process (object_store_mb = " +
                      std::to_string(bound() >> 20) + "; raise it, or drop object references)");
      }
      gone.clear();
      ask_to_evict(segment_name(), host.holders);
      host = host_segments(segment_name());
    }
  }

  /// Test hooks: called with the host's lock just taken, and when a
  /// reserve starts to wait for it. Set before use; empty by default.
  static std::function<void()>& on_host_locked() {
    static std::function<void()> f;
    return f;
  }
  static std::function<void()>& on_host_lock_wait() {
    static std::function<void()> f;
    return f;
  }

  /// Evicts every copy no reference in this process uses (another process
  /// on the host needs the room). Any thread.
  void evict_unused() {
    std::vector<entry> gone; // destroyed unlocked
    std::lock_guard lk(m_);
    for (auto it = entries_.begin(); it != entries_.end();)
      if (unused(it->second)) {
        held_ -= it->second.held;
        gone.push_back(std::move(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
  }

  /// Gives back what reserve() took, for a put that failed after it.
  void unreserve(std::uint64_t size) {
    std::lock_guard lk(m_);
    held_ -= size;
  }

  /// A segment this process put: `view` readable here at once, held until drop().
  void add_owned(std::uint64_t nonce, std::shared_ptr<const segment_view> view, std::uint64_t size) {
    add(nonce, std::move(view), size, nullptr, true);
  }

  /// The owner dropped `nonce` (or, in the owner, its last handle went):
  /// forget it here; mappings references still hold stay until they go.
  void drop(std::uint64_t nonce) {
    entry gone;
    std::lock_guard lk(m_);
    if (auto it = entries_.find(nonce); it != entries_.end()) {
      held_ -= it->second.held;
      gone = std::move(it->second);
      entries_.erase(it);
    }
  }

  /// The entry of `id`: opened on the owner's host, received from this
  /// host's holder, or fetched (waiting on the calling thread). Throws
  /// worker_lost (the owner is gone), error (the bound; the owner dropped
  /// it), std::logic_error on fiber's runtime thread.
  opened_object open(const object_id& id) {
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
    if (!it->second.o.value) it->second.o.value = std::move(value);
    return it->second.o.value;
  }

  /// Bytes held here against the bound.
  std::uint64_t held_bytes() const {
    std::lock_guard lk(m_);
    return held_;
  }

  /// Bytes fetches have received in this process so far (for tests and benchmarks).
  static std::atomic<std::uint64_t>& fetched() {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }

private:
  // A copy fetched here: its segment, the source that serves it to other
  // hosts, and the socket that hands it to processes on this one.
  struct copy {
    shared_segment seg;
    std::shared_ptr<object_source> source;
    std::uint64_t source_id = 0;
    std::shared_ptr<host_server> server;
    copy() = default;
    copy(const copy&) = delete;
    copy& operator=(const copy&) = delete;
    ~copy() {
      auto& rt = runtime::instance();
      asio::post(rt.executor(), [src = std::move(source), id = source_id, srv = std::move(server),
                                 seg = std::make_shared<shared_segment>(std::move(seg))] {
        if (srv) srv->close();
        if (src) src->shutdown("");
        if (id) runtime::instance().remove_service(id);
      });
    }
  };

  struct entry {
    opened_object o;
    std::uint64_t held = 0; ///< bytes counted against the bound (put or fetched here)
    std::uint64_t last_use = 0;
    bool owned = false; ///< put by this process: never evicted
    std::shared_ptr<copy> fetched;
  };

  // Whether `e` may be evicted: not put here, and no reference here uses it.
  static bool unused(const entry& e) { return !e.owned && e.o.users.use_count() == 1; }

  std::optional<opened_object> find_locked(std::uint64_t nonce) {
    auto it = entries_.find(nonce);
    if (it == entries_.end()) return std::nullopt;
    it->second.last_use = ++clock_;
    return it->second.o;
  }

  // Evicts this process's unused copies until `size` more bytes fit;
  // false when they do not. `host`: bytes of the host's segments, this
  // process's among them.
  bool make_room_locked(std::uint64_t size, std::vector<entry>& gone, std::uint64_t host) {
    const auto cap = bound();
    while (held_ + size > cap || host + size > cap) {
      auto victim = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->second.held && unused(it->second) &&
            (victim == entries_.end() || it->second.last_use < victim->second.last_use))
          victim = it;
      if (victim == entries_.end()) return false;
      held_ -= victim->second.held;
      host -= std::min(host, victim->second.held);
      gone.push_back(std::move(victim->second));
      entries_.erase(victim);
    }
    return true;
  }

  void add(std::uint64_t nonce, std::shared_ptr<const segment_view> view, std::uint64_t held,
           std::shared_ptr<copy> fetched = nullptr, bool owned = false) {
    if (!owned) serve_evictions();
    std::lock_guard lk(m_);
    auto& e = entries_[nonce];
    e.o = {std::move(view), nullptr, std::make_shared<int>()};
    e.held = held;
    e.last_use = ++clock_;
    e.owned = owned;
    e.fetched = std::move(fetched);
  }

  // The owner's segment on its host; else this host's copy from the process
  // holding it; else this process claims the host's copy and fetches it.
  void load(const object_id& id) {
    if (id.host == host_key())
      if (auto v = open_segment(id.pid, id.fd, id.nonce, id.size)) {
        attach(id, false);
        return add(id.nonce, std::move(v), 0);
      }
    attach(id, true); // worker_lost here if the owner is gone
    for (int tries = 0; tries < 3; ++tries) {
      if (auto fd = receive_shared(id.nonce))
        if (auto v = map_sealed(fd.get(), id.nonce, id.size)) return add(id.nonce, std::move(v), 0);
      if (auto listener = claim_shared(id.nonce)) return fetch(id, std::move(listener));
    }
    fetch(id, {}); // the host's holder keeps failing: a copy of this process's own
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

  // Where to read from: the owner places this copy at the end of its chain
  // (`failed`: the source that just failed us, dropped from it).
  service_ref where(const object_id& id, const service_ref& mine, const service_ref& failed) {
    auto& rt = runtime::instance();
    auto rep = wait_on_runtime<std::vector<std::byte>>("fiber::object_ref::get", [&](auto cb) {
      rt.request(id.source.url, id.source.id, store_where,
                 serialize(std::pair{std::pair{mine.url, mine.id}, std::pair{failed.url, failed.id}}), cb);
    });
    auto [url, sid] = deserialize<std::pair<std::string, std::uint64_t>>(rep);
    return url.empty() ? id.source : service_ref{url, sid};
  }

  // Reads the object in pieces, a few in flight, into a new segment here,
  // from the source the owner names; serves the pieces already here to the
  // next host meanwhile. A source that fails is replaced by the owner.
  void fetch(const object_id& id, unique_fd listener) {
    auto lock = reserve(id.size, "a copy of an object");
    auto& rt = runtime::instance();
    auto c = std::make_shared<copy>();
    try {
      c->seg = shared_segment(id.nonce, id.size, segment_name());
      auto view = map_segment(c->seg.fd(), id.size);
      lock.release(); // the host counts the copy now
      c->source = std::make_shared<object_source>(view, 0, false);
      c->source_id = rt.add_service(c->source);
      const service_ref mine{rt.service_url(), c->source_id};
      service_ref from = where(id, mine, {});
      const std::uint64_t piece = std::min<std::uint64_t>(std::uint64_t(8) << 20,
                                                          (std::uint64_t(config_int("max_message_size_mb")) << 20) / 2);
      constexpr std::size_t window = 4;
      using result = blocking_result<std::vector<std::byte>>;
      std::deque<std::pair<std::uint64_t, std::shared_ptr<result>>> flight;
      std::uint64_t next = 0, written = 0;
      auto issue = [&] {
        const auto n = std::min(piece, id.size - next);
        auto r = std::make_shared<result>();
        rt.request(from.url, from.id, store_read, serialize(std::pair{next, n}),
                   [r](std::exception_ptr e, std::vector<std::byte> p) { r->set(std::move(e), std::move(p)); });
        flight.emplace_back(next, std::move(r));
        next += n;
      };
      while (written < id.size) {
        while (next < id.size && flight.size() < window) issue();
        auto [at, r] = std::move(flight.front());
        flight.pop_front();
        std::vector<std::byte> bytes;
        try {
          bytes = r->take();
        } catch (const error&) {
          if (from.url == id.source.url && from.id == id.source.id) throw;
          from = where(id, mine, from); // resume from the owner, at the first byte missing here
          flight.clear();
          next = written;
          continue;
        }
        c->seg.write(at, bytes);
        written = at + bytes.size();
        fetched() += bytes.size();
        asio::post(rt.executor(), [src = c->source, written] { src->advance(written); });
      }
      c->seg.seal();
      if (listener) {
        c->server = std::make_shared<host_server>(rt.executor(), std::move(listener),
                                                  [fd = c->seg.fd()](unique_fd peer) { send_fd(peer.get(), fd); });
        asio::post(rt.executor(), [srv = c->server] { srv->start(); });
      }
      add(id.nonce, std::move(view), id.size, std::move(c));
    } catch (...) {
      unreserve(id.size);
      throw;
    }
  }

  // Answers other processes of the run on this host that need room, from
  // the first copy this process maps; the server lives in its wait.
  void serve_evictions() {
    std::call_once(evict_once_, [] {
      auto l = evict_listener(segment_name());
      if (!l) return;
      auto& rt = runtime::instance();
      auto srv = std::make_shared<host_server>(rt.executor(), std::move(l), [](unique_fd c) {
        instance().evict_unused();
        // after the copies' own clean-up, posted meanwhile: their mappings go first
        asio::post(runtime::instance().executor(), [c = std::make_shared<unique_fd>(std::move(c))] {
          const char done = 1;
          (void)::send(c->get(), &done, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        });
      });
      asio::post(rt.executor(), [srv] { srv->start(); });
    });
  }

  // This process's drop listener, made on first use; not under m_, which
  // the runtime thread takes (drops) while add_service waits for it.
  std::uint64_t listener_id() {
    std::call_once(listener_once_, [this] { listener_ = runtime::instance().add_service(std::make_shared<drops>()); });
    return listener_;
  }

  struct drops final : service {
    void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
      if (op != store_drop) return reply(wire_status::error, failure_payload("fiber: unknown object store operation"));
      instance().drop(deserialize<std::uint64_t>(payload));
      reply(wire_status::ok, {});
    }
  };

  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, entry> entries_;
  std::unordered_map<std::uint64_t, std::shared_ptr<blocking_result<std::monostate>>> fetching_;
  std::uint64_t held_ = 0, clock_ = 0;
  std::once_flag listener_once_, evict_once_;
  std::uint64_t listener_ = 0; // set once, in listener_once_
};

} // namespace fiber::detail
