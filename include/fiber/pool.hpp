// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file pool.hpp
/// fiber::Pool — multiprocessing.Pool over job-backed workers, with Fiber's
/// resilience: workers that die are replaced and their tasks rerun; every
/// result is delivered exactly once and in its place; workers that start
/// late take work as they arrive (dynamic scaling).

#include <fiber/backend/from_env.hpp>
#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/imap_range.hpp>
#include <fiber/detail/pool_call.hpp>
#include <fiber/detail/pool_scheduler.hpp>
#include <fiber/detail/take_once.hpp>
#include <fiber/init.hpp>
#include <fiber/target.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fiber {

/// Pool options (an aggregate: use designated initializers).
struct pool_options {
  unsigned processes = 0; ///< workers; 0 = fiber::cpu_count()
  /// Tasks a worker runs before it exits and is replaced (Python's
  /// maxtasksperchild); 0: unlimited. Tasks, not chunks: the automatic
  /// chunksize is at most this, and a chunk is never split, so a larger
  /// explicit chunksize lets a worker run one whole chunk. No task is lost.
  /// On a backend whose jobs do not run on the master's cores (Slurm,
  /// Kubernetes, a remote Docker daemon) the successors of retiring workers
  /// are launched ahead of need while tasks are queued beyond what the
  /// workers left can take: at most 2 x processes more jobs, which connect
  /// and wait for a seat; at most `processes` workers run tasks at once.
  unsigned maxtasksperchild = 0;
  std::size_t chunksize = 0;    ///< inputs per task message; 0 = automatic
  int max_retries = 3;          ///< reruns of a task after its worker *died*
  fiber::resources resources{}; ///< per worker, asked of the backend
  std::string name{};           ///< prefix of worker names; default "pool-N"
  /// Called after each finished chunk of a map with (items done, items total;
  /// total is 0 while unknown). Runs on fiber's runtime thread: keep it short.
  std::function<void(std::size_t, std::size_t)> progress{};
  /// Draw a progress line on stderr for long maps when it is a terminal
  /// (also the `progress` configuration key).
  bool progress_bar = false;
  /// Chunks a worker may hold (its credit window). Workers whose chunks run
  /// in well under a millisecond are given more, up to about 1 ms of work
  /// (at most 32 chunks), so that tiny tasks are not held back by the round trip.
  unsigned prefetch = 2;
};

/// Handle of an asynchronous Pool call: multiprocessing's AsyncResult.
/// `T` is the target's result for apply_async (get() returns std::monostate
/// for void), `std::vector<R>` for map_async and starmap_async. Copyable
/// (copies share the call); any member may be called from any thread. The
/// call goes on if the handle is dropped; its results are then discarded.
template <class T>
class async_result {
public:
  using value_type = detail::item_result<T>; ///< what get() returns: `T`, or std::monostate for void

  /// Waits, then returns the value (decoded anew on every call). Throws what
  /// the call raised: remote_error (the target threw), worker_lost (its
  /// workers died too often), fiber::error (the Pool was terminated).
  value_type get() {
    st_->wait();
    return take_();
  }
  /// As get(), but throws fiber::timeout_error if not ready within `timeout`
  /// (the call itself goes on).
  template <class Rep, class Period>
  value_type get(std::chrono::duration<Rep, Period> timeout) {
    if (!st_->wait_for(timeout)) throw timeout_error("fiber::async_result::get: not ready within the timeout");
    return take_();
  }
  /// Whether the call has completed (never blocks).
  bool ready() const {
    std::lock_guard lk(st_->m);
    return st_->complete();
  }
  /// Blocks until the call has completed.
  void wait() const { st_->wait(); }
  /// Blocks at most `timeout`; true if the call has completed.
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) const {
    return st_->wait_for(timeout);
  }
  /// Whether the call completed without an exception. Throws std::logic_error
  /// while it is not ready (Python's ValueError).
  bool successful() const {
    if (!ready()) throw std::logic_error("fiber::async_result::successful: not ready");
    try {
      (void)take_();
      return true;
    } catch (...) {
      return false;
    }
  }

private:
  template <auto, backend::policy>
  friend class Pool;
  async_result(std::shared_ptr<detail::call_sync> st, std::function<value_type()> take)
      : st_(std::move(st)), take_(std::move(take)) {}

  std::shared_ptr<detail::call_sync> st_;
  std::function<value_type()> take_;
};

/// A pool of job-backed workers running target F.
///
/// `Pool pool{fiber::target<&f>, {.processes = 8}}` deduces `Pool<&f>`.
/// Backend: backend::from_env by default (FIBER_BACKEND), or a policy.
/// Thread-safety: calls may come from several threads at once.
/// Errors: remote_error (a task threw; not retried, the worker survives),
/// worker_lost (a task's workers died more than max_retries times; a chunk
/// of several tasks whose worker dies is rerun as single tasks, so only the
/// task that kills its worker again is charged and fails),
/// backend_error (workers cannot be started), std::logic_error (submit after close).
template <auto F, backend::policy Backend = backend::from_env>
class Pool {
  using target = target_t<F>;
  using params = typename target::args_tuple;

public:
  /// One task's result as map() etc. return it: the target's result type, std::monostate for a void target.
  using result_type = detail::item_result<typename target::result_type>;
  using R = typename target::result_type; ///< the target's declared result type (may be void)

  /// Starts `opt.processes` workers (at first a core's worth at a time on
  /// the local backend); work starts with the first one up. Throws
  /// backend_error if the backend cannot start them.
  explicit Pool(target_t<F>, pool_options opt = {}) : opt_(std::move(opt)) { start({}); }

  /// As above; every worker runs `initializer(initargs...)` once, before its
  /// first task — also workers started later (resize, replacement of a dead
  /// one): Python's initializer/initargs. A worker whose initializer throws
  /// exits and is replaced; when every start keeps failing so (more than
  /// max(3, 2 × processes) in a row), calls fail with fiber::worker_lost
  /// naming the initializer's error. A wrong initarg is a compile-time error.
  template <auto I, class... IA>
  Pool(target_t<F>, pool_options opt, target_t<I>, IA&&... initargs) : opt_(std::move(opt)) {
    if constexpr (detail::check_target_args<I, IA...>()) {
      static_assert(detail::check_target<I>());
      writer w;
      detail::write_args<typename target_t<I>::args_tuple>(w, std::forward<IA>(initargs)...);
      start(detail::run_msg{target_t<I>::id, w.release()});
    }
  }

  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// Terminates: outstanding tasks are abandoned and workers stopped.
  ~Pool() { terminate(); }

  // ---- blocking API ---------------------------------------------------------

  /// f applied to every input, in input order. Inputs: any input range of
  /// F's single argument (a target of several arguments: starmap). Throws
  /// the first task's exception in input order; an exception thrown by the
  /// input range itself reaches the caller as it is. `chunksize`: inputs per
  /// task message; 0: automatic (about four chunks per worker).
  template <class In>
  std::vector<result_type> map(In&& inputs, std::size_t chunksize = 0) {
    if constexpr (detail::check_map_inputs<F, In>()) return detail::collect<R>(*call().map(inputs, chunksize));
    else return {};
  }

  /// Like map, for a target of several arguments: each element of `tuples`
  /// is a std::tuple holding exactly the target's arguments, each convertible
  /// to its parameter (else a compile-time error naming the rule).
  template <class In>
  std::vector<result_type> starmap(In&& tuples, std::size_t chunksize = 0) {
    if constexpr (detail::check_starmap_inputs<F, In>()) return detail::collect<R>(*call().starmap(tuples, chunksize));
    else return {};
  }

  /// f(args...) on a worker; blocks for the result.
  template <class... A>
  result_type apply(A&&... args) {
    if constexpr (detail::check_target_args<F, A...>()) return apply_async(std::forward<A>(args)...).get();
    else return result_type{};
  }

  /// f(args...) on a worker; returns at once with a handle (get, wait,
  /// ready, successful). For Python's callback / error_callback, use
  /// async_apply with a callback as the completion token.
  template <class... A>
  async_result<R> apply_async(A&&... args) {
    if constexpr (detail::check_target_args<F, A...>()) {
      auto st = call().apply(std::forward<A>(args)...);
      return async_result<R>(st, [st] { return detail::take_one<R>(*st); });
    } else {
      return async_result<R>(nullptr, {});
    }
  }

  /// map, returning at once with a handle whose get() gives the results.
  template <class In>
  async_result<std::vector<result_type>> map_async(In&& inputs, std::size_t chunksize = 0) {
    if constexpr (detail::check_map_inputs<F, In>()) return handle(call().map(inputs, chunksize));
    else return {nullptr, {}};
  }

  /// starmap, returning at once with a handle whose get() gives the results.
  template <class In>
  async_result<std::vector<result_type>> starmap_async(In&& tuples, std::size_t chunksize = 0) {
    if constexpr (detail::check_starmap_inputs<F, In>()) return handle(call().starmap(tuples, chunksize));
    else return {nullptr, {}};
  }

  /// Lazy, ordered results. The input range is read as results are consumed
  /// (by a feeder thread, so a slow or blocking input never stalls results
  /// already computed); never materialized. A task that failed (remote_error,
  /// worker_lost) throws from the increment that reaches its position; the
  /// iteration may go on after catching, with every later result in its
  /// place. An exception thrown by the input range arrives after the results
  /// of the items before it, at its position; the Pool stays usable.
  /// `chunksize`: inputs per task message, 1 by default (as Python).
  /// Lifetime: the returned range owns the input (moved or copied in) and
  /// shares the Pool's scheduler; it may outlive the Pool, whose destruction
  /// terminates the work: what was not computed then throws fiber::error.
  template <class In>
  auto imap(In&& inputs, std::size_t chunksize = 1) {
    if constexpr (detail::check_map_inputs<F, In>())
      return detail::make_imap<true>(call(), std::forward<In>(inputs), chunksize);
    else return std::vector<result_type>{}; // after the check's one error, keep the caller well-typed
  }
  /// Lazy results in completion order.
  template <class In>
  auto imap_unordered(In&& inputs, std::size_t chunksize = 1) {
    if constexpr (detail::check_map_inputs<F, In>())
      return detail::make_imap<false>(call(), std::forward<In>(inputs), chunksize);
    else return std::vector<result_type>{};
  }

  // ---- asynchronous API (Asio completion tokens) -------------------------------

  /// f(args...) on a worker, asynchronously; the last argument is an Asio
  /// completion token. Completion signature `void(std::exception_ptr,
  /// result_type)`; the handler runs on its associated executor (the
  /// coroutine's for use_awaitable; fiber's runtime thread for a plain
  /// callback, which is Python's apply_async callback and error_callback in
  /// one: keep it short and non-blocking). Arguments are serialized at
  /// initiation. Cancellation is not supported: a submitted task runs.
  ///
  /// ```cpp
  /// int r = co_await pool.async_apply(3, asio::use_awaitable);
  /// pool.async_apply(3, [](std::exception_ptr e, int r) { if (!e) use(r); });
  /// ```
  template <class... A>
    requires(sizeof...(A) >= 1)
  auto async_apply(A&&... args_and_token) {
    auto tup = std::forward_as_tuple(std::forward<A>(args_and_token)...);
    auto&& token = std::get<sizeof...(A) - 1>(tup);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (detail::check_target_args<F, std::tuple_element_t<I, std::tuple<A...>>...>()) {
        return detail::async_take_one(std::forward<decltype(token)>(token), call().apply(std::get<I>(tup)...));
      } else { // after the check's one error, keep the caller well-typed
        return detail::async_misused<result_type>(token);
      }
    }
    (std::make_index_sequence<sizeof...(A) - 1>{});
  }

  /// map, asynchronously. Completion signature
  /// `void(std::exception_ptr, std::vector<result_type>)`; the handler runs on
  /// its associated executor (default: fiber's runtime thread — keep such
  /// handlers short and non-blocking). Inputs are serialized at initiation.
  /// Cancellation is not supported: submitted tasks run.
  template <class In, class Token>
  auto async_map(In&& inputs, Token&& token) {
    if constexpr (detail::check_map_inputs<F, In>())
      return detail::async_collect(std::forward<Token>(token), call().map(inputs, 0));
    else return detail::async_misused<std::vector<result_type>>(token);
  }

  /// starmap, asynchronously; as async_map.
  template <class In, class Token>
  auto async_starmap(In&& tuples, Token&& token) {
    if constexpr (detail::check_starmap_inputs<F, In>())
      return detail::async_collect(std::forward<Token>(token), call().starmap(tuples, 0));
    else return detail::async_misused<std::vector<result_type>>(token);
  }

  // ---- lifecycle --------------------------------------------------------------

  /// No more submissions; workers exit once the work already submitted is
  /// done. Workers still starting, dying or retiring (maxtasksperchild) are
  /// replaced until then. An imap's input is read to its end at once (as
  /// Python's imap submits every task): join() waits for all of it.
  void close() {
    {
      std::lock_guard lk(m_);
      closed_ = true;
    }
    if (core_) core_->release_feeders();
  }

  /// Waits until every task submitted has its result or error and the
  /// workers have exited; afterwards every async_result of this Pool is
  /// ready. Requires close() or terminate() first.
  void join() {
    {
      std::lock_guard lk(m_);
      if (!closed_) throw std::logic_error("fiber::Pool::join: call close() or terminate() first");
    }
    stop(false);
  }

  /// Stop the workers now; outstanding results fail with fiber::error.
  void terminate() {
    {
      std::lock_guard lk(m_);
      closed_ = true;
    }
    stop(true);
  }

  /// Grow or shrink the pool while it runs. Shrinking retires idle workers
  /// first; a busy worker finishes its chunks, then exits.
  void resize(unsigned n) {
    if (n == 0) throw std::invalid_argument("fiber::Pool::resize: need at least one worker");
    processes_ = n;
    auto core = core_;
    detail::runtime::instance().sync([&] { core->resize(n); });
  }

  /// The number of workers asked for: pool_options::processes, or the last resize().
  unsigned processes() const noexcept { return processes_; }
  /// Workers connected right now, successors launched ahead included (see
  /// pool_options::maxtasksperchild).
  unsigned live_workers() const {
    auto core = core_;
    return detail::runtime::instance().sync([&] { return core->live_workers(); });
  }
  /// OS pids of connected workers (local backend: child processes).
  std::vector<std::int64_t> worker_pids() const {
    auto core = core_;
    return detail::runtime::instance().sync([&] { return core->worker_pids(); });
  }

private:
  using state = detail::call_state<R>;

  void start(std::optional<detail::run_msg> initializer) {
    static_assert(detail::check_target<F>());
    if (opt_.processes == 0) opt_.processes = cpu_count();
    if (opt_.name.empty()) opt_.name = "pool-" + std::to_string(detail::next_pool_number());
    if (opt_.prefetch == 0) opt_.prefetch = 1;
    core_ = detail::start_pool<Backend>({opt_.name, opt_.processes, opt_.max_retries, opt_.prefetch, opt_.resources,
                                         opt_.maxtasksperchild, std::move(initializer)});
    processes_ = opt_.processes;
  }

  void stop(bool now) {
    if (auto core = detail::take_once(m_, stopped_, core_)) detail::stop_pool(core, now);
  }

  // A new call; throws std::logic_error after close().
  detail::pool_call<R, params> call() {
    check_open();
    return {core_, target::id, {processes_, opt_.chunksize, opt_.maxtasksperchild, {opt_.progress, opt_.progress_bar}}};
  }

  void check_open() {
    std::lock_guard lk(m_);
    if (closed_) throw std::logic_error("fiber::Pool: submit after close()");
  }

  async_result<std::vector<result_type>> handle(std::shared_ptr<state> st) {
    return {st, [st] { return detail::collect<R>(*st); }};
  }

  pool_options opt_;
  std::shared_ptr<detail::pool_scheduler> core_;
  std::atomic<unsigned> processes_{1};
  std::mutex m_;
  bool closed_ = false, stopped_ = false;
};

/// Deduces `Pool<F>` (backend::from_env) from `Pool(fiber::target<&f>, opt)`.
template <auto F>
Pool(target_t<F>, pool_options) -> Pool<F>;
/// Deduces `Pool<F>` (backend::from_env) from `Pool(fiber::target<&f>)`.
template <auto F>
Pool(target_t<F>) -> Pool<F>;
/// Deduces `Pool<F>` (backend::from_env) from the initializer constructor.
template <auto F, auto I, class... IA>
Pool(target_t<F>, pool_options, target_t<I>, IA&&...) -> Pool<F>;

} // namespace fiber
