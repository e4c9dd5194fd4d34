// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker/options.hpp
/// The docker backend's settings (configuration keys docker.*), the labels
/// it puts on containers, and who the master is (for the sweep of containers
/// whose master is gone).

// Before config.hpp, whose `extern char** environ` must follow unistd.h's extern "C" one.
#include <unistd.h>

#include <fiber/backend/docker/keys.hpp>
#include <fiber/detail/host_name.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>

#include <cctype>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace fiber::detail {

namespace docker_impl {

inline constexpr std::string_view managed_by_label = "app.kubernetes.io/managed-by";
inline constexpr std::string_view label_run = "fiber.run";
inline constexpr std::string_view label_worker = "fiber.worker";
inline constexpr std::string_view label_host = "fiber.master.host";
inline constexpr std::string_view label_pid = "fiber.master.pid";
inline constexpr std::string_view label_start = "fiber.master.start";
inline constexpr std::string_view label_boot = "fiber.master.boot";
inline constexpr std::string_view label_pidns = "fiber.master.pidns";

inline std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

/// Field 22 of /proc/<pid>/stat (start time in clock ticks after boot); "" if no such process.
inline std::string process_start_time(const std::string& pid) {
  auto stat = read_first_line("/proc/" + pid + "/stat");
  auto rp = stat.rfind(')');
  if (rp == std::string::npos) return {};
  std::istringstream rest(stat.substr(rp + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

/// Who this master is, for the labels the sweep reads.
struct master_identity {
  std::string host, pid, start, boot, pidns;
  static master_identity self() {
    master_identity m;
    m.host = fiber::detail::host_name();
    m.pid = std::to_string(::getpid());
    m.start = process_start_time("self");
    m.boot = read_first_line("/proc/sys/kernel/random/boot_id");
    char ns[64] = {};
    if (auto n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1); n > 0) m.pidns.assign(ns, std::size_t(n));
    return m;
  }
};

/// Whether the master a container's labels name is gone: only answerable
/// for masters on this host in this pid namespace (nullopt otherwise).
inline std::optional<bool> master_gone(const std::map<std::string, std::string>& labels, const master_identity& me) {
  auto get = [&](std::string_view k) {
    auto it = labels.find(std::string(k));
    return it == labels.end() ? std::string() : it->second;
  };
  if (get(label_host) != me.host || get(label_pid).empty() || get(label_start).empty()) return std::nullopt;
  if (!get(label_boot).empty() && get(label_boot) != me.boot) return true; // rebooted since
  if (get(label_pidns) != me.pidns) return std::nullopt;
  return process_start_time(get(label_pid)) != get(label_start); // gone, or its pid reused
}

/// Docker's container-name alphabet: anything else becomes '-'.
inline std::string container_name(std::string_view run, std::string_view job) {
  std::string n = "fiber-" + std::string(run) + "-";
  for (char c : job) n += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '-';
  return n;
}

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (!(cur.empty() && c == ' ')) {
      cur += c;
    }
  }
  while (!cur.empty() && cur.back() == ' ') cur.pop_back();
  if (!cur.empty()) out.push_back(cur);
  return out;
}

/// A comma-separated list of key=value labels (docker.labels, k8s.labels).
/// Throws fiber::backend_error naming `who`'s `key` for an item with no key,
/// or with no `=` when `need_value`.
inline std::map<std::string, std::string> parse_labels(const char* who, const char* key, bool need_value) {
  std::map<std::string, std::string> out;
  for (auto& kv : split_list(config_string(key))) {
    auto eq = kv.find('=');
    if (eq == 0 || (need_value && eq == std::string::npos))
      throw backend_error(std::string(who) + ": " + key + ": '" + kv + "' is not key=value");
    out[kv.substr(0, eq)] = eq == std::string::npos ? std::string() : kv.substr(eq + 1);
  }
  return out;
}

/// `value` if it is one of `allowed`; else throws fiber::backend_error
/// naming `who`'s `key` and the choices.
inline std::string one_of(const char* who, const char* key, std::string value,
                          std::initializer_list<std::string_view> allowed) {
  std::string list;
  for (auto a : allowed) {
    if (value == a) return value;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw backend_error(std::string(who) + ": " + key + " must be one of " + list + ", got '" + value + "'");
}

} // namespace docker_impl

/// Settings of the docker backend (configuration keys docker.*).
struct docker_options {
  std::string image;                         ///< docker.image
  bool mount_binary = true;                  ///< docker.mount_binary
  std::string network = "host";              ///< docker.network
  std::string user;                          ///< docker.user resolved: "uid:gid", or "" for the image's
  std::vector<std::string> binds;            ///< docker.binds
  std::map<std::string, std::string> labels; ///< docker.labels
  std::string listen_address;                ///< listen_address
  std::vector<std::string> tls_files;        ///< tls_cert, tls_key, tls_ca (bind-mounted when TLS is on)
  bool tls = false;                          ///< tls_cert set: workers dial tls+tcp://

  /// Reads the configuration table. Throws fiber::backend_error for a malformed value.
  static docker_options from_config() {
    docker_options o;
    o.image = config_string("docker.image");
    o.mount_binary = config_bool("docker.mount_binary");
    o.network = config_string("docker.network");
    if (o.network.empty()) o.network = "host";
    auto user = config_string("docker.user");
    if (user.empty()) o.user = std::to_string(::getuid()) + ":" + std::to_string(::getgid());
    else if (user != "image") o.user = user;
    o.binds = docker_impl::split_list(config_string("docker.binds"));
    o.labels = docker_impl::parse_labels("docker", "docker.labels", false);
    o.listen_address = config_string("listen_address");
    for (const char* k : {"tls_cert", "tls_key", "tls_ca"})
      if (auto v = config_string(k); !v.empty()) o.tls_files.push_back(v);
    o.tls = !config_string("tls_cert").empty();
    return o;
  }
};

} // namespace fiber::detail
