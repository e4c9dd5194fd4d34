#pragma once
/// @file impl/manager.hpp
/// Internals of fiber::RemoteManager / fiber::Remote. Not a public header.
///
/// Three parts:
///  - compile-time identity and checks: method traits, the "is &T::m
///    described?" test, and the registry of constructors and methods, filled
///    at static-initialization time (variable templates instantiated by
///    RemoteManager::make<Args...> and Remote::call<&T::m>, the trick of
///    target.hpp), so every process of the binary knows them;
///  - the object host, in a manager process: a worker extension for
///    `frame_kind::object` frames; each object is an actor (a mailbox run by
///    at most one thread at a time) on an elastic thread pool;
///  - the manager core, in the process that created the RemoteManager: it
///    launches and supervises the manager processes (like pool_core) and is
///    also the relay service every Remote handle sends its calls to.
///
/// Wire. Handle → relay: runtime::request ops (`relay_op`), payload
/// `[u64 object][u64 method id][arguments]` for a call, `[u64 object]` for a
/// destroy. Relay → manager process: `frame_kind::object` + object_msg.
/// Manager process → relay: `frame_kind::object_reply` + reply_msg (status 0:
/// the result's bytes; 1: the method threw (type, message); 2: fiber::error).

#include <fiber/backend/launcher.hpp>
#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/supervisor.hpp>
#include <fiber/detail/worker.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#include <boost/describe/members.hpp>
#include <boost/describe/modifiers.hpp>
#include <boost/mp11/algorithm.hpp>

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace fiber::detail {

// ============================================================================
// Compile-time: method traits and checks
// ============================================================================

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
  using params = std::tuple<A...>;                    ///< as declared
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
struct method_traits<R (C::*)(A...) &> : method_traits_base<R, C, false, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) const&> : method_traits_base<R, C, true, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) & noexcept> : method_traits_base<R, C, false, A...> {};
template <class R, class C, class... A>
struct method_traits<R (C::*)(A...) const & noexcept> : method_traits_base<R, C, true, A...> {};

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
  requires method_traits<decltype(M)>::is_method
struct call_result<M> {
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
    static_assert(always_false_v<M>, "fiber::Remote<T>::call<&T::m>: m is a member function of another class, not of T");
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
using wire_arg_t = std::conditional_t<std::is_same_v<std::decay_t<A>, const char*> || std::is_same_v<std::decay_t<A>, char*>,
                                      std::string, std::remove_cvref_t<A>>;

template <class T, class... A>
constexpr bool check_make() {
  if constexpr (!(serializable<wire_arg_t<A>> && ...)) {
    static_assert(always_false<T>,
                  "fiber::RemoteManager<T>::make(args...): every argument must be serializable (they are copied "
                  "to the manager process)");
    return false;
  } else if constexpr (!std::is_constructible_v<T, wire_arg_t<A>&&...>) {
    static_assert(always_false<T>, "fiber::RemoteManager<T>::make(args...): T cannot be constructed from these arguments");
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

// ============================================================================
// Identity and registry (filled at static initialization, in every process)
// ============================================================================

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
};
struct method_entry {
  std::uint64_t type_id = 0;
  std::string_view name;
  method_fn invoke = nullptr;
};

/// Constructors and methods Remote objects may run, by id. Any thread.
class object_registry {
public:
  static object_registry& instance() {
    static object_registry r;
    return r;
  }
  void add_ctor(std::uint64_t id, const ctor_entry& e) {
    std::lock_guard lk(m_);
    ctors_.emplace(id, e);
  }
  void add_method(std::uint64_t id, const method_entry& e) {
    std::lock_guard lk(m_);
    methods_.emplace(id, e);
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
  }(std::make_index_sequence<tr::arity>{});
}

template <class T, class... W>
bool register_ctor() {
  object_registry::instance().add_ctor(ctor_id<T, W...>(),
                                       {object_type_id<T>(), pretty_type_name<T>(), &construct_object<T, W...>});
  return true;
}

template <class T, auto M>
bool register_method() {
  object_registry::instance().add_method(method_id<T, M>(),
                                         {object_type_id<T>(), pretty_value_name<M>(), &invoke_method<T, M>});
  return true;
}

/// Naming one of these registers the constructor / method in every process
/// of the binary (dynamic initialization, before main).
template <class T, class... W>
inline const bool ctor_registered = register_ctor<T, W...>();
template <class T, auto M>
inline const bool method_registered = register_method<T, M>();

// ============================================================================
// Messages
// ============================================================================

namespace object_op {
inline constexpr std::uint8_t make = 1, call = 2, destroy = 3, quit = 4;
} // namespace object_op

/// Relay service operations (runtime::request op codes).
namespace relay_op {
inline constexpr std::uint32_t call = 1, destroy = 2;
} // namespace relay_op

/// Master → manager process (`frame_kind::object`).
struct object_msg {
  std::uint8_t op = 0;
  std::uint64_t call_id = 0;   ///< 0: no reply wanted
  std::uint64_t object_id = 0;
  std::uint64_t fn_id = 0;     ///< ctor id (make) or method id (call)
  std::vector<std::byte> args;
};


// ============================================================================
// Manager process side: actors on an elastic thread pool
// ============================================================================

class actor;

/// Threads that run actors. A thread is added whenever an actor becomes
/// runnable and no thread is idle, so objects never wait for each other (a
/// method that blocks holds one thread, not the pool); threads idle for 30 s
/// retire. Used only in manager processes, which end with _Exit: threads
/// are detached.
class actor_pool {
public:
  static actor_pool& instance() {
    static auto* p = new actor_pool; // never destroyed: detached threads may still use it
    return *p;
  }

  void schedule(std::shared_ptr<actor> a) {
    std::unique_lock lk(m_);
    ready_.push_back(std::move(a));
    if (ready_.size() > idle_) {
      lk.unlock();
      std::thread([this] { run(); }).detach();
    } else {
      lk.unlock();
      cv_.notify_one();
    }
  }

private:
  void run();

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<actor>> ready_;
  std::size_t idle_ = 0;
};

/// A mailbox whose tasks run one at a time, in order, on pool threads.
class actor : public std::enable_shared_from_this<actor> {
public:
  void post(std::function<void()> f) {
    std::unique_lock lk(m_);
    box_.push_back(std::move(f));
    if (scheduled_) return;
    scheduled_ = true;
    lk.unlock();
    actor_pool::instance().schedule(shared_from_this());
  }

  /// Run a batch of tasks, then give the thread back (rescheduling if more wait).
  void run_some() {
    for (int n = 0; n < 64; ++n) {
      std::function<void()> f;
      {
        std::lock_guard lk(m_);
        if (box_.empty()) {
          scheduled_ = false;
          return;
        }
        f = std::move(box_.front());
        box_.pop_front();
      }
      try { // tasks answer their caller themselves; nothing may end this thread
        f();
      } catch (const std::exception& e) {
        log(log_level::error, "remote object task failed: ", e.what());
      } catch (...) {
        log(log_level::error, "remote object task failed with a non-standard exception");
      }
    }
    actor_pool::instance().schedule(shared_from_this()); // fairness: others' turn
  }

  /// No task waits behind the one running now.
  bool nothing_queued() {
    std::lock_guard lk(m_);
    return box_.empty();
  }

private:
  std::mutex m_;
  std::deque<std::function<void()>> box_;
  bool scheduled_ = false;
};

inline void actor_pool::run() {
  use_user_policy(); // started from the runtime thread; methods are user code
  std::unique_lock lk(m_);
  for (;;) {
    if (ready_.empty()) {
      ++idle_;
      bool got = cv_.wait_for(lk, std::chrono::seconds(30), [&] { return !ready_.empty(); });
      --idle_;
      if (!got) return;
    }
    auto a = std::move(ready_.front());
    ready_.pop_front();
    lk.unlock();
    a->run_some();
    a.reset();
    lk.lock();
  }
}

/// The objects of one manager process. Frames arrive on the runtime thread
/// (the object table is touched there only); constructors, methods and
/// destructors run on the object's actor, never on the runtime thread.
class object_host {
public:
  static object_host& instance() {
    static auto* h = new object_host; // never destroyed: actors may outlive static destruction
    return *h;
  }

  /// Runtime thread: one `frame_kind::object` frame from the master.
  void on_frame(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) {
    if (link_.link.lock() != master) link_ = reply_to{master, master->direct()};
    auto msg = deserialize<object_msg>(body);
    switch (msg.op) {
    case object_op::make: return make(std::move(msg));
    case object_op::call: return call(std::move(msg));
    case object_op::destroy: return destroy(msg.object_id);
    case object_op::quit: return quit();
    default: log(log_level::warning, "object host: unknown operation ", int(msg.op));
    }
  }

private:
  struct hosted {
    std::uint64_t type_id = 0;
    std::shared_ptr<void> obj; // touched by actor tasks only
    std::shared_ptr<actor> act = std::make_shared<actor>();
  };

  /// Where replies go: the master's link, and its direct writer.
  struct reply_to {
    std::weak_ptr<peer_link> link;
    direct_writer direct;
  };

  // Any thread: the frame is built here and sent from the runtime thread,
  // where replies that pile up leave together. `direct`: an actor thread
  // with no more calls queued writes it itself if the link has nothing
  // queued either (no hop to the runtime thread and back, as a Pool worker
  // sends its results) — never the runtime thread, which must not block on
  // a full socket.
  static void reply(const reply_to& to, std::uint64_t call_id, wire_status status, std::vector<std::byte> payload,
                    bool direct = false) {
    if (call_id == 0) return;
    auto f = frame(frame_kind::object_reply, reply_msg{call_id, status, std::move(payload)});
    auto& rt = runtime::instance();
    if (direct && !rt.on_runtime_thread() && to.direct.try_send(f)) return;
    asio::post(rt.executor(), [link = to.link, f = std::move(f)]() mutable {
      if (auto l = link.lock()) l->send(std::move(f));
    });
  }

  void make(object_msg msg) {
    auto e = object_registry::instance().find_ctor(msg.fn_id);
    if (!e)
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::RemoteManager::make: constructor not registered in the manager process"));
    if (objects_.count(msg.object_id))
      return reply(link_, msg.call_id, wire_status::error, failure_payload("fiber::RemoteManager::make: duplicate object id"));
    auto h = std::make_shared<hosted>();
    h->type_id = e->type_id;
    objects_[msg.object_id] = h;
    ++live_;
    h->act->post([this, h, e = *e, link = link_, msg = std::move(msg)] {
      try {
        reader in(msg.args);
        h->obj = e.construct(in);
        reply(link, msg.call_id, wire_status::ok, {});
      } catch (...) {
        reply(link, msg.call_id, wire_status::remote_error, current_exception_payload());
        // The master forgets the object; so do we.
        asio::post(runtime::instance().executor(), [this, id = msg.object_id, h] {
          if (auto it = objects_.find(id); it != objects_.end() && it->second == h) objects_.erase(it);
        });
        release();
      }
    });
  }

  void call(object_msg msg) {
    auto it = objects_.find(msg.object_id);
    if (it == objects_.end())
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::Remote: object " + std::to_string(msg.object_id) +
                                " does not exist in its manager process"));
    auto h = it->second;
    auto m = object_registry::instance().find_method(msg.fn_id);
    if (!m || m->type_id != h->type_id)
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::Remote: method not registered for this object's type "
                                "(a handle deserialized as Remote of another type?)"));
    h->act->post([h, m = *m, link = link_, msg = std::move(msg)] {
      if (!h->obj)
        return reply(link, msg.call_id, wire_status::error, failure_payload("fiber::Remote: the object was destroyed"));
      writer out;
      try {
        reader in(msg.args);
        m.invoke(h->obj.get(), in, out);
      } catch (...) {
        return reply(link, msg.call_id, wire_status::remote_error, current_exception_payload());
      }
      reply(link, msg.call_id, wire_status::ok, out.release(), h->act->nothing_queued());
    });
  }

  void destroy(std::uint64_t id) {
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    auto h = std::move(it->second);
    objects_.erase(it);
    h->act->post([this, h] {
      bool had = h->obj != nullptr;
      h->obj.reset(); // T's destructor, on the actor
      if (had) release();
    });
  }

  // The manager is shutting down: destroy every object (after the calls
  // already queued on it), then exit.
  void quit() {
    quitting_ = true;
    auto objs = std::move(objects_);
    objects_.clear();
    for (auto& kv : objs)
      kv.second->act->post([this, h = kv.second] {
        bool had = h->obj != nullptr;
        h->obj.reset();
        if (had) release();
      });
    if (live_ == 0) exit_once();
  }

  void release() {
    if (--live_ == 0 && quitting_) exit_once();
  }

  void exit_once() {
    if (!exiting_.exchange(true)) worker_exit(0);
  }

  reply_to link_;                                                    // runtime thread
  std::unordered_map<std::uint64_t, std::shared_ptr<hosted>> objects_; // runtime thread
  std::atomic<std::size_t> live_{0};  // objects constructed or being constructed, not yet destroyed
  std::atomic<bool> quitting_{false}, exiting_{false};
};

inline void object_frame(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) {
  object_host::instance().on_frame(master, body);
}

/// Every binary that includes this header can be a manager process.
inline const bool object_host_registered = add_worker_extension(frame_kind::object, &object_frame);

// ============================================================================
// Master side: the manager core (supervisor + relay service)
// ============================================================================

struct manager_settings {
  std::string name;
  unsigned processes = 1;
  fiber::resources res;
  std::chrono::milliseconds shutdown_grace{5000};
};

/// Launches and supervises the manager processes and relays calls to them.
/// Runtime thread only. A manager process that dies (link lost, heartbeat
/// missed, job ended) fails the calls waiting on it and every later call on
/// its objects with worker_lost; a replacement process is started so that
/// later make() calls still have `processes` processes to spread over.
class manager_core : public service, public std::enable_shared_from_this<manager_core> {
public:
  using make_done = std::function<void(std::exception_ptr, std::uint64_t object_id)>;

  manager_core(manager_settings s, std::shared_ptr<backend::launcher> l) : s_(std::move(s)), launcher_(std::move(l)) {}

  /// Launch the processes; throws backend_error.
  void start() {
    std::weak_ptr<manager_core> weak = shared_from_this();
    sup_ = std::make_shared<supervisor>(
        launcher_, "fiber::RemoteManager " + s_.name, "manager processes",
        supervisor::events{[weak](std::uint64_t id, std::shared_ptr<peer_link> l) {
                             if (auto s = weak.lock()) s->on_connect(id, std::move(l));
                             else l->send(frame(frame_kind::shutdown));
                           },
                           [weak](std::uint64_t id, const backend::job_exit& ex) {
                             if (auto s = weak.lock()) s->on_exit(id, ex);
                           },
                           [weak](std::uint64_t, const std::string& reason) {
                             if (auto s = weak.lock())
                               s->fail_fatal(std::make_exception_ptr(handshake_error(reason)), reason);
                           }});
    grow();
  }

  /// Construct an object (ctor `ctor`, serialized `args`) in the process
  /// holding the fewest objects; `done` gets its id or the error.
  void make(std::uint64_t ctor, std::vector<std::byte> args, make_done done) {
    if (shut_) return done(std::make_exception_ptr(error("fiber::RemoteManager " + s_.name + ": shut down")), 0);
    if (fatal_) return done(fatal_, 0);
    proc* best = nullptr;
    std::uint64_t best_id = 0;
    for (auto& [wid, p] : procs_) {
      if (p.dead) continue;
      if (!best || p.objects < best->objects) {
        best = &p;
        best_id = wid;
      }
    }
    if (!best)
      return done(std::make_exception_ptr(worker_lost("fiber::RemoteManager " + s_.name + ": no manager process is running")), 0);
    auto obj = next_object_++;
    auto cid = next_call_++;
    objects_[obj] = object_rec{best_id, false, {}};
    ++best->objects;
    object_msg m{object_op::make, cid, obj, ctor, std::move(args)};
    auto f = frame(frame_kind::object, m);
    makes_[cid] = make_rec{std::move(done), best_id, std::move(m)};
    send(*best, std::move(f));
  }

  void handle(std::uint64_t /*peer*/, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    auto obj = r.read<std::uint64_t>();
    if (op == relay_op::destroy) {
      destroy(obj);
      return reply(wire_status::ok, {});
    }
    if (op != relay_op::call)
      return reply(wire_status::error, failure_payload("fiber::Remote: unknown operation " + std::to_string(op)));
    auto fn = r.read<std::uint64_t>();
    auto it = objects_.find(obj);
    if (it == objects_.end())
      return reply(wire_status::error,
                   failure_payload("fiber::Remote: object " + std::to_string(obj) + " of RemoteManager " + s_.name +
                                " does not exist (its last owning handle was destroyed, or the manager shut down)"));
    if (it->second.lost) return reply(wire_status::worker_lost, failure_payload(it->second.why));
    auto pit = procs_.find(it->second.proc);
    if (pit == procs_.end()) return reply(wire_status::worker_lost, failure_payload("fiber::Remote: manager process gone"));
    auto cid = next_call_++;
    auto rest = r.read_span(r.remaining());
    calls_[cid] = call_rec{std::move(reply), it->second.proc};
    send(pit->second, frame(frame_kind::object, object_msg{object_op::call, cid, obj, fn, {rest.begin(), rest.end()}}));
  }

  /// Stop every manager process: objects are destroyed there (their
  /// destructors run), then the processes exit; after `shutdown_grace` the
  /// rest are killed. Waiting calls fail with fiber::error. `done` runs when
  /// every job has ended.
  void shutdown(std::function<void()> done) {
    on_all_exited_ = std::move(done);
    if (!shut_) {
      shut_ = true;
      sup_->close();
      auto why = "fiber::RemoteManager " + s_.name + ": shut down";
      objects_.clear();
      for (auto& [cid, c] : std::exchange(calls_, {})) c.reply(wire_status::error, failure_payload(why));
      for (auto& [cid, m] : std::exchange(makes_, {})) m.done(std::make_exception_ptr(error(why)), 0);
      for (auto& [wid, p] : procs_) {
        if (p.link && !p.dead) p.link->send(frame(frame_kind::object, object_msg{object_op::quit, 0, 0, 0, {}}));
        else sup_->cancel(wid, 9);
      }
      grace_ = std::make_unique<asio::steady_timer>(runtime::instance().executor(), s_.shutdown_grace);
      grace_->async_wait([weak = weak_from_this()](std::error_code ec) {
        auto s = weak.lock();
        if (ec || !s) return;
        for (auto& [wid, p] : s->procs_) {
          log(log_level::warning, p.name, ": did not exit within the shutdown grace period; killing it");
          s->sup_->cancel(wid, 9);
        }
      });
    }
    maybe_finish();
  }

  std::vector<std::int64_t> pids() const {
    std::vector<std::int64_t> out;
    for (auto& [wid, p] : procs_)
      if (p.link && !p.dead) out.push_back(sup_->pid(wid, p.link.get()));
    return out;
  }

  std::size_t object_count() const { return objects_.size(); }

private:
  struct proc {
    std::string name;
    std::shared_ptr<peer_link> link;
    std::vector<std::vector<std::byte>> queued; // frames sent before it connected
    std::size_t objects = 0;
    bool dead = false;     // lost: takes no new objects
    bool exited = false;   // its job ended
  };
  struct object_rec {
    std::uint64_t proc = 0;
    bool lost = false;
    std::string why;
  };
  struct call_rec {
    reply_fn reply;
    std::uint64_t proc = 0;
  };
  struct make_rec {
    make_done done;
    std::uint64_t proc = 0;
    object_msg msg;
  };

  void send(proc& p, std::vector<std::byte> f) {
    if (p.link) p.link->send(std::move(f));
    else p.queued.push_back(std::move(f));
  }

  void grow() {
    unsigned active = 0;
    for (auto& [wid, p] : procs_) active += p.dead ? 0 : 1;
    if (active >= s_.processes || shut_ || fatal_) return;
    std::vector<std::string> names;
    for (unsigned i = active; i < s_.processes; ++i) names.push_back(s_.name + "-m" + std::to_string(next_index_++));
    auto ids = sup_->launch(names, s_.res);
    for (std::size_t i = 0; i < ids.size(); ++i) procs_[ids[i]].name = names[i];
  }

  void on_connect(std::uint64_t wid, std::shared_ptr<peer_link> l) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return l->send(frame(frame_kind::shutdown));
    auto& p = it->second;
    p.link = l;
    std::weak_ptr<manager_core> weak = shared_from_this();
    l->start(
        [weak, wid](frame_kind k, std::span<const std::byte> body, message&) {
          if (auto s = weak.lock(); s && k == frame_kind::object_reply) s->on_reply(body);
        },
        [weak, wid](const std::string& reason) {
          if (auto s = weak.lock()) s->on_link_lost(wid, reason);
        });
    if (shut_) {
      l->send(frame(frame_kind::object, object_msg{object_op::quit, 0, 0, 0, {}}));
      return;
    }
    for (auto& f : p.queued) l->send(std::move(f));
    p.queued.clear();
  }

  void on_reply(std::span<const std::byte> body) {
    auto r = deserialize<reply_msg>(body);
    if (auto it = calls_.find(r.request_id); it != calls_.end()) {
      auto c = std::move(it->second);
      calls_.erase(it);
      return c.reply(r.status, std::move(r.payload));
    }
    if (auto it = makes_.find(r.request_id); it != makes_.end()) {
      auto m = std::move(it->second);
      makes_.erase(it);
      if (r.status == wire_status::ok) return m.done(nullptr, m.msg.object_id);
      forget_object(m.msg.object_id);
      m.done(failure_of(r.status, r.payload), 0);
    }
  }

  void forget_object(std::uint64_t obj) {
    auto it = objects_.find(obj);
    if (it == objects_.end()) return;
    if (auto p = procs_.find(it->second.proc); p != procs_.end() && !it->second.lost && p->second.objects > 0)
      --p->second.objects;
    objects_.erase(it);
  }

  void destroy(std::uint64_t obj) {
    auto it = objects_.find(obj);
    if (it == objects_.end()) return;
    auto wid = it->second.proc;
    bool lost = it->second.lost;
    forget_object(obj);
    if (lost) return;
    if (auto p = procs_.find(wid); p != procs_.end() && !p->second.dead)
      send(p->second, frame(frame_kind::object, object_msg{object_op::destroy, 0, obj, 0, {}}));
  }

  void on_link_lost(std::uint64_t wid, const std::string& reason) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return;
    if (!it->second.exited) {
      if (!shut_) log(log_level::warning, it->second.name, ": ", reason, "; its objects are lost");
      sup_->cancel(wid, 9); // a hung process must not come back
    }
    lose(wid, reason);
    replace();
  }

  // Start replacements for lost processes now (not when their exit is
  // reported), so that make() always finds a process to queue on.
  void replace() {
    if (shut_ || fatal_) return;
    try {
      grow();
    } catch (const std::exception& e) {
      fail_fatal(std::current_exception(), e.what());
    }
  }

  void on_exit(std::uint64_t wid, const backend::job_exit& ex) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return;
    auto& p = it->second;
    p.exited = true;
    bool never_connected = !p.link;
    if (p.link) p.link->close("job ended");
    lose(wid, "exited with code " + std::to_string(ex.exitcode()));
    // Objects made on a process that never connected were never constructed:
    // make them again elsewhere.
    std::vector<make_rec> redo;
    if (never_connected)
      for (auto m = makes_.begin(); m != makes_.end();) {
        if (m->second.proc == wid) {
          forget_object(m->second.msg.object_id);
          redo.push_back(std::move(m->second));
          m = makes_.erase(m);
        } else {
          ++m;
        }
      }
    procs_.erase(wid);
    if (!shut_ && sup_->start_budget_exhausted(s_.processes))
      fail_fatal(sup_->start_failure(), "manager processes keep failing to start");
    replace();
    for (auto& m : redo) make(m.msg.fn_id, std::move(m.msg.args), std::move(m.done));
    maybe_finish();
  }

  // A process is gone (or going): what waits on it fails, its objects are lost.
  void lose(std::uint64_t wid, const std::string& reason) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return;
    auto& p = it->second;
    bool connected = p.link != nullptr;
    if (p.dead) return;
    p.dead = true;
    if (!connected) return; // makes queued on it are redone by on_exit
    auto pid = sup_->pid(wid, p.link.get());
    auto why = "fiber::RemoteManager " + s_.name + ": manager process " + p.name + " (pid " + std::to_string(pid) +
               ") was lost (" + reason + "); the objects it held are gone";
    for (auto c = calls_.begin(); c != calls_.end();) {
      if (c->second.proc == wid) {
        auto rec = std::move(c->second);
        c = calls_.erase(c);
        rec.reply(wire_status::worker_lost, failure_payload(why));
      } else {
        ++c;
      }
    }
    for (auto m = makes_.begin(); m != makes_.end();) {
      if (m->second.proc == wid) {
        auto rec = std::move(m->second);
        m = makes_.erase(m);
        objects_.erase(rec.msg.object_id);
        rec.done(std::make_exception_ptr(worker_lost(why)), 0);
      } else {
        ++m;
      }
    }
    for (auto& [id, o] : objects_)
      if (o.proc == wid && !o.lost) {
        o.lost = true;
        o.why = why;
      }
  }

  void fail_fatal(std::exception_ptr e, const std::string& why) {
    if (fatal_) return;
    fatal_ = e;
    log(log_level::error, "fiber::RemoteManager ", s_.name, ": ", why);
    for (auto m = makes_.begin(); m != makes_.end();) {
      auto wid = m->second.proc;
      auto p = procs_.find(wid);
      if (p == procs_.end() || !p->second.link) { // not constructed: cannot be redone now
        auto rec = std::move(m->second);
        m = makes_.erase(m);
        forget_object(rec.msg.object_id);
        rec.done(e, 0);
      } else {
        ++m;
      }
    }
    for (auto& [wid, p] : procs_)
      if (!p.link) sup_->cancel(wid, 9);
  }

  void maybe_finish() {
    if (shut_ && procs_.empty() && on_all_exited_) {
      grace_.reset();
      std::exchange(on_all_exited_, nullptr)();
    }
  }

  manager_settings s_;
  std::shared_ptr<backend::launcher> launcher_;
  std::shared_ptr<supervisor> sup_;
  std::map<std::uint64_t, proc> procs_; // worker id → process, in launch order
  std::unordered_map<std::uint64_t, object_rec> objects_;
  std::unordered_map<std::uint64_t, call_rec> calls_;
  std::unordered_map<std::uint64_t, make_rec> makes_;
  std::uint64_t next_object_ = 1, next_call_ = 1;
  unsigned next_index_ = 1;
  std::exception_ptr fatal_;
  bool shut_ = false;
  std::unique_ptr<asio::steady_timer> grace_;
  std::function<void()> on_all_exited_;
};

// ============================================================================
// Handle side
// ============================================================================

/// Names one object: the relay's process URL, the relay's service id, the object id.
struct remote_ref {
  std::string url;
  std::uint64_t service = 0;
  std::uint64_t object = 0;
};

/// Owns an object on behalf of the process that made it: the last owning
/// handle gone, the object is destroyed.
struct object_owner {
  explicit object_owner(remote_ref r) : ref(std::move(r)) {}
  object_owner(const object_owner&) = delete;
  object_owner& operator=(const object_owner&) = delete;
  ~object_owner();
  remote_ref ref;
};

/// Objects made by this process, so that a handle that comes back here
/// (deserialized) owns the object too. Any thread.
class local_objects {
public:
  static local_objects& instance() {
    static local_objects o;
    return o;
  }
  void add(const std::shared_ptr<object_owner>& o) {
    std::lock_guard lk(m_);
    map_[{o->ref.service, o->ref.object}] = {o->ref.url, o};
  }
  std::shared_ptr<object_owner> find(const remote_ref& r) {
    std::lock_guard lk(m_);
    auto it = map_.find({r.service, r.object});
    if (it == map_.end() || it->second.first != r.url) return nullptr;
    return it->second.second.lock();
  }
  void erase_expired(const remote_ref& r) {
    std::lock_guard lk(m_);
    if (auto it = map_.find({r.service, r.object}); it != map_.end() && it->second.second.expired()) map_.erase(it);
  }

private:
  std::mutex m_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<std::string, std::weak_ptr<object_owner>>> map_;
};

inline object_owner::~object_owner() {
  local_objects::instance().erase_expired(ref);
  writer w;
  w.write(ref.object);
  runtime::instance().request(ref.url, ref.service, relay_op::destroy, w.release(), [](std::exception_ptr, auto) {});
}

/// What every copy of one Remote handle shares.
struct remote_state {
  remote_ref ref;
  std::shared_ptr<object_owner> owner; // set in the process that made the object
};

/// An error as plain data. Results cross from fiber's runtime thread to the
/// caller's as this, and the caller throws a fresh exception built from it:
/// an exception object is then never shared between threads (its reference
/// count lives in uninstrumented libstdc++, so ThreadSanitizer could not see
/// the hand-over, and no thread may drop the last reference to an exception
/// another is reading).
struct error_info {
  enum class kind : std::uint8_t { none, remote, worker_lost, eof, serialization, timeout, backend, handshake, other };
  kind k = kind::none;
  std::string type;    ///< remote: the remote exception's type name
  std::string message; ///< remote: its what(); otherwise what()

  explicit operator bool() const noexcept { return k != kind::none; }

  static error_info from(std::exception_ptr e) {
    error_info i;
    if (!e) return i;
    try {
      std::rethrow_exception(e);
    } catch (const remote_error& x) {
      i = {kind::remote, x.type_name(), x.message()};
    } catch (const worker_lost& x) {
      i = {kind::worker_lost, {}, x.what()};
    } catch (const eof_error& x) {
      i = {kind::eof, {}, x.what()};
    } catch (const serialization_error& x) {
      i = {kind::serialization, {}, x.what()};
    } catch (const timeout_error& x) {
      i = {kind::timeout, {}, x.what()};
    } catch (const backend_error& x) {
      i = {kind::backend, {}, x.what()};
    } catch (const handshake_error& x) {
      i = {kind::handshake, {}, x.what()};
    } catch (const std::exception& x) {
      i = {kind::other, {}, x.what()};
    } catch (...) {
      i = {kind::other, {}, "fiber: unknown exception"};
    }
    return i;
  }

  [[noreturn]] void raise() const {
    switch (k) {
    case kind::remote: throw remote_error(type, message);
    case kind::worker_lost: throw worker_lost(message);
    case kind::eof: throw eof_error(message);
    case kind::serialization: throw serialization_error(message);
    case kind::timeout: throw timeout_error(message);
    case kind::backend: throw backend_error(message);
    case kind::handshake: throw handshake_error(message);
    default: throw error(message);
    }
  }

  /// A new exception_ptr (nullptr for none), made on the calling thread.
  std::exception_ptr make() const {
    if (k == kind::none) return nullptr;
    try {
      raise();
    } catch (...) {
      return std::current_exception();
    }
  }
};

/// Result of one call_async, filled on the runtime thread.
struct remote_call_state {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  error_info error;
  std::vector<std::byte> bytes;
};

/// Decode a method's result (std::monostate for void).
template <class R>
R decode_result(std::span<const std::byte> bytes) {
  if constexpr (std::is_void_v<R>) {
    if (!bytes.empty()) throw serialization_error("fiber::Remote: unexpected bytes in a void result");
  } else {
    return fiber::deserialize<R>(bytes);
  }
}

/// Send one call; `done` runs on the runtime thread.
inline void send_call(const remote_ref& r, std::vector<std::byte> payload, request_done done) {
  runtime::instance().request(r.url, r.service, relay_op::call, std::move(payload), std::move(done));
}

inline int next_manager_number() {
  static std::atomic<int> n{1};
  return n++;
}

} // namespace fiber::detail
