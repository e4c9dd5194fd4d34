// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/service_client.hpp
/// The client side of services: one link per process whose services this
/// process calls, the requests waiting for it, and the replies they await.

#include <fiber/detail/worker_link.hpp>
#include <fiber/detail/protocol.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Bounds a timed request while the link to its service's process is being
/// set up: a request still unsent at `at` is withdrawn and completes with
/// `reply`, the service's own answer to a timeout. A request already sent
/// waits for the service (the link's heartbeats bound that).
struct request_expiry {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point::max();
  std::vector<std::byte> reply;
};

/// Requests to the services of other processes, by URL. All members on the
/// executor's thread (the runtime thread); a test builds one on its own
/// io_context with a connect function of its own.
class service_client {
public:
  /// Calls its callback with the authenticated client link to `url`, or
  /// with why there is none.
  using connect_fn = std::function<void(const std::string& url,
                                        std::function<void(std::exception_ptr, std::shared_ptr<worker_link>)>)>;

  service_client(asio::any_io_executor ex, connect_fn connect) : ex_(std::move(ex)), connect_(std::move(connect)) {}

  service_client(const service_client&) = delete;
  service_client& operator=(const service_client&) = delete;

  /// Sends request `op` for service `service_id` to the process at `url`,
  /// connecting first if there is no link yet. `done` gets the reply's
  /// payload, or the failure it carries, or worker_lost when the link fails
  /// first; every request waiting on a failed connect gets its error.
  void send(const std::string& url, std::uint64_t service_id, std::uint32_t op, std::vector<std::byte> payload,
            request_done done, request_expiry expiry = {}) {
    auto& c = clients_[url];
    auto id = next_id_++;
    c.pending[id] = std::move(done);
    auto f = frame(frame_kind::request, request_msg{id, service_id, op, std::move(payload)});
    if (c.link) return c.link->send(std::move(f));
    c.queued.push_back({id, std::move(f), expire_unsent(url, id, std::move(expiry))});
    if (!c.connecting) connect(url);
  }

  /// Closes every link (at stop).
  void close_links(const std::string& why) {
    for (auto& [u, c] : clients_)
      if (c.link) c.link->close(why);
  }

private:
  using clock = std::chrono::steady_clock;

  // A request waiting for its link: its id, its frame, and the timer of its
  // expiry (if it has one).
  struct unsent_request {
    std::uint64_t id;
    std::vector<std::byte> frame;
    std::shared_ptr<asio::steady_timer> expiry;
  };

  struct client_conn {
    std::shared_ptr<worker_link> link;
    bool connecting = false;
    std::vector<unsent_request> queued;
    std::unordered_map<std::uint64_t, request_done> pending;
  };

  // Request `id` to `url`, not sent yet: at the expiry's time, if it still
  // waits for its link, it is withdrawn and completes with the expiry's reply.
  std::shared_ptr<asio::steady_timer> expire_unsent(const std::string& url, std::uint64_t id, request_expiry ex) {
    if (ex.at == clock::time_point::max()) return nullptr;
    auto t = std::make_shared<asio::steady_timer>(ex_, ex.at);
    t->async_wait([this, url, id, reply = std::move(ex.reply)](std::error_code ec) mutable {
      auto c = clients_.find(url);
      if (ec || c == clients_.end()) return;
      auto& q = c->second.queued;
      auto it = std::find_if(q.begin(), q.end(), [id](const unsent_request& u) { return u.id == id; });
      auto p = c->second.pending.find(id);
      if (it == q.end() || p == c->second.pending.end()) return; // sent, or failed already
      q.erase(it);
      auto done = std::move(p->second);
      c->second.pending.erase(p);
      done(nullptr, std::move(reply));
    });
    return t;
  }

  void connect(const std::string& url) {
    clients_[url].connecting = true;
    connect_(url, [this, url](std::exception_ptr e, std::shared_ptr<worker_link> l) {
      auto& c = clients_[url];
      c.connecting = false;
      if (e) return fail(url, std::move(e));
      c.link = l;
      l->start(
          [this, url](frame_kind k, std::span<const std::byte> body, message&) {
            if (k != frame_kind::reply) return;
            auto r = deserialize<reply_msg>(body);
            auto& c = clients_[url];
            auto it = c.pending.find(r.request_id);
            if (it == c.pending.end()) return;
            auto done = std::move(it->second);
            c.pending.erase(it);
            if (r.status == wire_status::ok) done(nullptr, std::move(r.payload));
            else done(failure_of(r.status, r.payload), {});
          },
          [this, url](const std::string& reason) {
            fail(url,
                 std::make_exception_ptr(worker_lost("fiber: lost the connection to " + url + " (" + reason + ")")));
          });
      for (auto& u : c.queued) {
        if (u.expiry) u.expiry->cancel();
        l->send(std::move(u.frame));
      }
      c.queued.clear();
    });
  }

  void fail(const std::string& url, std::exception_ptr e) {
    auto c = std::move(clients_[url]);
    clients_.erase(url);
    for (auto& u : c.queued)
      if (u.expiry) u.expiry->cancel();
    // The last waiter gets `e` itself: with one waiter, the thread that reads
    // the error releases it (libstdc++'s exception refcount is invisible to TSan).
    std::size_t left = c.pending.size();
    for (auto& [id, done] : c.pending) {
      if (--left) done(e, {});
      else done(std::move(e), {});
    }
  }

  asio::any_io_executor ex_;
  connect_fn connect_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::string, client_conn> clients_;
};

} // namespace fiber::detail
