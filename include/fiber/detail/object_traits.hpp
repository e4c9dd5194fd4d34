// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_traits.hpp
/// Remote objects at compile time: the traits of a method pointer, whether
/// &T::m is described, and the checks that turn a misuse of RemoteManager<T> /
/// Remote<T> into one readable error.

#include <fiber/detail/api_checks.hpp>
#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#include <boost/describe/members.hpp>
#include <boost/describe/modifiers.hpp>
#include <boost/mp11/algorithm.hpp>

#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace fiber::detail {

template <class F>
struct method_traits {
  static constexpr bool is_method = false;
};

template <class R, class C, bool Const, class... A>
struct method_traits_base {
  static constexpr bool is_method = true;
  static constexpr bool is_const = Const;
  using result = R;
  using cls = C;
  using params = std::tuple<A...>;                           ///< as declared
  using wire_params = std::tuple<std::remove_cvref_t<A>...>; ///< as sent
  static constexpr std::size_t arity = sizeof...(A);
};

template <class R, class C, class... A>
struct method_traits<R (C::*)(A...)> : method_traits_base<R, C, false, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) const> : method_traits_base<R, C, true, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) noexcept> : method_traits_base<R, C, false, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) const noexcept> : method_traits_base<R, C, true, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...)&> : method_traits_base<R, C, false, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) const&> : method_traits_base<R, C, true, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...)& noexcept> : method_traits_base<R, C, false, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) const& noexcept> : method_traits_base<R, C, true, A...> {};

/// What a remote method returns to its caller: its result without cv/ref.
template <auto M>
using method_result_t = std::remove_cvref_t<typename method_traits<decltype(M)>::result>;

/// The result a call of M delivers (an empty tag if M is not a member
/// function at all, so that a failed check still gives the caller's code a type).
struct not_a_method {};
template <auto M>
struct call_result {
  using type = not_a_method;
};
template <auto M>
requires method_traits<decltype(M)>::is_method struct call_result<M> {
  using type = method_result_t<M>;
};
template <auto M>
using call_result_t = typename call_result<M>::type;

/// Completion signature of an async call delivering R.
template <class R>
struct completion_signature {
  using type = void(std::exception_ptr, R);
};
template <>
struct completion_signature<void> {
  using type = void(std::exception_ptr);
};

/// The unqualified name of member function M ("ns::C<int>::step" → "step").
template <auto M>
constexpr std::string_view member_name() {
  auto q = pretty_value_name<M>();
  auto pos = q.rfind("::");
  return pos == std::string_view::npos ? q : q.substr(pos + 2);
}

/// True if M is one of T's public member functions listed in its
/// BOOST_DESCRIBE_STRUCT / BOOST_DESCRIBE_CLASS (inherited ones included).
/// Matched by type and name, not by comparing member pointers: comparing
/// pointers to virtual functions is not a constant expression in clang.
template <class T, auto M>
constexpr bool is_described_method() {
  namespace bd = boost::describe;
  if constexpr (!bd::has_describe_members<T>::value) {
    return false;
  } else {
    bool found = false;
    boost::mp11::mp_for_each<bd::describe_members<T, bd::mod_public | bd::mod_function | bd::mod_inherited>>(
        [&](auto d) {
          if constexpr (std::is_same_v<std::remove_cv_t<decltype(d.pointer)>, decltype(M)>)
            if (std::string_view(d.name) == member_name<M>()) found = true;
        });
    return found;
  }
}

/// A described, serializable public member function of T: what
/// Remote<T>::call<M> accepts.
template <class T, auto M>
concept remote_method = method_traits<decltype(M)>::is_method && is_described_method<T, M>();

/// Arguments `A...` for parameters `P...` (decayed): same count, each convertible.
template <class Params, class... A>
constexpr bool args_convertible() {
  return []<class... P>(std::tuple<P...>*) {
    if constexpr (sizeof...(P) != sizeof...(A)) return false;
    else return (std::is_convertible_v<A, P> && ...);
  }(static_cast<Params*>(nullptr));
}

template <class Params>
constexpr bool params_serializable() {
  return []<class... P>(std::tuple<P...>*) { return (serializable<P> && ...); }(static_cast<Params*>(nullptr));
}

/// The single readable diagnostic for `Remote<T>::call<M>(A...)`. Used as
/// `if constexpr (check_call<T, M, A...>())` so nothing else is instantiated
/// (and reported) once one static_assert has fired.
template <class T, auto M, class... A>
constexpr bool check_call() {
  using tr = method_traits<decltype(M)>;
  if constexpr (!boost::describe::has_describe_members<T>::value) {
    return false; // check_object_type has said why
  } else if constexpr (!tr::is_method) {
    static_assert(always_false_v<M>,
                  "fiber::Remote<T>::call<&T::m>: m must be a pointer to a public, non-static member function of T");
    return false;
  } else if constexpr (!std::is_base_of_v<typename tr::cls, T>) {
    static_assert(always_false_v<M>,
                  "fiber::Remote<T>::call<&T::m>: m is a member function of another class, not of T");
    return false;
  } else if constexpr (!is_described_method<T, M>()) {
    static_assert(always_false_v<M>,
                  "fiber::Remote<T>::call<&T::m>: m is not described — add it to BOOST_DESCRIBE_STRUCT/CLASS(T, ...)");
    return false;
  } else if constexpr (!args_convertible<typename tr::wire_params, A...>()) {
    static_assert(always_false_v<M>,
                  "fiber::Remote<T>::call<&T::m>(args...): the arguments do not match m's parameters "
                  "(wrong number of arguments, or an argument not convertible to its parameter type)");
    return false;
  } else if constexpr (!params_serializable<typename tr::wire_params>()) {
    static_assert(always_false_v<M>,
                  "fiber::Remote<T>::call<&T::m>: every parameter of m must be serializable (an aggregate, a "
                  "BOOST_DESCRIBE_STRUCT/CLASS type, or a type with fiber_serialize/fiber_deserialize)");
    return false;
  } else if constexpr (!std::is_void_v<typename tr::result> && !serializable<method_result_t<M>>) {
    static_assert(always_false_v<M>,
                  "fiber::Remote<T>::call<&T::m>: the result of m must be void or serializable (an aggregate, a "
                  "BOOST_DESCRIBE_STRUCT/CLASS type, or a type with fiber_serialize/fiber_deserialize)");
    return false;
  } else {
    return true;
  }
}

/// How a constructor argument travels: string literals and char pointers as
/// std::string, everything else as its decayed type.
template <class A>
using wire_arg_t =
    std::conditional_t<std::is_same_v<std::decay_t<A>, const char*> || std::is_same_v<std::decay_t<A>, char*>,
                       std::string, std::remove_cvref_t<A>>;

template <class T, class... A>
constexpr bool check_make() {
  if constexpr (!(serializable<wire_arg_t<A>> && ...)) {
    static_assert(always_false<T>,
                  "fiber::RemoteManager<T>::make(args...): every argument must be serializable (they are copied "
                  "to the manager process)");
    return false;
  } else if constexpr (!std::is_constructible_v<T, wire_arg_t<A>&&...>) {
    static_assert(always_false<T>,
                  "fiber::RemoteManager<T>::make(args...): T cannot be constructed from these arguments");
    return false;
  } else {
    return true;
  }
}

template <class T>
constexpr bool check_object_type() {
  static_assert(std::is_class_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>,
                "fiber::RemoteManager<T> / fiber::Remote<T>: T must be a (non-const) class type");
  static_assert(boost::describe::has_describe_members<T>::value,
                "fiber::RemoteManager<T> / fiber::Remote<T>: T must be described with BOOST_DESCRIBE_STRUCT or "
                "BOOST_DESCRIBE_CLASS, listing the public member functions callers may name");
  static_assert(std::is_destructible_v<T>, "fiber::RemoteManager<T>: T must be destructible");
  return true;
}

} // namespace fiber::detail
