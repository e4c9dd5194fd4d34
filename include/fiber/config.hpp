// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file config.hpp
/// fiber's one configuration table, over the keys detail/config_keys.hpp
/// knows (fiber's own and each registered backend's). Precedence: code
/// (options structs and fiber::set_config) > FIBER_* environment variables >
/// a TOML file (`FIBER_CONFIG`, else `fiber.toml` in the working directory;
/// parsed with toml++ when it was found at build time). An unknown key in code or in the
/// file is an error naming the key; an unknown FIBER_* environment variable
/// is ignored with a warning on stderr (the environment is shared: Uber's
/// Python Fiber reads FIBER_IMAGE, FIBER_CPU_PER_JOB, ... too). Workers
/// receive the master's effective table at the handshake.
///
/// Thread-safety: all functions may be called from any thread.

#include <fiber/detail/config_keys.hpp>
#include <fiber/detail/worker_env.hpp>
#include <fiber/error.hpp>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h> // environ

#if defined(FIBER_HAS_TOMLPLUSPLUS)
#include <toml++/toml.h>
#endif

namespace fiber {

namespace detail {

// Variables fiber sets for its own workers; not user configuration.
inline bool is_internal_env(std::string_view name) {
  return name.starts_with("FIBER_INTERNAL_") || name == "FIBER_CONFIG";
}

/// Throws config_error unless `value` suits `key`'s range (if it has one);
/// `from` says where the value came from.
inline void check_config_value(const config_key& key, const std::string& value, std::string_view from) {
  if (!key.ranged) return;
  std::size_t used = 0;
  long long n = 0;
  bool ok = false;
  try {
    n = std::stoll(value, &used);
    ok = used == value.size() && n >= key.min && n <= key.max;
  } catch (const std::exception&) {
  }
  if (!ok)
    throw config_error("fiber: configuration key '" + std::string(key.name) + "' must be an integer from " +
                       std::to_string(key.min) + " to " + std::to_string(key.max) + ", got '" + value + "' (" +
                       std::string(from) + ")");
}

class config_table {
public:
  static config_table& instance() {
    static config_table t;
    return t;
  }

  std::optional<std::string> get(std::string_view key) {
    std::lock_guard lk(mutex_);
    load_locked();
    const config_key* found = find_config_key(key);
    if (!found) throw config_error("fiber: unknown configuration key '" + std::string(key) + "'");
    const config_key& k = *found;
    if (auto it = code_.find(std::string(key)); it != code_.end()) return it->second; // checked by set()
    if (auto it = env_.find(std::string(key)); it != env_.end()) {
      check_config_value(k, it->second, k.env);
      return it->second;
    }
    if (auto it = file_.find(std::string(key)); it != file_.end()) {
      check_config_value(k, it->second, file_path_);
      return it->second;
    }
    auto fb = k.fallback;
    if (fb.empty()) return std::nullopt;
    return std::string(fb);
  }

  void set(std::string_view key, std::string value) {
    const config_key* k = find_config_key(key);
    if (!k) throw config_error("fiber: unknown configuration key '" + std::string(key) + "'");
    check_config_value(*k, value, "set_config");
    std::lock_guard lk(mutex_);
    code_[std::string(key)] = std::move(value);
  }

  /// The effective table (every key that has a value), shipped to workers.
  std::map<std::string, std::string> effective() {
    std::map<std::string, std::string> out;
    for (const auto* k : config_keys())
      if (auto v = get(k->name)) out.emplace(k->name, *v);
    return out;
  }

  /// FIBER_* environment variables that name no key (ignored, warned about once).
  std::vector<std::string> unknown_environment() {
    std::lock_guard lk(mutex_);
    load_locked();
    return unknown_env_;
  }

  /// Reload environment and file layers (tests; after setenv).
  void reload() {
    std::lock_guard lk(mutex_);
    loaded_ = false;
    env_.clear();
    file_.clear();
    unknown_env_.clear();
    load_locked();
  }

private:
  // A key registered after the layers were read (a registration that runs
  // late) gets its environment variable and file entry too: read them again.
  void load_locked() {
    const auto generation = config_key_registry::instance().generation();
    if (loaded_ && generation == loaded_generation_) return;
    if (loaded_) {
      env_.clear();
      file_.clear();
      unknown_env_.clear();
    }
    loaded_ = true;
    loaded_generation_ = generation;
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq == std::string_view::npos || !kv.starts_with("FIBER_")) continue;
      auto name = kv.substr(0, eq);
      if (is_internal_env(name)) continue;
      const config_key* key = config_key_registry::instance().find_env(name);
      if (!key) {
        unknown_env_.emplace_back(name);
        continue;
      }
      env_[std::string(key->name)] = std::string(kv.substr(eq + 1));
    }
    // Once per process, by the master only (workers inherit its environment).
    if (!unknown_env_.empty() && !warned_unknown_env_ && !worker_environment().is_worker()) {
      warned_unknown_env_ = true;
      std::string names;
      for (const auto& n : unknown_env_) names += (names.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "fiber: warning: ignoring unknown configuration variable(s) in the environment: %s\n",
                   names.c_str());
    }
    load_file_locked();
  }

  void load_file_locked() {
    std::string path;
    bool explicit_path = false;
    if (const char* p = std::getenv("FIBER_CONFIG"); p && *p) {
      path = p;
      explicit_path = true;
    } else {
      path = "fiber.toml";
    }
    file_path_ = path;
    std::ifstream in(path);
    if (!in) {
      if (explicit_path) throw config_error("fiber: cannot open configuration file '" + path + "' (FIBER_CONFIG)");
      return;
    }
#if defined(FIBER_HAS_TOMLPLUSPLUS)
    toml::table tbl;
    try {
      tbl = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      std::ostringstream os;
      os << "fiber: " << path << ": " << e.description() << " (line " << e.source().begin.line << ")";
      throw config_error(os.str());
    }
    flatten(tbl, "", path);
#else
    throw config_error("fiber: '" + path + "' found but this build has no TOML support (install libtomlplusplus-dev)");
#endif
  }

#if defined(FIBER_HAS_TOMLPLUSPLUS)
  void flatten(const toml::table& t, const std::string& prefix, const std::string& path) {
    for (const auto& [k, node] : t) {
      std::string name = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (const auto* sub = node.as_table()) {
        flatten(*sub, name, path);
        continue;
      }
      if (!find_config_key(name)) throw config_error("fiber: " + path + ": unknown configuration key '" + name + "'");
      std::string value;
      if (auto s = node.value<std::string>()) value = *s;
      else if (auto i = node.value<std::int64_t>()) value = std::to_string(*i);
      else if (auto b = node.value<bool>()) value = *b ? "true" : "false";
      else if (auto d = node.value<double>()) value = std::to_string(*d);
      else throw config_error("fiber: " + path + ": key '" + name + "' must be a string, number or boolean");
      file_[name] = std::move(value);
    }
  }
#endif

  std::mutex mutex_;
  bool loaded_ = false;
  std::uint64_t loaded_generation_ = 0; // config_key_registry's generation when the layers were read
  std::map<std::string, std::string> code_, env_, file_;
  std::string file_path_;                // where file_ came from
  std::vector<std::string> unknown_env_; // FIBER_* variables that are not keys (ignored)
  bool warned_unknown_env_ = false;
};

/// Value of `key`, or nullopt when unset and without default.
/// Throws fiber::config_error for an unknown key or a bad file.
inline std::optional<std::string> config_get(std::string_view key) { return config_table::instance().get(key); }

inline std::string config_string(std::string_view key) { return config_get(key).value_or(""); }

inline long long config_int(std::string_view key) {
  auto v = config_string(key);
  try {
    std::size_t used = 0;
    long long n = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return n;
  } catch (const std::exception&) {
    throw config_error("fiber: configuration key '" + std::string(key) + "' must be an integer, got '" + v + "'");
  }
}

/// Checks every key that has a range, and that heartbeat_timeout_ms exceeds
/// heartbeat_interval_ms. Throws config_error naming the key and its range.
inline void check_config() {
  for (const auto* k : config_keys())
    if (k->ranged) (void)config_get(k->name);
  const auto interval = config_int("heartbeat_interval_ms"), timeout = config_int("heartbeat_timeout_ms");
  if (timeout <= interval)
    throw config_error("fiber: configuration key 'heartbeat_timeout_ms' must be greater than heartbeat_interval_ms (" +
                       std::to_string(timeout) + " <= " + std::to_string(interval) + ")");
}

inline bool config_bool(std::string_view key) {
  auto v = config_string(key);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw config_error("fiber: configuration key '" + std::string(key) + "' must be a boolean, got '" + v + "'");
}

} // namespace detail

/// Set a configuration value from code; beats the environment and the file.
/// Throws fiber::config_error for an unknown key, or a value outside the
/// key's range (docs/reference/config.md). Takes effect for jobs
/// started afterwards.
inline void set_config(std::string_view key, std::string value) {
  detail::config_table::instance().set(key, std::move(value));
}

/// The effective configuration: every key that has a value, after precedence.
inline std::map<std::string, std::string> effective_config() { return detail::config_table::instance().effective(); }

} // namespace fiber
