// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/from_env.hpp
/// The default backend policy: chooses the backend at run time from the
/// `backend` configuration key (FIBER_BACKEND; "local" when unset). Thus
/// `FIBER_BACKEND=slurm ./app` moves an unchanged binary onto a cluster.

#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/local.hpp>
#if __has_include(<fiber/backend/slurm.hpp>)
#include <fiber/backend/slurm.hpp>
#define FIBER_HAS_SLURM_BACKEND 1
#endif
#include <fiber/config.hpp>

namespace fiber::backend {

/// Policy: the backend named by the `backend` key (FIBER_BACKEND), chosen
/// when make() is called; local when unset. Stateless tag.
struct from_env {
  static constexpr std::string_view name = "from_env"; ///< this policy's name
  /// Throws fiber::backend_error naming the value for an unknown backend.
  static std::shared_ptr<launcher> make(asio::any_io_executor ex) {
    auto which = detail::config_string("backend");
    if (which.empty() || which == "local") return local::make(std::move(ex));
#if defined(FIBER_HAS_SLURM_BACKEND)
    if (which == "slurm") return slurm::make(std::move(ex));
#endif
    if (auto make = detail::find_backend(which))
      return make(std::move(ex)); // docker, kubernetes: registered by their headers
    if (which == "docker" || which == "kubernetes")
      throw backend_error("fiber: FIBER_BACKEND=" + which + ", but this program does not contain the " + which +
                          " backend: include <fiber/fiber.hpp> or <fiber/backend/" + which +
                          ".hpp> in one of its source files (with FIBER_SEPARATE_COMPILATION defined: "
                          "compile <fiber/impl/src.hpp> into it)");
    throw backend_error("fiber: unknown backend '" + which +
                        "' (FIBER_BACKEND): expected local, slurm, docker or kubernetes");
  }
};

} // namespace fiber::backend
