// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker/wire.hpp
/// The pure parts of fiber's Docker Engine API client: DOCKER_HOST parsing,
/// API versions, the container-create document, `/events` lines and the
/// multiplexed output of `/attach`. No I/O; unit-tested without a daemon.

#include <fiber/backend/detail/http_client.hpp>
#include <fiber/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail::docker {

/// A failed Engine API call or an unreachable daemon. The message starts with
/// "docker: " and carries Docker's own `message`; status() is the HTTP
/// status (0: no response: the daemon could not be reached, or the call was
/// aborted).
class api_error : public fiber::backend_error {
public:
  api_error(const std::string& what, long status) : backend_error(what), status_(status) {}
  long status() const noexcept { return status_; }

private:
  long status_;
};

// ---------------------------------------------------------------------------
// Where the daemon is
// ---------------------------------------------------------------------------

/// How to reach a daemon.
struct endpoint {
  std::string host;        ///< as configured, for messages ("unix:///var/run/docker.sock")
  std::string unix_socket; ///< set for unix://
  std::string base_url;    ///< "http://localhost" (unix), "http://h:2375", "https://h:2376"
  http::tls_options tls;   ///< https only
};

inline constexpr std::string_view default_docker_host = "unix:///var/run/docker.sock";

/// Parses a DOCKER_HOST value: `unix:///path` (or a bare absolute path),
/// `tcp://host[:port]` (http, port 2375; https with client certificates,
/// port 2376, when `tls_verify`: `cert_path`/{ca,cert,key}.pem, as the docker
/// CLI does with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH), `http://`,
/// `https://`. "" means the default socket. Throws fiber::backend_error for
/// other schemes (ssh://, fd://, npipe://).
inline endpoint parse_host(std::string_view host, bool tls_verify = false, std::string cert_path = {}) {
  endpoint e;
  e.host = host.empty() ? std::string(default_docker_host) : std::string(host);
  std::string_view h = e.host;
  if (h.starts_with("unix://") || h.starts_with("/")) {
    e.unix_socket = std::string(h.starts_with("/") ? h : h.substr(7));
    e.base_url = "http://localhost";
    if (e.unix_socket.empty()) throw backend_error("docker: DOCKER_HOST=" + e.host + " names no socket");
    return e;
  }
  if (h.starts_with("http://") || h.starts_with("https://")) {
    e.base_url = std::string(h);
    while (!e.base_url.empty() && e.base_url.back() == '/') e.base_url.pop_back();
  } else if (h.starts_with("tcp://")) {
    std::string rest(h.substr(6));
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    const bool has_port = rest.rfind(':') != std::string::npos && rest.back() != ']';
    if (!has_port) rest += tls_verify ? ":2376" : ":2375";
    e.base_url = (tls_verify ? "https://" : "http://") + rest;
  } else {
    throw backend_error("docker: DOCKER_HOST=" + e.host +
                        " is not supported by fiber: use unix:///path/to/docker.sock or tcp://host:port");
  }
  if (e.base_url.starts_with("https://")) {
    if (cert_path.empty()) {
      const char* home = std::getenv("HOME");
      cert_path = std::string(home ? home : "") + "/.docker";
    }
    e.tls.ca_file = cert_path + "/ca.pem";
    e.tls.cert_file = cert_path + "/cert.pem";
    e.tls.key_file = cert_path + "/key.pem";
  }
  return e;
}

/// The endpoint the docker CLI would use: DOCKER_HOST, DOCKER_TLS_VERIFY,
/// DOCKER_CERT_PATH. Throws like parse_host.
inline endpoint endpoint_from_env() {
  auto get = [](const char* k) {
    const char* v = std::getenv(k);
    return std::string(v ? v : "");
  };
  return parse_host(get("DOCKER_HOST"), !get("DOCKER_TLS_VERIFY").empty(), get("DOCKER_CERT_PATH"));
}

// ---------------------------------------------------------------------------
// API versions
// ---------------------------------------------------------------------------

/// "1.41" -> {1, 41}; {0, 0} when it does not parse.
inline std::pair<int, int> parse_api_version(std::string_view v) {
  auto dot = v.find('.');
  if (dot == std::string_view::npos) return {0, 0};
  char* end = nullptr;
  std::string major(v.substr(0, dot)), minor(v.substr(dot + 1));
  long a = std::strtol(major.c_str(), &end, 10);
  if (*end) return {0, 0};
  long b = std::strtol(minor.c_str(), &end, 10);
  if (*end) return {0, 0};
  return {int(a), int(b)};
}

/// The newest Engine API version fiber was written against; a newer daemon
/// is spoken to in this version (Docker keeps old versions working down to
/// its MinAPIVersion: 1.24 for Docker 25-28, 1.44 for 29).
inline constexpr std::string_view newest_api_version = "1.47";
/// The oldest fiber can use: DeviceRequests (GPUs) came with 1.40 (Docker 19.03).
inline constexpr std::string_view oldest_api_version = "1.40";

/// The version to speak with a daemon whose `GET /version` said
/// `ApiVersion` = `daemon` and `MinAPIVersion` = `daemon_min`: the older of
/// `daemon` and newest_api_version. Throws api_error when that is below
/// daemon_min or oldest_api_version.
inline std::string choose_api_version(std::string_view daemon, std::string_view daemon_min, const std::string& host) {
  auto d = parse_api_version(daemon), newest = parse_api_version(newest_api_version),
       oldest = parse_api_version(oldest_api_version);
  auto m = daemon_min.empty() ? std::pair{1, 12} : parse_api_version(daemon_min);
  if (d == std::pair{0, 0})
    throw api_error("docker: the daemon at " + host + " reported no usable API version ('" + std::string(daemon) + "')",
                    0);
  auto use = std::min(d, newest);
  if (use < m || use < oldest)
    throw api_error("docker: the daemon at " + host + " speaks Engine API " + std::string(daemon) + " (minimum " +
                        std::string(daemon_min) + "); fiber speaks " + std::string(oldest_api_version) + " to " +
                        std::string(newest_api_version),
                    0);
  return std::to_string(use.first) + "." + std::to_string(use.second);
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// Percent-encoding for a query value (RFC 3986 unreserved characters kept).
inline std::string url_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// `filters=` value selecting containers that carry every label in `labels`
/// ("key" or "key=value").
inline std::string label_filter(const std::vector<std::string>& labels) {
  return url_encode(nlohmann::json{{"label", labels}}.dump());
}

/// One container, as fiber creates it.
struct container_spec {
  std::string name; ///< Docker's name rules: [a-zA-Z0-9][a-zA-Z0-9_.-]+
  std::string image;
  std::vector<std::string> argv; ///< argv[0] becomes the Entrypoint, the rest Cmd; empty: the image's
  std::vector<std::string> env;  ///< "KEY=value"
  std::map<std::string, std::string> labels;
  std::string user;               ///< "uid:gid"; "" = the image's
  std::string working_dir;        ///< "" = the image's
  std::string network = "host";   ///< HostConfig.NetworkMode
  std::vector<std::string> binds; ///< "src:dst[:ro]"
  bool auto_remove = true, init = true;
  std::int64_t nano_cpus = 0;    ///< 0: no limit
  std::int64_t memory_bytes = 0; ///< 0: no limit; also the memory+swap limit (no swap)
  int gpus = 0;                  ///< DeviceRequests: Count gpus, Capabilities [["gpu"]]
};

/// The body of `POST /containers/create` for `s`.
inline nlohmann::json create_body(const container_spec& s) {
  nlohmann::json host{{"AutoRemove", s.auto_remove}, {"Init", s.init}, {"NetworkMode", s.network}};
  if (!s.binds.empty()) host["Binds"] = s.binds;
  if (s.nano_cpus > 0) host["NanoCpus"] = s.nano_cpus;
  if (s.memory_bytes > 0) {
    host["Memory"] = s.memory_bytes;
    host["MemorySwap"] = s.memory_bytes; // no swap: over the limit is out of memory, not slow
  }
  if (s.gpus > 0)
    host["DeviceRequests"] =
        nlohmann::json::array({{{"Driver", ""},
                                {"Count", s.gpus},
                                {"Capabilities", nlohmann::json::array({nlohmann::json::array({"gpu"})})}}});
  nlohmann::json b{{"Image", s.image},     {"Env", s.env}, {"Labels", s.labels}, {"AttachStdout", true},
                   {"AttachStderr", true}, {"Tty", false}, {"OpenStdin", false}, {"HostConfig", std::move(host)}};
  if (!s.argv.empty()) {
    b["Entrypoint"] = nlohmann::json::array({s.argv.front()});
    b["Cmd"] = std::vector<std::string>(s.argv.begin() + 1, s.argv.end());
  }
  if (!s.user.empty()) b["User"] = s.user;
  if (!s.working_dir.empty()) b["WorkingDir"] = s.working_dir;
  return b;
}

/// Docker's error document `{"message": "..."}` as text; the raw body (or
/// "HTTP <status>") when it is something else.
inline std::string error_message(const http::response& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  std::string body = r.body;
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
  return body.empty() ? "HTTP " + std::to_string(r.status) : body;
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

/// One entry of `GET /events`.
struct event {
  std::string type;                              ///< "container", "network", ...
  std::string action;                            ///< "create", "start", "die", "oom", "destroy", ...
  std::string id;                                ///< Actor.ID
  std::map<std::string, std::string> attributes; ///< Actor.Attributes: name, exitCode, image, the labels
  std::int64_t time_nano = 0;

  std::string attribute(const std::string& k) const {
    auto it = attributes.find(k);
    return it == attributes.end() ? std::string() : it->second;
  }
};

/// One event document (parse_event); throws nlohmann::json::exception for a
/// field of the wrong type.
inline event event_from(const nlohmann::json& j) {
  event e;
  e.type = j.value("Type", "");
  e.action = j.value("Action", j.value("status", ""));
  e.time_nano = j.value("timeNano", std::int64_t(0));
  if (auto a = j.find("Actor"); a != j.end() && a->is_object()) {
    e.id = a->value("ID", "");
    if (auto at = a->find("Attributes"); at != a->end() && at->is_object())
      for (auto& [k, v] : at->items())
        if (v.is_string()) e.attributes[k] = v.get<std::string>();
  }
  if (e.id.empty()) e.id = j.value("id", "");
  return e;
}

/// Parses one line of the events stream; nullopt for anything else. Throws
/// std::invalid_argument, quoting the line, for a field of the wrong type.
inline std::optional<event> parse_event(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    return event_from(j);
  } catch (const nlohmann::json::exception& x) {
    throw std::invalid_argument("an event of an unexpected shape (" + std::string(x.what()) +
                                "): " + std::string(line.substr(0, 200)));
  }
}

/// Cuts a byte stream into items, keeping an incomplete one's bytes between
/// calls: `Cut{}(bytes, on_item)` reports each whole item in `bytes` and
/// returns how many bytes those took.
template <class Cut>
class stream_decoder {
public:
  template <class F>
  void feed(std::string_view data, F&& on_item) {
    buf_.append(data);
    buf_.erase(0, Cut{}(std::string_view(buf_), on_item));
  }

private:
  std::string buf_;
};

/// Lines (the events stream: one JSON document a line); empty ones skipped.
struct cut_lines {
  template <class F>
  std::size_t operator()(std::string_view b, F& on_line) const {
    std::size_t start = 0;
    for (auto nl = b.find('\n'); nl != std::string_view::npos; nl = b.find('\n', start)) {
      if (nl > start) on_line(b.substr(start, nl - start));
      start = nl + 1;
    }
    return start;
  }
};
using line_splitter = stream_decoder<cut_lines>;

/// The framing of `/attach` without a TTY: frames of [stream (1 stdout,
/// 2 stderr), 0, 0, 0, size (u32 big-endian)] + payload; calls
/// on_output(stream, payload) for each.
struct cut_output_frames {
  template <class F>
  std::size_t operator()(std::string_view b, F& on_output) const {
    std::size_t at = 0;
    while (b.size() - at >= 8) {
      auto* h = reinterpret_cast<const unsigned char*>(b.data() + at);
      const std::size_t n = (std::size_t(h[4]) << 24) | (std::size_t(h[5]) << 16) | (std::size_t(h[6]) << 8) | h[7];
      if (b.size() - at - 8 < n) break;
      on_output(int(h[0]), b.substr(at + 8, n));
      at += 8 + n;
    }
    return at;
  }
};
using output_demux = stream_decoder<cut_output_frames>;

} // namespace fiber::detail::docker
