// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/runtime_host.hpp
/// The worker_host of a real process: fiber's runtime, its listener and its
/// liveness registry, behind the interface Pool, RemoteManager and Process use.

#include <fiber/detail/runtime.hpp>
#include <fiber/detail/worker_host.hpp>
#include <fiber/detail/worker_spec.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace fiber::detail {

/// runtime::instance() as a worker_host. Stateless; runtime thread only.
class runtime_host final : public worker_host {
public:
  /// Never destroyed: job ends reach supervisors on the runtime thread
  /// during static destruction too (end_children_at_exit).
  static runtime_host& instance() {
    static auto* h = new runtime_host;
    return *h;
  }

  asio::any_io_executor executor() override { return runtime::instance().executor(); }
  std::uint64_t new_worker_id() override { return runtime::instance().new_worker_id(); }
  backend::job_spec worker_spec(backend::launcher& l, std::uint64_t id, const std::string& name,
                                const fiber::resources& res) override {
    return detail::worker_spec(l, id, name, res);
  }
  void expect_worker(std::uint64_t id, connect_handler on_connect, refuse_handler on_refused) override {
    runtime::instance().expect_worker(id, std::move(on_connect), std::move(on_refused));
  }
  std::size_t expected_workers() const override { return runtime::instance().expected_workers(); }
  void forget_worker(std::uint64_t id) override { runtime::instance().forget_worker(id); }
  void worker_connected(std::uint64_t id, const peer_identity& p) override {
    runtime::instance().workers_liveness().connected(id, {p.host, p.pid, p.incarnation});
  }
  void worker_link_lost(std::uint64_t id, const std::string& reason) override {
    runtime::instance().workers_liveness().link_lost(id, reason);
  }
  void worker_ended(std::uint64_t id, const std::string& why) override {
    runtime::instance().workers_liveness().ended(id, why);
  }
  void child_ended(std::int64_t pid) override { runtime::instance().remove_socket_of(pid); }
};

} // namespace fiber::detail
