// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/self_signed_cert.hpp
/// An ephemeral self-signed certificate (ECDSA P-256) made with mbedTLS, for
/// backends that turn TLS on without a configured certificate (kubernetes),
/// and for the listener of a worker that dialed over TLS without one.

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crt.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

namespace fiber::detail {

/// A certificate and its private key, both PEM text.
struct pem_identity {
  std::string cert_pem; ///< "-----BEGIN CERTIFICATE-----..."
  std::string key_pem;  ///< "-----BEGIN EC PRIVATE KEY-----..."
};

namespace cert_impl {

struct mbed_state {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_pk_context key;
  mbedtls_x509write_cert crt;
  mbedtls_mpi serial;
  mbed_state() {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_pk_init(&key);
    mbedtls_x509write_crt_init(&crt);
    mbedtls_mpi_init(&serial);
  }
  ~mbed_state() {
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&crt);
    mbedtls_pk_free(&key);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
  }
  mbed_state(const mbed_state&) = delete;
  mbed_state& operator=(const mbed_state&) = delete;
};

inline void check(int rc, const char* what) {
  if (rc != 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "self-signed certificate: %s failed (mbedTLS error -0x%04x)", what, unsigned(-rc));
    throw std::runtime_error(buf);
  }
}

/// "YYYYMMDDhhmmss" (UTC), as mbedtls_x509write_crt_set_validity wants it.
inline std::string x509_time(std::chrono::system_clock::time_point t) {
  std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&s, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y%m%d%H%M%S", &tm);
  return buf;
}

} // namespace cert_impl

/// Makes a fresh ECDSA P-256 key and a self-signed X.509 v3 certificate for
/// it: subject and issuer `CN=<common_name>`, the same name as its one
/// subjectAltName (dNSName; at most 100 characters), a random 128-bit
/// serial, valid from an hour ago (clock skew) for `validity`, signed with
/// SHA-256. Clients pin it: it is their CA (`tls_ca`) and `common_name`
/// their `tls_server_name` (the kubernetes backend's default). ~2 ms. Any
/// thread. Throws std::runtime_error naming the mbedTLS step that failed
/// (e.g. no entropy source).
inline pem_identity make_self_signed(std::string_view common_name,
                                     std::chrono::hours validity = std::chrono::hours(24 * 30)) {
  using namespace cert_impl;
  mbed_state s;
  static constexpr unsigned char personal[] = "fiber-self-signed";
  check(mbedtls_ctr_drbg_seed(&s.drbg, mbedtls_entropy_func, &s.entropy, personal, sizeof personal - 1), "seeding");
  check(mbedtls_pk_setup(&s.key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), "key setup");
  check(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(s.key), mbedtls_ctr_drbg_random, &s.drbg),
        "key generation");

  unsigned char serial[16];
  check(mbedtls_ctr_drbg_random(&s.drbg, serial, sizeof serial), "serial");
  serial[0] &= 0x7f; // positive
  serial[0] |= 0x40; // and 16 bytes long
  check(mbedtls_mpi_read_binary(&s.serial, serial, sizeof serial), "serial");

  const std::string name = "CN=" + std::string(common_name);
  auto now = std::chrono::system_clock::now();
  mbedtls_x509write_crt_set_version(&s.crt, MBEDTLS_X509_CRT_VERSION_3);
  mbedtls_x509write_crt_set_md_alg(&s.crt, MBEDTLS_MD_SHA256);
  mbedtls_x509write_crt_set_subject_key(&s.crt, &s.key);
  mbedtls_x509write_crt_set_issuer_key(&s.crt, &s.key);
  check(mbedtls_x509write_crt_set_subject_name(&s.crt, name.c_str()), "subject name");
  check(mbedtls_x509write_crt_set_issuer_name(&s.crt, name.c_str()), "issuer name");
#if MBEDTLS_VERSION_NUMBER >= 0x03040000
  check(mbedtls_x509write_crt_set_serial_raw(&s.crt, serial, sizeof serial), "serial");
#else
  check(mbedtls_x509write_crt_set_serial(&s.crt, &s.serial), "serial");
#endif
  check(mbedtls_x509write_crt_set_validity(&s.crt, x509_time(now - std::chrono::hours(1)).c_str(),
                                           x509_time(now + validity).c_str()),
        "validity");
  check(mbedtls_x509write_crt_set_basic_constraints(&s.crt, 0, -1), "basic constraints");
  check(mbedtls_x509write_crt_set_key_usage(&s.crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE | MBEDTLS_X509_KU_KEY_AGREEMENT),
        "key usage");
  if (common_name.empty() || common_name.size() > 100) check(-1, "a name of 1 to 100 characters");
  // GeneralNames ::= SEQUENCE { dNSName [2] IA5String } (short DER lengths).
  std::string san{char(0x30), char(common_name.size() + 2), char(0x82), char(common_name.size())};
  san += common_name;
  check(mbedtls_x509write_crt_set_extension(&s.crt, MBEDTLS_OID_SUBJECT_ALT_NAME,
                                            MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME), 0,
                                            reinterpret_cast<const unsigned char*>(san.data()), san.size()),
        "subjectAltName");

  pem_identity out;
  std::string buf(4096, '\0');
  auto* p = reinterpret_cast<unsigned char*>(buf.data());
  check(mbedtls_x509write_crt_pem(&s.crt, p, buf.size(), mbedtls_ctr_drbg_random, &s.drbg), "signing");
  out.cert_pem.assign(buf.c_str());
  std::fill(buf.begin(), buf.end(), '\0');
  check(mbedtls_pk_write_key_pem(&s.key, p, buf.size()), "key encoding");
  out.key_pem.assign(buf.c_str());
  std::fill(buf.begin(), buf.end(), '\0');
  return out;
}

/// `dir`, or when it is "" a fresh 0700 directory under /tmp. Throws
/// std::runtime_error when none can be made. Example: private_dir("") == "/tmp/fiber-cert-Ab12Cd".
inline std::string private_dir(std::string dir) {
  if (!dir.empty()) return dir;
  dir = "/tmp/fiber-cert-XXXXXX";
  if (!::mkdtemp(dir.data())) throw std::runtime_error("self-signed certificate: cannot create a directory in /tmp");
  return dir;
}

/// Writes `text` to `path` (created or truncated, mode 0600) and returns
/// `path`. Throws std::runtime_error when it cannot.
/// Example: write_private_file(dir + "/c.crt", id.cert_pem).
inline std::string write_private_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("self-signed certificate: cannot write " + path);
  return path;
}

} // namespace fiber::detail
