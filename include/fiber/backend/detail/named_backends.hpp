// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/named_backends.hpp
/// The registry of backends by FIBER_BACKEND name (as nng's transport list):
/// each registers its factory and its configuration keys, so backend::from_env,
/// set_config and fiber.toml find them without naming any backend.

#include <fiber/backend/launcher.hpp>
#include <fiber/detail/config_keys.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>

#include <concepts>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail {

/// What makes a backend's launcher: its policy's make().
using backend_factory = std::shared_ptr<backend::launcher> (*)(const backend::launch_context&);

/// Factories by backend name.
inline std::map<std::string, backend_factory, std::less<>>& named_backends() {
  static std::map<std::string, backend_factory, std::less<>> m;
  return m;
}

/// Backends known by name, factory or not, each with the header that brings
/// its launcher ("" when that is not said): a backend with heavy headers
/// (docker: libcurl's, nlohmann-json's) is known from a light one, and made
/// only where a source file includes its own.
inline std::map<std::string, std::string, std::less<>>& known_backends() {
  static std::map<std::string, std::string, std::less<>> m;
  return m;
}

/// Called during static initialization by a backend's header (an inline
/// variable): from then on from_env can make it. Returns true.
inline bool register_backend(std::string_view name, backend_factory make) {
  named_backends()[std::string(name)] = make;
  known_backends().try_emplace(std::string(name));
  return true;
}

/// Called during static initialization by a backend's keys header: its
/// configuration keys (`<prefix>.<key>`, a table in config_keys_text's
/// form) exist, and so does its name, with `header` to name in the error of
/// a program that lacks its factory. Returns true.
inline bool register_backend_keys(std::string_view name, std::string_view header, std::string_view keys) {
  if (auto& h = known_backends()[std::string(name)]; !header.empty()) h = std::string(header);
  return register_config_keys(keys);
}

/// The factory registered for `name`, or nullptr.
inline backend_factory find_backend(std::string_view name) {
  auto& m = named_backends();
  auto it = m.find(name);
  return it == m.end() ? nullptr : it->second;
}

/// The header that brings backend `name`'s launcher when it is known without
/// a factory ("" when not said), or nullptr when `name` is unknown.
inline const std::string* backend_header(std::string_view name) {
  auto& m = known_backends();
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

/// Every backend name known, sorted: "a, b or c".
inline std::string known_backend_names() {
  std::string out;
  const auto& m = known_backends();
  std::size_t i = 0;
  for (auto& [name, header] : m) {
    if (i > 0) out += i + 1 == m.size() ? " or " : ", ";
    out += name;
    ++i;
  }
  return out;
}

/// A policy with a configuration key table of its own: `static constexpr
/// std::string_view config_keys` in config_keys_text's form.
template <class B>
concept policy_with_keys = requires {
  { B::config_keys } -> std::convertible_to<std::string_view>;
};

/// The factory of backend policy `B`: its launcher, made and started.
template <backend::policy B>
backend_factory policy_factory() {
  return [](const backend::launch_context& ctx) { return backend::make_launcher<B>(ctx); };
}

/// The one registration of a backend policy `B` (`name`, `make`, and
/// `config_keys` when it has them), for an inline variable next to it:
/// `inline const bool my_registered = fiber::detail::register_policy<my_backend>();`.
template <backend::policy B>
bool register_policy() {
  if constexpr (policy_with_keys<B>) register_backend_keys(B::name, "", B::config_keys);
  return register_backend(B::name, policy_factory<B>());
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
