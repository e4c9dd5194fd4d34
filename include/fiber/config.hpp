// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file config.hpp
/// fiber's one configuration table. Precedence: code (options structs and
/// fiber::set_config) > FIBER_* environment variables > a TOML file
/// (`FIBER_CONFIG`, else `fiber.toml` in the working directory; parsed with
/// toml++ when it was found at build time). An unknown key in code or in the
/// file is an error naming the key; an unknown FIBER_* environment variable
/// is ignored with a warning on stderr (the environment is shared: Uber's
/// Python Fiber reads FIBER_IMAGE, FIBER_CPU_PER_JOB, ... too). Workers
/// receive the master's effective table at the handshake.
///
/// Thread-safety: all functions may be called from any thread.

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

/// Every configuration key, one a line: its name (a dotted key such as
/// slurm.partition is `[slurm] partition = ...` in TOML), its default in
/// brackets (`[]`: unset), for an integer key its range in braces
/// (`{min..max}`, both included), and what it sets; an indented line
/// continues the one before. Its
/// environment variable is FIBER_ and the name in capitals, '.' as '_'.
/// Keep in sync with the README's configuration table.
inline constexpr std::string_view config_keys_text = R"(
backend [local] backend of backend::from_env: local | slurm | docker | kubernetes
log_level [warning] debug | info | warning | error | off
log_dir [] if set, each process also logs to <log_dir>/<name>.log
worker_output_dir [] if set, each worker's stdout/stderr go to <dir>/<name>.{out,err} instead of the master's
heartbeat_interval_ms [500] {10..3600000} heartbeat period, both directions
heartbeat_timeout_ms [2000] {20..86400000} a peer silent this long is dead (hung worker, lost link, vanished master); must be greater than
    heartbeat_interval_ms
start_timeout_s [120] {1..604800} a job that has not connected back after this long counts as lost
connect_timeout_ms [10000] {10..3600000} bound on one dial and handshake with another fiber process (a worker dials
    again within start_timeout_s; a timed call returns within its own timeout)
max_message_size_mb [1024] {1..4095} largest accepted frame (MiB)
local_transport [ipc] how local workers dial back: ipc (a socket in the 0700 run dir) | tcp | tls (127.0.0.1 only;
    tls needs tls_cert)
listen_address [] address the master binds for TCP backends (default: its hostname's address)
tls_cert [] PEM certificate: enables TLS for TCP transports
tls_key [] PEM private key of tls_cert
tls_ca [] PEM CA bundle peers are verified against
tls_server_name [] with tls_ca: the name the master's certificate must carry (default: the host of the URL workers
    dial)
frame_mac [true] after the handshake every frame on a tcp:// link carries a ChaCha20-Poly1305 tag under a
    per-connection key and a sequence number; false: frames after the handshake on tcp:// are not authenticated
    (docs/security.md; tls+tcp:// frames are always encrypted and tagged). The master's value holds for all its links
io_threads_batch [true] fiber's and nng's I/O threads run as SCHED_BATCH (Linux), so an arriving message does not
    preempt a running task
progress [false] draw a progress line for long Pool maps on a terminal
slurm.partition [] sbatch --partition
slurm.account [] sbatch --account
slurm.time_limit [] sbatch --time
slurm.extra_args [] extra sbatch arguments (shell-split)
slurm.launch_mode [auto] auto | sbatch | array | srun
slurm.poll_interval_ms [500] {10..3600000} squeue polling period
docker.image [] image of the docker backend's containers (docs/backends/docker.md)
docker.mount_binary [true] bind-mount the executable's directory read-only at its own path (the image then needs
    only its libraries)
docker.network [host] container network: host, or a network whose gateway the master binds
docker.user [] user[:group] the containers run as; default: the master's uid:gid; image: the image's
docker.binds [] more bind mounts, comma-separated src:dst[:ro]
docker.labels [] more container labels, comma-separated key=value
k8s.namespace [] namespace of the kubernetes backend's pods (default: the kubeconfig context's, the master pod's,
    or default)
k8s.image [] image of the worker pods (default: the master pod's own image)
k8s.image_pull_policy [] Always | IfNotPresent | Never (default: the cluster's)
k8s.service_account [] service account of the worker pods (default: the namespace's)
k8s.automount_token [false] mount the service account token into worker pods
k8s.gpu_resource [nvidia.com/gpu] extended resource that resources.gpu requests
k8s.labels [] more pod labels, comma-separated key=value
k8s.pod_patch [] JSON merge patch (RFC 7386) applied to each worker pod, or @file: node selector, tolerations,
    ...
k8s.container_patch [] JSON merge patch applied to the worker container, or @file
k8s.credentials [auto] auto (in-cluster, then kubeconfig, then k8s.api_server) | in-cluster | kubeconfig |
    api-server
k8s.context [] kubeconfig context (default: its current context)
k8s.api_server [] API server URL used as is, e.g. http://127.0.0.1:8001 (kubectl proxy)
k8s.service_account_dir [/var/run/secrets/kubernetes.io/serviceaccount] in-cluster credentials: token, ca.crt,
    namespace
k8s.kubectl [kubectl] kubectl, to resolve a kubeconfig and clean up after a killed master
k8s.tls [true] workers dial tls+tcp:// and pin the master's certificate (an ephemeral self-signed one when tls_cert
    is not set)
k8s.watch_silence_s [90] {1..3600} a pod watch that carries no event or bookmark this long is cancelled and the pods
    listed again (the API server bookmarks every minute)
)";

/// One row of config_keys_text.
struct config_key {
  std::string_view name;     ///< dotted key, e.g. "slurm.partition"
  std::string_view fallback; ///< default ("" = unset)
  std::string doc;
  std::string env;     ///< environment variable, e.g. FIBER_SLURM_PARTITION
  bool ranged = false; ///< an integer key: its value lies in [min, max]
  long long min = 0, max = 0;
};

/// config_keys_text, parsed once. Thread-safe.
inline const std::vector<config_key>& config_keys() {
  static const std::vector<config_key> keys = [] {
    std::vector<config_key> out;
    std::string_view text = config_keys_text;
    while (!text.empty()) {
      auto nl = text.find('\n');
      auto line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
      if (line.empty()) continue;
      if (line.front() == ' ') { // continuation
        out.back().doc += " " + std::string(line.substr(line.find_first_not_of(' ')));
        continue;
      }
      auto open = line.find(" ["), close = line.find("] ", open);
      auto doc = line.substr(close + 2);
      config_key k{line.substr(0, open), line.substr(open + 2, close - open - 2), {}, "FIBER_"};
      if (doc.starts_with("{")) { // {min..max}
        auto dots = doc.find(".."), end = doc.find("} ");
        k.ranged = true;
        k.min = std::stoll(std::string(doc.substr(1, dots - 1)));
        k.max = std::stoll(std::string(doc.substr(dots + 2, end - dots - 2)));
        doc = doc.substr(end + 2);
      }
      k.doc = std::string(doc);
      for (char c : k.name) k.env += c == '.' ? '_' : char(std::toupper(static_cast<unsigned char>(c)));
      out.push_back(std::move(k));
    }
    return out;
  }();
  return keys;
}

// Variables fiber sets for its own workers; not user configuration.
inline bool is_internal_env(std::string_view name) {
  return name.starts_with("FIBER_INTERNAL_") || name == "FIBER_CONFIG";
}

inline const config_key* find_config_key(std::string_view name) {
  for (const auto& k : config_keys())
    if (k.name == name) return &k;
  return nullptr;
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
    if (!find_config_key(key)) throw config_error("fiber: unknown configuration key '" + std::string(key) + "'");
    const config_key& k = *find_config_key(key);
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
    for (const auto& k : config_keys())
      if (auto v = get(k.name)) out.emplace(k.name, *v);
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
  void load_locked() {
    if (loaded_) return;
    loaded_ = true;
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq == std::string_view::npos || !kv.starts_with("FIBER_")) continue;
      auto name = kv.substr(0, eq);
      if (is_internal_env(name)) continue;
      const config_key* key = nullptr;
      for (const auto& k : config_keys())
        if (k.env == name) key = &k;
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
  for (const auto& k : config_keys())
    if (k.ranged) (void)config_get(k.name);
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
