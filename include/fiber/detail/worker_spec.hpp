// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/worker_spec.hpp
/// The job spec that starts a worker: this executable, with how to reach and
/// authenticate with its master in the environment, shaped by the backend's traits.

#include <fiber/detail/handshake.hpp>
#include <fiber/detail/host_name.hpp>
#include <fiber/detail/inherited_link.hpp>
#include <fiber/detail/local_transport.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/tls_config.hpp>

#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

#include <unistd.h>

namespace fiber::detail {

/// The abstract socket where this run's workers find their host's relay
/// (the `relay` key; relay.hpp): one random name per master process.
inline const std::string& relay_name() {
  static const std::string name = [] {
    const auto n = random_nonce();
    return "abstract://fiber-relay-" + to_hex(std::span<const std::uint8_t>(n.data(), 12));
  }();
  return name;
}

/// A job spec that runs this executable as worker `id` of this process:
/// argv as the master's, and what the worker needs to dial back and
/// authenticate in its environment (never its argv; the worker removes it
/// from its environment before user code runs). Runtime thread; binds the
/// listener the worker will dial, and makes the run directory on this
/// machine (again) if it is missing. Throws what listening throws.
inline backend::job_spec worker_spec(backend::launcher& l, std::uint64_t id, const std::string& name,
                                     const fiber::resources& res = {}) {
  auto& rt = runtime::instance();
  const auto traits = l.traits();
  backend::job_spec s;
  s.name = name;
  s.argv = rt.argv();
  s.argv.at(0) = rt.executable();
  s.resources = res;
  if (traits.shares_filesystem) rt.ensure_run_dir(); // the worker reads the secret's file
  const auto url = rt.listen_url(traits.shares_filesystem ? local_listen_base() : l.listen_url());
  s.env = {{"FIBER_INTERNAL_MASTER", url},
           {"FIBER_INTERNAL_WORKER_ID", std::to_string(id)},
           {"FIBER_INTERNAL_WORKER_NAME", name},
           // for parent_process()
           {"FIBER_INTERNAL_PARENT_NAME", rt.process_name()},
           {"FIBER_INTERNAL_PARENT_PID", std::to_string(::getpid())},
           {"FIBER_INTERNAL_PARENT_HOST", host_name()}};
  if (traits.shares_filesystem) {
    s.env.emplace_back("FIBER_INTERNAL_SECRET_FILE", rt.secret_file());
    s.env.emplace_back("FIBER_INTERNAL_RUN_DIR", rt.run_dir());
  }
  if (traits.dies_with_master) s.env.emplace_back("FIBER_INTERNAL_PDEATHSIG", "1");
  // A child on this machine proves itself over a nonce issued now instead of
  // waiting for the challenge: a round trip less at start-up. Its
  // environment is as private as the secret's file; a cluster job's is not.
  if (traits.dies_with_master && traits.shares_filesystem)
    s.env.emplace_back("FIBER_INTERNAL_WORKER_NONCE", rt.issue_worker_nonce(id));
  if (!traits.shares_filesystem) {
    // Other machines rarely share the master's /tmp: hand the secret over in
    // the job's environment (backends keep it out of argv and of what the
    // cluster manager shows).
    s.env.emplace_back("FIBER_INTERNAL_SECRET", rt.secret());
    // Services (a Queue, a Pipe, an object) made before this process
    // listened for other machines carry another of its URLs (ipc://, or
    // loopback TCP with local_transport = tcp), which another machine cannot
    // reach: tell the worker to use `url` for them (see runtime::request).
    std::string aliases = rt.ipc_url();
    for (auto& u : rt.listener_urls())
      if (u != url && u != rt.ipc_url()) aliases += " " + u;
    s.env.emplace_back("FIBER_INTERNAL_MASTER_ALIASES", aliases);
  }
  // A worker reads these before the handshake that would bring it the
  // master's configuration (io_threads_batch when its runtime starts, TLS
  // material to dial): pass the master's values, also ones set in code,
  // the way users would.
  std::vector<std::string_view> early_keys{"io_threads_batch"};
  if (is_tls_url(url)) early_keys.insert(early_keys.end(), std::begin(tls_keys), std::end(tls_keys));
  for (auto key : early_keys)
    if (auto v = config_string(key); !v.empty()) s.env.emplace_back(std::string(find_config_key(key)->env), v);
  if (config_bool("relay")) {
    s.env.emplace_back("FIBER_INTERNAL_RELAY", relay_name());
  } else if (traits.inherits_link && url.starts_with("ipc://")) {
    // Its link is made now, not dialled: the master reads it on its own
    // reactor instead of through nng's poller and callback threads.
    auto [job_end, mine] = make_link_pair();
    s.env.emplace_back("FIBER_INTERNAL_LINK_FD", std::to_string(*job_end));
    s.link_fd = std::move(job_end);
    rt.adopt_link(mine);
  }
  if (auto dir = config_string("worker_output_dir"); !dir.empty()) {
    ::mkdir(dir.c_str(), 0700);
    s.stdout_path = dir + "/" + name + ".out";
    s.stderr_path = dir + "/" + name + ".err";
  }
  return s;
}

} // namespace fiber::detail
