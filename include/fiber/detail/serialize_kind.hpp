// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/serialize_kind.hpp
/// How the serializer encodes a type (`kind`), and the standard library
/// templates it knows with their element types (`std_info`).

#include <boost/mp11/list.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace fiber::detail {

/// How a type is encoded. `none`/`half_hook`/`cv_ref` are not serializable.
enum class kind {
  none,      // no strategy applies
  cv_ref,    // const/volatile/reference: cannot be deserialized in place
  half_hook, // only one of fiber_serialize / fiber_deserialize was found
  hook,
  describe,
  boolean,
  scalar, // arithmetic (not bool) and enums: fixed width
  string,
  vector,
  array, // std::array and C arrays
  map,
  set,
  pair,
  tuple,
  optional,
  variant,
  duration,
  time_point,
  monostate,
  aggregate,
};

using boost::mp11::mp_list;

/// Standard library templates fiber knows, with their element types.
template <class T>
struct std_info {
  static constexpr kind value = kind::none;
};
template <class C, class Tr, class A>
struct std_info<std::basic_string<C, Tr, A>> {
  static constexpr kind value = std::is_arithmetic_v<C> ? kind::string : kind::none;
  using children = mp_list<>;
};
template <class E, class A>
struct std_info<std::vector<E, A>> {
  static constexpr kind value = kind::vector;
  using children = mp_list<E>;
};
template <class E, std::size_t N>
struct std_info<std::array<E, N>> {
  static constexpr kind value = kind::array;
  static constexpr std::size_t extent = N;
  using children = mp_list<E>;
};
template <class K, class V, class C, class A>
struct std_info<std::map<K, V, C, A>> {
  static constexpr kind value = kind::map;
  using children = mp_list<K, V>;
};
template <class K, class V, class H, class E, class A>
struct std_info<std::unordered_map<K, V, H, E, A>> {
  static constexpr kind value = kind::map;
  using children = mp_list<K, V>;
};
template <class K, class C, class A>
struct std_info<std::set<K, C, A>> {
  static constexpr kind value = kind::set;
  using children = mp_list<K>;
};
template <class K, class H, class E, class A>
struct std_info<std::unordered_set<K, H, E, A>> {
  static constexpr kind value = kind::set;
  using children = mp_list<K>;
};
template <class A, class B>
struct std_info<std::pair<A, B>> {
  static constexpr kind value = kind::pair;
  using children = mp_list<A, B>;
};
template <class... Ts>
struct std_info<std::tuple<Ts...>> {
  static constexpr kind value = kind::tuple;
  using children = mp_list<Ts...>;
};
template <class E>
struct std_info<std::optional<E>> {
  static constexpr kind value = kind::optional;
  using children = mp_list<E>;
};
template <class... Ts>
struct std_info<std::variant<Ts...>> {
  static constexpr kind value = kind::variant;
  using children = mp_list<Ts...>;
};
template <class R, class P>
struct std_info<std::chrono::duration<R, P>> {
  static constexpr kind value = kind::duration;
  using children = mp_list<R>;
};
template <class C, class D>
struct std_info<std::chrono::time_point<C, D>> {
  static constexpr kind value = kind::time_point;
  using children = mp_list<D>;
};
template <>
struct std_info<std::monostate> {
  static constexpr kind value = kind::monostate;
  using children = mp_list<>;
};
template <class E, std::size_t N>
struct std_info<E[N]> {
  static constexpr kind value = kind::array;
  static constexpr std::size_t extent = N;
  using children = mp_list<E>;
};

} // namespace fiber::detail
