// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file serialize.hpp
/// fiber's wire format: a compact, non-self-describing binary encoding.
///
/// ```cpp
/// std::vector<std::byte> bytes = fiber::serialize(value);        // any serializable T
/// auto back = fiber::deserialize<T>(bytes);                       // throws fiber::serialization_error
/// ```
///
/// What is serializable, in priority order (the first that applies wins):
///  1. a type with a user hook found by argument-dependent lookup:
///     `void fiber_serialize(fiber::writer&, const T&)` and
///     `void fiber_deserialize(fiber::reader&, T&)` (both must exist);
///  2. a class described with `BOOST_DESCRIBE_STRUCT` / `BOOST_DESCRIBE_CLASS`:
///     its described bases, then its own public, protected and private members;
///  3. built-ins: `bool`, arithmetic types, enums (as their underlying type),
///     `std::byte`, `std::basic_string`, `std::vector` (`vector<bool>` packed),
///     `std::array`, C arrays, `std::map`, `std::unordered_map`, `std::set`,
///     `std::unordered_set`, `std::pair`, `std::tuple`, `std::optional`,
///     `std::variant`, `std::monostate`, `std::chrono::duration` and
///     `std::chrono::time_point`;
///  4. aggregates (Boost.PFR): every field in declaration order.
///
/// Built-ins are checked before PFR only because `std::array` and
/// `std::monostate` are themselves aggregates; no user type is affected.
///
/// Wire format (little-endian hosts only): fixed-width integers and floats as
/// in memory; `bool` as one byte 0/1; enums as their underlying integer;
/// lengths and variant indices as LEB128 varints; `optional` as a 0/1 tag
/// byte then the value; maps and sets as a count then their elements in
/// iteration order. Structs, pairs and tuples are their fields back to back,
/// without padding. Contiguous ranges of "memcpy-wire" elements (arithmetic
/// but not bool, enums, and arrays/durations/padding-free aggregates of
/// those) are copied with one `memcpy`; other fixed-size records are written
/// and read as one block. Elements of a counted container whose encoding can
/// be empty (std::monostate, empty structs, hook types) are each followed by a
/// zero pad byte, so that every length can be bounded by the bytes that remain.
///
/// Every value has exactly one encoding: decoding rejects non-minimal varints,
/// bool and tag bytes other than 0/1, non-zero padding, duplicate keys,
/// ordered-container keys out of order, and trailing bytes.
///
/// Deserialization builds values empty and fills them, so every deserialized
/// type (and every element, key and variant alternative) must be
/// default-initializable. It never trusts a length: each count is checked
/// against the bytes that remain before anything is reserved, node
/// containers are filled one element at a time, and up-front reservations are
/// capped at 1 MiB, so hostile input cannot make it crash, hang or allocate
/// beyond what the input actually encodes.
///
/// Hooks must take exactly `fiber::writer&` / `fiber::reader&` and the type
/// itself (not a base or something it converts to); a hook for a base class
/// does not apply to derived classes. Declare hooks next to their type, before
/// the first use (the choice of encoding is made once per type).
///
/// Thread-safety: the free functions are reentrant; a writer or reader object
/// must not be used from two threads at once.
///
/// Limits: directly recursive types (`struct node { std::vector<node> kids; }`)
/// need the hook; aggregates with C-array members are not supported by
/// Boost.PFR (use `std::array` or Describe).

#include <fiber/detail/serialize_kind.hpp>
#include <fiber/error.hpp>

#include <boost/describe/bases.hpp>
#include <boost/describe/members.hpp>
#include <boost/describe/modifiers.hpp>
#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>
#include <boost/pfr/core.hpp>
#include <boost/pfr/tuple_size.hpp>

#include <array>
#include <bit>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

static_assert(std::endian::native == std::endian::little, "fiber's wire format copies integers as they are in memory; "
                                                          "only little-endian hosts are supported");

namespace fiber {

namespace detail {
/// Every message the reader throws starts with this; deserialize<T>
/// replaces it with "fiber::deserialize<T>: ".
inline constexpr std::string_view reader_prefix = "fiber::reader: ";

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_malformed(std::string_view what, std::size_t at) {
  throw serialization_error(std::string(reader_prefix) + std::string(what) + " at byte " + std::to_string(at));
}
} // namespace detail

/// Appends an encoding to a byte buffer it owns.
/// Not thread-safe; one writer per thread. Movable.
class writer {
public:
  /// Starts with an empty buffer.
  writer() noexcept = default;
  /// Appends after `initial` (e.g. a frame header already written).
  explicit writer(std::vector<std::byte> initial) noexcept : buf_(std::move(initial)) {}

  /// Appends `n` raw bytes from `p`. `p` must not point into buffer().
  void write_bytes(const void* p, std::size_t n) {
    if (n == 0) return; // p may legitimately be null for empty ranges
    const auto* b = static_cast<const std::byte*>(p);
    if (n <= 16) {
      // Fields: zero-filling a few bytes is cheaper than insert()'s range logic.
      const std::size_t old = buf_.size();
      buf_.resize(old + n);
      std::memcpy(buf_.data() + old, b, n);
    } else {
      // Bulk: insert() copies once, without zero-filling first.
      buf_.insert(buf_.end(), b, b + n);
    }
  }

  /// Appends `v` as an unsigned LEB128 varint (1 byte below 128, at most 10).
  void write_varint(std::uint64_t v) {
    if (v < 0x80) { // the common case: short lengths, small indices
      buf_.push_back(static_cast<std::byte>(v));
      return;
    }
    std::byte tmp[10]{}; // {} silences a gcc -Wmaybe-uninitialized false positive
    std::size_t n = 0;
    while (v >= 0x80) {
      tmp[n++] = static_cast<std::byte>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    tmp[n++] = static_cast<std::byte>(v);
    write_bytes(tmp, n);
  }

  /// Appends the encoding of `v`; same as `serialize_into(*this, v)`.
  template <class T>
  void write(const T& v);

  /// The bytes written so far (including `initial`). Mutable for callers
  /// that patch headers or reserve.
  std::vector<std::byte>& buffer() noexcept { return buf_; }
  /// Moves the buffer out; the writer is left empty and reusable.
  std::vector<std::byte> release() noexcept { return std::exchange(buf_, {}); }
  /// Bytes written so far (including `initial`).
  std::size_t size() const noexcept { return buf_.size(); }

private:
  std::vector<std::byte> buf_;
};

/// A cursor over bytes it does not own (the span must outlive it). Every read
/// is bounds-checked and throws fiber::serialization_error ("truncated
/// input ...") rather than reading past the end; after a throw the position
/// is unspecified. Not thread-safe; cheap to copy.
class reader {
public:
  /// Starts at the first byte of `in`, which is borrowed, not copied.
  explicit reader(std::span<const std::byte> in) noexcept
      : begin_(in.data()), cur_(in.data()), end_(in.data() + in.size()) {}

  /// Copies the next `n` bytes to `p`. Throws if fewer than `n` remain.
  void read_bytes(void* p, std::size_t n) {
    need(n);
    if (n != 0) std::memcpy(p, cur_, n);
    cur_ += n;
  }

  /// Reads an unsigned LEB128 varint. Throws on truncation, on more than 64
  /// bits, and on non-minimal encodings (so every value has one encoding).
  std::uint64_t read_varint() {
    if (cur_ != end_ && std::to_integer<unsigned>(*cur_) < 0x80) return std::to_integer<unsigned>(*cur_++);
    return read_varint_slow();
  }

  /// Reads a varint element count and checks that `count * min_elem_bytes`
  /// bytes remain, so callers may reserve/resize for it. A `min_elem_bytes`
  /// of 0 is treated as 1: every counted element must occupy at least a byte.
  std::size_t read_length(std::size_t min_elem_bytes = 1) {
    const std::size_t at = position();
    const std::uint64_t n = read_varint();
    if (min_elem_bytes == 0) min_elem_bytes = 1;
    if (n > remaining() / min_elem_bytes) [[unlikely]]
      throw_bad_length(at, n, min_elem_bytes);
    return static_cast<std::size_t>(n);
  }

  /// Reads a value: `T v{}; deserialize_from(*this, v); return v;`.
  template <class T>
  T read();
  /// Reads into an existing value (containers are cleared first).
  template <class T>
  void read(T& out);

  /// A view of the next `n` bytes (no copy; valid as long as the input).
  /// Throws if fewer than `n` remain.
  std::span<const std::byte> read_span(std::size_t n) {
    need(n);
    std::span<const std::byte> s{cur_, n};
    cur_ += n;
    return s;
  }

  /// Bytes not yet read.
  std::size_t remaining() const noexcept { return static_cast<std::size_t>(end_ - cur_); }
  /// True when every byte has been read.
  bool empty() const noexcept { return cur_ == end_; }
  /// Bytes read so far (offset of the next byte); used in error messages.
  std::size_t position() const noexcept { return static_cast<std::size_t>(cur_ - begin_); }

  /// Throws serialization_error "fiber::reader: <what> at byte <position()>".
  /// For hooks that find a value they cannot accept.
  [[noreturn]] void fail(std::string_view what) const { detail::throw_malformed(what, position()); }

  /// Every message the reader throws starts with this; deserialize<T>
  /// replaces it with "fiber::deserialize<T>: ".
  static constexpr std::string_view prefix = detail::reader_prefix;

private:
  void need(std::size_t n) const {
    if (n > remaining()) [[unlikely]]
      throw_truncated(n);
  }

  [[noreturn, gnu::cold, gnu::noinline]] void throw_truncated(std::size_t n) const {
    throw serialization_error(std::string(prefix) + "truncated input at byte " + std::to_string(position()) +
                              ": need " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " remain");
  }

  [[noreturn, gnu::cold, gnu::noinline]] void throw_bad_length(std::size_t at, std::uint64_t n, std::size_t min) const {
    throw serialization_error(std::string(prefix) + "length " + std::to_string(n) + " at byte " + std::to_string(at) +
                              " cannot fit in the " + std::to_string(remaining()) + " bytes that remain (" +
                              std::to_string(min) + "+ bytes per element)");
  }

  [[gnu::noinline]] std::uint64_t read_varint_slow() {
    const std::size_t at = position();
    std::uint64_t v = 0;
    for (unsigned i = 0;; ++i) {
      if (cur_ == end_) [[unlikely]]
        throw serialization_error(std::string(prefix) + "truncated varint at byte " + std::to_string(at));
      const unsigned b = std::to_integer<unsigned>(*cur_++);
      if (i == 9 && b > 1) [[unlikely]] // 10th byte holds only bit 63
        throw serialization_error(std::string(prefix) + "varint at byte " + std::to_string(at) + " overflows 64 bits");
      v |= std::uint64_t{b & 0x7fu} << (7 * i);
      if ((b & 0x80u) == 0) {
        if (b == 0 && i != 0) [[unlikely]]
          throw serialization_error(std::string(prefix) + "non-minimal varint at byte " + std::to_string(at));
        return v;
      }
    }
  }

  const std::byte* begin_;
  const std::byte* cur_;
  const std::byte* end_;
};

namespace detail {

template <class>
inline constexpr bool dependent_false = false;

/// "app::point" for T = app::point, from __PRETTY_FUNCTION__ (no RTTI needed).
template <class T>
constexpr std::string_view type_name() noexcept {
#if defined(__clang__) || defined(__GNUC__)
  // clang: "... type_name() [T = app::point]"
  // gcc:   "... type_name() [with T = app::point; std::string_view = ...]"
  constexpr std::string_view f = __PRETTY_FUNCTION__;
  constexpr std::size_t start = f.find("T = ") + 4;
  constexpr std::size_t semi = f.find(';', start);
  constexpr std::size_t end = semi != std::string_view::npos ? semi : f.rfind(']');
  return f.substr(start, end - start);
#else
  return "T";
#endif
}

// --- user hooks -------------------------------------------------------------
namespace hook_lookup {
// Deleted catch-alls. They stop unqualified lookup here, so hooks are found
// only by ADL, and as exact-match candidates they beat any hook reachable
// only through a conversion: a hook for Base does not silently slice a
// Derived, and a converting constructor of some fiber:: handle (found via the
// writer's namespace) cannot capture std::string. A non-template or more
// specialized hook for exactly T still wins over them.
template <class T>
void fiber_serialize(writer&, const T&) = delete;
template <class T>
void fiber_deserialize(reader&, T&) = delete;

template <class T>
concept has_save = requires(writer& w, const T& v) {
  fiber_serialize(w, v);
};
template <class T>
concept has_load = requires(reader& r, T& v) {
  fiber_deserialize(r, v);
};

template <class T>
void save(writer& w, const T& v) {
  fiber_serialize(w, v);
}
template <class T>
void load(reader& r, T& v) {
  fiber_deserialize(r, v);
}
} // namespace hook_lookup

// --- classification: detail/serialize_kind.hpp (kind, std_info) ------------------

/// Converts to any proper base of T and nothing else: `T{any_base_of<T>{}}`
/// compiles iff T's first aggregate element is a base class. Boost.PFR
/// rejects such aggregates with a hard error, so we must not hand them to it.
template <class T>
struct any_base_of {
  template <class B>
    requires(std::is_base_of_v<B, T> && !std::is_same_v<B, T>)
  operator B() const;
};

template <class T>
concept pfr_aggregate = std::is_class_v<T> && std::is_aggregate_v<T> && !requires {
  T{any_base_of<T>{}};
};

template <class T>
concept described = boost::describe::has_describe_members<T>::value;

template <class T>
constexpr kind classify() noexcept {
  if constexpr (std::is_reference_v<T> || std::is_const_v<T> || std::is_volatile_v<T>) return kind::cv_ref;
  else if constexpr (hook_lookup::has_save<T> && hook_lookup::has_load<T>) return kind::hook;
  else if constexpr (hook_lookup::has_save<T> || hook_lookup::has_load<T>) return kind::half_hook;
  else if constexpr (described<T>) return kind::describe;
  else if constexpr (std::is_same_v<T, bool>) return kind::boolean;
  else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) return kind::scalar;
  else if constexpr (std_info<T>::value != kind::none) return std_info<T>::value;
  else if constexpr (pfr_aggregate<T>) return kind::aggregate;
  else return kind::none;
}

template <class T>
inline constexpr kind kind_of = classify<T>();

constexpr bool is_ok(kind k) noexcept { return k != kind::none && k != kind::cv_ref && k != kind::half_hook; }

// --- the types a value is made of (what must be serializable in turn) ---------

template <class T, class D>
using describe_member_t = std::remove_reference_t<decltype(std::declval<T&>().*D::pointer)>;
template <class D>
using describe_base_t = typename D::type;
template <class T>
struct describe_member_fn {
  template <class D>
  using fn = describe_member_t<T, D>;
};

template <class T, class Seq>
struct pfr_fields_impl;
template <class T, std::size_t... I>
struct pfr_fields_impl<T, std::index_sequence<I...>> {
  using type = mp_list<std::remove_reference_t<boost::pfr::tuple_element_t<I, T>>...>;
};

template <class T, kind K = kind_of<T>>
struct children_of {
  using type = typename std_info<T>::children;
};
template <class T, kind K>
  requires(K == kind::none || K == kind::cv_ref || K == kind::half_hook || K == kind::hook || K == kind::boolean ||
           K == kind::scalar)
struct children_of<T, K> {
  using type = mp_list<>;
};
template <class T>
struct children_of<T, kind::describe> {
  using type = boost::mp11::mp_rename< // Describe has its own list template
      boost::mp11::mp_append<
          boost::mp11::mp_transform<describe_base_t,
                                    boost::describe::describe_bases<T, boost::describe::mod_any_access>>,
          boost::mp11::mp_transform_q<describe_member_fn<T>,
                                      boost::describe::describe_members<T, boost::describe::mod_any_access>>>,
      mp_list>;
};
template <class T>
struct children_of<T, kind::aggregate> {
  using type = typename pfr_fields_impl<T, std::make_index_sequence<boost::pfr::tuple_size_v<T>>>::type;
};
template <class T>
using children_t = typename children_of<T>::type;

// --- the serializable trait (recursive) -------------------------------------------

template <class T>
struct is_serializable;
template <class L>
struct all_serializable;
template <class... Ts>
struct all_serializable<mp_list<Ts...>> : std::conjunction<is_serializable<Ts>...> {};
template <class T>
struct is_serializable : std::bool_constant<is_ok(kind_of<T>) && all_serializable<children_t<T>>::value> {};

template <class T>
inline constexpr bool serializable_v = is_serializable<T>::value;

/// The first type inside T (T itself, or a field, element, base...) that has
/// no encoding: the one to name in the diagnostic. Only for non-serializable T.
template <class T, bool SelfOk = is_ok(kind_of<T>)>
struct first_bad {
  using type = T;
};
template <class T>
struct first_bad<T, true> {
  template <class U>
  using bad = std::bool_constant<!serializable_v<U>>;
  using type = typename first_bad<boost::mp11::mp_at<children_t<T>, boost::mp11::mp_find_if<children_t<T>, bad>>>::type;
};

// --- wire properties -----------------------------------------------------------

template <class T>
constexpr std::size_t min_wire_size() noexcept;

template <class... Ts>
constexpr std::size_t sum_min_wire(mp_list<Ts...>) noexcept {
  return (std::size_t{0} + ... + min_wire_size<Ts>());
}
template <class... Ts>
constexpr std::size_t least_min_wire(mp_list<Ts...>) noexcept {
  std::size_t m = static_cast<std::size_t>(-1);
  ((m = min_wire_size<Ts>() < m ? min_wire_size<Ts>() : m), ...);
  return m;
}

/// The fewest bytes any value of T can encode to (hooks: 0, unknown).
template <class T>
constexpr std::size_t min_wire_size() noexcept {
  constexpr kind k = kind_of<T>;
  if constexpr (k == kind::hook || k == kind::monostate) return 0;
  else if constexpr (k == kind::boolean) return 1;
  else if constexpr (k == kind::scalar) return sizeof(T);
  else if constexpr (k == kind::string || k == kind::vector || k == kind::map || k == kind::set || k == kind::optional)
    return 1; // the length or the tag
  else if constexpr (k == kind::variant) return 1 + least_min_wire(children_t<T>{});
  else if constexpr (k == kind::array) return std_info<T>::extent * sum_min_wire(children_t<T>{});
  else // describe, aggregate, pair, tuple, duration, time_point: fields back to back
    return sum_min_wire(children_t<T>{});
}

template <class T>
constexpr bool memcpy_wire_v() noexcept;

template <class... Ts>
constexpr bool all_memcpy_wire(mp_list<Ts...>) noexcept {
  return (memcpy_wire_v<Ts>() && ...);
}
template <class... Ts>
constexpr std::size_t sum_sizeof(mp_list<Ts...>) noexcept {
  return (std::size_t{0} + ... + sizeof(Ts));
}

/// True when T's encoding is exactly its object representation, so one
/// memcpy encodes T and any contiguous run of Ts.
template <class T>
constexpr bool memcpy_wire_v() noexcept {
  constexpr kind k = kind_of<T>;
  if constexpr (k == kind::scalar) return true;
  else if constexpr (k == kind::array)
    return memcpy_wire_v<boost::mp11::mp_front<children_t<T>>>() &&
           sizeof(T) == std_info<T>::extent * sizeof(boost::mp11::mp_front<children_t<T>>);
  else if constexpr (k == kind::duration || k == kind::time_point)
    return std::is_trivially_copyable_v<T> && all_memcpy_wire(children_t<T>{}) &&
           sizeof(T) == sum_sizeof(children_t<T>{});
  else if constexpr (k == kind::aggregate)
    // Padding-free with all-public members: fields lie back to back in
    // declaration order, which is exactly the wire order.
    return std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T> && all_memcpy_wire(children_t<T>{}) &&
           sizeof(T) == sum_sizeof(children_t<T>{});
  else return false;
}

template <class T>
inline constexpr bool memcpy_wire = memcpy_wire_v<T>();

inline constexpr std::size_t variable_size = static_cast<std::size_t>(-1);

template <class T>
constexpr std::size_t fixed_wire_size_v() noexcept;

template <class... Ts>
constexpr std::size_t sum_fixed_wire(mp_list<Ts...>) noexcept {
  constexpr std::size_t sizes[] = {fixed_wire_size_v<Ts>()..., 0};
  std::size_t sum = 0;
  for (std::size_t s : sizes) {
    if (s == variable_size) return variable_size;
    sum += s;
  }
  return sum;
}

/// The size every value of T encodes to, or variable_size. Fixed-size values
/// are written and read as one block (one resize, one bounds check) rather
/// than field by field.
template <class T>
constexpr std::size_t fixed_wire_size_v() noexcept {
  constexpr kind k = kind_of<T>;
  if constexpr (k == kind::scalar) return sizeof(T);
  else if constexpr (k == kind::boolean) return 1;
  else if constexpr (k == kind::monostate) return 0;
  else if constexpr (k == kind::array) {
    constexpr std::size_t e = sum_fixed_wire(children_t<T>{});
    return e == variable_size ? variable_size : std_info<T>::extent * e;
  } else if constexpr (k == kind::describe || k == kind::aggregate || k == kind::pair || k == kind::tuple ||
                       k == kind::duration || k == kind::time_point)
    return sum_fixed_wire(children_t<T>{});
  else // hooks (unknown), strings, containers, optional, variant
    return variable_size;
}

template <class T>
inline constexpr std::size_t fixed_wire_size = fixed_wire_size_v<T>();

// --- diagnostics -------------------------------------------------------------

// Always false; named so that clang's "failed due to requirement '...'" reads
// as the reason, with the culprit type in it.
template <class>
inline constexpr bool has_an_encoding = false;
template <class>
inline constexpr bool has_both_hooks = false;
template <class>
inline constexpr bool is_deserializable_in_place = false;

/// Fires the one static_assert a user sees for a type without an encoding.
/// The compiler's "required from" note names the culprit as NotSerializable.
template <class NotSerializable>
constexpr void type_is_not_serializable() {
  constexpr kind k = kind_of<NotSerializable>;
  if constexpr (k == kind::half_hook)
    static_assert(has_both_hooks<NotSerializable>,
                  "fiber: NotSerializable has only one of fiber_serialize / fiber_deserialize; "
                  "define both, `void fiber_serialize(fiber::writer&, const T&)` and "
                  "`void fiber_deserialize(fiber::reader&, T&)`, where argument-dependent "
                  "lookup finds them (T's namespace or hidden friends)");
  else if constexpr (k == kind::cv_ref)
    static_assert(is_deserializable_in_place<NotSerializable>,
                  "fiber: NotSerializable is const, volatile or a reference and cannot be "
                  "deserialized in place; drop the qualifier or give the enclosing type "
                  "fiber_serialize/fiber_deserialize hooks");
  else
    static_assert(has_an_encoding<NotSerializable>,
                  "fiber: NotSerializable cannot be serialized. Fix it in one of three ways: "
                  "(1) make it an aggregate (public data members, no constructors, no base "
                  "classes) so Boost.PFR can see its fields; "
                  "(2) describe it with BOOST_DESCRIBE_STRUCT or BOOST_DESCRIBE_CLASS; "
                  "(3) define `void fiber_serialize(fiber::writer&, const T&)` and "
                  "`void fiber_deserialize(fiber::reader&, T&)` where argument-dependent "
                  "lookup finds them (T's namespace or hidden friends)");
}

/// True if T is serializable; otherwise fires the diagnostic naming the first
/// offending type inside T. Used as `if constexpr (check_serializable<T>())`
/// so that nothing else is instantiated (and reported) after the message.
template <class T>
constexpr bool check_serializable() {
  if constexpr (serializable_v<T>) {
    return true;
  } else {
    type_is_not_serializable<typename first_bad<T>::type>();
    return false;
  }
}

template <class T>
constexpr bool check_default_initializable() {
  static_assert(std::default_initializable<T>, "fiber: deserializing needs T (and every element, key and variant "
                                               "alternative) to be default-initializable: the value is built empty, "
                                               "then filled in place by its fields or by fiber_deserialize");
  return std::default_initializable<T>;
}

template <class T>
void encode(writer& w, const T& v);
template <class T>
void decode(reader& r, T& out);

} // namespace detail

/// True for every type fiber can encode and decode (see the file comment):
/// cv-ref qualifiers are ignored, so `serializable<const T&>` asks about T.
/// SFINAE-friendly: false (never an error) for everything else.
template <class T>
concept serializable = detail::serializable_v<std::remove_cvref_t<T>>;

/// Encodes `v` into a new buffer. A non-serializable T is a compile error
/// (one static_assert naming the remedies). Throws serialization_error only
/// for unencodable values (a valueless std::variant); std::bad_alloc.
template <class T>
std::vector<std::byte> serialize(const T& v);

/// Decodes a T that must span exactly `bytes`. T must be default-initializable.
/// Throws serialization_error ("fiber::deserialize<T>: ...") on truncated,
/// malformed or oversized input and when bytes remain unread; anything a user
/// hook throws passes through. Never reads outside `bytes`.
template <class T>
T deserialize(std::span<const std::byte> bytes);

/// Appends the encoding of `v` to `w` (for hooks and framing code).
template <class T>
void serialize_into(writer& w, const T& v);

/// Decodes into `out` from the reader's position (containers are cleared,
/// optionals/variants replaced). Throws serialization_error; on a throw `out`
/// holds an unspecified but valid value.
template <class T>
void deserialize_from(reader& r, T& out);

} // namespace fiber

#include <fiber/impl/serialize.hpp>
