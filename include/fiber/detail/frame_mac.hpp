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
#include <utility>

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
    seal_parts(parts, nullptr, tag);
  }

  /// Seals the next frame piece by piece (a big frame, as its bytes are
  /// written: trailing_seal): begin_seal, feed each piece in order, then
  /// finish_seal writes the tag. `size`: the payload's total bytes.
  void begin_seal(std::size_t size) { start(true, false, size); }
  /// The next piece of the frame begun with begin_seal, encrypted into `out`
  /// (its size; it may be `piece` itself): a big frame encrypted just ahead
  /// of its write (trailing_seal).
  void encrypt_piece(std::span<const std::byte> piece, std::byte* out) {
    feed_to(reinterpret_cast<const unsigned char*>(piece.data()), piece.size(), reinterpret_cast<unsigned char*>(out));
  }
  /// The tag of the frame begun with begin_seal and fed.
  void finish_seal(std::byte (&tag)[frame_tag_size]) {
    auto* t = reinterpret_cast<unsigned char*>(tag);
    bool ok;
    if (evp_on_) {
      unsigned char none[16];
      int n = 0;
      ok = ssl_->final(evp_, none, &n) == 1 &&
           ssl_->ctrl(evp_, libcrypto_api::ctrl_aead_get_tag, int(frame_tag_size), t) == 1;
    } else {
      ok = mbedtls_chachapoly_finish(&ctx_, t) == 0;
    }
    if (!ok) throw error("fiber: ChaCha20-Poly1305 failed");
  }

  /// Encrypts the next frame, whose plaintext is `parts` in order, into
  /// `out` (their total size; it may be the storage of a single part), and
  /// writes its tag. Example: `m.encrypt({msg, tail}, wire.data(), tag)`.
  void encrypt(std::initializer_list<std::span<const std::byte>> parts, std::byte* out,
               std::byte (&tag)[frame_tag_size]) {
    seal_parts(parts, reinterpret_cast<unsigned char*>(out), tag);
  }

  /// Decrypts the next frame in place; whether `tag` is the one the peer
  /// made for it (in constant time). When false, `payload` holds garbage
  /// and the sequence has advanced: a stream reads no further.
  bool decrypt(std::span<std::byte> payload, std::span<const std::byte> tag) {
    begin(true, payload.size());
    feed(payload);
    return finish(tag);
  }

  /// Whether `payload` followed by `tag` is the next frame the peer sealed
  /// (constant time in the tag's bytes). The sequence advances either way:
  /// a stream never reads on after a failure.
  bool open(std::span<const std::byte> payload, std::span<const std::byte> tag) {
    begin(false, payload.size());
    feed({const_cast<std::byte*>(payload.data()), payload.size()}); // not written: nothing is decrypted
    return finish(tag);
  }

  /// Checks the next frame piece by piece, as its bytes arrive (while they
  /// are still in the caches): begin, feed each piece in order, then
  /// finish with the tag (as open, or with `decrypt` as decrypt, in place).
  /// `size`: the payload's total bytes. Example:
  /// `m.begin(false, n); m.feed(a); m.feed(b); ok = m.finish(tag);`
  void begin(bool decrypt, std::size_t size) { start(false, decrypt, size); }

  /// The next piece of the frame begun; decrypted in place when begun so.
  void feed(std::span<std::byte> piece) {
    auto* p = reinterpret_cast<unsigned char*>(piece.data());
    feed_to(p, piece.size(), decrypting_ ? p : nullptr);
  }

  /// Whether `tag` ends the frame begun as its peer sealed it (constant time).
  bool finish(std::span<const std::byte> tag) {
    if (tag.size() != frame_tag_size) return false;
    if (evp_on_) {
      unsigned char t[frame_tag_size], none[16];
      int n = 0;
      std::copy_n(reinterpret_cast<const unsigned char*>(tag.data()), frame_tag_size, t);
      return ssl_->ctrl(evp_, libcrypto_api::ctrl_aead_set_tag, int(frame_tag_size), t) == 1 &&
             ssl_->dfinal(evp_, none, &n) == 1; // OpenSSL compares in constant time
    }
    unsigned char want[frame_tag_size];
    if (mbedtls_chachapoly_finish(&ctx_, want) != 0) throw error("fiber: ChaCha20-Poly1305 failed (mbedTLS)");
    return constant_time_equal(std::as_bytes(std::span(want)), tag);
  }

  /// Which library computes this one's tags.
  mac_engine engine() const noexcept { return ssl_ ? mac_engine::best : mac_engine::mbedtls; }

private:
  // begin or begin_seal: the next frame's nonce, the library by its size.
  void start(bool seal, bool decrypt, std::size_t size) {
    const auto nonce = next_nonce();
    sealing_ = seal;
    decrypting_ = decrypt;
    evp_on_ = ssl_ && size >= evp_threshold;
    bool ok;
    if (evp_on_ && seal) {
      const bool rekey = std::exchange(evp_keyed_for_open_, false); // a context that opened before
      ok = ssl_->init(evp_, rekey ? ssl_->chacha20_poly1305() : nullptr, nullptr, rekey ? key_.data() : nullptr,
                      nonce.data()) == 1;
    } else if (evp_on_) {
      // The key is set once per direction; a context that sealed before is re-keyed.
      ok = ssl_->dinit(evp_, evp_keyed_for_open_ ? nullptr : ssl_->chacha20_poly1305(), nullptr,
                       evp_keyed_for_open_ ? nullptr : key_.data(), nonce.data()) == 1;
      evp_keyed_for_open_ = true;
    } else {
      ok = mbedtls_chachapoly_starts(&ctx_, nonce.data(),
                                     decrypt ? MBEDTLS_CHACHAPOLY_DECRYPT : MBEDTLS_CHACHAPOLY_ENCRYPT) == 0;
    }
    if (!ok) throw error("fiber: ChaCha20-Poly1305 failed");
  }

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

  // The next frame's tag over `parts`: as additional data, or with `out`,
  // over their encryption into it.
  void seal_parts(std::initializer_list<std::span<const std::byte>> parts, unsigned char* out,
                  std::byte (&tag)[frame_tag_size]) {
    std::size_t n = 0;
    for (auto p : parts) n += p.size();
    begin_seal(n);
    for (auto p : parts) {
      feed_to(reinterpret_cast<const unsigned char*>(p.data()), p.size(), out);
      if (out) out += p.size();
    }
    finish_seal(tag);
  }

  // `in` into the frame begun: encrypted or decrypted into `out`, or, without
  // it, as additional data (the direction and the library: start).
  void feed_to(const unsigned char* in, std::size_t size, unsigned char* out) {
    bool ok = true;
    if (evp_on_) {
      const auto update = sealing_ ? ssl_->update : ssl_->dupdate;
      for (std::size_t at = 0, n; ok && at < size; at += n) { // int lengths: 1 GiB at a time
        int got = 0;
        n = std::min<std::size_t>(size - at, std::size_t(1) << 30);
        ok = update(evp_, out ? out + at : nullptr, &got, in + at, int(n)) == 1 && (!out || std::size_t(got) == n);
      }
    } else if (size > 0) {
      ok = (out ? mbedtls_chachapoly_update(&ctx_, size, in, out) : mbedtls_chachapoly_update_aad(&ctx_, in, size)) ==
           0;
    }
    if (!ok) throw error("fiber: ChaCha20-Poly1305 failed");
  }

  // Below this many bytes mbedTLS's few instructions beat OpenSSL's EVP
  // layers, which a round trip finds cold in the caches (docs/RATIONALE.md).
  static constexpr std::size_t evp_threshold = 4096;

  const libcrypto_api* ssl_;
  session_key key_;     // to re-key the EVP context between sealing and opening
  void* evp_ = nullptr; // EVP_CIPHER_CTX*
  bool evp_keyed_for_open_ = false, evp_on_ = false, decrypting_ = false, sealing_ = false;
  mbedtls_chachapoly_context ctx_;
  std::uint64_t seq_ = 0;
};

} // namespace fiber::detail
