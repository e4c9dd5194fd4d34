// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm/address.hpp
/// The address a Slurm master listens at for its jobs (rules in slurm.hpp,
/// "Listen address"). Blocks (DNS, `scontrol show config`): call it off the
/// runtime thread (launcher::prepare).

#include <fiber/backend/detail/command.hpp>
#include <fiber/backend/detail/net_address.hpp>
#include <fiber/backend/slurm/options.hpp>
#include <fiber/backend/slurm/status.hpp>

#include <chrono>
#include <exception>
#include <string>

#include <netdb.h>
#include <unistd.h>

namespace fiber::detail::slurm_impl {

/// listen_address; else the host name's first non-loopback address; else
/// the local address routing to slurmctld; else 127.0.0.1.
inline std::string listen_address(const slurm_options& o) {
  if (o.listen_address) return *o.listen_address;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0)
    if (auto a = resolve(host); !a.empty()) return a.front();
  try {
    spawn_request req;
    req.argv = {o.bin("scontrol"), "show", "config"};
    auto res = run(req, std::chrono::seconds(15));
    for (auto& h : controller_hosts(res.out)) {
      auto src = route_source(h);
      if (src.empty()) continue;
      addrinfo hints{};
      hints.ai_flags = AI_NUMERICHOST;
      addrinfo* ai = nullptr;
      auto bare = src.front() == '[' ? src.substr(1, src.size() - 2) : src;
      bool loop = true;
      if (::getaddrinfo(bare.c_str(), nullptr, &hints, &ai) == 0) {
        loop = is_loopback(ai->ai_addr);
        ::freeaddrinfo(ai);
      }
      if (!loop) return src;
    }
  } catch (const std::exception&) {
    // no scontrol: fall through
  }
  return "127.0.0.1";
}

} // namespace fiber::detail::slurm_impl
