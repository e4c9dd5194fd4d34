// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/config_keys.hpp
/// Which configuration keys exist: fiber's own, and those each backend
/// registers next to its code; their defaults, ranges and variables.

#include <atomic>
#include <cctype>
#include <cstdint>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fiber::detail {

/// fiber's own configuration keys, one a line: its name (a dotted key such
/// as slurm.partition is `[slurm] partition = ...` in TOML), its default in
/// brackets (`[]`: unset), for an integer key its range in braces
/// (`{min..max}`, both included), and what it sets; an indented line
/// continues the one before. Its environment variable is FIBER_ and the name
/// in capitals, '.' as '_'. A backend's keys (`<prefix>.<key>`) are a table
/// of the same form next to its code (e.g. backend/slurm/keys.hpp),
/// registered with register_config_keys. Keep docs/reference/config.md in
/// sync.
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
object_store_mb [4096] {1..16777216} bound on the object store's memory in each process (MiB): the objects it put and
    the copies it fetched from other hosts; past it, copies no reference uses are evicted, then put and get fail
    with fiber::error
max_message_size_mb [1024] {1..4095} largest accepted frame (MiB)
local_transport [ipc] how local workers dial back: ipc (a socket in the 0700 run dir) | tcp | tls (127.0.0.1 only;
    tls needs tls_cert)
relay [false] workers on one host share one link to the master: the first to start there binds an abstract unix
    socket named after the run (one per network namespace) and relays for the others; for hundreds of workers per host
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
metrics_address [] the master serves Prometheus metrics (/metrics), a live status page (/) and its data (/status.json)
    on HOST:PORT; auto: 127.0.0.1 on a free port (fiber::metrics_url()). Needs <fiber/metrics.hpp> and the CMake target
    fiber::metrics
metrics_public [false] let metrics_address bind an address other than loopback (what is served: names, hosts and
    counts; no secret, no task data)
)";

/// One row of a key table.
struct config_key {
  std::string name;     ///< dotted key, e.g. "slurm.partition"
  std::string fallback; ///< default ("" = unset)
  std::string doc;      ///< what it sets
  std::string env;      ///< environment variable, e.g. FIBER_SLURM_PARTITION
  bool ranged = false;  ///< an integer key: its value lies in [min, max]
  long long min = 0, max = 0;
};

/// The rows of `text`, a table in config_keys_text's form. Throws
/// std::invalid_argument for a line that is not a key.
inline std::vector<config_key> parse_config_keys(std::string_view text) {
  std::vector<config_key> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) continue;
    if (line.front() == ' ') { // continuation
      if (out.empty()) throw std::invalid_argument("fiber: configuration key table starts with a continuation");
      out.back().doc += " " + std::string(line.substr(line.find_first_not_of(' ')));
      continue;
    }
    auto open = line.find(" ["), close = line.find("] ", open);
    if (open == std::string_view::npos || close == std::string_view::npos)
      throw std::invalid_argument("fiber: not a configuration key: " + std::string(line));
    auto doc = line.substr(close + 2);
    config_key k{std::string(line.substr(0, open)), std::string(line.substr(open + 2, close - open - 2)), {}, "FIBER_"};
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
}

/// Every key this program knows: fiber's own and those registered since.
/// Keys are never removed, so a pointer to one stays valid. Thread-safe.
class config_key_registry {
public:
  /// The one registry (a function-local static: safe from static initializers).
  static config_key_registry& instance() {
    static config_key_registry r;
    return r;
  }

  /// Adds the keys of `table` (config_keys_text's form) that are not known
  /// yet. Returns true, for a registration variable.
  bool add(std::string_view table) {
    auto rows = parse_config_keys(table);
    std::lock_guard lk(mutex_);
    for (auto& k : rows) {
      if (find_locked(k.name)) continue;
      keys_.push_back(std::move(k));
      generation_.fetch_add(1, std::memory_order_release);
    }
    return true;
  }

  /// The key named `name`, or nullptr.
  const config_key* find(std::string_view name) const {
    std::lock_guard lk(mutex_);
    return find_locked(name);
  }

  /// The key whose environment variable is `var`, or nullptr.
  const config_key* find_env(std::string_view var) const {
    std::lock_guard lk(mutex_);
    for (const auto& k : keys_)
      if (k.env == var) return &k;
    return nullptr;
  }

  /// Every key, in registration order (fiber's own first).
  std::vector<const config_key*> all() const {
    std::lock_guard lk(mutex_);
    std::vector<const config_key*> v;
    for (const auto& k : keys_) v.push_back(&k);
    return v;
  }

  /// Changes whenever a key is added (the configuration table then reads its
  /// environment and file layers again).
  std::uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }

private:
  config_key_registry() {
    for (auto& k : parse_config_keys(config_keys_text)) keys_.push_back(std::move(k));
  }

  const config_key* find_locked(std::string_view name) const {
    for (const auto& k : keys_)
      if (k.name == name) return &k;
    return nullptr;
  }

  mutable std::mutex mutex_;
  std::deque<config_key> keys_; // a deque: pointers survive push_back
  std::atomic<std::uint64_t> generation_{0};
};

/// Registers a table of keys (config_keys_text's form): what a backend's
/// keys header does during static initialization. Returns true.
inline bool register_config_keys(std::string_view table) { return config_key_registry::instance().add(table); }

/// Every key known, fiber's own first.
inline std::vector<const config_key*> config_keys() { return config_key_registry::instance().all(); }

/// The key named `name`, or nullptr.
inline const config_key* find_config_key(std::string_view name) { return config_key_registry::instance().find(name); }

} // namespace fiber::detail
