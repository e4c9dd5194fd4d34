// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file impl/serialize.hpp
/// Template bodies for fiber/serialize.hpp: the per-kind encoders and
/// decoders. Include <fiber/serialize.hpp>, not this file.

#include <fiber/serialize.hpp>

#include <boost/describe/bases.hpp>
#include <boost/describe/members.hpp>
#include <boost/mp11/algorithm.hpp>
#include <boost/pfr/core.hpp>

#include <algorithm>
#include <iterator>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace fiber {
namespace detail {

/// Containers reserve at most this much up front; beyond it they grow only as
/// elements actually decode, so a lying count cannot make us allocate.
inline constexpr std::size_t max_upfront_reserve_bytes = std::size_t{1} << 20;

template <class C>
void reserve_bounded(C& c, std::size_t n) {
  constexpr std::size_t elem = sizeof(typename C::value_type);
  constexpr std::size_t cap = max_upfront_reserve_bytes / elem > 0 ? max_upfront_reserve_bytes / elem : 1;
  c.reserve(n < cap ? n : cap);
}

/// Elements whose encoding may be empty get a zero pad byte after each one in
/// counted containers, so a count can always be bounded by the bytes left.
template <class... Ts>
inline constexpr bool needs_pad = (0 + ... + min_wire_size<Ts>()) == 0;
template <class... Ts>
inline constexpr std::size_t elem_bound = needs_pad<Ts...> ? 1 : (0 + ... + min_wire_size<Ts>());

template <class... Ts>
void write_pad(writer& w) {
  if constexpr (needs_pad<Ts...>) w.write_varint(0);
}
template <class... Ts>
void read_pad(reader& r) {
  if constexpr (needs_pad<Ts...>) {
    std::byte b;
    r.read_bytes(&b, 1);
    if (b != std::byte{0}) [[unlikely]]
      r.fail("non-zero pad byte after an empty element");
  }
}

template <class T>
T make_default() {
  if constexpr (check_default_initializable<T>()) return T{};
  else std::terminate(); // unreachable: the static_assert above already failed
}

// vector<bool> is packed LSB-first, 8 per byte; unused high bits must be 0.
template <class A>
void encode_bits(writer& w, const std::vector<bool, A>& v) {
  const std::size_t n = v.size();
  w.write_varint(n);
  std::vector<std::byte>& buf = w.buffer();
  const std::size_t base = buf.size();
  buf.resize(base + n / 8 + (n % 8 != 0));
  for (std::size_t i = 0; i < n; ++i)
    if (v[i]) buf[base + i / 8] |= std::byte{1} << (i % 8);
}

template <class A>
void decode_bits(reader& r, std::vector<bool, A>& out) {
  const std::uint64_t n = r.read_varint();
  const std::uint64_t nbytes = n / 8 + (n % 8 != 0); // no overflow, unlike (n + 7) / 8
  if (nbytes > r.remaining()) [[unlikely]]
    r.fail("vector<bool> length " + std::to_string(n) + " exceeds the input");
  const std::span<const std::byte> bits = r.read_span(static_cast<std::size_t>(nbytes));
  out.assign(static_cast<std::size_t>(n), false);
  for (std::size_t i = 0; i < n; ++i)
    if ((bits[i / 8] >> (i % 8) & std::byte{1}) != std::byte{0}) out[i] = true;
  if (n % 8 != 0 && (bits.back() >> (n % 8)) != std::byte{0}) [[unlikely]]
    r.fail("vector<bool> has non-zero padding bits");
}

template <class V, std::size_t... I>
void decode_variant(reader& r, V& out, std::size_t index, std::index_sequence<I...>) {
  using fn = void (*)(reader&, V&);
  static constexpr fn table[] = {+[](reader& rr, V& v) {
    if constexpr (check_default_initializable<std::variant_alternative_t<I, V>>())
      detail::decode(rr, v.template emplace<I>());
  }...};
  table[index](r, out);
}

// Maps and sets are filled one element at a time (no trust in the count
// beyond the bound check). Ordered ones must arrive in strictly increasing key
// order, as they are written: each value has exactly one encoding, and every
// insert is an O(1) append. Unordered ones reject duplicate keys.
template <class C, class K, class... M>
void insert_unique(C& c, std::size_t at, K&& key, M&&... mapped) {
  if constexpr (requires { c.key_comp(); }) {
    if (!c.empty()) {
      const auto& last = *std::prev(c.end());
      const auto& last_key = [&]() -> const auto& {
        if constexpr (sizeof...(M) == 0) return last;
        else return last.first;
      }
      ();
      if (!c.key_comp()(last_key, key)) [[unlikely]]
        throw_malformed("key out of order or duplicated", at);
    }
    c.emplace_hint(c.end(), std::forward<K>(key), std::forward<M>(mapped)...);
  } else {
    const std::size_t before = c.size();
    c.emplace(std::forward<K>(key), std::forward<M>(mapped)...);
    if (c.size() == before) [[unlikely]]
      throw_malformed("duplicate key", at);
  }
}

/// `v` as its base B, even a private one: only a C-style cast may convert to
/// an inaccessible base (Describe lists private bases too).
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
template <class B, class T>
const B& as_base(const T& v) noexcept {
  return (const B&)v;
}
template <class B, class T>
B& as_base(T& v) noexcept {
  return (B&)v;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/// Calls f(member) for each described base (as a base reference) and then
/// each described member of v, in wire order.
template <class T, class F>
void for_each_described(T& v, F&& f) {
  namespace bd = boost::describe;
  using U = std::remove_const_t<T>;
  boost::mp11::mp_for_each<bd::describe_bases<U, bd::mod_any_access>>([&](auto d) {
    f(detail::as_base<typename decltype(d)::type>(v));
  });
  boost::mp11::mp_for_each<bd::describe_members<U, bd::mod_any_access>>([&](auto d) { f(v.*decltype(d)::pointer); });
}

// --- fixed-size values: one block, no per-field size bookkeeping ----------------
// The cursor is threaded through folds by value (not captured by reference):
// stores through std::byte* may alias anything, so a cursor kept in memory
// would be reloaded after every field.

/// Where a fixed-size block starts in the input, for error positions.
struct block_origin {
  const std::byte* base;
  std::size_t position;
  std::size_t at(const std::byte* p) const noexcept { return position + static_cast<std::size_t>(p - base); }
};

template <class T>
std::byte* encode_fixed(std::byte* p, const T& v) noexcept;
template <class T>
const std::byte* decode_fixed(const std::byte* p, T& out, block_origin o);

/// Fields of a tuple (or a PFR tie of an aggregate): one fold, local cursor.
template <class Tuple>
std::byte* encode_fixed_tuple(std::byte* p, const Tuple& t) noexcept {
  return std::apply(
      [p](const auto&... xs) {
        std::byte* q = p;
        ((q = detail::encode_fixed(q, xs)), ...);
        return q;
      },
      t);
}
template <class T, template <class...> class L, class... D>
std::byte* encode_fixed_bases(std::byte* p, [[maybe_unused]] const T& v, L<D...>) noexcept {
  ((p = detail::encode_fixed(p, detail::as_base<typename D::type>(v))), ...);
  return p;
}
template <class T, template <class...> class L, class... D>
std::byte* encode_fixed_members(std::byte* p, [[maybe_unused]] const T& v, L<D...>) noexcept {
  ((p = detail::encode_fixed(p, v.*D::pointer)), ...);
  return p;
}
template <class Tuple>
const std::byte* decode_fixed_tuple(const std::byte* p, Tuple&& t, block_origin o) {
  return std::apply(
      [p, o](auto&... xs) {
        const std::byte* q = p;
        ((q = detail::decode_fixed(q, xs, o)), ...);
        return q;
      },
      t);
}
template <class T, template <class...> class L, class... D>
const std::byte* decode_fixed_bases(const std::byte* p, [[maybe_unused]] T& out, [[maybe_unused]] block_origin o,
                                    L<D...>) {
  ((p = detail::decode_fixed(p, detail::as_base<typename D::type>(out), o)), ...);
  return p;
}
template <class T, template <class...> class L, class... D>
const std::byte* decode_fixed_members(const std::byte* p, [[maybe_unused]] T& out, [[maybe_unused]] block_origin o,
                                      L<D...>) {
  ((p = detail::decode_fixed(p, out.*D::pointer, o)), ...);
  return p;
}

/// Writes v (fixed_wire_size<T> bytes) at p; returns the end.
template <class T>
std::byte* encode_fixed(std::byte* p, const T& v) noexcept {
  constexpr kind k = kind_of<T>;
  if constexpr (memcpy_wire<T>) {
    std::memcpy(p, std::addressof(v), sizeof(T));
    return p + sizeof(T);
  } else if constexpr (k == kind::boolean) {
    *p = v ? std::byte{1} : std::byte{0};
    return p + 1;
  } else if constexpr (k == kind::describe) {
    namespace bd = boost::describe;
    p = detail::encode_fixed_bases(p, v, bd::describe_bases<T, bd::mod_any_access>{});
    return detail::encode_fixed_members(p, v, bd::describe_members<T, bd::mod_any_access>{});
  } else if constexpr (k == kind::aggregate) {
    return detail::encode_fixed_tuple(p, boost::pfr::structure_tie(v));
  } else if constexpr (k == kind::array) {
    for (const auto& e : v) p = detail::encode_fixed(p, e);
    return p;
  } else if constexpr (k == kind::pair) {
    return detail::encode_fixed(detail::encode_fixed(p, v.first), v.second);
  } else if constexpr (k == kind::tuple) {
    return detail::encode_fixed_tuple(p, v);
  } else if constexpr (k == kind::duration) {
    return detail::encode_fixed(p, v.count());
  } else if constexpr (k == kind::time_point) {
    return detail::encode_fixed(p, v.time_since_epoch());
  } else {
    static_assert(k == kind::monostate, "fiber: internal error: not a fixed-size kind");
    return p;
  }
}

/// Reads out from p (fixed_wire_size<T> bytes, already bounds-checked).
template <class T>
const std::byte* decode_fixed(const std::byte* p, T& out, block_origin o) {
  constexpr kind k = kind_of<T>;
  if constexpr (memcpy_wire<T>) {
    std::memcpy(std::addressof(out), p, sizeof(T));
    return p + sizeof(T);
  } else if constexpr (k == kind::boolean) {
    const unsigned b = std::to_integer<unsigned>(*p);
    if (b > 1) [[unlikely]]
      throw_malformed("bool byte " + std::to_string(b) + " is not 0 or 1", o.at(p));
    out = b == 1;
    return p + 1;
  } else if constexpr (k == kind::describe) {
    namespace bd = boost::describe;
    p = detail::decode_fixed_bases(p, out, o, bd::describe_bases<T, bd::mod_any_access>{});
    return detail::decode_fixed_members(p, out, o, bd::describe_members<T, bd::mod_any_access>{});
  } else if constexpr (k == kind::aggregate) {
    return detail::decode_fixed_tuple(p, boost::pfr::structure_tie(out), o);
  } else if constexpr (k == kind::array) {
    for (auto& e : out) p = detail::decode_fixed(p, e, o);
    return p;
  } else if constexpr (k == kind::pair) {
    return detail::decode_fixed(detail::decode_fixed(p, out.first, o), out.second, o);
  } else if constexpr (k == kind::tuple) {
    return detail::decode_fixed_tuple(p, out, o);
  } else if constexpr (k == kind::duration) {
    typename T::rep count{};
    p = detail::decode_fixed(p, count, o);
    out = T{count};
    return p;
  } else if constexpr (k == kind::time_point) {
    typename T::duration since{};
    p = detail::decode_fixed(p, since, o);
    out = T{since};
    return p;
  } else {
    static_assert(k == kind::monostate, "fiber: internal error: not a fixed-size kind");
    return p;
  }
}

/// Appends n bytes to the writer's buffer and returns where they start.
inline std::byte* grow(writer& w, std::size_t n) {
  std::vector<std::byte>& b = w.buffer();
  const std::size_t old = b.size();
  b.resize(old + n);
  return b.data() + old;
}

/// Fixed-size but not a plain memcpy (bools, padding, Describe...): worth the
/// block path when there is more than one field to it.
template <class T>
inline constexpr bool block_wire = !memcpy_wire<T> && fixed_wire_size<T> != variable_size && fixed_wire_size<T> > 1;

// --- the general encoder/decoder ---------------------------------------------------

// Internal calls are qualified (detail::encode, ...) so that argument-dependent
// lookup cannot pick up a user's own `encode`/`decode` for the value's type.
template <class T>
void encode(writer& w, const T& v) {
  constexpr kind k = kind_of<T>;
  if constexpr (k == kind::hook) {
    hook_lookup::save(w, v);
  } else if constexpr (memcpy_wire<T>) {
    w.write_bytes(std::addressof(v), sizeof(T));
  } else if constexpr (block_wire<T>) {
    detail::encode_fixed(detail::grow(w, fixed_wire_size<T>), v);
  } else if constexpr (k == kind::describe) {
    detail::for_each_described(v, [&](const auto& f) { detail::encode(w, f); });
  } else if constexpr (k == kind::boolean) {
    w.write_varint(v ? 1 : 0);
  } else if constexpr (k == kind::string) {
    w.write_varint(v.size());
    w.write_bytes(v.data(), v.size() * sizeof(typename T::value_type));
  } else if constexpr (k == kind::vector) {
    using E = typename T::value_type;
    if constexpr (std::is_same_v<E, bool>) {
      detail::encode_bits(w, v);
    } else {
      w.write_varint(v.size());
      if constexpr (memcpy_wire<E>) {
        w.write_bytes(v.data(), v.size() * sizeof(E));
      } else if constexpr (fixed_wire_size<E> != variable_size && fixed_wire_size<E> > 0) {
        std::byte* p = detail::grow(w, v.size() * fixed_wire_size<E>);
        for (const E& e : v) p = detail::encode_fixed(p, e);
      } else {
        for (const E& e : v) {
          detail::encode(w, e);
          write_pad<E>(w);
        }
      }
    }
  } else if constexpr (k == kind::array) { // variable-size elements
    for (const auto& e : v) detail::encode(w, e);
  } else if constexpr (k == kind::map) {
    using K = typename T::key_type;
    using M = typename T::mapped_type;
    w.write_varint(v.size());
    for (const auto& [key, val] : v) {
      detail::encode(w, key);
      detail::encode(w, val);
      write_pad<K, M>(w);
    }
  } else if constexpr (k == kind::set) {
    using K = typename T::key_type;
    w.write_varint(v.size());
    for (const K& key : v) {
      detail::encode(w, key);
      write_pad<K>(w);
    }
  } else if constexpr (k == kind::pair) {
    detail::encode(w, v.first);
    detail::encode(w, v.second);
  } else if constexpr (k == kind::tuple) {
    std::apply([&](const auto&... xs) { (detail::encode(w, xs), ...); }, v);
  } else if constexpr (k == kind::optional) {
    w.write_varint(v.has_value() ? 1 : 0);
    if (v) detail::encode(w, *v);
  } else if constexpr (k == kind::variant) {
    if (v.valueless_by_exception()) [[unlikely]]
      throw serialization_error("fiber::serialize: cannot encode a valueless " + std::string(type_name<T>()));
    w.write_varint(v.index());
    std::visit([&](const auto& x) { detail::encode(w, x); }, v);
  } else if constexpr (k == kind::duration) {
    detail::encode(w, v.count());
  } else if constexpr (k == kind::time_point) {
    detail::encode(w, v.time_since_epoch());
  } else if constexpr (k == kind::monostate) {
    // no bytes
  } else if constexpr (k == kind::aggregate) {
    boost::pfr::for_each_field(v, [&](const auto& f) { detail::encode(w, f); });
  } else {
    static_assert(dependent_false<T>, "fiber: internal error: unhandled kind");
  }
}

template <class T>
void decode(reader& r, T& out) {
  // kind_of<T> is spelled out: the same dispatch as encode, in the same order.
  if constexpr (kind_of<T> == kind::hook) {
    hook_lookup::load(r, out);
  } else if constexpr (memcpy_wire<T>) {
    r.read_bytes(std::addressof(out), sizeof(T));
  } else if constexpr (block_wire<T>) {
    const std::size_t at = r.position();
    const std::span<const std::byte> s = r.read_span(fixed_wire_size<T>);
    detail::decode_fixed(s.data(), out, block_origin{s.data(), at});
  } else if constexpr (kind_of<T> == kind::describe) {
    detail::for_each_described(out, [&](auto& f) { detail::decode(r, f); });
  } else if constexpr (kind_of<T> == kind::boolean) {
    std::byte b;
    r.read_bytes(&b, 1);
    if (std::to_integer<unsigned>(b) > 1) [[unlikely]]
      throw_malformed("bool byte " + std::to_string(std::to_integer<unsigned>(b)) + " is not 0 or 1", r.position() - 1);
    out = b == std::byte{1};
  } else if constexpr (kind_of<T> == kind::string) {
    using C = typename T::value_type;
    const std::size_t n = r.read_length(sizeof(C));
    const std::span<const std::byte> s = r.read_span(n * sizeof(C));
    if constexpr (sizeof(C) == 1) {
      out.assign(reinterpret_cast<const C*>(s.data()), n); // char-sized: aliasing is fine
    } else {
      out.resize(n);
      if (n != 0) std::memcpy(out.data(), s.data(), s.size());
    }
  } else if constexpr (kind_of<T> == kind::vector) {
    using E = typename T::value_type;
    if constexpr (std::is_same_v<E, bool>) {
      detail::decode_bits(r, out);
    } else if constexpr (memcpy_wire<E>) {
      const std::size_t n = r.read_length(sizeof(E));
      const std::span<const std::byte> s = r.read_span(n * sizeof(E));
      // resize() zero-fills before the copy (docs/RATIONALE.md: cheap enough).
      out.resize(n);
      if (n != 0) std::memcpy(out.data(), s.data(), s.size());
    } else if constexpr (!check_default_initializable<E>()) {
      // diagnosed by the static_assert
    } else if constexpr (fixed_wire_size<E> != variable_size && fixed_wire_size<E> > 0) {
      // Every element's bytes are present (checked), so sizing for n is safe.
      const std::size_t n = r.read_length(fixed_wire_size<E>);
      const block_origin o{r.read_span(0).data(), r.position()};
      const std::span<const std::byte> s = r.read_span(n * fixed_wire_size<E>);
      out.resize(n);
      const std::byte* p = s.data();
      for (E& e : out) p = detail::decode_fixed(p, e, o);
    } else {
      const std::size_t n = r.read_length(elem_bound<E>);
      out.clear();
      detail::reserve_bounded(out, n);
      for (std::size_t i = 0; i < n; ++i) {
        detail::decode(r, out.emplace_back());
        read_pad<E>(r);
      }
    }
  } else if constexpr (kind_of<T> == kind::array) { // variable-size elements
    for (auto& e : out) detail::decode(r, e);
  } else if constexpr (kind_of<T> == kind::map) {
    using K = typename T::key_type;
    using M = typename T::mapped_type;
    const std::size_t n = r.read_length(elem_bound<K, M>);
    out.clear();
    if constexpr (requires { out.reserve(n); }) detail::reserve_bounded(out, n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = r.position();
      K key = make_default<K>();
      M val = make_default<M>();
      detail::decode(r, key);
      detail::decode(r, val);
      read_pad<K, M>(r);
      detail::insert_unique(out, at, std::move(key), std::move(val));
    }
  } else if constexpr (kind_of<T> == kind::set) {
    using K = typename T::key_type;
    const std::size_t n = r.read_length(elem_bound<K>);
    out.clear();
    if constexpr (requires { out.reserve(n); }) detail::reserve_bounded(out, n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = r.position();
      K key = make_default<K>();
      detail::decode(r, key);
      read_pad<K>(r);
      detail::insert_unique(out, at, std::move(key));
    }
  } else if constexpr (kind_of<T> == kind::pair) {
    detail::decode(r, out.first);
    detail::decode(r, out.second);
  } else if constexpr (kind_of<T> == kind::tuple) {
    std::apply([&](auto&... xs) { (detail::decode(r, xs), ...); }, out);
  } else if constexpr (kind_of<T> == kind::optional) {
    std::byte tag;
    r.read_bytes(&tag, 1);
    if (tag == std::byte{0}) {
      out.reset();
    } else if (tag == std::byte{1}) {
      if constexpr (check_default_initializable<typename T::value_type>()) detail::decode(r, out.emplace());
    } else [[unlikely]] {
      throw_malformed("optional tag " + std::to_string(std::to_integer<unsigned>(tag)) + " is not 0 or 1",
                      r.position() - 1);
    }
  } else if constexpr (kind_of<T> == kind::variant) {
    constexpr std::size_t alternatives = std::variant_size_v<T>;
    const std::size_t at = r.position();
    const std::uint64_t index = r.read_varint();
    if (index >= alternatives) [[unlikely]]
      throw_malformed("variant index " + std::to_string(index) + " is out of range for " +
                          std::to_string(alternatives) + " alternatives",
                      at);
    detail::decode_variant(r, out, static_cast<std::size_t>(index), std::make_index_sequence<alternatives>{});
  } else if constexpr (kind_of<T> == kind::duration) {
    typename T::rep count{};
    detail::decode(r, count);
    out = T{count};
  } else if constexpr (kind_of<T> == kind::time_point) {
    typename T::duration since{};
    detail::decode(r, since);
    out = T{since};
  } else if constexpr (kind_of<T> == kind::monostate) {
    // no bytes
  } else if constexpr (kind_of<T> == kind::aggregate) {
    boost::pfr::for_each_field(out, [&](auto& f) { detail::decode(r, f); });
  } else {
    static_assert(dependent_false<T>, "fiber: internal error: unhandled kind");
  }
}

/// A first guess at the encoded size, to allocate once in the common cases.
template <class T>
std::size_t size_hint(const T& v) noexcept {
  if constexpr (kind_of<T> == kind::string) {
    return 10 + v.size() * sizeof(typename T::value_type);
  } else if constexpr (kind_of<T> == kind::vector) {
    using E = typename T::value_type;
    if constexpr (memcpy_wire<E>) return 10 + v.size() * sizeof(E);
    else return 10 + v.size() * elem_bound<E>;
  } else {
    return min_wire_size<T>();
  }
}

} // namespace detail

template <class T>
void serialize_into(writer& w, const T& v) {
  if constexpr (detail::check_serializable<T>()) detail::encode(w, v);
}

template <class T>
void deserialize_from(reader& r, T& out) {
  if constexpr (detail::check_serializable<T>()) detail::decode(r, out);
}

template <class T>
std::vector<std::byte> serialize(const T& v) {
  if constexpr (detail::check_serializable<T>()) {
    writer w;
    w.buffer().reserve(detail::size_hint(v));
    detail::encode(w, v);
    return w.release();
  } else {
    return {};
  }
}

template <class T>
T deserialize(std::span<const std::byte> bytes) {
  // Nested so that at most one diagnostic fires for a bad T.
  if constexpr (!detail::check_serializable<T>()) {
    std::terminate(); // unreachable: a static_assert has already failed
  } else if constexpr (!detail::check_default_initializable<T>()) {
    std::terminate(); // unreachable: a static_assert has already failed
  } else {
    reader r(bytes);
    T v{};
    try {
      detail::decode(r, v);
      if (!r.empty()) [[unlikely]]
        throw serialization_error(std::string(reader::prefix) + std::to_string(r.remaining()) +
                                  " trailing bytes after the value (" + std::to_string(bytes.size()) +
                                  " bytes in all)");
    } catch (const serialization_error& e) {
      // Name the requested type: the reader only knows positions.
      std::string_view what = e.what();
      if (what.starts_with(reader::prefix)) what.remove_prefix(reader::prefix.size());
      throw serialization_error("fiber::deserialize<" + std::string(detail::type_name<T>()) +
                                ">: " + std::string(what));
    }
    return v;
  }
}

template <class T>
void writer::write(const T& v) {
  serialize_into(*this, v);
}

template <class T>
T reader::read() {
  if constexpr (detail::check_default_initializable<T>()) {
    T v{};
    deserialize_from(*this, v);
    return v;
  } else {
    std::terminate(); // unreachable: a static_assert has already failed
  }
}

template <class T>
void reader::read(T& out) {
  deserialize_from(*this, out);
}

} // namespace fiber
