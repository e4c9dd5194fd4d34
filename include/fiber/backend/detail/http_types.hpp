// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/http_types.hpp
/// What fiber's HTTP client (http_client.hpp) takes and gives: requests,
/// responses, TLS material, stream callbacks, libcurl's error codes.

#include <fiber/backend/detail/async_util.hpp>
#include <fiber/backend/detail/curl_loader.hpp>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace fiber::detail::http {

/// libcurl's CURLcode values as std::error_code.
inline const std::error_category& curl_category() noexcept {
  struct category final : std::error_category {
    const char* name() const noexcept override { return "curl"; }
    std::string message(int c) const override {
      try {
        return curl_api::get().easy_strerror(CURLcode(c));
      } catch (...) {
        return "libcurl error " + std::to_string(c);
      }
    }
  };
  static const category c;
  return c;
}

inline std::error_code make_error(CURLcode c) noexcept { return {int(c), curl_category()}; }

/// TLS material for https:// URLs. A `*_pem` string holds the PEM text itself
/// (e.g. from a kubeconfig); it beats the matching `*_file`.
struct tls_options {
  std::string ca_file, ca_pem;     ///< trust these CAs (both empty: the system's store)
  std::string cert_file, cert_pem; ///< client certificate
  std::string key_file, key_pem;   ///< its private key
  bool verify_peer = true;         ///< false: accept any server certificate (tests only)
};

/// What requests to `url` with `tls` expose on the network, for a warning;
/// "" when nothing does: https:// with the certificate checked, or a
/// loopback host (a unix socket's "http://localhost").
/// `exposure("http://10.0.0.1:2375", {})` starts "plain HTTP".
inline std::string exposure(std::string_view url, const tls_options& tls) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return "";
  const auto scheme = url.substr(0, scheme_end);
  auto host = url.substr(scheme_end + 3);
  host = host.substr(0, host.find('/'));
  if (auto at = host.rfind('@'); at != std::string_view::npos) host = host.substr(at + 1);
  if (host.starts_with('[')) host = host.substr(0, host.find(']') + 1);
  else host = host.substr(0, host.find(':'));
  if (host == "localhost" || host.starts_with("127.") || host == "[::1]") return "";
  if (scheme == "http") return "plain HTTP: anyone on the path can read and change what is sent";
  if (scheme == "https" && !tls.verify_peer)
    return "the server's certificate is not checked: anyone on the path can pose as the server";
  return "";
}

/// One HTTP request. Owned by the operation once passed in.
struct request {
  std::string method = "GET";
  std::string url;                                          ///< absolute, e.g. "http://docker/v1.41/version"
  std::vector<std::pair<std::string, std::string>> headers; ///< sent as given
  std::string body;                                         ///< sent when non-empty, or for POST/PUT/PATCH
  std::string unix_socket;  ///< connect to this AF_UNIX socket (the URL's host is then only the Host header)
  std::string bearer_token; ///< "Authorization: Bearer <token>"
  tls_options tls;
  std::chrono::milliseconds timeout{0};             ///< whole request; 0: none (streams)
  std::chrono::milliseconds connect_timeout{10000}; ///< connection setup
  bool use_env_proxy = false; ///< honour http_proxy/https_proxy/no_proxy; off: always connect directly
  std::string proxy;          ///< through this proxy ("http://host:3128", "socks5://..."); beats use_env_proxy
  std::size_t max_body = std::size_t(64) << 20; ///< a longer buffered body fails the request (CURLE_WRITE_ERROR)
};

/// What came back.
struct response {
  long status = 0;                                          ///< HTTP status; 0 if no response arrived
  std::vector<std::pair<std::string, std::string>> headers; ///< names in lower case, in arrival order
  /// One-shot requests: the whole body. Streams: the body only when the
  /// status is not 2xx (an error document); 2xx bodies go to on_data.
  std::string body;
  std::string error; ///< libcurl's detailed message when the transfer failed ("" otherwise)

  /// First value of header `name` (lower case), or "".
  std::string_view header(std::string_view name) const noexcept {
    for (auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
};

/// Callbacks of a streaming request; both run on the client's executor.
struct stream_handlers {
  /// Once, when a 2xx status line and its headers have arrived (the stream
  /// is established), before any on_data. Optional.
  unique_function<void(const response&)> on_head;
  /// Each piece of a 2xx body as it arrives, in order. The view is valid
  /// only during the call.
  unique_function<void(std::string_view)> on_data;
};

} // namespace fiber::detail::http
