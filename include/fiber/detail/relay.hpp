// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/relay.hpp
/// A host's relay (the `relay` key): the first worker on a host binds the
/// run's abstract socket and carries the links of the workers after it.

#include <fiber/detail/relay_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/worker_env.hpp>

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

/// The relay's two sides on its runtime thread: the master's link (dialled
/// when the first worker joins, so a worker alone on its host costs the
/// master nothing), and the workers that authenticated at the relay's
/// listener, each by its slot. A worker's frames go up as relay_data (its
/// whole frame as the tail: no copy), the master's come down the same way;
/// a link that ends on one side is reported (relay_leave) or closed on the
/// other. Heartbeats stay on each link: the master hears the relay's only.
class relay_state : public std::enable_shared_from_this<relay_state> {
public:
  /// `master_lost`: called when the master's link ends (the master is gone:
  /// the process exits, as its workers do).
  relay_state(std::string master_url, std::function<void()> master_lost)
      : master_url_(std::move(master_url)), master_lost_(std::move(master_lost)) {}

  /// A worker authenticated at this relay.
  void join(std::shared_ptr<peer_link> w) {
    const auto slot = next_slot_++;
    workers_.emplace(slot, w);
    up(frame(frame_kind::relay_join, relay_join_msg{slot, w->peer()}), {});
    w->start(
        [self = shared_from_this(), slot](frame_kind, std::span<const std::byte>, message& m) {
          auto whole = std::make_shared<message>(std::move(m));
          self->up(relay_data_head(slot), shared_bytes{whole, std::span<const std::byte>(*whole)});
        },
        [self = shared_from_this(), slot](const std::string& reason) {
          if (self->workers_.erase(slot)) self->up(frame(frame_kind::relay_leave, relay_leave_msg{slot, reason}), {});
        });
    if (!master_ && !dialling_) dial();
  }

  /// Workers whose links this relay carries.
  std::size_t workers() const noexcept { return workers_.size(); }

private:
  // To the master, or queued in order until its link is up.
  void up(std::vector<std::byte> head, shared_bytes tail) {
    if (master_) return master_->send(std::move(head), std::move(tail));
    backlog_.emplace_back(std::move(head), std::move(tail));
  }

  void dial() {
    dialling_ = true;
    auto& rt = runtime::instance();
    rt.connect(master_url_, role::relay, 0,
               [self = shared_from_this()](std::exception_ptr e, std::shared_ptr<peer_link> l,
                                           std::map<std::string, std::string>) {
                 self->dialling_ = false;
                 if (e) return self->fail(exception_text(e, "cannot reach the master"));
                 l->set_max_message_size(runtime::instance().transport().max_message_size + relay_overhead);
                 self->master_ = l;
                 l->start([self](frame_kind k, std::span<const std::byte> body,
                                 message& m) { self->from_master(k, body, m); },
                          [self](const std::string& reason) {
                            log(log_level::info, "relay: master link lost (", reason, ")");
                            self->fail(reason);
                            if (self->master_lost_) self->master_lost_();
                          });
                 for (auto& [h, t] : std::exchange(self->backlog_, {})) l->send(std::move(h), std::move(t));
               });
  }

  // The master cannot be reached through this relay: its workers' links end
  // (they exit, and their jobs' deaths are the master's to handle).
  void fail(const std::string& reason) {
    if (!workers_.empty()) log(log_level::warning, "relay: closing ", workers_.size(), " workers' links: ", reason);
    master_.reset();
    backlog_.clear();
    for (auto& [slot, w] : std::exchange(workers_, {})) w->close("relay lost the master: " + reason);
  }

  void from_master(frame_kind k, std::span<const std::byte> body, message& m) {
    const bool relay_frame = visit_relay_frame(
        k, body,
        [&](std::uint32_t slot, std::span<const std::byte> inner) {
          auto it = workers_.find(slot);
          if (it == workers_.end()) return;                     // ended here; the master hears of it
          auto whole = std::make_shared<message>(std::move(m)); // `inner` lies in it still
          it->second->send(std::vector<std::byte>(inner.begin(), inner.begin() + 1),
                           shared_bytes{whole, inner.subspan(1)});
        },
        [](const relay_join_msg&) { log(log_level::warning, "relay: a join from the master; ignored"); },
        [&](const relay_leave_msg& lv) {
          if (auto it = workers_.find(lv.slot); it != workers_.end()) {
            auto w = std::move(it->second);
            workers_.erase(it);
            w->close(lv.reason);
          }
        });
    if (!relay_frame) log(log_level::warning, "relay: unexpected frame kind ", int(k), " from the master; ignored");
  }

  std::string master_url_;
  std::function<void()> master_lost_;
  std::shared_ptr<peer_link> master_;
  std::vector<std::pair<std::vector<std::byte>, shared_bytes>> backlog_;
  std::unordered_map<std::uint32_t, std::shared_ptr<peer_link>> workers_;
  std::uint32_t next_slot_ = 1;
  bool dialling_ = false;
};

/// Becomes the relay of this host for the run: listens at `relay_url` (the
/// run's abstract socket) and hands every worker that authenticates there
/// (there only: a Pool of this worker's own still gets its workers) to a
/// relay_state that dials `master_url`. False when another process
/// holds the name (it won the election: bind(2) decides). Runtime thread.
inline bool become_host_relay(const std::string& relay_url, const std::string& master_url,
                              std::function<void()> master_lost) {
  auto& rt = runtime::instance();
  auto r = std::make_shared<relay_state>(master_url, std::move(master_lost));
  try {
    rt.listen_for_workers(relay_url, [r](std::shared_ptr<peer_link> w) { r->join(std::move(w)); });
  } catch (const std::exception& e) {
    log(log_level::debug, "relay: ", e.what(), ": another worker relays here");
    return false;
  }
  log(log_level::info, "relaying this host's workers at ", relay_url);
  return true;
}

} // namespace fiber::detail
