// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/service_host.hpp
/// The owner side of services: this process's services by id, the client
/// links it serves requests on, and who is behind each of them (peer_fates).

#include <fiber/detail/frame_limit.hpp>
#include <fiber/detail/liveness.hpp>
#include <fiber/detail/peer_fate.hpp>
#include <fiber/detail/worker_link.hpp>
#include <fiber/detail/protocol.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// This process's services and the client links that reach them. All
/// members on the executor's thread (the runtime thread); a test builds one
/// on its own io_context.
class service_host {
public:
  /// `ex`: where replies to in-process requests are posted; `self`: this
  /// process, as its liveness service names it.
  service_host(asio::any_io_executor ex, process_ref self)
      : ex_(std::move(ex)),
        liveness_(std::make_shared<liveness>(ex_, std::move(self))),
        fates_(std::make_unique<peer_fates>(ex_, *liveness_)) {
    services_[liveness_service_id] = liveness_;
  }

  service_host(const service_host&) = delete;
  service_host& operator=(const service_host&) = delete;

  /// Adds `s`; returns the id requests name it by.
  std::uint64_t add(std::shared_ptr<service> s) {
    auto id = next_id_++;
    services_[id] = std::move(s);
    return id;
  }
  /// Removes service `id`; requests for it fail from now on.
  void remove(std::uint64_t id) { services_.erase(id); }

  /// The services with a kind (service::kind), by id: fiber::stats()'s list.
  void add_to(runtime_stats& out) const {
    std::map<std::uint64_t, const service*> listed; // services_ is unordered: list them by id
    for (auto& [id, s] : services_)
      if (!s->kind().empty()) listed[id] = s.get();
    for (auto [id, s] : listed)
      out.services.push_back({std::string(s->kind()), std::string(s->kind()) + "-" + std::to_string(id), s->depth()});
  }

  /// Serves the requests that arrive on client link `l` until it closes;
  /// then every service is told (service::peer_gone).
  void serve(std::shared_ptr<worker_link> l) {
    std::weak_ptr<worker_link> weak = l;
    served_[l->id()] = l->peer();
    fates_->attach(l->id(), l->peer());
    served_links_[l->id()] = l;
    l->start(
        [this, weak](frame_kind k, std::span<const std::byte> body, message&) {
          auto l = weak.lock();
          if (!l || k != frame_kind::request) return;
          auto req = deserialize<request_msg>(body);
          dispatch(l->id(), std::move(req), [weak, id = req.request_id](wire_status st, std::vector<std::byte> p) {
            auto l = weak.lock();
            if (!l) return;
            if (!fits_in_frame(p.size())) { // the reply fails, not the link
              p = failure_payload(oversize_message("a reply", p.size()));
              st = wire_status::error;
            }
            l->send(frame(frame_kind::reply, reply_msg{id, st, std::move(p)}));
          });
        },
        [this, id = l->id()](const std::string&) {
          for (auto& [sid, s] : services_) s->peer_gone(id);
          served_.erase(id);
          served_links_.erase(id);
          fates_->detach(id);
        });
  }

  /// Hands `req` from `peer` (0: this process) to its service; an unknown
  /// id, or a service that throws, gets a failure reply (current_failure).
  void dispatch(std::uint64_t peer, request_msg req, reply_fn reply) {
    auto it = services_.find(req.service_id);
    if (it == services_.end()) {
      return reply(wire_status::error, failure_payload("fiber: no such object or queue (id " +
                                                       std::to_string(req.service_id) + "); its owner released it"));
    }
    auto svc = it->second;
    try {
      svc->handle(peer, req.op, req.payload, reply);
    } catch (...) {
      auto [status, payload] = current_failure();
      reply(status, std::move(payload));
    }
  }

  /// A request from this process itself: `done` is posted, as a reply over
  /// a link would be, with the payload or the failure the reply carries.
  void request(std::uint64_t service_id, std::uint32_t op, std::vector<std::byte> payload, request_done done) {
    dispatch(0, request_msg{0, service_id, op, std::move(payload)}, answer_later(ex_, std::move(done)));
  }

  /// Closes every client link served (at stop: their reads would otherwise
  /// complete into a destroyed io_context).
  void close_links(const std::string& why) {
    for (auto& [id, w] : std::unordered_map(served_links_))
      if (auto l = w.lock()) l->close(why);
  }

  /// "name (pid N on host)" of client link `peer`; "this process" for 0.
  std::string peer_description(std::uint64_t peer) const {
    if (peer == 0) return "this process";
    auto it = served_.find(peer);
    if (it == served_.end()) return "link " + std::to_string(peer);
    return it->second.name + " (pid " + std::to_string(it->second.pid) + " on " + it->second.host + ")";
  }

  /// This process's liveness service (its workers report to it).
  liveness& workers_liveness() { return *liveness_; }
  /// The processes behind the client links served.
  peer_fates& fates() { return *fates_; }
  const peer_fates& fates() const { return *fates_; }

private:
  asio::any_io_executor ex_;
  std::shared_ptr<liveness> liveness_;
  std::unique_ptr<peer_fates> fates_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, std::shared_ptr<service>> services_;
  std::unordered_map<std::uint64_t, peer_identity> served_;                    // by link id
  std::unordered_map<std::uint64_t, std::weak_ptr<worker_link>> served_links_; // the same links, closed at stop
};

} // namespace fiber::detail
