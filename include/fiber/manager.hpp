// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file manager.hpp
/// Remote objects — Fiber's Manager / AsyncManager as typed actors.
///
/// ```cpp
/// struct Env { Obs reset(std::uint64_t seed); Step step(Action a); };
/// BOOST_DESCRIBE_STRUCT(Env, (), (reset, step))
///
/// fiber::RemoteManager<Env> manager{{.processes = 4}};
/// fiber::Remote<Env> env = manager.make(ctor_args...);   // lives in a manager process
/// Obs o = env.call<&Env::reset>(7);                      // blocking
/// Step s = co_await env.async_call<&Env::step>(a, asio::use_awaitable);
/// auto h = env.call_async<&Env::step>(a);  Step t = h.get();
/// ```
///
/// **Where objects live.** In job-backed manager processes (this executable,
/// started again by the backend, like Pool workers), spread evenly: make()
/// picks the process holding the fewest objects. An object id (64 bits,
/// never a pointer) names it on the wire.
///
/// **Threads and order (actor semantics).** In its manager process each
/// object has a mailbox: its constructor, methods and destructor run one at a
/// time, in the order the messages arrived, on a pool thread (never on
/// fiber's runtime thread). Calls made by one thread of one process reach the
/// object in the order that thread made them; calls from different callers
/// interleave in arrival order. Different objects run concurrently: a thread
/// is added whenever an object has work and no thread is idle, so a method
/// that blocks delays only its own object. A method calling back into its
/// own object through a Remote handle deadlocks (as any actor would).
///
/// **Ownership.** Handles are cheap copies naming one object. In the process
/// that called make() ("the owner"), the object lives while a handle exists
/// there; the last one destroyed, the object is destroyed in its manager
/// process (after the calls already sent). Handles in other processes
/// (serialized into a Pool task or a Process) do not keep it alive: a call
/// made after the owner dropped it fails with fiber::error. A handle
/// deserialized back in the owner process owns again.
///
/// **The relay.** Every call goes through a service in the process that
/// created the RemoteManager, which forwards it to the manager process and
/// the reply back (the manager processes talk to that process only). As with
/// Queue's broker, that process must outlive every handle in use elsewhere;
/// if it exits, calls elsewhere fail with fiber::worker_lost.
///
/// **Failures.** A method (or constructor) that throws reaches the caller as
/// fiber::remote_error (type name and message); the object survives and
/// keeps its state. A manager process that dies (killed, crashed, job lost,
/// heartbeat missed) fails the calls waiting on it and every later call on
/// its objects with fiber::worker_lost — objects are never silently
/// recreated. A replacement process is started, so make() keeps working
/// (up to 2 × processes consecutive start failures, then backend_error).
/// Destroying the RemoteManager destroys every object (destructors run in the
/// manager processes, after the calls already queued on them, killed after
/// `shutdown_grace`) and stops its processes; calls on remaining handles
/// then fail with fiber::error.

#include <fiber/backend/from_env.hpp>
#include <fiber/detail/take_once.hpp>
#include <fiber/detail/async_op.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/manager_relay.hpp>
#include <fiber/detail/object_host.hpp>
#include <fiber/detail/object_registry.hpp>
#include <fiber/detail/object_traits.hpp>
#include <fiber/detail/remote_ref.hpp>
#include <fiber/detail/wire_status.hpp>
#include <fiber/init.hpp>
#include <fiber/shared.hpp>

#include <boost/describe/class.hpp>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/dispatch.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fiber {

/// RemoteManager options (an aggregate: use designated initializers).
struct manager_options {
  unsigned processes = 1; ///< manager processes; 0 = fiber::cpu_count()
  /// At most this many of a process's objects run a method (or constructor,
  /// or destructor) at once; the others' calls wait, in arrival order. 0
  /// (the default): no limit, so objects never wait for each other. For
  /// objects that compute (simulators), the cores a process has: one
  /// thread a core, as EnvPool runs its environments. With 1, the
  /// process's main thread reads the calls and runs them itself.
  unsigned threads = 0;
  fiber::resources resources{}; ///< per process, asked of the backend
  std::string name{};           ///< prefix of process names; default "manager-N"
  /// How long shutdown waits for objects' pending calls and destructors
  /// before killing the manager processes.
  std::chrono::milliseconds shutdown_grace{5000};
};

/// Handle of one call_async: like multiprocessing's AsyncResult.
/// Copyable; thread-safe.
template <class R>
class remote_result {
public:
  /// Wait and return the result (void for a void method). Rethrows
  /// fiber::remote_error (the method threw), fiber::worker_lost (its
  /// manager process died), fiber::error (the object or manager is gone).
  /// May be called again (decodes again).
  R get() const {
    wait();
    return take();
  }
  /// As get(), but throws fiber::timeout_error if not ready within `timeout`
  /// (the call itself goes on).
  template <class Rep, class Period>
  R get(std::chrono::duration<Rep, Period> timeout) const {
    if (!wait(timeout)) throw timeout_error("fiber::remote_result::get: not ready within the timeout");
    return take();
  }
  /// True once the call has finished (returned, thrown or failed); never blocks.
  bool ready() const { return st_->ready(); }
  /// Waits until ready(). Throws std::logic_error on fiber's runtime thread
  /// (in a completion handler): use Remote::async_call there.
  void wait() const {
    check_thread();
    st_->wait();
  }
  /// Waits at most `timeout`; true if ready. Throws as wait().
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) const {
    check_thread();
    return st_->wait_for(timeout);
  }
  /// True once ready and the method returned normally; std::logic_error before.
  bool successful() const {
    if (!st_->ready()) throw std::logic_error("fiber::remote_result::successful: not ready");
    return st_->get().first == detail::wire_status::ok;
  }

private:
  template <class>
  friend class Remote;
  // ok and the result's bytes, or a failure in its wire form: each read
  // raises a fresh exception on the reading thread, so that no exception
  // object is shared between threads (docs/ARCHITECTURE.md).
  using state = detail::blocking_result<std::pair<detail::wire_status, std::vector<std::byte>>>;
  explicit remote_result(std::shared_ptr<state> st) : st_(std::move(st)) {}

  static void check_thread() {
    if (detail::runtime::instance().on_runtime_thread())
      throw std::logic_error("fiber::remote_result: blocking wait on fiber's runtime thread (e.g. in a completion "
                             "handler); use async_call there");
  }

  R take() const {
    auto [status, bytes] = st_->get();
    if (status != detail::wire_status::ok) std::rethrow_exception(detail::failure_of(status, bytes));
    return detail::decode_result<R>(bytes);
  }

  std::shared_ptr<state> st_;
};

/// A handle naming an object of type T that lives in a manager process.
///
/// Copyable (copies name the same object), serializable (pass it to a Pool
/// task or a Process: it calls the same object from there), default
/// constructible (an empty handle: calls throw std::logic_error). Any member
/// function may be called from any thread concurrently. See the file comment
/// for ownership and ordering.
template <class T>
class Remote {
  static_assert(detail::check_object_type<T>());

public:
  using element_type = T; ///< the remote object's type

  Remote() = default;

  /// Calls `m(args...)` on the object and waits for its result (void for a
  /// void method). `&T::m` must be a public member function listed in T's
  /// BOOST_DESCRIBE_STRUCT/CLASS; const methods work; arguments are checked
  /// at compile time and copied now. Throws remote_error, worker_lost,
  /// fiber::error (object or manager gone), std::logic_error (empty handle,
  /// or called on fiber's runtime thread).
  template <auto M, class... A>
  detail::call_result_t<M> call(A&&... args) const {
    if constexpr (detail::check_call<T, M, A...>()) {
      remote_result<detail::call_result_t<M>>::check_thread(); // before anything is sent
      return call_async<M>(std::forward<A>(args)...).get();
    } else {
      std::terminate(); // unreachable: check_call has failed to compile
    }
  }

  /// Sends the call and returns at once with a handle (get(), get(timeout),
  /// ready(), wait()): Fiber's AsyncManager.
  template <auto M, class... A>
  remote_result<detail::call_result_t<M>> call_async(A&&... args) const {
    if constexpr (detail::check_call<T, M, A...>()) {
      using result_type = remote_result<detail::call_result_t<M>>;
      auto st = std::make_shared<typename result_type::state>();
      detail::send_call(state(), payload<M>(std::forward<A>(args)...),
                        [st](std::exception_ptr e, std::vector<std::byte> bytes) {
                          if (!e) return st->set_value({detail::wire_status::ok, std::move(bytes)});
                          std::pair<detail::wire_status, std::vector<std::byte>> failure;
                          try {
                            std::rethrow_exception(e);
                          } catch (...) {
                            failure = detail::current_failure();
                          }
                          st->set_value(std::move(failure));
                        });
      return result_type(st);
    } else {
      std::terminate(); // unreachable: check_call has failed to compile
    }
  }

  /// Calls `m(args...)` asynchronously; the last argument is an Asio
  /// completion token (asio::use_awaitable, asio::use_future, a callback,
  /// asio::experimental::deferred, ...). Completion signature
  /// `void(std::exception_ptr, R)`, or `void(std::exception_ptr)` for a void
  /// method; the handler runs on its associated executor (default: fiber's
  /// runtime executor — keep such handlers short and non-blocking).
  /// Arguments are copied at initiation. The completion is posted from
  /// fiber's runtime thread — or, for a call made on a thread running the
  /// io_context the handler's executor belongs to, to an object whose
  /// manager process has a reply line, run there as its reply is read (see
  /// has_reply_line) — so the handler's execution context (e.g. your
  /// io_context) must outlive the operation — and, as a rule, this process's
  /// RemoteManager/handles, as in any Asio program. Cancellation is not
  /// supported: a call, once sent, runs.
  template <auto M, class... A>
  auto async_call(A&&... args_and_token) const {
    static_assert(sizeof...(A) >= 1,
                  "fiber::Remote<T>::async_call<&T::m>(args..., token): the last argument must be a completion token "
                  "(e.g. asio::use_awaitable)");
    if constexpr (sizeof...(A) >= 1) {
      using R = detail::call_result_t<M>;
      using signature = typename detail::completion_signature<R>::type;
      using token_type = std::tuple_element_t<sizeof...(A) - 1, std::tuple<A...>>;
      if constexpr (!asio::completion_token_for<token_type, signature>) {
        static_assert(detail::always_false<token_type>,
                      "fiber::Remote<T>::async_call<&T::m>(args..., token): the last argument must be an Asio "
                      "completion token (e.g. asio::use_awaitable, asio::use_future, a callback)");
        return;
      } else {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
          auto tup = std::forward_as_tuple(std::forward<A>(args_and_token)...);
          auto&& token = std::get<sizeof...(A) - 1>(tup);
          if constexpr (detail::check_call<T, M, std::tuple_element_t<I, std::tuple<A...>>...>()) {
            auto bytes = payload<M>(std::get<I>(std::move(tup))...);
            return asio::async_initiate<decltype(token), signature>(initiation<R>{}, token, st_, std::move(bytes));
          } else { // check_call has failed to compile; keep the caller's code well-typed
            return asio::async_initiate<decltype(token), signature>([](auto&&...) {}, token);
          }
        }
        (std::make_index_sequence<sizeof...(A) - 1>{});
      }
    }
  }

  /// True unless default-constructed (or moved from).
  explicit operator bool() const noexcept { return st_ != nullptr; }
  /// True if an async_call made on a thread that runs its handler's
  /// io_context is answered there, as the reply is read (this process made
  /// the object, and its manager process has a reply line: a socketpair
  /// inherited at launch on this machine, or a second connection it dialled
  /// over tcp:// or tls+tcp://, authenticated as its link); false if replies
  /// are posted from fiber's runtime thread (an empty handle, a process
  /// behind a host relay or whose line is not connected yet, a copy in
  /// another process, a process that was lost). Decides whether binding a handler
  /// to your executor saves a thread wake or costs one. Any thread.
  /// Example: `if (env.has_reply_line()) env.async_call<&Env::step>(a, asio::bind_executor(ex, h));`
  bool has_reply_line() const { return st_ && detail::has_reply_line(*st_); }
  /// The object's id (unique within its RemoteManager); 0 for an empty handle.
  std::uint64_t id() const noexcept { return st_ ? st_->ref.object : 0; }

  /// True if both name the same object.
  friend bool operator==(const Remote& a, const Remote& b) {
    if (a.st_ == b.st_) return true;
    if (!a.st_ || !b.st_) return false;
    return a.st_->ref.object == b.st_->ref.object && a.st_->ref.service == b.st_->ref.service &&
           a.st_->ref.url == b.st_->ref.url;
  }

  /// Serialization hook: relay URL, relay service id, object id, and T's
  /// type id (a handle deserialized as Remote of another type is refused
  /// with serialization_error).
  friend void fiber_serialize(writer& w, const Remote& r) {
    static const detail::remote_ref empty;
    const auto& ref = r.st_ ? r.st_->ref : empty;
    w.write(ref.url);
    w.write(ref.service);
    w.write(ref.object);
    w.write(detail::object_type_id<T>());
  }
  /// Deserialization hook: reads what fiber_serialize wrote. Throws
  /// serialization_error if the bytes name an object of another type.
  friend void fiber_deserialize(reader& in, Remote& r) {
    detail::remote_ref ref;
    ref.url = in.read<std::string>();
    ref.service = in.read<std::uint64_t>();
    ref.object = in.read<std::uint64_t>();
    auto type = in.read<std::uint64_t>();
    if (type != detail::object_type_id<T>())
      throw serialization_error("fiber::Remote<" + std::string(detail::pretty_type_name<T>()) +
                                ">: the bytes name a remote object of another type");
    if (ref.object == 0) {
      r.st_.reset();
      return;
    }
    auto owner = detail::local_objects::instance().find(ref);
    r.st_ = std::make_shared<const detail::remote_state>(detail::remote_state{std::move(ref), std::move(owner)});
  }

private:
  template <class, backend::policy>
  friend class RemoteManager;

  explicit Remote(std::shared_ptr<const detail::remote_state> st) : st_(std::move(st)) {}

  const detail::remote_state& state() const {
    if (!st_) throw std::logic_error("fiber::Remote: empty handle (default-constructed or moved from)");
    return *st_;
  }
  const detail::remote_ref& ref() const { return state().ref; }

  template <auto M, class... A>
  std::vector<std::byte> payload(A&&... args) const {
    (void)detail::method_registered<T, M>; // registers the method in every process
    using params = typename detail::method_traits<decltype(M)>::wire_params;
    writer w;
    w.write(ref().object);
    w.write(detail::method_id<T, M>());
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (w.write(std::tuple_element_t<I, params>(std::forward<A>(args))), ...);
    }
    (std::index_sequence_for<A...>{});
    return w.release();
  }

  /// Starts one call and completes the handler with the decoded result.
  template <class R>
  struct initiation {
    template <class Handler>
    void operator()(Handler&& handler, const std::shared_ptr<const detail::remote_state>& st,
                    std::vector<std::byte> bytes) const {
      auto caller = detail::reply_line_executor(handler);
      auto op = std::make_shared<detail::async_op<std::decay_t<Handler>>>(std::forward<Handler>(handler),
                                                                          detail::runtime::instance().executor());
      auto done = [op](std::exception_ptr e, std::vector<std::byte> bytes) {
        if constexpr (std::is_void_v<R>) {
          if (!e) {
            try {
              detail::decode_result<void>(bytes);
            } catch (...) {
              e = std::current_exception();
            }
          }
          op->complete(detail::via::dispatch, std::move(e));
        } else {
          R v{};
          if (!e) {
            try {
              v = detail::decode_result<R>(bytes);
            } catch (...) {
              e = std::current_exception();
            }
          }
          op->complete(detail::via::dispatch, std::move(e), std::move(v));
        }
      };
      detail::send_call(*st, std::move(bytes), std::move(done), caller);
    }
  };

  std::shared_ptr<const detail::remote_state> st_;
};

/// Starts `processes` job-backed manager processes and makes objects of
/// type T in them (spread evenly). T must be described with
/// BOOST_DESCRIBE_STRUCT/CLASS; its described public member functions are
/// what Remote<T>::call can name.
///
/// Backend: backend::from_env by default (FIBER_BACKEND), or a policy.
/// Thread-safety: make() may be called from several threads at once.
/// Errors: backend_error (processes cannot be started), remote_error (T's
/// constructor threw), worker_lost (the chosen process died during make()).
/// The destructor destroys every object and stops the processes (see the
/// file comment); the creating process must outlive handles used elsewhere.
template <class T, backend::policy Backend = backend::from_env>
class RemoteManager {
  static_assert(detail::check_object_type<T>());

public:
  using object_type = T; ///< the type of the objects it holds

  /// Starts `opt.processes` manager processes (0: cpu_count()) on the
  /// backend. Throws backend_error if the backend cannot start them.
  explicit RemoteManager(manager_options opt = {}) : opt_(std::move(opt)) {
    if (opt_.processes == 0) opt_.processes = cpu_count();
    if (opt_.name.empty()) opt_.name = "manager-" + std::to_string(detail::next_manager_number());
    auto& rt = detail::runtime::instance();
    auto launcher = rt.template prepared_launcher<Backend>();
    rt.sync([&] {
      core_ = std::make_shared<detail::manager_relay>(detail::manager_settings{opt_.name, opt_.processes, opt_.threads,
                                                                               opt_.resources, opt_.shutdown_grace},
                                                      launcher);
      service_ = rt.add_service(core_);
      // Handles elsewhere reach the relay where this backend's jobs dial in
      // (local: the ipc socket; Slurm: a TCP port on this host).
      url_ = rt.listen_url(launcher->listen_url());
      try {
        core_->start();
      } catch (...) {
        rt.remove_service(service_);
        throw;
      }
    });
  }

  RemoteManager(const RemoteManager&) = delete;
  RemoteManager& operator=(const RemoteManager&) = delete;

  /// Destroys every object and stops the manager processes (waits for them).
  ~RemoteManager() { shutdown(); }

  /// Constructs `T(args...)` in the manager process holding the fewest
  /// objects and returns a handle once it is constructed. Arguments are
  /// copied (string literals become std::string) and checked at compile time.
  template <class... A>
  Remote<T> make(A&&... args) {
    if constexpr (detail::check_make<T, A...>()) {
      (void)detail::ctor_registered<T, detail::wire_arg_t<A>...>; // registers the constructor everywhere
      writer w;
      (w.write(detail::wire_arg_t<A>(std::forward<A>(args))), ...);
      auto& rt = detail::runtime::instance();
      if (rt.on_runtime_thread())
        throw std::logic_error("fiber::RemoteManager::make: blocking call on fiber's runtime thread");
      auto made = std::make_shared<detail::blocking_result<std::uint64_t>>();
      auto core = core_;
      asio::post(rt.executor(), [core, made, args = w.release()]() mutable {
        core->make(detail::ctor_id<T, detail::wire_arg_t<A>...>(), std::move(args),
                   [made](std::exception_ptr e, std::uint64_t id) { made->set(std::move(e), id); });
      });
      auto id = made->take();
      auto owner = std::make_shared<detail::object_owner>(detail::remote_ref{url_, service_, id});
      owner->calls = core_->direct_calls();
      detail::local_objects::instance().add(owner);
      auto ref = owner->ref;
      return Remote<T>(std::make_shared<const detail::remote_state>(detail::remote_state{std::move(ref),
                                                                                         std::move(owner)}));
    } else {
      return Remote<T>{};
    }
  }

  /// Destroy every object and stop the processes now (the destructor does
  /// this). Later make() calls throw fiber::error. Idempotent.
  void shutdown() {
    auto core = detail::take_once(m_, stopped_, core_);
    if (!core) return;
    auto& rt = detail::runtime::instance();
    if (rt.on_runtime_thread()) { // cannot wait here
      core->stop_processes({});
      rt.remove_service(service_);
      return;
    }
    auto done = std::make_shared<detail::blocking_result<>>();
    rt.sync([&] { core->stop_processes([done] { done->set(nullptr); }); });
    done->wait();
    rt.remove_service(service_);
  }

  /// The number of manager processes (manager_options::processes, 0 resolved to cpu_count()).
  unsigned processes() const noexcept { return opt_.processes; }
  /// The manager's name, the prefix of its processes' names ("manager-N" unless set).
  const std::string& name() const noexcept { return opt_.name; }

  /// OS pids of the connected manager processes (local backend: children).
  std::vector<std::int64_t> pids() const {
    auto core = core_;
    return detail::runtime::instance().sync([&] { return core->pids(); });
  }

  /// Objects alive (made and not yet destroyed, including lost ones).
  std::size_t objects() const {
    auto core = core_;
    return detail::runtime::instance().sync([&] { return core->object_count(); });
  }

private:
  manager_options opt_;
  std::shared_ptr<detail::manager_relay> core_;
  std::uint64_t service_ = 0;
  std::string url_;
  std::mutex m_;
  bool stopped_ = false;
};

} // namespace fiber
