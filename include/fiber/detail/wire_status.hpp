// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/wire_status.hpp
/// One vocabulary for outcomes on the wire: the status of a reply (service
/// requests, remote-object calls) and of each item of a Pool chunk's results,
/// with the one codec every sender and receiver uses.

#include <fiber/detail/demangle.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>
#include <cxxabi.h>

namespace fiber::detail {

/// How an operation ended: ok, or which exception the failure stands for,
/// one value for each fiber::error subclass. The values are part of the
/// wire format.
enum class wire_status : std::uint8_t {
  ok = 0,             ///< the value follows
  remote_error = 1,   ///< user code threw: (type name, message) → fiber::remote_error
  error = 2,          ///< fiber refused the operation: message → fiber::error
  eof = 3,            ///< message → fiber::eof_error
  worker_lost = 4,    ///< message → fiber::worker_lost
  serialization = 5,  ///< message → fiber::serialization_error
  timeout = 6,        ///< message → fiber::timeout_error
  backend = 7,        ///< message → fiber::backend_error
  handshake = 8,      ///< message → fiber::handshake_error
  broken_barrier = 9, ///< message → fiber::broken_barrier_error
  hold_revoked = 10,  ///< message → fiber::hold_revoked_error
  config = 11,        ///< message → fiber::config_error
};

/// The status a fiber::error stands for (its most derived known class; a
/// class of the user's own derived from fiber::error counts as error).
/// remote_error is not one of them: its body differs (write_error).
inline wire_status status_of(const error& e) noexcept {
  if (dynamic_cast<const eof_error*>(&e)) return wire_status::eof;
  if (dynamic_cast<const worker_lost*>(&e)) return wire_status::worker_lost;
  if (dynamic_cast<const serialization_error*>(&e)) return wire_status::serialization;
  if (dynamic_cast<const timeout_error*>(&e)) return wire_status::timeout;
  if (dynamic_cast<const backend_error*>(&e)) return wire_status::backend;
  if (dynamic_cast<const handshake_error*>(&e)) return wire_status::handshake;
  if (dynamic_cast<const broken_barrier_error*>(&e)) return wire_status::broken_barrier;
  if (dynamic_cast<const hold_revoked_error*>(&e)) return wire_status::hold_revoked;
  if (dynamic_cast<const config_error*>(&e)) return wire_status::config;
  return wire_status::error;
}

/// The exception of status `s` (neither ok nor remote_error) with `message`;
/// serialization_error for a status outside the vocabulary.
inline std::exception_ptr make_failure(wire_status s, std::string message) {
  switch (s) {
  case wire_status::error: return std::make_exception_ptr(error(message));
  case wire_status::eof: return std::make_exception_ptr(eof_error(message));
  case wire_status::worker_lost: return std::make_exception_ptr(worker_lost(message));
  case wire_status::serialization: return std::make_exception_ptr(serialization_error(message));
  case wire_status::timeout: return std::make_exception_ptr(timeout_error(message));
  case wire_status::backend: return std::make_exception_ptr(backend_error(message));
  case wire_status::handshake: return std::make_exception_ptr(handshake_error(message));
  case wire_status::broken_barrier: return std::make_exception_ptr(broken_barrier_error(message));
  case wire_status::hold_revoked: return std::make_exception_ptr(hold_revoked_error(message));
  case wire_status::config: return std::make_exception_ptr(config_error(message));
  default: break;
  }
  return std::make_exception_ptr(serialization_error("fiber: unknown wire status " + std::to_string(int(s))));
}

/// Appends the body of a failure other than remote_error: its message.
inline void write_failure(writer& w, std::string_view message) { w.write(std::string(message)); }

/// Appends the body of a remote_error for the exception being handled: its
/// demangled type name and what(). Call inside a catch block.
inline void write_current_exception(writer& w) {
  std::string type = "unknown exception", msg;
  try {
    throw;
  } catch (const std::exception& e) {
    type = demangle(typeid(e).name());
    msg = e.what();
  } catch (...) {
    if (auto* t = abi::__cxa_current_exception_type()) type = demangle(t->name());
  }
  w.write(type);
  w.write(msg);
}

/// The payload of a failed reply other than remote_error: its `message`.
inline std::vector<std::byte> failure_payload(std::string_view message) {
  writer w;
  write_failure(w, message);
  return w.release();
}

/// The payload of a remote_error reply for the exception being handled.
inline std::vector<std::byte> current_exception_payload() {
  writer w;
  write_current_exception(w);
  return w.release();
}

/// The status and payload of a failed reply from fiber's own code (a
/// service) for the exception being handled: a fiber::error keeps its class,
/// remote_error its type and message, anything else is a remote_error.
/// Call inside a catch block.
inline std::pair<wire_status, std::vector<std::byte>> current_failure() {
  try {
    throw;
  } catch (const remote_error& e) {
    writer w;
    w.write(e.type_name());
    w.write(e.message());
    return {wire_status::remote_error, w.release()};
  } catch (const error& e) {
    return {status_of(e), failure_payload(e.what())};
  } catch (...) {
    return {wire_status::remote_error, current_exception_payload()};
  }
}

/// The exception a failure body read from `r` stands for; a status outside
/// the vocabulary or a body that does not decode gives serialization_error.
inline std::exception_ptr read_failure(wire_status s, reader& r) {
  try {
    if (s == wire_status::remote_error) {
      auto type = r.read<std::string>();
      auto msg = r.read<std::string>();
      return std::make_exception_ptr(remote_error(std::move(type), std::move(msg)));
    }
    if (s == wire_status::ok || std::uint8_t(s) > std::uint8_t(wire_status::config))
      return std::make_exception_ptr(serialization_error("fiber: unknown wire status " + std::to_string(int(s))));
    return make_failure(s, r.read<std::string>());
  } catch (const serialization_error& e) {
    return std::make_exception_ptr(e);
  }
}

/// The exception a failed reply's payload stands for.
inline std::exception_ptr failure_of(wire_status s, std::span<const std::byte> payload) {
  reader r(payload);
  return read_failure(s, r);
}

} // namespace fiber::detail
