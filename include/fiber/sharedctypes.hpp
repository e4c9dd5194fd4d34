// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file sharedctypes.hpp
/// Python's multiprocessing.Value and multiprocessing.Array across processes
/// and machines: fiber::Value<T> and fiber::Array<T> of an arithmetic T.
///
/// ```cpp
/// fiber::Value<long> counter{0};
/// fiber::Array<double> xs(8);                          // 8 zeros
/// fiber::Process p{fiber::target<&work>, counter, xs};  // handles are serializable
/// { std::lock_guard g{counter.get_lock()}; counter.set(counter.get() + 1); }   // atomic increment
/// xs.set(3, 2.5);  double x = xs.get(3);
/// ```
///
/// **Where the values live.** Like Queue items, in a service in the process
/// that created them (see synchronize.hpp): every get and set is one
/// request to that process (~5 µs there, ~45 µs from another process on the
/// same machine), and each alone is atomic. A read-modify-write is not:
/// hold get_lock() around it, a fiber::Lock made with the value (Python's
/// default is an RLock; fiber's is a Lock). get and set do not take the lock
/// themselves (Python's synchronized wrappers do, re-entrantly), so they
/// can be called while holding it. Handles are copyable (copies name the
/// same values, and the same lock) and serializable.
///
/// **Errors.** std::out_of_range: an index past the end. fiber::worker_lost
/// / fiber::error: the creating process is gone or dropped its last handle.
/// std::logic_error: a call on fiber's runtime thread.
/// Thread safety: a handle may be used and copied from any thread.

#include <fiber/detail/array_service.hpp>
#include <fiber/detail/sync_client.hpp>
#include <fiber/serialize.hpp>
#include <fiber/synchronize.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fiber {

namespace detail {

/// Base of Value<T> and Array<T>: the one error for a T that is not
/// arithmetic (the compiler names it in check_shared_ctype<...>).
template <class T>
struct check_shared_ctype {
  static_assert(std::is_arithmetic_v<T>,
                "fiber::Value<T> / fiber::Array<T>: T (check_shared_ctype<T> above) must be an arithmetic type "
                "(bool, an integer or a floating-point type), as Python's ctypes values are; share other values "
                "through a fiber::Queue, or as an object of a fiber::RemoteManager");
};

/// What Value<T> and Array<T> share: the elements' service, their count and
/// their lock.
template <class T>
class shared_elements {
public:
  shared_elements() = default;
  explicit shared_elements(const std::vector<T>& init) : size_(init.size()) {
    std::vector<std::byte> bytes(init.size() * sizeof(T));
    for (std::size_t i = 0; i < init.size(); ++i) { // not data(): std::vector<bool> has none
      const T v = init[i];
      std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
    }
    h_ = sync_handle(
        [bytes = std::move(bytes)](asio::any_io_executor) { return std::make_shared<array_service>(sizeof(T), bytes); },
        "fiber::Array: the values are gone (their last handle in the creating process was destroyed)");
  }

  T get(const char* what, std::size_t i) const {
    check(what, i);
    auto rep = h_.call(what, sync_op::read, -1, std::uint64_t(i));
    auto b = rep.rest();
    if (b.size() != sizeof(T)) throw serialization_error(std::string(what) + ": malformed reply");
    T v;
    std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }
  void set(const char* what, std::size_t i, T v) {
    check(what, i);
    writer w(sync_payload(next_wait_id(), -1, std::uint64_t(i)));
    w.write_bytes(&v, sizeof(T));
    (void)h_.send(what, sync_op::write, w.release());
  }

  std::size_t size() const noexcept { return size_; }
  Lock& lock() noexcept { return lock_; }
  /// True if both name the same service (so the same values).
  friend bool operator==(const shared_elements& a, const shared_elements& b) { return a.h_.same(b.h_); }

  void write(writer& w) const {
    h_.write(w);
    w.write(std::uint64_t(size_));
    w.write(std::uint8_t(sizeof(T)));
    serialize_into(w, lock_);
  }
  void read(reader& r) {
    h_.read(r);
    size_ = std::size_t(r.read<std::uint64_t>());
    if (r.read<std::uint8_t>() != sizeof(T))
      throw serialization_error("fiber::Value / fiber::Array: the bytes name values of another size");
    deserialize_from(r, lock_);
  }

private:
  void check(const char* what, std::size_t i) const {
    if (i >= size_)
      throw std::out_of_range(std::string(what) + ": index " + std::to_string(i) + " out of range (size " +
                              std::to_string(size_) + ")");
  }

  sync_handle h_;
  std::size_t size_ = 0;
  Lock lock_;
};

/// The handle side Value<T> and Array<T> share: their elements, the lock,
/// identity and the serialization hooks.
template <class Derived, class T>
class shared_ctype_handle : check_shared_ctype<T> {
public:
  /// The lock that makes a read-modify-write atomic (this handle's copy of
  /// it; every copy names the same lock). Held by no call of Value or Array.
  Lock& get_lock() noexcept { return e_.lock(); }
  /// True if both handles name the same values.
  friend bool operator==(const Derived& a, const Derived& b) { return elements(a) == elements(b); }
  /// Serialization hooks: the service, the size, and the lock.
  friend void fiber_serialize(writer& w, const Derived& d) { elements(d).write(w); }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Derived& d) { elements(d).read(r); }

protected:
  shared_ctype_handle() = default;
  explicit shared_ctype_handle(const std::vector<T>& init) : e_(init) {}
  static const shared_elements<T>& elements(const shared_ctype_handle& h) { return h.e_; }
  static shared_elements<T>& elements(shared_ctype_handle& h) { return h.e_; }
  shared_elements<T> e_;
};

} // namespace detail

/// multiprocessing.Value: one arithmetic value shared by processes, with
/// its lock. See the file's documentation.
template <class T>
class Value : public detail::shared_ctype_handle<Value<T>, T> {
public:
  using value_type = T; ///< the element type

  /// A value initialized to `v` (default: zero), kept in this process.
  explicit Value(T v = T{}) : detail::shared_ctype_handle<Value<T>, T>(std::vector<T>{v}) {}

  /// The value now (one request).
  T get() const { return e_.get("fiber::Value::get", 0); }
  /// Replaces the value (one request).
  void set(T v) { e_.set("fiber::Value::set", 0, v); }

private:
  using detail::shared_ctype_handle<Value<T>, T>::e_;
};

/// multiprocessing.Array: a fixed number of arithmetic values shared by
/// processes, with one lock. See the file's documentation.
template <class T>
class Array : public detail::shared_ctype_handle<Array<T>, T> {
public:
  using value_type = T; ///< the element type

  /// An empty handle, to be assigned or deserialized into (size 0).
  Array() = default;
  /// `size` zeros, kept in this process. (`Array<int> a(10)`: ten zeros.)
  explicit Array(std::size_t size) : detail::shared_ctype_handle<Array<T>, T>(std::vector<T>(size, T{})) {}
  /// A copy of `values`, kept in this process.
  explicit Array(const std::vector<T>& values) : detail::shared_ctype_handle<Array<T>, T>(values) {}

  /// The number of elements (fixed).
  std::size_t size() const noexcept { return e_.size(); }
  /// Element `i` now (one request); std::out_of_range if i >= size().
  T get(std::size_t i) const { return e_.get("fiber::Array::get", i); }
  /// Replaces element `i` (one request); std::out_of_range if i >= size().
  void set(std::size_t i, T v) { e_.set("fiber::Array::set", i, v); }

private:
  using detail::shared_ctype_handle<Array<T>, T>::e_;
};

} // namespace fiber
