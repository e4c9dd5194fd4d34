// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/from_env.hpp
/// The default backend policy: chooses the backend at run time from the
/// `backend` configuration key (FIBER_BACKEND; "local" when unset). Thus
/// `FIBER_BACKEND=slurm ./app` moves an unchanged binary onto a cluster.

#include <fiber/backend/detail/builtin_backends.hpp>
#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace fiber::backend {

/// Policy: the backend named by the `backend` key (FIBER_BACKEND), chosen
/// when make() is called; local when unset. Stateless tag. It finds backends
/// by the name they registered (backend/detail/named_backends.hpp).
struct from_env {
  static constexpr std::string_view name = "from_env"; ///< this policy's name
  /// Throws fiber::backend_error naming the value for an unknown backend,
  /// or one whose launcher this program does not contain.
  static std::shared_ptr<launcher> make(const launch_context& ctx) {
    auto which = detail::config_string("backend");
    if (which.empty()) which = "local";
    if (auto make = detail::find_backend(which)) return make(ctx);
    if (const auto* header = detail::backend_header(which))
      throw backend_error("fiber: FIBER_BACKEND=" + which + ", but this program does not contain the " + which +
                          " backend: include <fiber/fiber.hpp>" + (header->empty() ? "" : " or <" + *header + ">") +
                          " in one of its source files (with FIBER_SEPARATE_COMPILATION defined: "
                          "compile <fiber/impl/src.hpp> into it)");
    throw backend_error("fiber: unknown backend '" + which + "' (FIBER_BACKEND): expected " +
                        detail::known_backend_names());
  }
};

} // namespace fiber::backend
