// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/libssl_loader.hpp
/// OpenSSL's libssl (and the libcrypto it loads), opened with dlopen for
/// the TLS 1.3 handshakes of `tls+tcp://` links; absent, such links fail.

#include <fiber/detail/dl_symbols.hpp>

#include <cstddef>
#include <cstdint>

namespace fiber::detail {

/// The functions of OpenSSL 3 a TLS handshake uses, with their C
/// signatures over opaque pointers (no OpenSSL headers needed). Names in
/// the comments; constants are OpenSSL's public ABI values.
struct libssl_api {
  // TLS_method, SSL_CTX_new, SSL_CTX_free, SSL_CTX_ctrl, SSL_CTX_set_verify,
  // SSL_CTX_use_certificate, SSL_CTX_use_PrivateKey, SSL_CTX_check_private_key,
  // SSL_CTX_get_cert_store, SSL_CTX_set_num_tickets, SSL_CTX_set_options
  const void* (*tls_method)() = nullptr;
  void* (*ctx_new)(const void*) = nullptr;
  void (*ctx_free)(void*) = nullptr;
  long (*ctx_ctrl)(void*, int, long, void*) = nullptr;
  void (*ctx_set_verify)(void*, int, void*) = nullptr;
  int (*ctx_use_certificate)(void*, void*) = nullptr;
  int (*ctx_use_private_key)(void*, void*) = nullptr;
  int (*ctx_check_private_key)(const void*) = nullptr;
  void* (*ctx_get_cert_store)(const void*) = nullptr;
  int (*ctx_set_num_tickets)(void*, std::size_t) = nullptr;
  std::uint64_t (*ctx_set_options)(void*, std::uint64_t) = nullptr;
  // SSL_new, SSL_free, SSL_set_connect_state, SSL_set_accept_state, SSL_set_bio,
  // SSL_do_handshake, SSL_get_error, SSL_set1_host, SSL_ctrl,
  // SSL_get_verify_result, SSL_export_keying_material, SSL_version
  void* (*ssl_new)(void*) = nullptr;
  void (*ssl_free)(void*) = nullptr;
  void (*set_connect_state)(void*) = nullptr;
  void (*set_accept_state)(void*) = nullptr;
  void (*set_bio)(void*, void*, void*) = nullptr;
  int (*do_handshake)(void*) = nullptr;
  int (*get_error)(const void*, int) = nullptr;
  int (*set1_host)(void*, const char*) = nullptr;
  long (*ssl_ctrl)(void*, int, long, void*) = nullptr;
  long (*get_verify_result)(const void*) = nullptr;
  int (*export_keying_material)(void*, unsigned char*, std::size_t, const char*, std::size_t, const unsigned char*,
                                std::size_t, int) = nullptr;
  int (*version)(const void*) = nullptr;
  // BIO_s_mem, BIO_new, BIO_free, BIO_read, BIO_write, BIO_ctrl_pending, BIO_new_mem_buf
  const void* (*bio_s_mem)() = nullptr;
  void* (*bio_new)(const void*) = nullptr;
  int (*bio_free)(void*) = nullptr;
  int (*bio_read)(void*, void*, int) = nullptr;
  int (*bio_write)(void*, const void*, int) = nullptr;
  std::size_t (*bio_ctrl_pending)(void*) = nullptr;
  void* (*bio_new_mem_buf)(const void*, int) = nullptr;
  // PEM_read_bio_X509, PEM_read_bio_PrivateKey, X509_free, EVP_PKEY_free,
  // X509_STORE_add_cert, X509_verify_cert_error_string
  void* (*pem_read_x509)(void*, void**, void*, void*) = nullptr;
  void* (*pem_read_private_key)(void*, void**, void*, void*) = nullptr;
  void (*x509_free)(void*) = nullptr;
  void (*pkey_free)(void*) = nullptr;
  int (*store_add_cert)(void*, void*) = nullptr;
  const char* (*verify_error_string)(long) = nullptr;
  // ERR_get_error, ERR_error_string_n, ERR_clear_error
  unsigned long (*err_get)() = nullptr;
  void (*err_string)(unsigned long, char*, std::size_t) = nullptr;
  void (*err_clear)() = nullptr;

  static constexpr int ctrl_extra_chain_cert = 14;       ///< SSL_CTRL_EXTRA_CHAIN_CERT
  static constexpr int ctrl_set_tlsext_hostname = 55;    ///< SSL_CTRL_SET_TLSEXT_HOSTNAME
  static constexpr int ctrl_set_min_proto_version = 123; ///< SSL_CTRL_SET_MIN_PROTO_VERSION
  static constexpr long tls1_3_version = 0x0304;         ///< TLS1_3_VERSION
  static constexpr int verify_peer = 0x01;               ///< SSL_VERIFY_PEER
  static constexpr int verify_fail_if_no_peer_cert = 0x02;
  static constexpr int error_want_read = 2;                   ///< SSL_ERROR_WANT_READ
  static constexpr int error_want_write = 3;                  ///< SSL_ERROR_WANT_WRITE
  static constexpr std::uint64_t op_no_ticket = 1u << 14;     ///< SSL_OP_NO_TICKET
  static constexpr std::uint64_t init_no_atexit = 0x00080000; ///< OPENSSL_INIT_NO_ATEXIT

  /// The process's table, loaded on first call and never unloaded; nullptr
  /// when libssl (Debian: libssl3, which libcurl already needs) cannot be
  /// opened or lacks a function. Any thread; the first call reads the
  /// library (about 1 ms): make it off the runtime thread.
  static const libssl_api* get() {
    static const libssl_api api = load();
    return api.err_clear ? &api : nullptr;
  }

private:
  static libssl_api load() {
    void* lib = dl_open_first({"libssl.so.3"});
    libssl_api a;
    if (!lib) return a;
    bool all = dl_bind(lib, a.tls_method, "TLS_method");
    all &= dl_bind(lib, a.ctx_new, "SSL_CTX_new");
    all &= dl_bind(lib, a.ctx_free, "SSL_CTX_free");
    all &= dl_bind(lib, a.ctx_ctrl, "SSL_CTX_ctrl");
    all &= dl_bind(lib, a.ctx_set_verify, "SSL_CTX_set_verify");
    all &= dl_bind(lib, a.ctx_use_certificate, "SSL_CTX_use_certificate");
    all &= dl_bind(lib, a.ctx_use_private_key, "SSL_CTX_use_PrivateKey");
    all &= dl_bind(lib, a.ctx_check_private_key, "SSL_CTX_check_private_key");
    all &= dl_bind(lib, a.ctx_get_cert_store, "SSL_CTX_get_cert_store");
    all &= dl_bind(lib, a.ctx_set_num_tickets, "SSL_CTX_set_num_tickets");
    all &= dl_bind(lib, a.ctx_set_options, "SSL_CTX_set_options");
    all &= dl_bind(lib, a.ssl_new, "SSL_new");
    all &= dl_bind(lib, a.ssl_free, "SSL_free");
    all &= dl_bind(lib, a.set_connect_state, "SSL_set_connect_state");
    all &= dl_bind(lib, a.set_accept_state, "SSL_set_accept_state");
    all &= dl_bind(lib, a.set_bio, "SSL_set_bio");
    all &= dl_bind(lib, a.do_handshake, "SSL_do_handshake");
    all &= dl_bind(lib, a.get_error, "SSL_get_error");
    all &= dl_bind(lib, a.set1_host, "SSL_set1_host");
    all &= dl_bind(lib, a.ssl_ctrl, "SSL_ctrl");
    all &= dl_bind(lib, a.get_verify_result, "SSL_get_verify_result");
    all &= dl_bind(lib, a.export_keying_material, "SSL_export_keying_material");
    all &= dl_bind(lib, a.version, "SSL_version");
    all &= dl_bind(lib, a.bio_s_mem, "BIO_s_mem");
    all &= dl_bind(lib, a.bio_new, "BIO_new");
    all &= dl_bind(lib, a.bio_free, "BIO_free");
    all &= dl_bind(lib, a.bio_read, "BIO_read");
    all &= dl_bind(lib, a.bio_write, "BIO_write");
    all &= dl_bind(lib, a.bio_ctrl_pending, "BIO_ctrl_pending");
    all &= dl_bind(lib, a.bio_new_mem_buf, "BIO_new_mem_buf");
    all &= dl_bind(lib, a.pem_read_x509, "PEM_read_bio_X509");
    all &= dl_bind(lib, a.pem_read_private_key, "PEM_read_bio_PrivateKey");
    all &= dl_bind(lib, a.x509_free, "X509_free");
    all &= dl_bind(lib, a.pkey_free, "EVP_PKEY_free");
    all &= dl_bind(lib, a.store_add_cert, "X509_STORE_add_cert");
    all &= dl_bind(lib, a.verify_error_string, "X509_verify_cert_error_string");
    all &= dl_bind(lib, a.err_get, "ERR_get_error");
    all &= dl_bind(lib, a.err_string, "ERR_error_string_n");
    all &= dl_bind(lib, a.err_clear, "ERR_clear_error");
    int (*init_ssl)(std::uint64_t, const void*) = nullptr; // OPENSSL_init_ssl
    all &= dl_bind(lib, init_ssl, "OPENSSL_init_ssl");
    // No cleanup at exit (see libcrypto_loader.hpp).
    if (!all || init_ssl(init_no_atexit, nullptr) != 1) a = {};
    return a;
  }
};

} // namespace fiber::detail
