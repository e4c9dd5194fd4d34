// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file shared.hpp
/// Shared state, as Python's SyncManager offers it: a dictionary and a list
/// that live in a manager process and are used by every process through a
/// handle.
///
/// ```cpp
/// fiber::RemoteManager<fiber::shared::dict<std::string, int>> m;
/// auto d = m.make();                                     // a fiber::Remote<dict<...>>
/// d.call<&fiber::shared::dict<std::string, int>::set>("a", 1);
/// pool.map(...);                                         // tasks receive `d` and call it
/// auto all = d.call<&fiber::shared::dict<std::string, int>::items>();
/// ```
///
/// These are ordinary described classes: locally they are a thin wrapper of
/// std::map / std::vector; remotely every call is one message, and calls on
/// one object run one at a time in the order they were issued (actor
/// semantics), so each member function is atomic. A read-modify-write made of
/// two calls (get, then set) is not: give such updates a method of your own
/// type instead. Python's KeyError / IndexError are std::out_of_range here
/// (fiber::remote_error with that type name when called remotely).
/// Both classes are also serializable (their contents).

#include <boost/describe/class.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fiber::shared {

/// A dictionary (ordered by key). K needs operator<; K and V must be
/// serializable to be used remotely. No member is overloaded, so each one can
/// be named as `&dict<K, V>::member`.
template <class K, class V>
class dict {
public:
  dict() = default;
  /// A dictionary holding `init`'s entries.
  explicit dict(std::map<K, V> init) : data_(std::move(init)) {}

  /// The value at `k`, or nullopt (Python's d.get(k)).
  std::optional<V> get(const K& k) const {
    auto it = data_.find(k);
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }
  /// The value at `k`; throws std::out_of_range if absent (Python's d[k]).
  V at(const K& k) const {
    auto it = data_.find(k);
    if (it == data_.end()) throw std::out_of_range("fiber::shared::dict::at: no such key");
    return it->second;
  }
  /// d[k] = v.
  void set(const K& k, const V& v) { data_[k] = v; }
  /// The value at `k`, inserting `v` first if absent (Python's setdefault).
  V setdefault(const K& k, const V& v) { return data_.try_emplace(k, v).first->second; }
  /// Removes `k`; true if it was there.
  bool erase(const K& k) { return data_.erase(k) != 0; }
  /// Removes `k` and returns its value, or nullopt if absent.
  std::optional<V> pop(const K& k) {
    auto it = data_.find(k);
    if (it == data_.end()) return std::nullopt;
    std::optional<V> v(std::move(it->second));
    data_.erase(it);
    return v;
  }
  /// True if `k` is a key (Python's `k in d`).
  bool contains(const K& k) const { return data_.count(k) != 0; }
  /// The number of entries (Python's len(d)).
  std::uint64_t size() const { return data_.size(); }
  /// Keys in order.
  std::vector<K> keys() const {
    std::vector<K> out;
    out.reserve(data_.size());
    for (const auto& kv : data_) out.push_back(kv.first);
    return out;
  }
  /// Values, in key order.
  std::vector<V> values() const {
    std::vector<V> out;
    out.reserve(data_.size());
    for (const auto& kv : data_) out.push_back(kv.second);
    return out;
  }
  /// Every (key, value), in key order.
  std::map<K, V> items() const { return data_; }
  /// Sets every (key, value) of `other` (Python's d.update(other)).
  void update(const std::map<K, V>& other) {
    for (const auto& [k, v] : other) data_[k] = v;
  }
  /// Removes every entry.
  void clear() { data_.clear(); }

private:
  std::map<K, V> data_;

  BOOST_DESCRIBE_CLASS(dict, (),
                       (get, at, set, setdefault, erase, pop, contains, size, keys, values, items, update, clear), (),
                       (data_))
};

/// A list. Indices are signed: -1 is the last element, as in Python. T must
/// be serializable to be used remotely.
template <class T>
class list {
public:
  list() = default;
  /// A list holding `init`'s elements.
  explicit list(std::vector<T> init) : data_(std::move(init)) {}

  /// Adds `v` at the end.
  void append(const T& v) { data_.push_back(v); }
  /// Appends every element of `vs` (Python's extend).
  void extend(const std::vector<T>& vs) { data_.insert(data_.end(), vs.begin(), vs.end()); }
  /// The element at `i`; throws std::out_of_range.
  T get(std::int64_t i) const { return data_[index(i)]; }
  /// l[i] = v; throws std::out_of_range.
  void set(std::int64_t i, const T& v) { data_[index(i)] = v; }
  /// The number of elements (Python's len(l)).
  std::uint64_t size() const { return data_.size(); }
  /// Removes and returns the last element; throws std::out_of_range if empty.
  T pop() {
    if (data_.empty()) throw std::out_of_range("fiber::shared::list::pop: empty list");
    T v = std::move(data_.back());
    data_.pop_back();
    return v;
  }
  /// A copy of every element, in order.
  std::vector<T> items() const { return data_; }
  /// Removes every element.
  void clear() { data_.clear(); }

private:
  std::size_t index(std::int64_t i) const {
    auto n = static_cast<std::int64_t>(data_.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw std::out_of_range("fiber::shared::list: index out of range");
    return static_cast<std::size_t>(i);
  }

  std::vector<T> data_;

  BOOST_DESCRIBE_CLASS(list, (), (append, extend, get, set, size, pop, items, clear), (), (data_))
};

} // namespace fiber::shared
