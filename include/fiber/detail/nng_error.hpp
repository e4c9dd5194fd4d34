// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/nng_error.hpp
/// nng's error codes as std::error_code, mapped to Asio's errors where one
/// exists, so that callers test transport failures portably.

#include <asio/error.hpp>

#include <nng/nng.h>

#include <string>
#include <system_error>

namespace fiber::detail {

class nng_error_category final : public std::error_category {
public:
  const char* name() const noexcept override { return "nng"; }
  std::string message(int rv) const override {
    // nng_strerror formats unknown codes into a static buffer (not
    // thread-safe); only hand it the codes it knows by name.
    if ((rv > 0 && rv <= NNG_ECONNSHUT) || rv == NNG_EINTERNAL) return nng_strerror(rv);
    return "nng error " + std::to_string(rv);
  }
};

/// The category of nng errors that have no closer Asio/POSIX equivalent.
inline const std::error_category& nng_category() noexcept {
  static const nng_error_category cat;
  return cat;
}

/// Maps an nng return value to an error code callers can test portably:
///   NNG_ECANCELED  -> asio::error::operation_aborted
///   NNG_ETIMEDOUT  -> asio::error::timed_out
///   NNG_ECONNSHUT  -> asio::error::eof               (peer closed)
///   NNG_ECLOSED    -> asio::error::eof               (stream closed under
///                     the operation; a stream closed by its own close()
///                     reports operation_aborted instead, see stream)
///   NNG_ECONNRESET -> asio::error::connection_reset
///   NNG_ECONNABORTED/ECONNREFUSED/EADDRINUSE/EMSGSIZE -> the asio equivalent
///   NNG_ESYSERR|e  -> {e, std::system_category()}
///   others         -> {rv, nng_category()}
inline std::error_code make_nng_error(int rv) noexcept {
  switch (rv) {
  case 0: return {};
  case NNG_ECANCELED: return asio::error::operation_aborted;
  case NNG_ETIMEDOUT: return asio::error::timed_out;
  case NNG_ECONNSHUT:
  case NNG_ECLOSED: return asio::error::eof;
  case NNG_ECONNRESET: return asio::error::connection_reset;
  case NNG_ECONNABORTED: return asio::error::connection_aborted;
  case NNG_ECONNREFUSED: return asio::error::connection_refused;
  case NNG_EADDRINUSE: return asio::error::address_in_use;
  case NNG_EMSGSIZE: return asio::error::message_size;
  default: break;
  }
  if (rv & NNG_ESYSERR) return {rv & ~NNG_ESYSERR, std::system_category()};
  return {rv, nng_category()};
}

} // namespace fiber::detail
