// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/tls_config.hpp
/// Transport options: frame limits and the TLS material of `tls+tcp://`
/// links (tls_context.hpp makes OpenSSL's context from it).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace fiber::detail {

/// Transport limits and TLS material (from fiber's config).
class tls_context;

struct transport_options {
  /// Frames above this fail with asio::error::message_size; the connection
  /// is closed. Also enforced on send. At most 4 GiB - 1 (u32 header).
  std::size_t max_message_size = 256u << 20;
  /// Used only for tls+tcp:// URLs. Server: cert+key required; with a CA it
  /// requires and verifies client certificates. Client: with a CA the server's
  /// chain and name are verified (the name against tls_server_name, else the
  /// host of the URL dialed: see tls_name_for); without one the server's
  /// certificate is not verified, and fiber's HMAC handshake, bound to the
  /// TLS channel, is what stops a relay. Client cert+key are presented if
  /// given. key may be empty when cert holds both.
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  std::string tls_server_name;
  /// A certificate and key held in memory (PEM), used instead of the files.
  std::string tls_cert_pem, tls_key_pem;
  /// Contexts made beforehand from the fields above (they read files: the
  /// runtime makes them off its thread); when null, a listener or a dial
  /// makes its own.
  std::shared_ptr<const tls_context> tls_server, tls_client;
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
/// removed). Example: tls_name_for("tls+tcp://10.0.0.5:4000", {}) == "10.0.0.5".
inline std::string tls_name_for(std::string_view url, const transport_options& o) {
  if (!o.tls_server_name.empty()) return o.tls_server_name;
  if (auto p = url.find("://"); p != std::string_view::npos) url.remove_prefix(p + 3);
  if (url.starts_with('[')) return std::string(url.substr(1, url.find(']') - 1));
  return std::string(url.substr(0, url.rfind(':')));
}

} // namespace fiber::detail
