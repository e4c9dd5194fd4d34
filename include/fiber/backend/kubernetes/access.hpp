// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/access.hpp
/// Where the kubernetes backend finds its API server and credentials:
/// in-cluster service-account files, a kubeconfig (read through `kubectl
/// config view`: no YAML parser here), or k8s.api_server; and the parsing of
/// exec credential plugins' output. Parsing is pure and unit-tested.

#include <fiber/backend/detail/command.hpp>
#include <fiber/backend/detail/environment.hpp>
#include <fiber/backend/detail/http_types.hpp>
#include <fiber/backend/kubernetes/options.hpp>
#include <fiber/error.hpp>

#include <mbedtls/base64.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/stat.h>

namespace fiber::detail::kube {

// ---------------------------------------------------------------------------
// Small pieces
// ---------------------------------------------------------------------------

/// Base64 (RFC 4648) of `data`, through mbedTLS.
inline std::string base64_encode(std::string_view data) {
  std::size_t n = 0;
  auto in = reinterpret_cast<const unsigned char*>(data.data());
  mbedtls_base64_encode(nullptr, 0, &n, in, data.size());
  std::string out(n, '\0');
  if (mbedtls_base64_encode(reinterpret_cast<unsigned char*>(out.data()), out.size(), &n, in, data.size()) != 0)
    throw std::runtime_error("base64 encoding failed");
  out.resize(n);
  return out;
}

/// The bytes `b64` encodes; nullopt when it is not valid base64.
inline std::optional<std::string> base64_decode(std::string_view b64) {
  std::size_t n = 0;
  auto in = reinterpret_cast<const unsigned char*>(b64.data());
  int rc = mbedtls_base64_decode(nullptr, 0, &n, in, b64.size());
  if (rc == MBEDTLS_ERR_BASE64_INVALID_CHARACTER) return std::nullopt;
  std::string out(n, '\0');
  if (mbedtls_base64_decode(reinterpret_cast<unsigned char*>(out.data()), out.size(), &n, in, b64.size()) != 0)
    return std::nullopt;
  out.resize(n);
  return out;
}

/// An RFC 3339 time ("2024-05-01T12:00:00Z", fractional seconds and
/// "+hh:mm" offsets accepted); nullopt when malformed.
inline std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view s) {
  std::tm tm{};
  int consumed = 0;
  std::string str(s);
  if (str.size() < 20 || str[4] != '-' || str[7] != '-' || str[13] != ':' || str[16] != ':') return std::nullopt;
  if (std::sscanf(str.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
      (str[10] != 'T' && str[10] != 't'))
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::size_t i = std::size_t(consumed);
  if (i < str.size() && str[i] == '.')
    for (++i; i < str.size() && std::isdigit(static_cast<unsigned char>(str[i])); ++i) {
    }
  long offset = 0;
  if (i < str.size() && (str[i] == 'Z' || str[i] == 'z')) {
    ++i;
  } else if (i + 6 <= str.size() && (str[i] == '+' || str[i] == '-') && str[i + 3] == ':') {
    int hh = std::atoi(str.substr(i + 1, 2).c_str()), mm = std::atoi(str.substr(i + 4, 2).c_str());
    offset = (str[i] == '+' ? 1 : -1) * (hh * 3600L + mm * 60L);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != str.size()) return std::nullopt;
  std::time_t t = ::timegm(&tm);
  if (t == std::time_t(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(t - offset);
}

inline std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string trim_text(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  s.erase(0, s.find_first_not_of(" \t\r\n"));
  return s;
}

// ---------------------------------------------------------------------------
// What a client needs to talk to an API server
// ---------------------------------------------------------------------------

/// A kubeconfig user's exec credential plugin (client.authentication.k8s.io).
struct exec_config {
  std::string api_version; ///< client.authentication.k8s.io/v1 or v1beta1
  std::string command;     ///< looked up on PATH unless it holds a '/'
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env; ///< added to the master's environment
  std::string install_hint;                             ///< shown when the command cannot run
  bool provide_cluster_info = false;
  nlohmann::json cluster; ///< spec.cluster of KUBERNETES_EXEC_INFO (server, CA data)
};

/// How to reach and authenticate with one API server.
struct access {
  std::string server;              ///< "https://10.0.0.1:443", no trailing '/'
  http::tls_options tls;           ///< CA (file or PEM), client certificate and key, verification
  std::string token;               ///< a static bearer token
  std::string token_file;          ///< a bearer token re-read from this file (it rotates)
  std::optional<exec_config> exec; ///< a credential plugin, run when needed
  std::string proxy;               ///< kubeconfig proxy-url ("": none)
  std::string namespace_;          ///< the credentials' namespace ("": none said)
  std::string source;              ///< for messages: where all this came from
  bool in_cluster = false;         ///< from a pod's service-account files
};

/// What an exec credential plugin printed (an ExecCredential's status).
struct exec_credential {
  std::string token;
  std::string cert_pem, key_pem;                               ///< clientCertificateData / clientKeyData
  std::optional<std::chrono::system_clock::time_point> expiry; ///< nullopt: until rejected
};

/// Parses an exec plugin's stdout (an ExecCredential). `expect_version` is
/// the apiVersion the kubeconfig asked for ("" accepts v1 and v1beta1).
/// Throws backend_error naming `plugin` when it is not one, or holds neither
/// a token nor a client certificate and key.
inline exec_credential parse_exec_credential(std::string_view out, const std::string& plugin,
                                             const std::string& expect_version = {}) {
  auto fail = [&](const std::string& why) -> exec_credential {
    throw backend_error("kubernetes: exec credential plugin " + plugin + ": " + why);
  };
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail("its output is not JSON (an ExecCredential)");
  if (j.value("kind", "") != "ExecCredential") return fail("its output is not an ExecCredential");
  auto v = j.value("apiVersion", "");
  if (!expect_version.empty() && v != expect_version)
    return fail("it answered apiVersion " + v + ", the kubeconfig asked for " + expect_version);
  auto st = j.find("status");
  if (st == j.end() || !st->is_object()) return fail("its ExecCredential has no status");
  exec_credential c;
  c.token = st->value("token", "");
  c.cert_pem = st->value("clientCertificateData", "");
  c.key_pem = st->value("clientKeyData", "");
  if (auto e = st->value("expirationTimestamp", ""); !e.empty()) {
    c.expiry = parse_rfc3339(e);
    if (!c.expiry) return fail("bad expirationTimestamp '" + e + "'");
  }
  if (c.token.empty() && (c.cert_pem.empty() || c.key_pem.empty()))
    return fail("its ExecCredential has neither a token nor a client certificate and key");
  return c;
}

namespace config_impl {

inline const nlohmann::json* named(const nlohmann::json& cfg, const char* list, const std::string& name,
                                   const char* field) {
  auto l = cfg.find(list);
  if (l == cfg.end() || !l->is_array()) return nullptr;
  for (auto& e : *l)
    if (e.is_object() && e.value("name", "") == name)
      if (auto f = e.find(field); f != e.end() && f->is_object()) return &*f;
  return nullptr;
}

inline std::string resolve_path(const std::string& p, const std::string& base_dir) {
  if (p.empty() || p.front() == '/' || base_dir.empty()) return p;
  return base_dir + "/" + p;
}

inline std::string str(const nlohmann::json& o, const char* k) {
  auto it = o.find(k);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

} // namespace config_impl

/// The access a kubeconfig (as JSON) gives: its `context` (""= its
/// current-context), that context's cluster, user and namespace. File paths
/// are relative to `base_dir`; `origin` names the file in messages. Throws
/// backend_error saying what is missing or unsupported (username/password,
/// legacy auth-provider plugins: use an exec plugin).
inline access from_kubeconfig(const nlohmann::json& cfg, std::string context, const std::string& base_dir,
                              const std::string& origin) {
  using namespace config_impl;
  auto fail = [&](const std::string& why) -> access {
    throw backend_error("kubernetes: kubeconfig " + origin + ": " + why);
  };
  if (!cfg.is_object()) return fail("not a kubeconfig document");
  if (context.empty()) context = str(cfg, "current-context");
  if (context.empty()) return fail("no current-context (set one, or k8s.context)");
  const auto* ctx = named(cfg, "contexts", context, "context");
  if (!ctx) return fail("no context named '" + context + "'");
  const std::string cluster_name = str(*ctx, "cluster"), user_name = str(*ctx, "user");
  const auto* cl = named(cfg, "clusters", cluster_name, "cluster");
  if (!cl) return fail("context '" + context + "' names cluster '" + cluster_name + "', which is not there");
  access a;
  a.source = "kubeconfig " + origin + ", context " + context;
  a.namespace_ = str(*ctx, "namespace");
  a.server = str(*cl, "server");
  while (!a.server.empty() && a.server.back() == '/') a.server.pop_back();
  if (a.server.empty()) return fail("cluster '" + cluster_name + "' has no server");
  if (auto d = str(*cl, "certificate-authority-data"); !d.empty()) {
    auto pem = base64_decode(d);
    if (!pem) return fail("cluster '" + cluster_name + "': certificate-authority-data is not base64");
    a.tls.ca_pem = *pem;
  } else if (auto f = str(*cl, "certificate-authority"); !f.empty()) {
    a.tls.ca_file = resolve_path(f, base_dir);
  }
  if (cl->value("insecure-skip-tls-verify", false)) a.tls.verify_peer = false;
  a.proxy = str(*cl, "proxy-url");
  if (!user_name.empty()) {
    const auto* u = named(cfg, "users", user_name, "user");
    if (!u) return fail("context '" + context + "' names user '" + user_name + "', which is not there");
    if (u->contains("auth-provider"))
      return fail("user '" + user_name +
                  "' uses an auth-provider plugin, which fiber does not support (they are "
                  "deprecated): use an exec credential plugin, e.g. gke-gcloud-auth-plugin or kubelogin");
    if (!str(*u, "username").empty() || !str(*u, "password").empty())
      return fail("user '" + user_name + "': basic authentication (username/password) is not supported");
    a.token = str(*u, "token");
    a.token_file = resolve_path(str(*u, "tokenFile"), base_dir);
    auto pem_or_file = [&](const char* data_key, const char* file_key, std::string& pem, std::string& file) {
      if (auto d = str(*u, data_key); !d.empty()) {
        auto v = base64_decode(d);
        if (!v) fail("user '" + user_name + "': " + data_key + " is not base64");
        pem = *v;
      } else {
        file = resolve_path(str(*u, file_key), base_dir);
      }
    };
    pem_or_file("client-certificate-data", "client-certificate", a.tls.cert_pem, a.tls.cert_file);
    pem_or_file("client-key-data", "client-key", a.tls.key_pem, a.tls.key_file);
    if (auto e = u->find("exec"); e != u->end() && e->is_object()) {
      exec_config x;
      x.api_version = str(*e, "apiVersion");
      if (x.api_version != "client.authentication.k8s.io/v1" && x.api_version != "client.authentication.k8s.io/v1beta1")
        return fail("user '" + user_name + "': exec apiVersion '" + x.api_version +
                    "' (fiber speaks client.authentication.k8s.io/v1 and v1beta1)");
      x.command = str(*e, "command");
      if (x.command.empty()) return fail("user '" + user_name + "': exec has no command");
      if (x.command.find('/') != std::string::npos) x.command = resolve_path(x.command, base_dir);
      if (auto args = e->find("args"); args != e->end() && args->is_array())
        for (auto& v : *args)
          if (v.is_string()) x.args.push_back(v.get<std::string>());
      if (auto env = e->find("env"); env != e->end() && env->is_array())
        for (auto& v : *env)
          if (v.is_object()) x.env.emplace_back(str(v, "name"), str(v, "value"));
      x.install_hint = str(*e, "installHint");
      if (str(*e, "interactiveMode") == "Always")
        return fail("user '" + user_name + "': its exec plugin needs a terminal (interactiveMode Always)");
      x.provide_cluster_info = e->value("provideClusterInfo", false);
      x.cluster = {{"server", a.server}};
      if (!a.tls.ca_pem.empty()) x.cluster["certificate-authority-data"] = base64_encode(a.tls.ca_pem);
      if (!a.tls.verify_peer) x.cluster["insecure-skip-tls-verify"] = true;
      a.exec = std::move(x);
    }
  }
  return a;
}

/// Host and port of a server URL ("https://[fd00::1]:6443/x" -> {"fd00::1",
/// "6443"}); the scheme's port when none is given.
inline std::pair<std::string, std::string> split_server(std::string s) {
  const bool https = s.starts_with("https://");
  if (auto p = s.find("://"); p != std::string::npos) s = s.substr(p + 3);
  s = s.substr(0, s.find('/'));
  std::string host = s, port = https ? "443" : "80";
  if (auto rb = s.rfind(']'); s.starts_with("[") && rb != std::string::npos) {
    host = s.substr(1, rb - 1);
    if (rb + 1 < s.size() && s[rb + 1] == ':') port = s.substr(rb + 2);
  } else if (auto c = s.rfind(':'); c != std::string::npos) {
    host = s.substr(0, c);
    port = s.substr(c + 1);
  }
  return {host, port};
}

/// The access of a pod's service account: https://host:port, the CA and the
/// (rotating) token under `sa_dir`, the namespace it names.
inline access in_cluster(const std::string& host, const std::string& port, const std::string& sa_dir) {
  access a;
  a.in_cluster = true;
  a.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  a.tls.ca_file = sa_dir + "/ca.crt";
  a.token_file = sa_dir + "/token";
  a.namespace_ = trim_text(read_file_text(sa_dir + "/namespace"));
  a.source = "in-cluster service account (" + sa_dir + ")";
  return a;
}

/// The part of the process environment the resolution reads (tests make
/// their own).
struct environment {
  std::string service_host; ///< KUBERNETES_SERVICE_HOST
  std::string service_port; ///< KUBERNETES_SERVICE_PORT
  std::string kubeconfig;   ///< KUBECONFIG (':'-separated)
  std::string home;         ///< HOME
  static environment from_process() {
    auto get = [](const char* k) {
      const char* v = std::getenv(k);
      return v ? std::string(v) : std::string();
    };
    return {get("KUBERNETES_SERVICE_HOST"), get("KUBERNETES_SERVICE_PORT"), get("KUBECONFIG"), get("HOME")};
  }
};

inline bool readable(const std::string& p) { return !p.empty() && ::access(p.c_str(), R_OK) == 0; }

/// Reads the kubeconfig files `paths` ("a:b" as KUBECONFIG): through
/// `kubectl config view --raw --minify --flatten -o json` (merging, YAML,
/// relative paths: kubectl's own rules), or, when `kubectl` cannot be run,
/// one file that is JSON already. Blocks for kubectl (~0.1 s, at most 20 s).
/// Throws backend_error with kubectl's message.
inline access load_kubeconfig(const std::string& paths, const std::string& context, const std::string& kubectl) {
  const std::string first = paths.substr(0, paths.find(':'));
  const std::string base_dir = first.find('/') == std::string::npos ? std::string() : first.substr(0, first.rfind('/'));
  spawn_request r;
  r.argv = {kubectl, "config", "view", "--raw", "--minify", "--flatten", "-o", "json"};
  if (!context.empty()) r.argv.push_back("--context=" + context);
  r.env = merged_environment({{"KUBECONFIG", paths}});
  command_result res;
  try {
    res = run(r, std::chrono::seconds(20));
  } catch (const std::system_error&) { // no kubectl: a JSON kubeconfig is read directly
    if (paths.find(':') != std::string::npos)
      throw backend_error("kubernetes: KUBECONFIG names several files, and " + kubectl +
                          " (which merges them) cannot be run: install kubectl (Debian: kubernetes-client)");
    auto j = nlohmann::json::parse(read_file_text(first), nullptr, false);
    if (j.is_discarded())
      throw backend_error("kubernetes: kubeconfig " + first + " is not JSON, and " + kubectl +
                          " (which reads YAML) cannot be run: install kubectl (Debian: kubernetes-client), or set "
                          "k8s.kubectl, or use k8s.api_server");
    return from_kubeconfig(j, context, base_dir, first);
  }
  if (!res.ok())
    throw backend_error("kubernetes: `" + kubectl + " config view` (KUBECONFIG=" + paths + ") failed (" +
                        res.describe() + "): " + res.message());
  auto j = nlohmann::json::parse(res.out, nullptr, false);
  if (j.is_discarded()) throw backend_error("kubernetes: `" + kubectl + " config view` printed something not JSON");
  return from_kubeconfig(j, context, base_dir, paths);
}

/// Finds the API server and credentials, in the order k8s.credentials says
/// (auto: in-cluster — KUBERNETES_SERVICE_HOST/PORT and a token under
/// k8s.service_account_dir —, then a kubeconfig — KUBECONFIG, else
/// ~/.kube/config when it exists —, then k8s.api_server). Blocks while
/// kubectl reads a kubeconfig. Throws backend_error saying where it looked.
inline access resolve(const kube_options& o, const environment& e) {
  const std::string mode = o.credentials.empty() ? "auto" : o.credentials;
  const bool auto_mode = mode == "auto";
  if (auto_mode || mode == "in-cluster") {
    if (!e.service_host.empty() && !e.service_port.empty() && readable(o.service_account_dir + "/token"))
      return in_cluster(e.service_host, e.service_port, o.service_account_dir);
    if (!auto_mode)
      throw backend_error("kubernetes: k8s.credentials is in-cluster, but " +
                          std::string(e.service_host.empty() ? "KUBERNETES_SERVICE_HOST is not set"
                                                             : "there is no token in " + o.service_account_dir) +
                          " (is the master running in a pod with a service account token?)");
  }
  if (auto_mode || mode == "kubeconfig") {
    std::string paths = e.kubeconfig;
    if (paths.empty() && !e.home.empty() && readable(e.home + "/.kube/config")) paths = e.home + "/.kube/config";
    if (!paths.empty()) return load_kubeconfig(paths, o.context, o.kubectl);
    if (!auto_mode)
      throw backend_error(
          "kubernetes: k8s.credentials is kubeconfig, but KUBECONFIG is not set and there is no ~/.kube/config");
  }
  if (!o.api_server.empty()) {
    access a;
    a.server = o.api_server;
    while (!a.server.empty() && a.server.back() == '/') a.server.pop_back();
    a.source = "k8s.api_server " + a.server;
    return a;
  }
  throw backend_error("kubernetes: no API server to talk to: not in a pod (KUBERNETES_SERVICE_HOST is not set), no "
                      "kubeconfig (KUBECONFIG, ~/.kube/config) and no k8s.api_server (FIBER_K8S_API_SERVER, e.g. "
                      "http://127.0.0.1:8001 from `kubectl proxy`)");
}

} // namespace fiber::detail::kube
