// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/liveness.hpp
/// Which of a master's workers are known dead (their job ended, or their
/// master link was lost and they have had time to end themselves), and the
/// service through which other processes of the run wait for that verdict.

#include <fiber/config.hpp>
#include <fiber/detail/broker_wire.hpp>
#include <fiber/detail/heartbeat_period.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/serialize.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <compare>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace fiber::detail {

/// A process of the run as its handshake named it: the same on every link
/// it opens, so it survives reconnects.
struct process_ref {
  std::string host;
  std::int64_t pid = 0;
  std::uint64_t incarnation = 0; ///< process_incarnation(): pids repeat across containers
  auto operator<=>(const process_ref&) const = default;
};

/// The liveness service has this id in every process (other ids start at 1).
inline constexpr std::uint64_t liveness_service_id = ~std::uint64_t{0};

/// Its one request: [string host][i64 pid][u64 incarnation] → [u8 verdict][string why],
/// answered once the process is known dead (`dead`), or at once when it is
/// not a worker of the asked process (`unknown`). About the asked process
/// itself it never answers: a process that can ask it is not dead.
namespace liveness_op {
inline constexpr std::uint32_t watch = 1;
} // namespace liveness_op
enum class verdict : std::uint8_t { dead = 0, unknown = 1 };

/// The registry of this process's workers, by the identity they connected
/// with. Runtime thread only. It remembers the last `dead_kept` dead
/// workers; an older one is forgotten (a watch on it is answered `unknown`,
/// and the asker counts it dead once it has had no link for grace()), so a
/// long run that replaces workers holds a bounded registry.
class liveness final : public service {
public:
  using dead_fn = std::function<void(const std::string& why)>;
  static constexpr std::size_t dead_kept = 4096;

  liveness(asio::any_io_executor ex, process_ref self) : ex_(std::move(ex)), self_(std::move(self)) {}

  /// Worker `id` authenticated as `p` (alive from now on).
  void connected(std::uint64_t id, process_ref p) {
    auto& e = procs_[p];
    e.dead = false;
    e.grace.reset();
    by_id_[id] = std::move(p);
  }

  /// Worker `id`'s job ended: it is dead now.
  void ended(std::uint64_t id, const std::string& why) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    auto p = std::move(it->second);
    by_id_.erase(it);
    declare(p, why);
  }

  /// Worker `id`'s master link closed: a worker ends itself once its master
  /// is gone or silent for heartbeat_timeout_ms, so it is dead at the latest
  /// that long (plus two heartbeat periods) from now, or when its job ends.
  void link_lost(std::uint64_t id, const std::string& why) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    auto& e = procs_[it->second];
    if (e.dead || e.grace) return;
    e.grace = std::make_unique<asio::steady_timer>(ex_, grace());
    e.grace->async_wait([this, p = it->second, why](std::error_code ec) {
      if (!ec) declare(p, "its master link was lost (" + why + ")");
    });
  }

  /// Whether `p` is one of this process's workers, alive or dead (and not
  /// forgotten).
  bool knows(const process_ref& p) const { return procs_.count(p) > 0; }
  /// The workers known, alive or dead.
  std::size_t size() const { return procs_.size(); }

  /// Calls `dead(why)` once `p` (known()) is known dead: now if it is.
  void watch(const process_ref& p, dead_fn dead) {
    auto& e = procs_[p];
    if (e.dead) return dead(e.why);
    e.watchers.push_back(std::move(dead));
  }

  /// How long a process without a link is given before it counts as dead
  /// when nobody knows better: its timeout and two periods, stretched as
  /// far as this process has stretched its heartbeats (heartbeat_period.hpp).
  static std::chrono::milliseconds grace() {
    const auto interval = config_int("heartbeat_interval_ms");
    const auto stretch = std::max<std::int64_t>(longest_announced_period(), interval);
    return std::chrono::milliseconds((config_int("heartbeat_timeout_ms") + 2 * interval) * stretch / interval);
  }

  void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    if (op != liveness_op::watch) return reply_text(reply, wire_status::error, "fiber: unknown liveness request");
    reader r(payload);
    process_ref p;
    p.host = r.read<std::string>();
    p.pid = r.read<std::int64_t>();
    p.incarnation = r.read<std::uint64_t>();
    if (p == self_) return parked_.push_back(std::move(reply)); // answered never
    if (!knows(p)) return answer(reply, verdict::unknown, "");
    watch(p, [reply = std::move(reply)](const std::string& why) { answer(reply, verdict::dead, why); });
  }

  /// A watch request's payload and its reply's decoding.
  static std::vector<std::byte> request(const process_ref& p) {
    writer w;
    w.write(p.host);
    w.write(p.pid);
    w.write(p.incarnation);
    return w.release();
  }
  static std::pair<verdict, std::string> decode(std::span<const std::byte> b) {
    reader r(b);
    auto v = r.read<std::uint8_t>();
    if (v > std::uint8_t(verdict::unknown)) throw serialization_error("fiber: malformed liveness reply");
    return {verdict(v), r.read<std::string>()};
  }

private:
  struct entry {
    bool dead = false;
    std::string why;
    std::vector<dead_fn> watchers;
    std::unique_ptr<asio::steady_timer> grace;
  };

  static void answer(const reply_fn& reply, verdict v, const std::string& why) {
    writer w;
    w.write(std::uint8_t(v));
    w.write(why);
    reply(wire_status::ok, w.release());
  }

  void declare(const process_ref& p, const std::string& why) {
    auto& e = procs_[p];
    e.grace.reset();
    if (e.dead) return;
    e.dead = true;
    e.why = why;
    for (auto& f : std::exchange(e.watchers, {})) f(why);
    dead_.push_back(p);
    while (dead_.size() > dead_kept) {
      auto it = procs_.find(dead_.front());
      if (it != procs_.end() && it->second.dead) procs_.erase(it);
      dead_.pop_front();
    }
  }

  asio::any_io_executor ex_;
  process_ref self_;
  std::map<process_ref, entry> procs_;
  std::map<std::uint64_t, process_ref> by_id_; // workers alive, by worker id
  std::deque<process_ref> dead_;               // in the order they died
  std::vector<reply_fn> parked_;               // watches on this process itself
};

} // namespace fiber::detail
