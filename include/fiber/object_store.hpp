// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file object_store.hpp
/// fiber::put and fiber::object_ref<T> — large read-only values put once and
/// read by every process of the run, one copy per host.
///
/// ```cpp
/// std::vector<float> theta(1 << 20);
/// fiber::object_ref<std::vector<float>> ref = fiber::put(theta);  // once
/// pool.map(..., std::vector{ref, ref, ...});                        // tasks carry the reference
/// std::span<const float> t = ref.get();  // in a worker: zero-copy, the host's one copy
/// ```

#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/object_store.hpp>
#include <fiber/detail/service_state.hpp>
#include <fiber/detail/shared_segment.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

namespace fiber {
namespace detail {

/// Whether object_ref<T>::get() is a zero-copy view: a std::vector of
/// memcpy-wire elements (arithmetic, enums, padding-free aggregates of those).
template <class T>
struct object_view_traits : std::false_type {
  using type = const T&;
};
template <class E, class A>
struct object_view_traits<std::vector<E, A>> : std::bool_constant<memcpy_wire<E> && !std::is_same_v<E, bool>> {
  using element = E;
  using type =
      std::conditional_t<memcpy_wire<E> && !std::is_same_v<E, bool>, std::span<const E>, const std::vector<E, A>&>;
};

} // namespace detail

template <class T>
class object_ref;

/// Puts `value` into this process's object store, once, and returns a
/// reference any process of the run can read it through (`get()`); the
/// reference is what tasks, Process arguments and remote calls carry.
///
/// The value is copied into a sealed shared-memory segment of this process
/// (a memfd: 0600, gone with the last process holding it) and is immutable.
/// It lives while a reference to it exists in this process (the owner):
/// when the last one here goes, every process holding a copy is told and
/// frees it. Throws fiber::error when it does not fit under
/// `object_store_mb` (after evicting copies no reference uses), or when the
/// kernel refuses the memory; fiber::serialization_error if `T` cannot be
/// encoded. Any thread.
///
/// ```cpp
/// auto ref = fiber::put(std::vector<float>(1 << 20, 0.5f));
/// ```
template <class T>
object_ref<std::remove_cvref_t<T>> put(const T& value);

/// A reference to an object put by fiber::put: small (about 100 bytes on
/// the wire), copyable, serializable, for any process of the run.
///
/// `get()` reads the object: in the owner, from its own segment; in a process
/// on the owner's host, by mapping the owner's segment (no copy); on another
/// host, from a copy fetched once from the owner in pieces (over fiber's
/// authenticated links, TLS where configured) and kept by that process until
/// the owner drops the object or the bound (`object_store_mb`) evicts it.
/// For `std::vector<E>` of memcpy-wire elements `get()` returns a
/// `std::span<const E>` into the shared memory itself (zero-copy); for any
/// other `T` a `const T&` to a value decoded once per process and cached. The
/// span or reference stays valid while this reference (or a copy of it in
/// this process) lives.
///
/// Errors of `get()`: fiber::worker_lost when the owner is gone (it exited
/// or was killed); fiber::error when the owner dropped the object, or the
/// copy does not fit under `object_store_mb`; fiber::serialization_error
/// when the reference's bytes name an object of another type;
/// std::logic_error for an empty reference, or for the first `get()` of an
/// object in a process made on fiber's runtime thread (it waits).
///
/// Thread safety: a reference may be copied and read from any thread.
template <class T>
class object_ref {
  static_assert(std::is_same_v<T, std::remove_cvref_t<T>>,
                "fiber::object_ref<T>: T must be a plain value type (no const, volatile or reference)");
  static_assert(detail::serializable_v<T>, "fiber::object_ref<T>: T must be serializable (see fiber/serialize.hpp)");

public:
  /// True when get() is a zero-copy std::span of the elements.
  static constexpr bool is_view = detail::object_view_traits<T>::value;
  /// What get() returns: std::span<const E> for a vector of memcpy-wire E,
  /// else const T&.
  using view_type = typename detail::object_view_traits<T>::type;

  /// An empty reference (get() throws std::logic_error).
  object_ref() = default;

  /// The object, waited for on the first call in this process (see the
  /// class comment for where it comes from and the errors).
  view_type get() const {
    if (!s_) throw std::logic_error("fiber::object_ref::get: an empty reference (default-constructed or moved from)");
    auto [view, value, users] = s_->opened();
    auto bytes = view->data();
    if constexpr (is_view) {
      using E = typename detail::object_view_traits<T>::element;
      return {reinterpret_cast<const E*>(bytes.data()), bytes.size() / sizeof(E)};
    } else {
      if (!value) value = s_->keep(std::make_shared<const T>(deserialize<T>(bytes)));
      return *static_cast<const T*>(value.get());
    }
  }

  /// The object's size in the store (bytes); 0 for an empty reference.
  std::uint64_t size_bytes() const noexcept { return s_ ? s_->id.size : 0; }
  /// Whether this names an object.
  explicit operator bool() const noexcept { return bool(s_); }

  /// Serialization hook: the owner's service, the object's identity and
  /// type; in the owner's process, a reference read back keeps it alive.
  friend void fiber_serialize(writer& w, const object_ref& r) {
    w.write(bool(r.s_));
    if (!r.s_) return;
    const auto& id = r.s_->id;
    w.write(id.source.url);
    w.write_varint(id.source.id);
    w.write(id.nonce);
    w.write_varint(id.size);
    w.write(id.type);
    w.write(id.host);
    w.write_varint(id.pid);
    w.write_varint(id.fd);
  }
  /// Serialization hook: reads what fiber_serialize wrote; a reference of
  /// another T is a fiber::serialization_error.
  friend void fiber_deserialize(reader& rd, object_ref& r) {
    if (!rd.read<bool>()) return r.s_.reset();
    auto s = std::make_shared<state>();
    auto& id = s->id;
    id.source.url = rd.read<std::string>();
    id.source.id = rd.read_varint();
    id.nonce = rd.read<std::uint64_t>();
    id.size = rd.read_varint();
    id.type = rd.read<std::uint64_t>();
    id.host = rd.read<std::uint64_t>();
    id.pid = rd.read_varint();
    id.fd = rd.read_varint();
    if (id.type != type_hash())
      throw serialization_error("fiber::object_ref<" + std::string(detail::pretty_type_name<T>()) +
                                ">: the bytes name an object of another type");
    s->owner = std::make_shared<detail::service_state>(id.source);
    r.s_ = std::move(s);
  }

private:
  template <class U>
  friend object_ref<std::remove_cvref_t<U>> put(const U&);

  static std::uint64_t type_hash() { return detail::fnv1a(detail::pretty_type_name<T>(), detail::fnv1a("fiber-put")); }

  // What copies of one reference share: the object's identity, its owner's
  // service (kept alive in the owner), and the mapping once read.
  struct state {
    detail::object_id id;
    std::shared_ptr<detail::service_state> owner;
    std::mutex m;
    detail::opened_object o;

    detail::opened_object opened() {
      {
        std::lock_guard lk(m);
        if (o.view) return o;
      }
      auto got = detail::object_store::instance().open(id);
      std::lock_guard lk(m);
      if (!o.view) o = std::move(got);
      return o;
    }
    std::shared_ptr<const void> keep(std::shared_ptr<const void> v) {
      v = detail::object_store::instance().keep_value(id.nonce, std::move(v));
      std::lock_guard lk(m);
      if (!o.value) o.value = v;
      return o.value;
    }
  };
  std::shared_ptr<state> s_;
};

template <class T>
object_ref<std::remove_cvref_t<T>> put(const T& value) {
  using V = std::remove_cvref_t<T>;
  using R = object_ref<V>;
  auto& store = detail::object_store::instance();
  std::vector<std::byte> bytes;
  std::uint64_t size = 0;
  if constexpr (R::is_view) size = std::uint64_t(value.size()) * sizeof(typename V::value_type);
  else bytes = serialize(value), size = bytes.size();
  const auto nonce = detail::random_token();
  auto lock = store.reserve(size, "fiber::put");
  try {
    auto seg = std::make_shared<detail::shared_segment>(nonce, size, store.segment_name());
    auto view = detail::map_segment(seg->fd(), size);
    lock.release(); // the host counts the segment now
    if constexpr (R::is_view) {
      if (size) std::memcpy(seg->map_writable().get(), value.data(), std::size_t(size));
    } else {
      seg->write(0, bytes);
    }
    seg->seal();
    auto s = std::make_shared<typename R::state>();
    s->id.nonce = nonce;
    s->id.size = size;
    s->id.type = R::type_hash();
    s->id.host = detail::host_key();
    s->id.pid = std::uint64_t(::getpid());
    s->id.fd = std::uint64_t(seg->fd());
    s->o = {view, nullptr, nullptr};
    auto source = std::make_shared<std::weak_ptr<detail::object_source>>(); // set when made, in ref() below
    s->owner = std::make_shared<detail::service_state>(
        [seg, view, nonce, size, source](asio::any_io_executor) {
          auto src = std::make_shared<detail::object_source>(
              view, size, true, [nonce, seg](std::vector<detail::service_ref> listeners) {
                (void)seg; // open until now: readers on this host open its fd
                auto& rt = detail::runtime::instance();
                for (auto& l : listeners)
                  rt.request(l.url, l.id, detail::store_drop, serialize(nonce), [](std::exception_ptr, auto) {});
              });
          *source = src;
          return src;
        },
        "fiber: the object's owner dropped it",
        [nonce, source] { // the mappings go at once: the next put may need the room
          detail::object_store::instance().drop(nonce);
          if (auto src = source->lock()) src->release();
        });
    s->id.source = s->owner->ref();
    store.add_owned(nonce, std::move(view), size);
    R r;
    r.s_ = std::move(s);
    return r;
  } catch (...) {
    store.unreserve(size);
    throw;
  }
}

} // namespace fiber
