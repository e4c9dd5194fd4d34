// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/handshake.hpp
/// The connection handshake: a mutual HMAC-SHA256 challenge–response over the
/// run's secret; nothing but the small, bounded auth frame is decoded before
/// the peer has proven it knows the secret.

#include <fiber/detail/constant_time.hpp>
#include <fiber/detail/frame.hpp>
#include <fiber/detail/frame_mac.hpp>
#include <fiber/detail/tls_config.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <mbedtls/md.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <sys/random.h>

namespace fiber::detail {

inline constexpr std::uint32_t protocol_version = 1;
/// Largest frame accepted before authentication (bytes). The server's
/// stream refuses a longer length header before allocating anything.
inline constexpr std::size_t max_auth_frame = 4096;
/// Largest frame a client accepts during the handshake (challenge, auth_ok
/// with the master's configuration) from a server not yet authenticated.
inline constexpr std::size_t max_handshake_reply = 1u << 20;
/// Connections a process accepts but that have not finished the handshake
/// yet; more are closed at once (each pending one times out after 5 s).
inline constexpr std::size_t max_pending_handshakes = 64;

using nonce_t = std::array<std::uint8_t, 32>;
using mac_t = std::array<std::uint8_t, 32>;

struct challenge_msg {
  nonce_t nonce{};
  std::uint32_t version = protocol_version;
};

struct auth_msg {
  mac_t mac{};     ///< HMAC(secret, "fiber-c" | server nonce | identity fields)
  nonce_t nonce{}; ///< the client's challenge to the server
  std::uint8_t role = 0;
  std::uint64_t worker_id = 0;
  std::uint64_t registry_hash = 0;
  std::string build_id;
  std::int64_t pid = 0;
  std::string host;
  std::string name;
  std::uint64_t incarnation = 0; ///< process_incarnation() of the client
};

struct auth_ok_msg {
  mac_t mac{}; ///< HMAC(secret, "fiber-s" | client nonce | config | frame_mac)
  std::map<std::string, std::string> config;
  std::uint8_t frame_mac = 0; ///< 1: frames after this one carry tags (frame_mac.hpp)
};

struct refused_msg {
  std::string reason;
};

/// Longest refusal text a client shows (bytes); the server is not
/// authenticated when it refuses.
inline constexpr std::size_t max_refusal_text = 512;

/// `text` from a peer, fit for a log line: every byte outside printable
/// ASCII becomes '?' (no terminal escapes), cut at `max` bytes with the
/// original length. `peer_text("a\x1b[2Jb", 512) == "a?[2Jb"`.
inline std::string peer_text(std::string_view text, std::size_t max) {
  std::string out(text.substr(0, max));
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  if (text.size() > max) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

/// The server's first read of an unauthenticated peer: at most
/// max_auth_frame bytes, an auth frame, nothing else.
inline auth_msg decode_auth_frame(std::span<const std::byte> f) {
  if (f.size() > max_auth_frame) throw serialization_error("fiber: auth frame too large");
  return decode_frame<auth_msg>(frame_kind::auth, f);
}

/// 256 bits from the kernel's random source. Throws fiber::error when
/// getrandom fails (other than EINTR).
inline nonce_t random_nonce() {
  nonce_t n{};
  std::size_t got = 0;
  while (got < n.size()) {
    auto r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += std::size_t(r);
    else if (r < 0 && errno != EINTR) throw error(std::string("fiber: getrandom failed: ") + std::strerror(errno));
  }
  return n;
}

/// HMAC-SHA256 (RFC 2104) of `data` under `key`, through mbedTLS's
/// libmbedcrypto, which nng's TLS loads into every process anyway (see
/// docs/RATIONALE.md on start-up cost). Throws fiber::error if mbedTLS fails.
inline mac_t hmac(std::string_view key, std::span<const std::byte> data) {
  mac_t out{};
  static const mbedtls_md_info_t* sha256 = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
  if (!sha256 || mbedtls_md_hmac(sha256, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                                 reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data()) != 0)
    throw error("fiber: HMAC-SHA256 failed (mbedTLS)");
  return out;
}

/// Whether two MACs are equal, in constant time (constant_time_equal).
inline bool mac_equal(const mac_t& a, const mac_t& b) {
  return constant_time_equal(std::as_bytes(std::span(a)), std::as_bytes(std::span(b)));
}

/// HMAC-SHA256 under `secret` of `label`, the other side's `nonce`, the TLS
/// channel and `fields`, serialized in that order: the one layout of both proofs.
template <class... Fields>
mac_t proof(std::string_view secret, const char* label, const nonce_t& nonce, const channel_binding& tls,
            const Fields&... fields) {
  writer w;
  w.write(std::string(label));
  w.write(nonce);
  w.write(tls);
  (w.write(fields), ...);
  return hmac(secret, w.buffer());
}

/// What the client's MAC covers: the server's nonce, every field of the
/// identity it claims (a relay cannot rename a worker, nor claim another's
/// pid) and the TLS channel it sees (a relay that terminates TLS sees two).
inline mac_t client_proof(std::string_view secret, const nonce_t& server_nonce, const auth_msg& a,
                          const channel_binding& tls) {
  return proof(secret, "fiber-c", server_nonce, tls, a.nonce, a.role, a.worker_id, a.registry_hash, a.build_id, a.pid,
               a.host, a.name, a.incarnation);
}

/// A random number drawn once per process: with the host name and pid it
/// names this process uniquely, also where pids repeat on one host name
/// (containers sharing the host's network and name, each with its own pid
/// namespace).
inline std::uint64_t process_incarnation() {
  static const std::uint64_t v = [] {
    auto n = random_nonce();
    std::uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x = x << 8 | n[std::size_t(i)];
    return x;
  }();
  return v;
}

/// What the server's MAC covers: the client's nonce, everything else
/// auth_ok carries (a relay can neither rewrite the configuration a worker
/// applies nor turn frame MACs off) and the TLS channel it sees.
inline mac_t server_proof(std::string_view secret, const nonce_t& client_nonce, const auth_ok_msg& ok,
                          const channel_binding& tls) {
  return proof(secret, "fiber-s", client_nonce, tls, ok.config, ok.frame_mac);
}

/// The keys of one connection's frame MACs, one per direction: HMAC-SHA256
/// under the run's secret (as a PRF, RFC 2104) of the client's proof, which
/// covers the server's fresh nonce, and the client's fresh nonce. Both ends
/// derive them; nobody without the secret can.
struct session_keys {
  session_key client_to_server, server_to_client;
};
inline session_keys derive_session_keys(std::string_view secret, const auth_msg& a) {
  auto key = [&](const char* label) {
    writer w;
    w.write(std::string(label));
    w.write(a.mac);
    w.write(a.nonce);
    return hmac(secret, w.buffer());
  };
  return {key("fiber-k-c2s"), key("fiber-k-s2c")};
}

inline std::string to_hex(std::span<const std::uint8_t> b) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (auto c : b) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

/// Parses exactly 2 * N hex digits into `out`; false otherwise.
template <std::size_t N>
bool from_hex(std::string_view s, std::array<std::uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = digit(s[2 * i]), lo = digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = std::uint8_t(hi << 4 | lo);
  }
  return true;
}

} // namespace fiber::detail
