// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/worker_host.hpp
/// Where an owner's workers come back to: their ids and job specs, the wait
/// for them to dial in, their liveness, the executor it all runs on. The
/// runtime is the real one (runtime_host.hpp); tests bring fakes.

#include <fiber/backend/launcher.hpp>
#include <fiber/detail/worker_link.hpp>

#include <asio/any_io_executor.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fiber::detail {

/// The services a supervisor and its owner use. Executor only.
class worker_host {
public:
  using connect_handler = std::function<void(std::shared_ptr<worker_link>)>;
  using refuse_handler = std::function<void(const std::string& reason)>;

  virtual ~worker_host() = default;

  /// The executor every event runs on (fiber's runtime thread).
  virtual asio::any_io_executor executor() = 0;
  /// A new worker id, unique in this process.
  virtual std::uint64_t new_worker_id() = 0;
  /// The job spec that starts worker `id` on launcher `l`. Throws what
  /// listening throws.
  virtual backend::job_spec worker_spec(backend::launcher& l, std::uint64_t id, const std::string& name,
                                        const fiber::resources& res) = 0;
  /// `on_connect` once worker `id` has authenticated; `on_refused` when it
  /// runs another binary.
  virtual void expect_worker(std::uint64_t id, connect_handler on_connect, refuse_handler on_refused) = 0;
  /// Workers expected and not connected yet (all owners).
  virtual std::size_t expected_workers() const = 0;
  /// Worker `id` is no longer expected.
  virtual void forget_worker(std::uint64_t id) = 0;

  /// Liveness reports: worker `id` connected as `peer`, its link was lost,
  /// its job ended (`why`).
  virtual void worker_connected(std::uint64_t id, const peer_identity& peer) = 0;
  virtual void worker_link_lost(std::uint64_t id, const std::string& reason) = 0;
  virtual void worker_ended(std::uint64_t id, const std::string& why) = 0;
  /// Child process `pid` of this one (a job that dies with its master) has
  /// ended and was reaped: what it left in the run directory goes.
  virtual void child_ended(std::int64_t pid) { (void)pid; }
};

} // namespace fiber::detail
