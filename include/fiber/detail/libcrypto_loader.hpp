// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/libcrypto_loader.hpp
/// OpenSSL's libcrypto, opened with dlopen the first time a frame MAC is
/// made, for its SIMD ChaCha20-Poly1305; absent, fiber uses mbedTLS's.

#include <dlfcn.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

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
  static constexpr int ctrl_aead_get_tag = 0x10;              ///< EVP_CTRL_AEAD_GET_TAG
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
    void* lib = nullptr;
    for (const char* name : {"libcrypto.so.3", "libcrypto.so.1.1"})
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    libcrypto_api a;
    if (!lib) return a;
    bool all = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      all = all && fn;
    };
    sym(a.ctx_new, "EVP_CIPHER_CTX_new");
    sym(a.ctx_free, "EVP_CIPHER_CTX_free");
    sym(a.chacha20_poly1305, "EVP_chacha20_poly1305");
    sym(a.init, "EVP_EncryptInit_ex");
    sym(a.update, "EVP_EncryptUpdate");
    sym(a.final, "EVP_EncryptFinal_ex");
    sym(a.ctrl, "EVP_CIPHER_CTX_ctrl");
    int (*init_crypto)(std::uint64_t, const void*) = nullptr; // OPENSSL_init_crypto
    sym(init_crypto, "OPENSSL_init_crypto");
    // No cleanup at exit: streams that outlive it (the runtime's, destroyed
    // after atexit handlers registered later) would free into an unloaded provider.
    if (!all || init_crypto(init_no_atexit, nullptr) != 1) a = {};
    return a;
  }
};

} // namespace fiber::detail
