// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/peer_fate.hpp
/// The processes behind the client links a process serves: one number per
/// process, the same across its reconnects, and the wait for the verdict that
/// it is dead (from this process's liveness registry, or its master's).

#include <fiber/detail/handshake_session.hpp>
#include <fiber/detail/liveness.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Runtime thread only.
class peer_fates {
public:
  /// Sends a liveness watch request to this process's master and calls the
  /// callback with its reply or failure; empty when this process has none.
  using ask_fn =
      std::function<void(std::vector<std::byte>, std::function<void(std::exception_ptr, std::vector<std::byte>)>)>;

  peer_fates(asio::any_io_executor ex, liveness& own) : ex_(std::move(ex)), own_(own) {}

  void set_master(ask_fn ask) { ask_master_ = std::move(ask); }

  /// Link `link` is `peer`'s from now on; returns its process number.
  std::uint64_t attach(std::uint64_t link, const peer_identity& peer) {
    process_ref ref{peer.host, peer.pid, peer.incarnation};
    auto [it, fresh] = keys_.try_emplace(ref, 0);
    if (fresh) {
      it->second = next_++;
      procs_[it->second].ref = ref;
    }
    auto& p = procs_[it->second];
    p.name = peer.name;
    ++p.links;
    links_[link] = it->second;
    return it->second;
  }
  /// Link `link` is closed.
  void detach(std::uint64_t link) {
    auto it = links_.find(link);
    if (it == links_.end()) return;
    --procs_[it->second].links;
    links_.erase(it);
  }

  /// The process number of `link` (0: none, i.e. this process).
  std::uint64_t process_of(std::uint64_t link) const {
    auto it = links_.find(link);
    return it == links_.end() ? 0 : it->second;
  }

  /// "name (pid N on host)".
  std::string describe(std::uint64_t proc) const {
    if (proc == 0) return "this process";
    auto& p = procs_.at(proc);
    return p.name + " (pid " + std::to_string(p.ref.pid) + " on " + p.ref.host + ")";
  }

  /// See runtime::when_dead.
  void when_dead(std::uint64_t proc, liveness::dead_fn dead) {
    if (proc == 0) return;
    auto& w = procs_.at(proc).watchers;
    w.push_back(std::move(dead));
    if (w.size() == 1) ask(proc);
  }

private:
  struct proc {
    process_ref ref;
    std::string name;
    std::size_t links = 0;                   // links open now
    std::vector<liveness::dead_fn> watchers; // when_dead
    std::unique_ptr<asio::steady_timer> timer;
  };

  void ask(std::uint64_t id) {
    auto& p = procs_.at(id);
    if (own_.knows(p.ref)) return own_.watch(p.ref, [this, id](const std::string& why) { fire(id, why); });
    if (!ask_master_) return orphan(id);
    ask_master_(liveness::request(p.ref), [this, id](std::exception_ptr e, std::vector<std::byte> b) {
      if (e) return after(id, liveness::grace() / 4, [this, id] { ask(id); }); // a master gone: we end too
      try {
        auto [v, why] = liveness::decode(b);
        if (v == verdict::dead) return fire(id, why);
      } catch (const std::exception&) {
      }
      orphan(id);
    });
  }

  // Nobody knows process `id`: dead once it has had no link for a grace period.
  void orphan(std::uint64_t id) {
    after(id, liveness::grace(), [this, id] {
      if (procs_.at(id).links > 0) return orphan(id);
      fire(id, "its link has been lost for " + std::to_string(liveness::grace().count()) +
                   " ms and no master of the run knows it");
    });
  }

  template <class F>
  void after(std::uint64_t id, std::chrono::milliseconds d, F f) {
    auto& t = procs_.at(id).timer;
    t = std::make_unique<asio::steady_timer>(ex_, d);
    t->async_wait([f = std::move(f)](std::error_code ec) {
      if (!ec) f();
    });
  }

  void fire(std::uint64_t id, const std::string& why) {
    for (auto& f : std::exchange(procs_.at(id).watchers, {})) f(why);
  }

  asio::any_io_executor ex_;
  liveness& own_;
  ask_fn ask_master_;
  std::map<process_ref, std::uint64_t> keys_;
  std::unordered_map<std::uint64_t, proc> procs_;
  std::unordered_map<std::uint64_t, std::uint64_t> links_; // link id → process number
  std::uint64_t next_ = 1;
};

} // namespace fiber::detail
