// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/api_checks.hpp
/// Misuse at the API boundary as one readable error: each check fires a
/// single static_assert naming the culprit and the fix, and is used as
/// `if constexpr (check...())` so that nothing else is instantiated after it.

#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#include <cstddef>
#include <ranges>
#include <tuple>
#include <type_traits>

namespace fiber::detail {

template <class...>
inline constexpr bool always_false = false;
template <auto...>
inline constexpr bool always_false_v = false;

/// Base of Queue<T>, JoinableQueue<T> and Connection<T>: the one error for
/// an item type that cannot travel (the compiler names it in check_item_type<...>).
template <class ItemType>
struct check_item_type {
  static_assert(
      serializable<ItemType>,
      "fiber::Queue<T> / fiber::Pipe<T>: the item type T (check_item_type<T> above) is not serializable; make it "
      "an aggregate, describe it with BOOST_DESCRIBE_STRUCT/CLASS, or give it "
      "fiber_serialize/fiber_deserialize hooks");
};

/// Arguments `A...` for target F: same count, each convertible to its parameter.
template <auto F, class... A>
constexpr bool check_target_args() {
  constexpr std::size_t arity = fn_traits<decltype(F)>::arity;
  if constexpr (arity != sizeof...(A)) {
    static_assert(always_false_v<F>, "fiber: wrong number of arguments for the target (see F below): pass exactly "
                                     "its parameters");
    return false;
  } else if constexpr (!callable_with<F, A...>) {
    static_assert(always_false_v<F>, "fiber: an argument does not convert to the target's parameter type (see F "
                                     "and A below): pass values of the parameters' types");
    return false;
  } else {
    return true;
  }
}

/// The inputs of Pool::map and its kin: an input range.
template <class Inputs>
constexpr bool check_input_range() {
  static_assert(
      std::ranges::input_range<Inputs>,
      "fiber::Pool::map / imap / imap_unordered / starmap / async_map: the inputs (Inputs below) must be an "
      "input range: e.g. a std::vector of the target's argument, or of std::tuple of its arguments for starmap");
  return std::ranges::input_range<Inputs>;
}

/// A range of one target argument per task (Pool::map, imap, imap_unordered,
/// async_map).
template <auto F, class Inputs>
constexpr bool check_map_inputs() {
  using traits = fn_traits<decltype(F)>;
  if constexpr (!check_input_range<Inputs>()) {
    return false;
  } else if constexpr (traits::arity != 1) {
    static_assert(always_false_v<F>, "fiber::Pool::map / imap / imap_unordered / async_map: the target takes "
                                     "several arguments (or none); use starmap with a range of std::tuple of its "
                                     "arguments, or apply");
    return false;
  } else if constexpr (
      !std::is_convertible_v<std::ranges::range_reference_t<Inputs>, std::tuple_element_t<0, typename traits::args>>) {
    static_assert(always_false<Inputs>, "fiber::Pool::map / imap / imap_unordered / async_map: the range's "
                                        "elements (Inputs below) do not convert to the target's parameter type");
    return false;
  } else {
    return true;
  }
}

template <class Tuple, class Params, class = void>
inline constexpr bool tuple_matches = false;
template <class Tuple, class Params>
inline constexpr bool tuple_matches<Tuple, Params, std::void_t<decltype(std::tuple_size<Tuple>::value)>> = [
]<std::size_t... I>(std::index_sequence<I...>) {
  if constexpr (std::tuple_size_v<Tuple> != std::tuple_size_v<Params>) return false;
  else return (std::is_convertible_v<std::tuple_element_t<I, Tuple>, std::tuple_element_t<I, Params>> && ...);
}
(std::make_index_sequence<std::tuple_size_v<Params>>{});

/// A range of std::tuple of all the target's arguments (Pool::starmap,
/// starmap_async, async_starmap).
template <auto F, class Tuples>
constexpr bool check_starmap_inputs() {
  if constexpr (!check_input_range<Tuples>()) {
    return false;
  } else if constexpr (!tuple_matches<std::remove_cvref_t<std::ranges::range_reference_t<Tuples>>,
                                      typename fn_traits<decltype(F)>::args>) {
    static_assert(always_false<Tuples>, "fiber::Pool::starmap: each element (of Tuples below) must be a std::tuple "
                                        "holding exactly the target's arguments, each convertible to its parameter");
    return false;
  } else {
    return true;
  }
}

} // namespace fiber::detail
