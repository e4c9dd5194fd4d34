// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/tls_context.hpp
/// One end's TLS settings as an OpenSSL context (TLS 1.3 only, no session
/// tickets), built from fiber's transport options; the errors of fiber's TLS.

#include <fiber/detail/libssl_loader.hpp>
#include <fiber/detail/tls_config.hpp>

#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// What went wrong in a TLS handshake or its settings.
enum class tls_errc {
  unavailable = 1, ///< OpenSSL's libssl 3 cannot be loaded
  bad_settings,    ///< a certificate, key or CA that OpenSSL refuses
  protocol,        ///< the peer spoke no TLS 1.3, or broke it
  trailing_bytes,  ///< bytes arrived after the peer's last handshake message
};

/// tls_verify_error's codes: this plus OpenSSL's X509_V_ERR_* reason.
inline constexpr int verify_base = 1000;

inline const std::error_category& tls_category() noexcept {
  struct category : std::error_category {
    const char* name() const noexcept override { return "fiber.tls"; }
    std::string message(int e) const override {
      if (e >= verify_base) {
        const auto* api = libssl_api::get();
        return std::string("the peer's TLS certificate failed verification: ") +
               (api ? api->verify_error_string(e - verify_base) : "error " + std::to_string(e - verify_base));
      }
      switch (tls_errc(e)) {
      case tls_errc::unavailable: return "OpenSSL's libssl 3 cannot be loaded (Debian: libssl3)";
      case tls_errc::bad_settings: return "OpenSSL refused the TLS certificate, key or CA";
      case tls_errc::protocol: return "the TLS 1.3 handshake failed";
      case tls_errc::trailing_bytes: return "the peer sent bytes after its last TLS handshake message";
      }
      return "TLS error";
    }
  };
  static const category c;
  return c;
}

inline std::error_code make_error_code(tls_errc e) noexcept { return {int(e), tls_category()}; }

/// The error of a certificate that failed verification with OpenSSL's
/// X509_V_ERR_* `reason`; its message gives OpenSSL's words.
/// Example: tls_verify_error(62).message() ends in "hostname mismatch".
inline std::error_code tls_verify_error(long reason) noexcept { return {int(verify_base + reason), tls_category()}; }
/// Whether `ec` is a tls_verify_error.
inline bool is_tls_verify_failure(std::error_code ec) noexcept {
  return ec.category() == tls_category() && ec.value() >= verify_base;
}

/// The OpenSSL error queue of this thread as text (emptied), or `fallback`.
inline std::string take_openssl_errors(const libssl_api& api, std::string fallback = {}) {
  std::string out;
  while (unsigned long e = api.err_get()) {
    char buf[256];
    api.err_string(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? fallback : out;
}

/// An OpenSSL SSL_CTX for one end of fiber's links: TLS 1.3 only, no
/// session tickets (nothing of TLS follows the handshake on the wire).
/// Server: presents cert+key (required); with tls_ca it also requires a
/// client certificate chaining to it. Client: presents cert+key if given;
/// with tls_ca it verifies the server's chain (and, per handshake, its
/// name); without one it verifies nothing, and fiber's channel binding is
/// what stops a relay (handshake.hpp). Immutable once made: share it
/// between threads and handshakes freely.
class tls_context {
public:
  enum class role { client, server };

  /// Throws std::system_error: tls_errc::unavailable, tls_errc::bad_settings
  /// (OpenSSL's reasons in what()), or no_such_file_or_directory for an
  /// unreadable file. Reads files: call it off the runtime thread.
  /// Example: `tls_context ctx(tls_context::role::server, opts);`
  tls_context(role r, const transport_options& o) : role_(r), verifies_(!o.tls_ca_file.empty()) {
    api_ = libssl_api::get();
    if (!api_) throw std::system_error(make_error_code(tls_errc::unavailable), "fiber: tls+tcp://");
    api_->err_clear();
    ctx_.reset(api_->ctx_new(api_->tls_method()), ctx_deleter{api_});
    if (!ctx_) fail("context");
    void* c = ctx_.get();
    if (api_->ctx_ctrl(c, libssl_api::ctrl_set_min_proto_version, libssl_api::tls1_3_version, nullptr) != 1)
      fail("TLS 1.3");
    api_->ctx_set_options(c, libssl_api::op_no_ticket);
    api_->ctx_set_num_tickets(c, 0);
    std::string cert = o.tls_cert_pem, key = o.tls_key_pem;
    if (cert.empty() && !o.tls_cert_file.empty()) {
      cert = read_text_file(o.tls_cert_file);
      key = o.tls_key_file.empty() ? cert : read_text_file(o.tls_key_file);
    }
    if (r == role::server && cert.empty())
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              "fiber: a tls+tcp listener needs tls_cert_file and tls_key_file");
    if (!cert.empty()) use_identity(cert, key.empty() ? cert : key, o.tls_cert_file);
    if (verifies_) {
      const std::string ca = read_text_file(o.tls_ca_file);
      bool any = false;
      for_each_cert(ca, [&](void* x) { // the store takes its own reference
        any = api_->store_add_cert(api_->ctx_get_cert_store(c), x) == 1 || any;
        return false;
      });
      if (!any) fail("CA file " + o.tls_ca_file);
      api_->ctx_set_verify(c,
                           libssl_api::verify_peer | (r == role::server ? libssl_api::verify_fail_if_no_peer_cert : 0),
                           nullptr);
    }
  }

  role side() const noexcept { return role_; }
  /// Whether the peer's certificate is verified (tls_ca was given).
  bool verifies() const noexcept { return verifies_; }
  const libssl_api& api() const noexcept { return *api_; }
  /// The SSL_CTX*, alive as long as any copy of this context.
  void* native() const noexcept { return ctx_.get(); }

private:
  struct ctx_deleter {
    const libssl_api* api;
    void operator()(void* c) const noexcept { api->ctx_free(c); }
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw std::system_error(make_error_code(tls_errc::bad_settings),
                            "fiber: TLS " + what + ": " + take_openssl_errors(*api_, "refused"));
  }

  // Calls f(X509*) for each certificate in the PEM text; f returns true
  // when it took the certificate over.
  template <class F>
  void for_each_cert(const std::string& pem, F f) const {
    void* bio = api_->bio_new_mem_buf(pem.data(), int(pem.size()));
    if (!bio) fail("memory");
    while (void* x = api_->pem_read_x509(bio, nullptr, nullptr, nullptr))
      if (!f(x)) api_->x509_free(x);
    api_->bio_free(bio);
    api_->err_clear(); // the end of the text reads as an error
  }

  void use_identity(const std::string& cert, const std::string& key, const std::string& name) {
    void* c = ctx_.get();
    bool leaf = true, ok = true;
    for_each_cert(cert, [&](void* x) {
      if (!std::exchange(leaf, false)) // a chain certificate: the context takes it over
        return (ok = ok && api_->ctx_ctrl(c, libssl_api::ctrl_extra_chain_cert, 0, x) == 1);
      ok = api_->ctx_use_certificate(c, x) == 1; // takes its own reference
      return false;
    });
    if (leaf || !ok) fail("certificate " + name);
    void* bio = api_->bio_new_mem_buf(key.data(), int(key.size()));
    void* pkey = bio ? api_->pem_read_private_key(bio, nullptr, nullptr, nullptr) : nullptr;
    if (bio) api_->bio_free(bio);
    ok = pkey && api_->ctx_use_private_key(c, pkey) == 1;
    if (pkey) api_->pkey_free(pkey);
    if (!ok || api_->ctx_check_private_key(c) != 1) fail("private key for certificate " + name);
  }

  const libssl_api* api_ = nullptr;
  role role_;
  bool verifies_;
  std::shared_ptr<void> ctx_;
};

} // namespace fiber::detail
