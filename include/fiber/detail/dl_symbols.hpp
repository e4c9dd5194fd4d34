// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/dl_symbols.hpp
/// Opening a shared library fiber uses when present (OpenSSL's) and binding
/// its C functions by name; the one copy of dlopen/dlsym under the loaders.

#include <dlfcn.h>

#include <initializer_list>
#include <type_traits>

namespace fiber::detail {

/// The first of `names` that loads (RTLD_NOW | RTLD_LOCAL, never unloaded),
/// or nullptr. Reads files: call it off the runtime thread.
/// Example: `void* lib = dl_open_first({"libssl.so.3"});`
inline void* dl_open_first(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (void* lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
  return nullptr;
}

/// Binds the function pointer `fn` to `name` in `lib` (or a library it
/// depends on); whether it was found. Example: `ok &= dl_bind(lib, f, "SSL_new");`
template <class Fn>
  requires std::is_pointer_v<Fn> && std::is_function_v<std::remove_pointer_t<Fn>>
bool dl_bind(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  return fn != nullptr;
}

} // namespace fiber::detail
