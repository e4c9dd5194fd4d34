// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/options.hpp
/// The kubernetes backend's settings (configuration keys k8s.*), the labels
/// it puts on pods, and the names it gives them.

// Before config.hpp, whose `extern char** environ` must follow unistd.h's extern "C" one.
#include <unistd.h>

#include <fiber/backend/docker/options.hpp> // docker_impl::split_list, the managed-by label
#include <fiber/backend/kubernetes/keys.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

namespace fiber::detail {

namespace kube {

inline constexpr std::string_view managed_by_label = docker_impl::managed_by_label; // = fiber
inline constexpr std::string_view label_run = "fiber.run";
inline constexpr std::string_view label_worker = "fiber.worker";
/// The worker pod's one container.
inline constexpr std::string_view container_name = "worker";
/// The key of the run's Secret that holds FIBER_INTERNAL_SECRET.
inline constexpr std::string_view secret_key = "fiber-secret";

inline std::string hex8(std::uint32_t h) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}

inline std::uint32_t fnv1a32(std::string_view s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

/// A DNS-1123 label (lower-case alphanumerics and '-', starting and ending
/// alphanumeric, at most 63 characters: what a pod's hostname must be):
/// `fiber-<run>-<job>`, other characters mapped to '-', too long a name cut
/// and ended with a hash of the whole.
inline std::string pod_name(std::string_view run, std::string_view job) {
  std::string n = "fiber-" + std::string(run) + "-";
  for (char c : job) {
    auto u = static_cast<unsigned char>(c);
    n += std::isalnum(u) ? char(std::tolower(u)) : '-';
  }
  while (!n.empty() && n.back() == '-') n.pop_back();
  if (n.size() > 63) n = n.substr(0, 54) + "-" + hex8(fnv1a32(n)).substr(0, 8);
  return n;
}

/// A label value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends
/// (other characters become '-', the rest is cut).
inline std::string label_value(std::string_view v) {
  std::string s;
  for (char c : v) {
    auto u = static_cast<unsigned char>(c);
    s += (std::isalnum(u) || c == '-' || c == '_' || c == '.') ? c : '-';
  }
  if (s.size() > 63) s.resize(63);
  while (!s.empty() && !std::isalnum(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && !std::isalnum(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
  return s;
}

/// A JSON document from a configuration value: the text itself, or `@path`
/// (the file's content). "" is null. Throws backend_error naming `key` when
/// it is not a JSON object or the file cannot be read.
inline nlohmann::json json_setting(std::string_view key, const std::string& value) {
  if (value.empty()) return nullptr;
  std::string text = value;
  if (value.front() == '@') {
    std::ifstream in(value.substr(1));
    if (!in) throw backend_error("kubernetes: " + std::string(key) + ": cannot read " + value.substr(1));
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw backend_error("kubernetes: " + std::string(key) + " must be a JSON object (a merge patch), got: " + value);
  return j;
}

} // namespace kube

/// Settings of the kubernetes backend (configuration keys k8s.*).
struct kube_options {
  std::string namespace_;                      ///< k8s.namespace ("": from the credentials, else "default")
  std::string image;                           ///< k8s.image ("": the master pod's image)
  std::string image_pull_policy;               ///< k8s.image_pull_policy ("": the cluster's default)
  std::string service_account;                 ///< k8s.service_account
  bool automount_token = false;                ///< k8s.automount_token
  std::string gpu_resource = "nvidia.com/gpu"; ///< k8s.gpu_resource
  std::map<std::string, std::string> labels;   ///< k8s.labels
  nlohmann::json pod_patch;                    ///< k8s.pod_patch (null: none)
  nlohmann::json container_patch;              ///< k8s.container_patch (null: none)
  std::string credentials = "auto";            ///< k8s.credentials
  std::string context;                         ///< k8s.context
  std::string api_server;                      ///< k8s.api_server
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount"; ///< k8s.service_account_dir
  std::string kubectl = "kubectl";                                                   ///< k8s.kubectl
  bool tls = true;                                                                   ///< k8s.tls
  std::chrono::seconds watch_silence{90};                                            ///< k8s.watch_silence_s
  std::string listen_address;                                                        ///< listen_address
  std::string tls_cert, tls_key, tls_ca; ///< tls_cert, tls_key, tls_ca as configured
  /// Where an ephemeral certificate is written (the runtime's 0700 run
  /// directory); "" makes the launcher create a directory of its own.
  std::string state_dir;
  /// Clean up after a SIGKILLed master with a kubectl watchdog (see kubernetes/reaper.hpp).
  bool reaper = true;

  /// Reads the configuration table. Throws fiber::backend_error for a malformed value.
  static kube_options from_config() {
    kube_options o;
    o.namespace_ = config_string("k8s.namespace");
    o.image = config_string("k8s.image");
    o.image_pull_policy = config_string("k8s.image_pull_policy");
    if (!o.image_pull_policy.empty())
      o.image_pull_policy = docker_impl::one_of("kubernetes", "k8s.image_pull_policy", o.image_pull_policy,
                                                {"Always", "IfNotPresent", "Never"});
    o.service_account = config_string("k8s.service_account");
    o.automount_token = config_bool("k8s.automount_token");
    if (auto g = config_string("k8s.gpu_resource"); !g.empty()) o.gpu_resource = g;
    o.labels = docker_impl::parse_labels("kubernetes", "k8s.labels", true);
    o.pod_patch = kube::json_setting("k8s.pod_patch", config_string("k8s.pod_patch"));
    o.container_patch = kube::json_setting("k8s.container_patch", config_string("k8s.container_patch"));
    o.credentials = config_string("k8s.credentials");
    if (o.credentials.empty()) o.credentials = "auto";
    o.credentials = docker_impl::one_of("kubernetes", "k8s.credentials", o.credentials,
                                        {"auto", "in-cluster", "kubeconfig", "api-server"});
    o.context = config_string("k8s.context");
    o.api_server = config_string("k8s.api_server");
    if (auto d = config_string("k8s.service_account_dir"); !d.empty()) o.service_account_dir = d;
    if (auto k = config_string("k8s.kubectl"); !k.empty()) o.kubectl = k;
    o.tls = config_bool("k8s.tls");
    o.watch_silence = std::chrono::seconds(config_int("k8s.watch_silence_s"));
    o.listen_address = config_string("listen_address");
    o.tls_cert = config_string("tls_cert");
    o.tls_key = config_string("tls_key");
    o.tls_ca = config_string("tls_ca");
    return o;
  }
};

} // namespace fiber::detail
