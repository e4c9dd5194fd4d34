// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/tls_config.hpp
/// Transport options and the nng TLS configuration built from them
/// (`tls+tcp://` URLs; mbedTLS underneath).

#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/nng_ptr.hpp>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace fiber::detail {

/// Transport limits and TLS material (from fiber's config).
struct transport_options {
  /// Frames above this fail with asio::error::message_size; the connection
  /// is closed. Also enforced on send. At most 4 GiB - 1 (u32 header).
  std::size_t max_message_size = 256u << 20;
  /// Used only for tls+tcp:// URLs. Server: cert+key required; with a CA it
  /// requires and verifies client certificates. Client: with a CA the server's
  /// chain and name are verified (the name against tls_server_name, else the
  /// host of the URL dialed: see tls_name_for); without one the channel is
  /// encrypted but unauthenticated (fiber authenticates peers with its own
  /// HMAC handshake). Client cert+key are presented if given. key may be
  /// empty when cert holds both.
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  std::string tls_server_name;
  /// A certificate and key held in memory (PEM), used instead of the files.
  std::string tls_cert_pem, tls_key_pem;
};

/// 32 bytes both ends of one TLS connection derive alike and nobody else
/// can: the exporter of RFC 9266 (label "EXPORTER-Channel-Binding", no
/// context). A relay that terminates TLS on both sides holds two
/// connections, hence two different bindings. All zero without TLS.
using channel_binding = std::array<std::uint8_t, 32>;

inline bool is_tls_url(const std::string& url) { return url.rfind("tls+", 0) == 0; }

/// The keys that say how one end of a TLS link verifies and presents itself.
inline constexpr std::string_view tls_keys[] = {"tls_cert", "tls_key", "tls_ca", "tls_server_name"};

/// Whether `key` is one of tls_keys: a worker that dialed over TLS keeps its
/// launch's, which may differ from the master's.
/// Example: is_tls_key("tls_ca") == true.
inline bool is_tls_key(std::string_view key) {
  return std::find(std::begin(tls_keys), std::end(tls_keys), key) != std::end(tls_keys);
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory),
                            "fiber: cannot read TLS file " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The name a client verifies the server's certificate against:
/// `o.tls_server_name`, else the host of `url` (brackets of an IPv6 literal
/// removed). nng sets the same default in the configuration it makes, which
/// make_tls_config replaces. Example: tls_name_for("tls+tcp://10.0.0.5:4000", {}) == "10.0.0.5".
inline std::string tls_name_for(std::string_view url, const transport_options& o) {
  if (!o.tls_server_name.empty()) return o.tls_server_name;
  if (auto p = url.find("://"); p != std::string_view::npos) url.remove_prefix(p + 3);
  if (url.starts_with('[')) return std::string(url.substr(1, url.find(']') - 1));
  return std::string(url.substr(0, url.rfind(':')));
}

/// Builds an nng TLS config from fiber's options. Throws std::system_error.
inline tls_config_ptr make_tls_config(nng_tls_mode mode, const transport_options& o) {
  auto check = [](int rv, const std::string& what) {
    if (rv) throw std::system_error(make_nng_error(rv), "fiber: TLS " + what);
  };
  nng_tls_config* raw = nullptr;
  check(nng_tls_config_alloc(&raw, mode), "config (is nng built with TLS?)");
  tls_config_ptr cfg(raw);
  const bool server = mode == NNG_TLS_MODE_SERVER;
  if (server && o.tls_cert_file.empty() && o.tls_cert_pem.empty())
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "fiber: a tls+tcp listener needs tls_cert_file and tls_key_file");
  if (!o.tls_cert_pem.empty()) {
    check(nng_tls_config_own_cert(cfg.get(), o.tls_cert_pem.c_str(), o.tls_key_pem.c_str(), nullptr),
          "in-memory certificate/key");
  } else if (!o.tls_cert_file.empty()) {
    const std::string cert = read_text_file(o.tls_cert_file);
    const std::string key = o.tls_key_file.empty() ? cert : read_text_file(o.tls_key_file);
    check(nng_tls_config_own_cert(cfg.get(), cert.c_str(), key.c_str(), nullptr),
          "certificate/key " + o.tls_cert_file + " " + o.tls_key_file);
  }
  if (!o.tls_ca_file.empty()) {
    check(nng_tls_config_ca_file(cfg.get(), o.tls_ca_file.c_str()), "CA file " + o.tls_ca_file);
    check(nng_tls_config_auth_mode(cfg.get(), NNG_TLS_AUTH_MODE_REQUIRED), "auth mode");
  } else {
    check(nng_tls_config_auth_mode(cfg.get(), NNG_TLS_AUTH_MODE_NONE), "auth mode");
  }
  if (!server && !o.tls_server_name.empty())
    check(nng_tls_config_server_name(cfg.get(), o.tls_server_name.c_str()), "server name");
  return cfg;
}

} // namespace fiber::detail
