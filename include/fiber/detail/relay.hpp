// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/relay.hpp
/// A host's relay (fiber::init in a process started by relay_spec): one
/// link to the master carrying the links of the workers of its host.

#include <fiber/detail/relay_wire.hpp>
#include <fiber/detail/worker.hpp>

#include <asio/post.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include <sys/prctl.h>
#include <unistd.h>

namespace fiber::detail {

/// The relay's two sides on its runtime thread: the master's link, and the
/// workers that authenticated at its listener, each by its slot. A
/// worker's frames go up as relay_data (its whole frame as the tail: no
/// copy), the master's come down the same way; a link that ends on one side
/// is reported (relay_leave) or closed on the other. Heartbeats stay on
/// each link: the master hears the relay's only.
class relay_state : public std::enable_shared_from_this<relay_state> {
public:
  explicit relay_state(std::shared_ptr<peer_link> master) : master_(std::move(master)) {}

  void start() {
    master_->start([self = shared_from_this()](frame_kind k, std::span<const std::byte> body,
                                               message& m) { self->from_master(k, body, m); },
                   [self = shared_from_this()](const std::string& reason) {
                     log(log_level::info, "master link lost (", reason, "): closing ", self->workers_.size(),
                         " workers' links and exiting");
                     for (auto& [slot, w] : std::exchange(self->workers_, {})) w->close("master lost");
                     worker_exit(exit_master_lost);
                   });
  }

  /// A worker authenticated at this relay.
  void join(std::shared_ptr<peer_link> w) {
    const auto slot = next_slot_++;
    workers_.emplace(slot, w);
    master_->send(frame(frame_kind::relay_join, relay_join(slot, w->peer())));
    w->start(
        [self = shared_from_this(), slot](frame_kind, std::span<const std::byte>, message& m) {
          auto whole = std::make_shared<message>(std::move(m));
          self->master_->send(relay_data_head(slot), shared_bytes{whole, std::span<const std::byte>(*whole)});
        },
        [self = shared_from_this(), slot](const std::string& reason) {
          if (self->workers_.erase(slot))
            self->master_->send(frame(frame_kind::relay_leave, relay_leave_msg{slot, reason}));
        });
  }

private:
  void from_master(frame_kind k, std::span<const std::byte> body, message& m) {
    if (k == frame_kind::relay_data) {
      auto [slot, inner] = split_relay_data(body);
      auto it = workers_.find(slot);
      if (it == workers_.end()) return; // ended here; the master hears of it
      auto whole = std::make_shared<message>(std::move(m)); // `inner` lies in it still
      it->second->send(std::vector<std::byte>(inner.begin(), inner.begin() + 1),
                       shared_bytes{whole, inner.subspan(1)});
    } else if (k == frame_kind::relay_leave) {
      auto lv = deserialize<relay_leave_msg>(body);
      if (auto it = workers_.find(lv.slot); it != workers_.end()) {
        auto w = std::move(it->second);
        workers_.erase(it);
        w->close(lv.reason);
      }
    } else if (k == frame_kind::shutdown) {
      worker_exit(0);
    } else {
      log(log_level::warning, "relay: unexpected frame kind ", int(k), " from the master; ignored");
    }
  }

  std::shared_ptr<peer_link> master_;
  std::unordered_map<std::uint32_t, std::shared_ptr<peer_link>> workers_;
  std::uint32_t next_slot_ = 1;
};

/// The relay's main: dial the master as a relay, then listen on
/// FIBER_INTERNAL_RELAY_LISTEN for this host's workers. Exits when the
/// master's link ends (its workers' links close with it, and they exit).
[[noreturn]] inline void run_relay() {
  const auto& env = worker_environment();
  if (env.pdeathsig) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const std::string url = env.master;
  auto& rt = runtime::instance();
  rt.become_worker(env.name.empty() ? "relay" : env.name, read_secret(env), env.secret.empty());
  if (!url.starts_with("ipc://")) libcrypto_api::get();
  if (is_tls_url(url)) rt.prepare_tls_client();
  blocking_result<> connected;
  asio::post(rt.executor(), [&] {
    rt.connect(url, role::relay, 0,
               [&](std::exception_ptr e, std::shared_ptr<peer_link> l, std::map<std::string, std::string> cfg) {
                 if (e) {
                   std::fprintf(stderr, "fiber[%s]: %s\n", rt.process_name().c_str(),
                                exception_text(e, "cannot reach the master").c_str());
                   worker_exit(exit_master_lost);
                 }
                 apply_master_config(url, cfg);
                 l->set_max_message_size(rt.transport().max_message_size + relay_overhead);
                 auto r = std::make_shared<relay_state>(std::move(l));
                 r->start();
                 rt.route_workers([r](std::shared_ptr<peer_link> w) { r->join(std::move(w)); });
                 connected.set(nullptr);
               });
  });
  connected.wait();
  (void)rt.listen_url(env.relay_listen);
  for (;;) ::pause();
}

} // namespace fiber::detail
