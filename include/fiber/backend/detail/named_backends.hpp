// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/named_backends.hpp
/// Backends that register themselves under their FIBER_BACKEND name, so that
/// backend::from_env finds them without including them: a backend with heavy
/// headers (docker: libcurl's, nlohmann-json's) costs compile time only in
/// the files that include it (fiber/fiber.hpp does).

#include <fiber/backend/launcher.hpp>

#include <asio/any_io_executor.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>

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

} // namespace fiber::detail
