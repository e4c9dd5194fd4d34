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
#include <vector>
#include <cxxabi.h>

namespace fiber::detail {

/// How an operation ended. The values are part of the wire format.
enum class wire_status : std::uint8_t {
  ok = 0,           ///< the value follows
  remote_error = 1, ///< user code threw: (type name, message) → fiber::remote_error
  error = 2,        ///< fiber refused the operation: message → fiber::error
  eof = 3,          ///< message → fiber::eof_error
  worker_lost = 4,  ///< message → fiber::worker_lost
};

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

/// The exception a failure body read from `r` stands for; a status outside
/// the vocabulary or a body that does not decode gives serialization_error.
inline std::exception_ptr read_failure(wire_status s, reader& r) {
  try {
    switch (s) {
    case wire_status::remote_error: {
      auto type = r.read<std::string>();
      auto msg = r.read<std::string>();
      return std::make_exception_ptr(remote_error(std::move(type), std::move(msg)));
    }
    case wire_status::error: return std::make_exception_ptr(error(r.read<std::string>()));
    case wire_status::eof: return std::make_exception_ptr(eof_error(r.read<std::string>()));
    case wire_status::worker_lost: return std::make_exception_ptr(worker_lost(r.read<std::string>()));
    default: break;
    }
    return std::make_exception_ptr(serialization_error("fiber: unknown wire status " + std::to_string(int(s))));
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
