#pragma once
/// @file detail/protocol.hpp
/// fiber's wire protocol: one frame = [u8 kind][fiber::serialize'd body].
/// A connection starts with a mutual HMAC-SHA256 challenge–response over
/// the run's secret; nothing but the small, bounded auth frame is
/// deserialized before the peer has proven it knows the secret.

#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <sys/random.h>
#include <vector>

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

enum class frame_kind : std::uint8_t {
  challenge = 1, ///< server → client: nonce
  auth = 2,      ///< client → server: proof, identity
  auth_ok = 3,   ///< server → client: proof, master's configuration
  refused = 4,   ///< server → client: reason; then close
  heartbeat = 5, ///< both ways, when idle
  run = 10,      ///< master → Process worker: run one target, then exit
  tasks = 11,    ///< master → pool worker: chunks
  results = 12,  ///< pool worker → master: chunk results
  shutdown = 13, ///< master → worker: exit now (late results are discarded)
  exiting = 14,  ///< worker → master: int32 status it exits with (sent for 129..192 only)
  request = 20,  ///< client → service owner
  reply = 21,    ///< service owner → client
  object = 30,   ///< master → manager worker: make/call/destroy a remote object
  object_reply = 31, ///< manager worker → master
};

enum class role : std::uint8_t { worker = 1, client = 2 };

using nonce_t = std::array<std::uint8_t, 32>;
using mac_t = std::array<std::uint8_t, 32>;

struct challenge_msg {
  nonce_t nonce{};
  std::uint32_t version = protocol_version;
};

struct auth_msg {
  mac_t mac{};          ///< HMAC(secret, "fiber-c" | server nonce | identity fields)
  nonce_t nonce{};      ///< the client's challenge to the server
  std::uint8_t role = 0;
  std::uint64_t worker_id = 0;
  std::uint64_t registry_hash = 0;
  std::string build_id;
  std::int64_t pid = 0;
  std::string host;
  std::string name;
};

struct auth_ok_msg {
  mac_t mac{}; ///< HMAC(secret, "fiber-s" | client nonce)
  std::map<std::string, std::string> config;
};

struct refused_msg {
  std::string reason;
};

/// One chunk of a Pool task: `count` serialized arguments back to back.
struct chunk_msg {
  std::uint64_t chunk_id = 0;
  std::uint64_t target_id = 0;
  std::uint32_t count = 0;
  std::vector<std::byte> args;
};

/// Status of an item in a results blob whose task's workers died more than
/// max_retries times, followed by the message. Made by the master (a split
/// chunk's lost task), never sent by a worker.
inline constexpr std::uint8_t lost_status = 2;

/// Per item: u8 status (0 ok, 1 error) then the value or (type, message).
struct chunk_result_msg {
  std::uint64_t chunk_id = 0;
  std::vector<std::byte> results;
};

struct run_msg {
  std::uint64_t target_id = 0;
  std::vector<std::byte> args;
};

struct request_msg {
  std::uint64_t request_id = 0;
  std::uint64_t service_id = 0;
  std::uint32_t op = 0;
  std::vector<std::byte> payload;
};

struct reply_msg {
  std::uint64_t request_id = 0;
  std::uint8_t status = 0; ///< 0 ok, 1 remote_error (payload: type, message), 2 other error (payload: message)
  std::vector<std::byte> payload;
};

/// A chunk of a received tasks frame; `args` lies in the frame (no copy).
struct chunk_view {
  std::uint64_t chunk_id = 0;
  std::uint64_t target_id = 0;
  std::uint32_t count = 0;
  std::span<const std::byte> args;
};

/// A chunk result of a received results frame; `results` lies in the frame.
struct chunk_result_view {
  std::uint64_t chunk_id = 0;
  std::span<const std::byte> results;
};

static_assert(!needs_pad<chunk_msg> && !needs_pad<chunk_result_msg>, "the views below assume no pad bytes");

/// The body of a tasks frame, decoded as deserialize<std::vector<chunk_msg>>
/// decodes it (same checks, same errors) but without copying arguments.
inline std::vector<chunk_view> decode_tasks_view(std::span<const std::byte> body) {
  reader r(body);
  std::vector<chunk_view> out(r.read_length(min_wire_size<chunk_msg>()));
  for (auto& c : out) {
    r.read(c.chunk_id);
    r.read(c.target_id);
    r.read(c.count);
    c.args = r.read_span(r.read_length());
  }
  if (!r.empty()) r.fail("trailing bytes after a tasks frame");
  return out;
}

/// The body of a results frame, as deserialize<std::vector<chunk_result_msg>>
/// decodes it, without copying the results.
inline std::vector<chunk_result_view> decode_results_view(std::span<const std::byte> body) {
  reader r(body);
  std::vector<chunk_result_view> out(r.read_length(min_wire_size<chunk_result_msg>()));
  for (auto& c : out) {
    r.read(c.chunk_id);
    c.results = r.read_span(r.read_length());
  }
  if (!r.empty()) r.fail("trailing bytes after a results frame");
  return out;
}

/// The bytes of frame(tasks, std::vector<chunk_msg>{c}) before c.args: sent
/// with the arguments as the frame's tail, they need not be copied.
inline std::vector<std::byte> tasks_frame_head(std::uint64_t chunk_id, std::uint64_t target_id, std::uint32_t count,
                                               std::size_t args_size) {
  writer w;
  w.buffer().reserve(40);
  w.write(static_cast<std::uint8_t>(frame_kind::tasks));
  w.write_varint(1);
  w.write(chunk_id);
  w.write(target_id);
  w.write(count);
  w.write_varint(args_size);
  return w.release();
}

/// The bytes of frame(results, std::vector<chunk_result_msg>{r}) before r.results.
inline std::vector<std::byte> results_frame_head(std::uint64_t chunk_id, std::size_t results_size) {
  writer w;
  w.buffer().reserve(24);
  w.write(static_cast<std::uint8_t>(frame_kind::results));
  w.write_varint(1);
  w.write(chunk_id);
  w.write_varint(results_size);
  return w.release();
}

template <class Body>
std::vector<std::byte> frame(frame_kind k, const Body& body) {
  writer w;
  w.write(static_cast<std::uint8_t>(k));
  w.write(body);
  return w.release();
}

inline std::vector<std::byte> frame(frame_kind k) {
  writer w;
  w.write(static_cast<std::uint8_t>(k));
  return w.release();
}

/// Splits a frame into kind and body; throws serialization_error if empty.
inline std::pair<frame_kind, std::span<const std::byte>> unframe(std::span<const std::byte> f) {
  if (f.empty()) throw serialization_error("fiber: empty frame");
  return {static_cast<frame_kind>(f[0]), f.subspan(1)};
}

/// The decoder for incoming frames: a frame of kind `want` whose body is a
/// serialized Msg. Throws serialization_error for any other kind, for a body
/// that does not decode, or for trailing bytes (deserialize is bounded by
/// its input). The runtime and the frame fuzzer (tests/fuzz/fuzz_frame.cpp)
/// share it.
template <class Msg>
Msg decode_frame(frame_kind want, std::span<const std::byte> f) {
  auto [k, body] = unframe(f);
  if (k != want)
    throw serialization_error("fiber: expected frame kind " + std::to_string(int(want)) + ", got " +
                              std::to_string(int(k)));
  return deserialize<Msg>(body);
}

/// The server's first read of an unauthenticated peer: at most
/// max_auth_frame bytes, an auth frame, nothing else.
inline auth_msg decode_auth_frame(std::span<const std::byte> f) {
  if (f.size() > max_auth_frame) throw serialization_error("fiber: auth frame too large");
  return decode_frame<auth_msg>(frame_kind::auth, f);
}

inline nonce_t random_nonce() {
  nonce_t n{};
  std::size_t got = 0;
  while (got < n.size()) {
    auto r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += std::size_t(r);
  }
  return n;
}

inline mac_t hmac(std::string_view key, std::span<const std::byte> data) {
  mac_t out{};
  unsigned len = 0;
  ::HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         out.data(), &len);
  return out;
}

inline bool mac_equal(const mac_t& a, const mac_t& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

/// What the client's MAC covers: the server's nonce and the identity it claims.
inline mac_t client_proof(std::string_view secret, const nonce_t& server_nonce, const auth_msg& a) {
  writer w;
  w.write(std::string("fiber-c"));
  w.write(server_nonce);
  w.write(a.nonce);
  w.write(a.role);
  w.write(a.worker_id);
  w.write(a.registry_hash);
  w.write(a.build_id);
  return hmac(secret, w.buffer());
}

inline mac_t server_proof(std::string_view secret, const nonce_t& client_nonce) {
  writer w;
  w.write(std::string("fiber-s"));
  w.write(client_nonce);
  return hmac(secret, w.buffer());
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

} // namespace fiber::detail
