// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_registry.hpp
/// Remote objects' constructors and methods by id, registered at static
/// initialization in every process of the binary (the trick of target.hpp),
/// so a manager process can construct and call what a handle names.

#include <fiber/detail/object_traits.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

template <class T>
constexpr std::uint64_t object_type_id() {
  return fnv1a(pretty_type_name<T>(), fnv1a("fiber-object-type"));
}

template <class T, class... W>
constexpr std::uint64_t ctor_id() {
  return fnv1a(pretty_type_name<void (*)(W...)>(), fnv1a(pretty_type_name<T>(), fnv1a("fiber-object-ctor")));
}

template <class T, auto M>
constexpr std::uint64_t method_id() {
  return fnv1a(pretty_type_name<decltype(M)>(),
               fnv1a(pretty_value_name<M>(), fnv1a(pretty_type_name<T>(), fnv1a("fiber-object-method"))));
}

using construct_fn = std::shared_ptr<void> (*)(reader& in);
using method_fn = void (*)(void* self, reader& in, writer& out);

struct ctor_entry {
  std::uint64_t type_id = 0;
  std::string_view name;
  construct_fn construct = nullptr;
  const std::type_info* type = nullptr; ///< tells apart equal names of types with internal linkage
};
struct method_entry {
  std::uint64_t type_id = 0;
  std::string_view name;
  method_fn invoke = nullptr;
  const std::type_info* type = nullptr;
};

/// Constructors and methods Remote objects may run, by id. Any thread.
class object_registry {
public:
  static object_registry& instance() {
    static object_registry r;
    return r;
  }
  /// Aborts (abort_name_clash) when `id` is held by another type's entry.
  void add_ctor(std::uint64_t id, const ctor_entry& e) {
    std::lock_guard lk(m_);
    auto [it, fresh] = ctors_.emplace(id, e);
    if (!fresh && *it->second.type != *e.type) abort_name_clash("fiber::RemoteManager<", e.name, ">::make", "");
  }
  void add_method(std::uint64_t id, const method_entry& e) {
    std::lock_guard lk(m_);
    auto [it, fresh] = methods_.emplace(id, e);
    if (!fresh && *it->second.type != *e.type) abort_name_clash("fiber::Remote<T>::call<&", e.name, ">", "");
  }
  std::optional<ctor_entry> find_ctor(std::uint64_t id) {
    std::lock_guard lk(m_);
    auto it = ctors_.find(id);
    if (it == ctors_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<method_entry> find_method(std::uint64_t id) {
    std::lock_guard lk(m_);
    auto it = methods_.find(id);
    if (it == methods_.end()) return std::nullopt;
    return it->second;
  }

private:
  std::mutex m_;
  std::unordered_map<std::uint64_t, ctor_entry> ctors_;
  std::unordered_map<std::uint64_t, method_entry> methods_;
};

inline void check_consumed(const reader& in, std::string_view what) {
  if (in.remaining() != 0)
    throw serialization_error("fiber: " + std::string(what) + ": " + std::to_string(in.remaining()) +
                              " unexpected bytes after the arguments");
}

template <class T, class... W>
std::shared_ptr<void> construct_object(reader& in) {
  std::tuple<W...> args{};
  std::apply([&](auto&... a) { (deserialize_from(in, a), ...); }, args);
  check_consumed(in, "RemoteManager::make");
  return std::apply([](auto&&... a) { return std::static_pointer_cast<void>(std::make_shared<T>(std::move(a)...)); },
                    std::move(args));
}

template <class T, auto M>
void invoke_method(void* self, reader& in, writer& out) {
  using tr = method_traits<decltype(M)>;
  typename tr::wire_params args{};
  std::apply([&](auto&... a) { (deserialize_from(in, a), ...); }, args);
  check_consumed(in, "Remote::call");
  T& obj = *static_cast<T*>(self);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    if constexpr (std::is_void_v<typename tr::result>) {
      (obj.*M)(std::forward<std::tuple_element_t<I, typename tr::params>>(std::get<I>(args))...);
    } else {
      decltype(auto) r = (obj.*M)(std::forward<std::tuple_element_t<I, typename tr::params>>(std::get<I>(args))...);
      const method_result_t<M>& v = r;
      out.write(v);
    }
  }
  (std::make_index_sequence<tr::arity>{});
}

template <class T, class... W>
bool register_ctor() {
  object_registry::instance().add_ctor(ctor_id<T, W...>(), {object_type_id<T>(), pretty_type_name<T>(),
                                                            &construct_object<T, W...>, &typeid(T)});
  return true;
}

template <class T, auto M>
bool register_method() {
  object_registry::instance().add_method(method_id<T, M>(), {object_type_id<T>(), pretty_value_name<M>(),
                                                             &invoke_method<T, M>, &typeid(T)});
  return true;
}

/// Naming one of these registers the constructor / method in every process
/// of the binary (dynamic initialization, before main).
template <class T, class... W>
inline const bool ctor_registered = register_ctor<T, W...>();
template <class T, auto M>
inline const bool method_registered = register_method<T, M>();

} // namespace fiber::detail
