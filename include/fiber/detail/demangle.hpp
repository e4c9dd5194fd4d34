// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/demangle.hpp
/// A C++ type's readable name: what remote_error reports as the type of a
/// remote exception.

#include <cstdlib>
#include <memory>
#include <string>
#include <cxxabi.h>

namespace fiber::detail {

/// Demangled `mangled` (e.g. typeid(x).name()), or `mangled` itself if it
/// does not demangle.
inline std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> p(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && p ? std::string(p.get()) : std::string(mangled);
}

} // namespace fiber::detail
