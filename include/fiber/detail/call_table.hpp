// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/call_table.hpp
/// The calls a RemoteManager's relay waits on, and its routes: how a thread
/// of the master other than the runtime thread sends a call straight to the
/// link of the process holding the object (one thread wake less a call).

#include <fiber/detail/frame.hpp>
#include <fiber/detail/frame_limit.hpp>
#include <fiber/detail/object_wire.hpp>
#include <fiber/detail/reply_line.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/wire_status.hpp>
#include <fiber/detail/worker_link.hpp>
#include <fiber/serialize.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Calls waiting for their reply, by call id, and the objects' routes.
/// Thread-safe: the runtime thread adds, answers and fails calls and keeps
/// the routes; try_call runs on any other thread.
class call_table : public std::enable_shared_from_this<call_table> {
public:
  struct call {
    reply_fn reply;
    std::uint64_t proc = 0; // the process it was sent to
  };

  explicit call_table(asio::any_io_executor runtime) : ex_(std::move(runtime)) {}

  /// A new call id (also used for constructions). Any thread.
  std::uint64_t next_id() noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }

  /// Call `id`, sent to `c.proc`, waits for its reply.
  void add(std::uint64_t id, call c) {
    std::lock_guard lk(m_);
    calls_.emplace(id, std::move(c));
  }
  /// Call `id` if it waits (it is answered now).
  std::optional<call> take(std::uint64_t id) {
    std::lock_guard lk(m_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return std::nullopt;
    auto c = std::move(it->second);
    calls_.erase(it);
    return c;
  }
  /// The calls waiting on process `proc` (it is lost).
  std::vector<call> take_of(std::uint64_t proc) {
    std::vector<call> out;
    std::lock_guard lk(m_);
    for (auto it = calls_.begin(); it != calls_.end();)
      if (it->second.proc == proc) {
        out.push_back(std::move(it->second));
        it = calls_.erase(it);
      } else {
        ++it;
      }
    return out;
  }
  /// Every call waiting, and no route stays (shutdown).
  std::vector<call> take_all() {
    std::vector<call> out;
    std::lock_guard lk(m_);
    for (auto& [id, c] : calls_) out.push_back(std::move(c));
    calls_.clear();
    routes_.clear();
    return out;
  }
  /// Calls waiting, by process (fiber::stats()).
  std::map<std::uint64_t, std::uint64_t> waiting() const {
    std::map<std::uint64_t, std::uint64_t> out;
    std::lock_guard lk(m_);
    for (auto& [id, c] : calls_) ++out[c.proc];
    return out;
  }
  /// Calls that try_call sent to process `proc`, and to all (fiber::stats()).
  std::uint64_t sent_directly(std::uint64_t proc) const {
    std::lock_guard lk(m_);
    auto it = direct_sent_.find(proc);
    return it == direct_sent_.end() ? 0 : it->second;
  }
  std::uint64_t sent_directly() const {
    std::lock_guard lk(m_);
    std::uint64_t n = 0;
    for (auto& [p, c] : direct_sent_) n += c;
    return n;
  }

  /// Runtime thread: object `obj` lives in process `proc`, on link `l`.
  /// Links without a direct writer (behind a relay) get no route.
  /// `line`: the process's reply line, if it has one.
  void route(std::uint64_t obj, std::uint64_t proc, const std::shared_ptr<worker_link>& l,
             std::shared_ptr<reply_line> line = nullptr) {
    auto w = l->direct();
    if (!w) return;
    std::lock_guard lk(m_);
    routes_[obj] = {proc, std::move(w), l, std::move(line)};
  }
  /// Runtime thread: process `proc`'s reply line came after objects were
  /// routed to it (a line it dialled): theirs from now on.
  void set_line(std::uint64_t proc, const std::shared_ptr<reply_line>& line) {
    std::lock_guard lk(m_);
    for (auto& [obj, r] : routes_)
      if (r.proc == proc) r.line = line;
  }
  /// Any thread: whether `obj`'s process has a reply line (try_call may answer there).
  bool has_line(std::uint64_t obj) const {
    std::lock_guard lk(m_);
    const auto it = routes_.find(obj);
    return it != routes_.end() && it->second.line;
  }
  /// Runtime thread: calls of `obj` take the runtime thread's way from now on.
  void unroute(std::uint64_t obj) {
    std::lock_guard lk(m_);
    routes_.erase(obj);
  }
  /// Runtime thread: as unroute, for every object of process `proc`.
  void unroute_proc(std::uint64_t proc) {
    std::lock_guard lk(m_);
    std::erase_if(routes_, [&](auto& kv) { return kv.second.proc == proc; });
  }

  /// Not on the runtime thread: sends call `payload` ([u64 object][u64
  /// method][arguments], as the relay receives it) to the object's process;
  /// `done` runs on the runtime thread with the reply. Written on this
  /// thread when the link has nothing queued, else queued on the runtime
  /// thread (calls leave in the order they were made). False, having done
  /// nothing, when the object has no route or the call is too large: the
  /// runtime thread's way then answers it. `caller`: the executor `done`
  /// completes a handler on; when the process has a reply line that this
  /// thread may read there (reply_line::enter), the reply comes on it and
  /// `done` runs on this thread, inline.
  bool try_call(std::span<const std::byte> payload, request_done& done, const asio::any_io_executor& caller = {}) {
    if (payload.size() < 2 * sizeof(std::uint64_t) || !fits_in_frame(payload.size() + 64)) return false;
    reader r(payload);
    object_msg msg{object_op::call, 0, r.read<std::uint64_t>(), r.read<std::uint64_t>(), {}};
    auto rest = r.read_span(r.remaining());
    msg.args.assign(rest.begin(), rest.end());
    msg.call_id = next_id();
    route_rec rt;
    bool first; // no call of this table waits to be queued on the runtime thread
    {
      std::lock_guard lk(m_);
      auto it = routes_.find(msg.object_id);
      if (it == routes_.end()) return false;
      rt = it->second;
      // Answered as the relay answers its own process (service_host::request),
      // or on the reply line.
      const bool aside = rt.line && rt.line->enter(caller);
      if (aside) msg.op = object_op::call_aside;
      calls_.emplace(msg.call_id,
                     call{aside ? rt.line->reply_fn_for(ex_, std::move(done)) : answer_later(ex_, std::move(done)),
                          rt.proc});
      ++direct_sent_[rt.proc];
      first = queued_ == 0;
    }
    auto f = frame(frame_kind::object, msg);
    // Written outside the lock: a full socket blocks this thread, never the
    // runtime thread (which takes the lock for every reply).
    if (first && rt.writer.try_send(f)) return true;
    {
      std::lock_guard lk(m_);
      ++queued_; // written by the runtime thread, in order, before any later call here
    }
    asio::post(ex_, [self = shared_from_this(), link = std::move(rt.link), f = std::move(f)]() mutable {
      if (auto l = link.lock()) l->send(std::move(f));
      std::lock_guard lk(self->m_);
      --self->queued_;
    });
    return true;
  }

private:
  struct route_rec {
    std::uint64_t proc = 0;
    direct_writer writer;
    std::weak_ptr<worker_link> link;
    std::shared_ptr<reply_line> line;
  };

  asio::any_io_executor ex_;
  std::atomic<std::uint64_t> next_{1};
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, call> calls_;
  std::unordered_map<std::uint64_t, route_rec> routes_;
  std::map<std::uint64_t, std::uint64_t> direct_sent_;
  std::size_t queued_ = 0; // calls posted to the runtime thread, not yet queued on their link
};

} // namespace fiber::detail
