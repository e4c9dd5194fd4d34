// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/frame_mac.hpp
/// Frames protected after the handshake: each payload (in clear, or
/// encrypted) is followed by a 16-byte tag under a per-connection,
/// per-direction key, with the frame's sequence number as nonce (no
/// forgery, replay, reordering or deletion).

#include <fiber/detail/constant_time.hpp>
#include <fiber/detail/libcrypto_loader.hpp>
#include <fiber/error.hpp>

#include <mbedtls/chachapoly.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <system_error>

namespace fiber::detail {

/// Bytes of the tag after each authenticated frame's payload.
inline constexpr std::size_t frame_tag_size = 16;

/// A 256-bit key of one direction of one connection.
using session_key = std::array<std::uint8_t, 32>;

/// The error a stream closes with when a frame fails its tag.
enum class frame_mac_errc { bad_tag = 1 };

inline const std::error_category& frame_mac_category() noexcept {
  struct category : std::error_category {
    const char* name() const noexcept override { return "fiber.frame_mac"; }
    std::string message(int) const override {
      return "a frame failed its authentication tag (changed, replayed or reordered in transit)";
    }
  };
  static const category c;
  return c;
}

inline std::error_code make_error_code(frame_mac_errc e) noexcept { return {int(e), frame_mac_category()}; }

/// Which library computes the tags; both give the same ones.
enum class mac_engine {
  best,    ///< OpenSSL's libcrypto when it can be loaded (SIMD), else mbedTLS
  mbedtls, ///< mbedTLS's portable C
};

/// One direction's sealing or checking: ChaCha20-Poly1305 (RFC 8439, §2.8),
/// the nonce the frame's sequence number (64-bit little-endian,
/// zero-padded); either the payload is additional data and nothing is
/// encrypted (seal/open), or the payload is encrypted (encrypt/decrypt;
/// one way per direction and connection). Computed by
/// OpenSSL's libcrypto where the process can load it (libcrypto_loader.hpp)
/// for frames of 4 KiB and more, else by mbedTLS (the same tags). Counts
/// frames itself, so the sender's and the receiver's must see the same
/// frames in the same order. Not thread-safe: one owner at a time (the
/// stream's write side or read side).
class frame_mac {
public:
  /// Throws fiber::error if the library refuses the key.
  explicit frame_mac(const session_key& key, mac_engine e = mac_engine::best)
      : ssl_(e == mac_engine::best ? libcrypto_api::get() : nullptr), key_(key) {
    mbedtls_chachapoly_init(&ctx_);
    const unsigned char zero[12] = {};
    const bool ok = mbedtls_chachapoly_setkey(&ctx_, key.data()) == 0 &&
                    (!ssl_ || ((evp_ = ssl_->ctx_new()) &&
                               ssl_->init(evp_, ssl_->chacha20_poly1305(), nullptr, key.data(), zero) == 1));
    if (!ok) {
      release();
      throw error("fiber: ChaCha20-Poly1305 key setup failed");
    }
  }
  ~frame_mac() { release(); }
  frame_mac(const frame_mac&) = delete;
  frame_mac& operator=(const frame_mac&) = delete;

  /// The tag of the next frame, whose payload is `parts` in order.
  /// Example: `m.seal({msg, tail}, tag)`.
  void seal(std::initializer_list<std::span<const std::byte>> parts, std::byte (&tag)[frame_tag_size]) {
    compute(parts, reinterpret_cast<unsigned char*>(tag));
  }

  /// Encrypts the next frame, whose plaintext is `parts` in order, into
  /// `out` (their total size; it may be the storage of a single part), and
  /// writes its tag. Example: `m.encrypt({msg, tail}, wire.data(), tag)`.
  void encrypt(std::initializer_list<std::span<const std::byte>> parts, std::byte* out,
               std::byte (&tag)[frame_tag_size]) {
    compute(parts, reinterpret_cast<unsigned char*>(tag), reinterpret_cast<unsigned char*>(out));
  }

  /// Decrypts the next frame in place; whether `tag` is the one the peer
  /// made for it (in constant time). When false, `payload` holds garbage
  /// and the sequence has advanced: a stream reads no further.
  bool decrypt(std::span<std::byte> payload, std::span<const std::byte> tag) {
    auto* p = reinterpret_cast<unsigned char*>(payload.data());
    const auto nonce = next_nonce();
    if (ssl_ && payload.size() >= evp_threshold) {
      int n = 0;
      bool ok = ssl_->dinit(evp_, ssl_->chacha20_poly1305(), nullptr, key_.data(), nonce.data()) == 1;
      for (std::size_t at = 0; ok && at < payload.size(); at += std::size_t(n)) {
        const int len = int(std::min<std::size_t>(payload.size() - at, std::size_t(1) << 30));
        ok = ssl_->dupdate(evp_, p + at, &n, p + at, len) == 1 && n == len;
      }
      unsigned char t[frame_tag_size], none[16];
      std::copy_n(reinterpret_cast<const unsigned char*>(tag.data()), frame_tag_size, t);
      ok = ok && ssl_->ctrl(evp_, libcrypto_api::ctrl_aead_set_tag, int(frame_tag_size), t) == 1;
      const bool authentic = ok && ssl_->dfinal(evp_, none, &n) == 1;
      // The next seal re-keys the context for encryption.
      if (ssl_->init(evp_, ssl_->chacha20_poly1305(), nullptr, key_.data(), nonce.data()) != 1)
        throw error("fiber: ChaCha20-Poly1305 failed (OpenSSL)");
      return authentic;
    }
    unsigned char want[frame_tag_size];
    int rv = mbedtls_chachapoly_starts(&ctx_, nonce.data(), MBEDTLS_CHACHAPOLY_DECRYPT);
    if (rv == 0 && !payload.empty()) rv = mbedtls_chachapoly_update(&ctx_, payload.size(), p, p);
    if (rv == 0) rv = mbedtls_chachapoly_finish(&ctx_, want);
    if (rv != 0) throw error("fiber: ChaCha20-Poly1305 failed (mbedTLS)");
    return constant_time_equal(std::as_bytes(std::span(want)), tag.first(frame_tag_size));
  }

  /// Whether `payload` followed by `tag` is the next frame the peer sealed
  /// (constant time in the tag's bytes). The sequence advances either way:
  /// a stream never reads on after a failure.
  bool open(std::span<const std::byte> payload, std::span<const std::byte> tag) {
    unsigned char want[frame_tag_size];
    compute({payload}, want);
    return constant_time_equal(std::as_bytes(std::span(want)), tag);
  }

  /// Which library computes this one's tags.
  mac_engine engine() const noexcept { return ssl_ ? mac_engine::best : mac_engine::mbedtls; }

private:
  void release() noexcept {
    if (evp_) ssl_->ctx_free(evp_);
    mbedtls_chachapoly_free(&ctx_);
  }

  std::array<unsigned char, 12> next_nonce() noexcept {
    std::array<unsigned char, 12> nonce{};
    for (std::size_t i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(seq_ >> (8 * i));
    ++seq_;
    return nonce;
  }

  // The tag of the next frame: over `parts` as additional data, or with
  // `out`, over their encryption into it.
  void compute(std::initializer_list<std::span<const std::byte>> parts, unsigned char* tag,
               unsigned char* out = nullptr) {
    const auto nonce = next_nonce();
    std::size_t n = 0;
    for (auto p : parts) n += p.size();
    if (ssl_ && n >= evp_threshold) return compute_evp(parts, nonce.data(), tag, out);
    int rv = mbedtls_chachapoly_starts(&ctx_, nonce.data(), MBEDTLS_CHACHAPOLY_ENCRYPT);
    for (auto p : parts) {
      const auto* in = reinterpret_cast<const unsigned char*>(p.data());
      if (rv == 0 && !p.empty())
        rv = out ? mbedtls_chachapoly_update(&ctx_, p.size(), in, out)
                 : mbedtls_chachapoly_update_aad(&ctx_, in, p.size());
      if (out) out += p.size();
    }
    if (rv == 0) rv = mbedtls_chachapoly_finish(&ctx_, tag);
    if (rv != 0) throw error("fiber: ChaCha20-Poly1305 failed (mbedTLS)");
  }

  void compute_evp(std::initializer_list<std::span<const std::byte>> parts, const unsigned char* nonce,
                   unsigned char* tag, unsigned char* out) {
    int n = 0;
    bool ok = ssl_->init(evp_, nullptr, nullptr, nullptr, nonce) == 1; // the key stays
    for (auto p : parts)
      for (std::size_t at = 0; ok && at < p.size(); at += std::size_t(n)) { // int lengths: 1 GiB at a time
        const int len = int(std::min<std::size_t>(p.size() - at, std::size_t(1) << 30));
        ok = ssl_->update(evp_, out, &n, reinterpret_cast<const unsigned char*>(p.data()) + at, len) == 1 && n == len;
        if (out) out += n;
      }
    unsigned char none[16];
    ok = ok && ssl_->final(evp_, none, &n) == 1 &&
         ssl_->ctrl(evp_, libcrypto_api::ctrl_aead_get_tag, int(frame_tag_size), tag) == 1;
    if (!ok) throw error("fiber: ChaCha20-Poly1305 failed (OpenSSL)");
  }

  // Below this many bytes mbedTLS's few instructions beat OpenSSL's EVP
  // layers, which a round trip finds cold in the caches (docs/RATIONALE.md).
  static constexpr std::size_t evp_threshold = 4096;

  const libcrypto_api* ssl_;
  session_key key_;     // decrypt re-keys the EVP context per frame
  void* evp_ = nullptr; // EVP_CIPHER_CTX*
  mbedtls_chachapoly_context ctx_;
  std::uint64_t seq_ = 0;
};

} // namespace fiber::detail
