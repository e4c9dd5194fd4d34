// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/libcrypto_loader.hpp
/// OpenSSL's libcrypto, opened with dlopen the first time a frame MAC is
/// made, for its SIMD ChaCha20-Poly1305; absent, fiber uses mbedTLS's.

#include <fiber/detail/dl_symbols.hpp>

#include <cstdint>

namespace fiber::detail {

/// The EVP functions of OpenSSL (1.1 or 3) that frame_mac uses, with
/// their C signatures over opaque pointers (no OpenSSL headers needed).
struct libcrypto_api {
  // EVP_CIPHER_CTX_new, EVP_CIPHER_CTX_free, EVP_chacha20_poly1305
  void* (*ctx_new)() = nullptr;
  void (*ctx_free)(void*) = nullptr;
  const void* (*chacha20_poly1305)() = nullptr;
  // EVP_EncryptInit_ex, EVP_EncryptUpdate, EVP_EncryptFinal_ex, EVP_CIPHER_CTX_ctrl
  int (*init)(void*, const void*, void*, const unsigned char*, const unsigned char*) = nullptr;
  int (*update)(void*, unsigned char*, int*, const unsigned char*, int) = nullptr;
  int (*final)(void*, unsigned char*, int*) = nullptr;
  int (*ctrl)(void*, int, int, void*) = nullptr;
  // EVP_DecryptInit_ex, EVP_DecryptUpdate, EVP_DecryptFinal_ex
  int (*dinit)(void*, const void*, void*, const unsigned char*, const unsigned char*) = nullptr;
  int (*dupdate)(void*, unsigned char*, int*, const unsigned char*, int) = nullptr;
  int (*dfinal)(void*, unsigned char*, int*) = nullptr;
  static constexpr int ctrl_aead_get_tag = 0x10;              ///< EVP_CTRL_AEAD_GET_TAG
  static constexpr int ctrl_aead_set_tag = 0x11;              ///< EVP_CTRL_AEAD_SET_TAG
  static constexpr std::uint64_t init_no_atexit = 0x00080000; ///< OPENSSL_INIT_NO_ATEXIT

  /// The process's table, loaded on first call and never unloaded; nullptr
  /// when libcrypto (Debian: libssl3) cannot be opened or lacks a function,
  /// and under ThreadSanitizer.
  /// Any thread; the first call reads the library (about 1 ms).
  static const libcrypto_api* get() {
    static const libcrypto_api api = load();
    return api.ctrl ? &api : nullptr;
  }

private:
  static libcrypto_api load() {
#if defined(__SANITIZE_THREAD__)
    return {}; // ThreadSanitizer cannot see into uninstrumented libcrypto: mbedTLS, which it can
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return {};
#endif
#endif
    void* lib = dl_open_first({"libcrypto.so.3", "libcrypto.so.1.1"});
    libcrypto_api a;
    if (!lib) return a;
    bool all = dl_bind(lib, a.ctx_new, "EVP_CIPHER_CTX_new");
    all &= dl_bind(lib, a.ctx_free, "EVP_CIPHER_CTX_free");
    all &= dl_bind(lib, a.chacha20_poly1305, "EVP_chacha20_poly1305");
    all &= dl_bind(lib, a.init, "EVP_EncryptInit_ex");
    all &= dl_bind(lib, a.update, "EVP_EncryptUpdate");
    all &= dl_bind(lib, a.final, "EVP_EncryptFinal_ex");
    all &= dl_bind(lib, a.ctrl, "EVP_CIPHER_CTX_ctrl");
    all &= dl_bind(lib, a.dinit, "EVP_DecryptInit_ex");
    all &= dl_bind(lib, a.dupdate, "EVP_DecryptUpdate");
    all &= dl_bind(lib, a.dfinal, "EVP_DecryptFinal_ex");
    int (*init_crypto)(std::uint64_t, const void*) = nullptr; // OPENSSL_init_crypto
    all &= dl_bind(lib, init_crypto, "OPENSSL_init_crypto");
    // No cleanup at exit: streams that outlive it (the runtime's, destroyed
    // after atexit handlers registered later) would free into an unloaded provider.
    if (!all || init_crypto(init_no_atexit, nullptr) != 1) a = {};
    return a;
  }
};

} // namespace fiber::detail
