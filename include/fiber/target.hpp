// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file target.hpp
/// Remote targets. `fiber::target<&f>` names a free function or static member
/// function as something a worker can run. It is a variable template of an
/// empty tag type; instantiating it registers `f` at static-initialization
/// time in every process of the binary (workers are the same executable),
/// under a 64-bit id hashed at compile time from f's qualified name and
/// signature. No macro, no string. Overloads: pick one with a cast,
/// `fiber::target<static_cast<int (*)(int)>(&f)>`.

#include <fiber/detail/demangle.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <variant>
#include <cxxabi.h>

namespace fiber {
namespace detail {

/// FNV-1a, 64 bit (Fowler, Noll, Vo): stable across builds and processes.
constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 14695981039346656037ull) {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

/// What follows `marker` ("F = ", "T = ") in a __PRETTY_FUNCTION__, up to
/// its `;` or `]` (g++ and clang spell the rest differently).
constexpr std::string_view pretty_argument(std::string_view p, std::string_view marker) {
  auto b = p.find(marker);
  if (b == std::string_view::npos) return p;
  b += marker.size();
  return p.substr(b, p.find_first_of(";]", b) - b);
}

/// "[with auto F = ns::f]" → "ns::f".
template <auto F>
constexpr std::string_view pretty_value_name() {
  auto name = pretty_argument(__PRETTY_FUNCTION__, "F = ");
  if (name.starts_with("&")) name.remove_prefix(1);
  return name;
}

/// "[with T = ns::S]" → "ns::S".
template <class T>
constexpr std::string_view pretty_type_name() {
  return pretty_argument(__PRETTY_FUNCTION__, "T = ");
}

template <class F>
struct fn_traits;
template <class R, class... A>
struct fn_traits<R (*)(A...)> {
  using result = R;
  using args = std::tuple<std::remove_cvref_t<A>...>;
  static constexpr std::size_t arity = sizeof...(A);
};
template <class R, class... A>
struct fn_traits<R (*)(A...) noexcept> : fn_traits<R (*)(A...)> {};

/// What a target returns on the wire: void becomes std::monostate.
template <class R>
using wire_result = std::conditional_t<std::is_void_v<R>, std::monostate, std::remove_cvref_t<R>>;

/// Runs a target: reads arguments from `in`, appends the result to `out`.
/// Throws whatever the target throws, or serialization_error on bad bytes.
using invoker_fn = void (*)(reader& in, writer& out);

/// Two different entities (functions or types with internal linkage, from
/// two source files) spell the same name, so their ids are equal and a
/// worker cannot tell them apart: says so on stderr and aborts (static
/// initialization, before main).
[[noreturn]] inline void abort_name_clash(std::string_view what, std::string_view name, std::string_view more,
                                          std::string_view signature) {
  std::fprintf(stderr,
               "fiber: %.*s%.*s%.*s%.*s names two different entities: each has internal linkage (an anonymous "
               "namespace or `static`) in its own source file, and they spell the same name, so a worker cannot "
               "tell them apart. Fix: rename one, or move it into a named namespace.\n",
               int(what.size()), what.data(), int(name.size()), name.data(), int(more.size()), more.data(),
               int(signature.size()), signature.data());
  std::abort();
}

struct target_info {
  std::uint64_t id;
  std::string_view name;
  std::string_view signature;
  invoker_fn invoke;
  void (*function)(); ///< the target's address (as another function pointer type): tells apart equal names
};

class registry {
public:
  static registry& instance() {
    static registry r;
    return r;
  }
  void add(const target_info& t) {
    std::lock_guard lk(mutex_);
    auto [it, fresh] = targets_.emplace(t.id, t);
    if (fresh) return;
    const target_info& held = it->second;
    if (held.name != t.name || held.signature != t.signature) {
      std::fprintf(stderr, "fiber: target id collision between %.*s and %.*s\n", int(t.name.size()), t.name.data(),
                   int(held.name.size()), held.name.data());
      std::abort();
    }
    if (held.function != t.function) abort_name_clash("fiber::target<&", t.name, "> with signature ", t.signature);
  }
  const target_info* find(std::uint64_t id) {
    std::lock_guard lk(mutex_);
    auto it = targets_.find(id);
    return it == targets_.end() ? nullptr : &it->second;
  }
  /// Hash of every registered name and signature, in id order: equal in two
  /// processes only if they registered the same targets.
  std::uint64_t hash() {
    std::lock_guard lk(mutex_);
    std::uint64_t h = fnv1a("fiber-registry-v1");
    for (const auto& [id, t] : targets_) {
      h = fnv1a(t.name, h);
      h = fnv1a(t.signature, h);
    }
    return h;
  }
  std::size_t size() {
    std::lock_guard lk(mutex_);
    return targets_.size();
  }

private:
  std::mutex mutex_;
  std::map<std::uint64_t, target_info> targets_;
};

template <auto F>
void invoke_target(reader& in, writer& out) {
  using traits = fn_traits<decltype(F)>;
  typename traits::args args{};
  std::apply([&](auto&... a) { (deserialize_from(in, a), ...); }, args);
  if constexpr (std::is_void_v<typename traits::result>) {
    std::apply([](auto&&... a) { F(std::move(a)...); }, std::move(args));
  } else {
    out.write(std::apply([](auto&&... a) -> decltype(auto) { return F(std::move(a)...); }, std::move(args)));
  }
}

template <auto F>
bool register_target();

} // namespace detail

/// A target's compile-time identity. Empty; copy it freely.
template <auto F>
struct target_t {
  using traits = detail::fn_traits<decltype(F)>; ///< internal: result, args and arity of F
  using result_type = typename traits::result;   ///< F's declared result type (may be void)
  using args_tuple = typename traits::args;      ///< F's parameter types without cv/ref, as a std::tuple
  static constexpr auto function = F;            ///< the function pointer itself
  /// F's qualified name, e.g. "app::square"; used in error messages and logs.
  static constexpr std::string_view name() { return detail::pretty_value_name<F>(); }
  /// F's type spelled out, e.g. "int (*)(int)"; part of the id.
  static constexpr std::string_view signature() { return detail::pretty_type_name<decltype(F)>(); }
  /// The 64-bit FNV-1a hash of name() and signature(): how a worker finds F.
  static constexpr std::uint64_t id = detail::fnv1a(signature(), detail::fnv1a(name()));
};

namespace detail {
template <auto F>
bool register_target() {
  using T = target_t<F>;
  registry::instance().add({T::id, T::name(), T::signature(), &invoke_target<F>, reinterpret_cast<void (*)()>(F)});
  return true;
}
} // namespace detail

/// A function usable as a target: a pointer to a free or static member
/// function whose arguments and result are serializable.
template <auto F>
concept target_function = requires {
  typename detail::fn_traits<decltype(F)>::result;
}
&&[]<class... A>(std::tuple<A...>*) {
  return (serializable<A> && ...);
}(static_cast<typename detail::fn_traits<decltype(F)>::args*>(nullptr)) &&
    (std::is_void_v<typename detail::fn_traits<decltype(F)>::result> ||
     serializable<std::remove_cvref_t<typename detail::fn_traits<decltype(F)>::result>>);

namespace detail {
template <auto F>
constexpr bool check_target() {
  static_assert(
      requires { typename fn_traits<decltype(F)>::result; },
      "fiber::target<&f>: f must be a pointer to a free function or a static member function");
  static_assert(target_function<F>,
                "fiber::target<&f>: every argument and the result of f must be serializable "
                "(an aggregate, a BOOST_DESCRIBE_STRUCT/CLASS type, or a type with fiber_serialize/fiber_deserialize)");
  return true;
}
template <auto F>
target_t<F> make_target() {
  static_assert(check_target<F>());
  static const bool registered = register_target<F>();
  (void)registered;
  return {};
}
} // namespace detail

/// `fiber::target<&f>`: names f as a remote target and registers it in every
/// process of the binary (dynamic initialization of this variable).
template <auto F>
inline const target_t<F> target = detail::make_target<F>();

/// Arguments `A...` can be passed to target F: same count, each convertible to
/// the parameter's decayed type. Misuse is a single readable error at the API.
template <auto F, class... A>
concept callable_with = (detail::fn_traits<decltype(F)>::arity == sizeof...(A)) && []<class... P>(std::tuple<P...>*) {
  if constexpr (sizeof...(P) == sizeof...(A)) return (std::is_convertible_v<A, P> && ...);
  else return false;
}(static_cast<typename detail::fn_traits<decltype(F)>::args*>(nullptr));

} // namespace fiber
