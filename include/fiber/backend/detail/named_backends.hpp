// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/named_backends.hpp
/// Backends that register themselves under their FIBER_BACKEND name, so that
/// backend::from_env finds them without including them: a backend with heavy
/// headers (docker: libcurl's, nlohmann-json's) costs compile time only in
/// the files that include it (fiber/fiber.hpp does).

#include <fiber/backend/launcher.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace fiber::detail {

using backend_factory = std::shared_ptr<backend::launcher> (*)(asio::any_io_executor);

inline std::map<std::string, backend_factory, std::less<>>& named_backends() {
  static std::map<std::string, backend_factory, std::less<>> m;
  return m;
}

/// Called during static initialization by a backend's header (an inline
/// variable): from then on from_env can make it.
inline bool register_backend(std::string_view name, backend_factory make) {
  named_backends()[std::string(name)] = make;
  return true;
}

/// The factory registered for `name`, or nullptr.
inline backend_factory find_backend(std::string_view name) {
  auto& m = named_backends();
  auto it = m.find(name);
  return it == m.end() ? nullptr : it->second;
}

/// A launcher of type `L` made from `args` and started: what a backend's
/// make() returns.
template <class L, class... Args>
std::shared_ptr<backend::launcher> make_started(Args&&... args) {
  auto l = std::make_shared<L>(std::forward<Args>(args)...);
  l->start();
  return l;
}

/// What make() of a backend that needs libcurl and nlohmann-json throws when
/// fiber was built without them.
[[noreturn]] inline void throw_built_without_http(std::string_view backend) {
  throw backend_error(std::string(backend) + ": fiber was built without libcurl and nlohmann-json, which the " +
                      std::string(backend) +
                      " backend needs: install the Debian packages libcurl4-openssl-dev and "
                      "nlohmann-json3-dev and rebuild");
}

} // namespace fiber::detail
