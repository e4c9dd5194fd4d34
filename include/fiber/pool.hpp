// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file pool.hpp
/// fiber::Pool — multiprocessing.Pool over job-backed workers, with Fiber's
/// resilience: workers that die are replaced and their tasks rerun; every
/// result is delivered exactly once and in its place; workers that start
/// late take work as they arrive (dynamic scaling).

#include <fiber/backend/from_env.hpp>
#include <fiber/detail/take_once.hpp>
#include <fiber/detail/async_op.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/imap_range.hpp>
#include <fiber/detail/pool_call.hpp>
#include <fiber/detail/pool_core.hpp>
#include <fiber/detail/runtime_host.hpp>
#include <fiber/init.hpp>
#include <fiber/target.hpp>

#include <asio/async_result.hpp>
#include <asio/associated_executor.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <stdexcept>
#include <thread>
#include <unistd.h>
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
  using traits = typename target::traits;
  using params = typename target::args_tuple;
  static constexpr bool unary = traits::arity == 1;

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
      using init_params = typename target_t<I>::args_tuple;
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        (detail::write_arg<std::tuple_element_t<K, init_params>>(w, std::forward<IA>(initargs)), ...);
      }
      (std::index_sequence_for<IA...>{});
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
    if constexpr (detail::check_map_inputs<F, In>()) return detail::collect<R>(*submit_range<false>(inputs, chunksize));
    else return {};
  }

  /// Like map, for a target of several arguments: each element of `tuples`
  /// is a std::tuple holding exactly the target's arguments, each convertible
  /// to its parameter (else a compile-time error naming the rule).
  template <class In>
  std::vector<result_type> starmap(In&& tuples, std::size_t chunksize = 0) {
    if constexpr (detail::check_starmap_inputs<F, In>())
      return detail::collect<R>(*submit_range<true>(tuples, chunksize));
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
      auto st = submit_one(std::forward<A>(args)...);
      return async_result<R>(st, [st] { return detail::take_one<R>(*st); });
    } else {
      return async_result<R>(nullptr, {});
    }
  }

  /// map, returning at once with a handle whose get() gives the results.
  template <class In>
  async_result<std::vector<result_type>> map_async(In&& inputs, std::size_t chunksize = 0) {
    if constexpr (detail::check_map_inputs<F, In>()) return handle(submit_range<false>(inputs, chunksize));
    else return {nullptr, {}};
  }

  /// starmap, returning at once with a handle whose get() gives the results.
  template <class In>
  async_result<std::vector<result_type>> starmap_async(In&& tuples, std::size_t chunksize = 0) {
    if constexpr (detail::check_starmap_inputs<F, In>()) return handle(submit_range<true>(tuples, chunksize));
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
    if constexpr (detail::check_map_inputs<F, In>()) return make_imap<true>(std::forward<In>(inputs), chunksize);
    else return std::vector<result_type>{}; // after the check's one error, keep the caller well-typed
  }
  /// Lazy results in completion order.
  template <class In>
  auto imap_unordered(In&& inputs, std::size_t chunksize = 1) {
    if constexpr (detail::check_map_inputs<F, In>()) return make_imap<false>(std::forward<In>(inputs), chunksize);
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
        auto st = submit_one(std::get<I>(tup)...);
        return initiate<result_type>(std::forward<decltype(token)>(token), st,
                                     [](auto& st) { return detail::take_one<R>(*st); });
      } else { // after the check's one error, keep the caller well-typed
        return misused<result_type>(token);
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
    if constexpr (detail::check_map_inputs<F, In>()) return async_collect<false>(inputs, std::forward<Token>(token));
    else return misused<std::vector<result_type>>(token);
  }

  /// starmap, asynchronously; as async_map.
  template <class In, class Token>
  auto async_starmap(In&& tuples, Token&& token) {
    if constexpr (detail::check_starmap_inputs<F, In>()) return async_collect<true>(tuples, std::forward<Token>(token));
    else return misused<std::vector<result_type>>(token);
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
    auto& rt = detail::runtime::instance();
    auto launcher = rt.template prepared_launcher<Backend>();
    rt.sync([&] {
      core_ = std::make_shared<detail::pool_core>(detail::pool_settings{opt_.name, opt_.processes, opt_.max_retries,
                                                                        opt_.prefetch, opt_.resources,
                                                                        opt_.maxtasksperchild, std::move(initializer)},
                                                  launcher, detail::runtime_host::instance());
      core_->start();
    });
    processes_ = opt_.processes;
  }

  async_result<std::vector<result_type>> handle(std::shared_ptr<state> st) {
    return {st, [st] { return detail::collect<R>(*st); }};
  }

  void check_open() {
    std::lock_guard lk(m_);
    if (closed_) throw std::logic_error("fiber::Pool: submit after close()");
  }

  void stop(bool now) {
    auto core = detail::take_once(m_, stopped_, core_);
    if (!core) return;
    auto done = std::make_shared<detail::blocking_result<>>();
    detail::runtime::instance().sync([&] { core->shutdown(now, [done] { done->set(nullptr); }); });
    done->wait();
  }

  /// `maps`: the call is a map (progress is reported for maps only).
  std::shared_ptr<state> new_state(std::size_t total_items, bool maps = true) {
    std::function<void(std::size_t)> on_progress;
    auto progress = maps ? opt_.progress : nullptr;
    bool bar = maps && (opt_.progress_bar || detail::config_bool("progress")) && ::isatty(2);
    if (progress || bar) {
      auto items_done = std::make_shared<std::size_t>(0);
      on_progress = [progress, bar, total_items, items_done](std::size_t n) {
        *items_done += n;
        if (progress) progress(*items_done, total_items);
        if (bar) {
          if (total_items)
            std::fprintf(stderr, "\r[fiber] %zu/%zu (%3.0f%%)", *items_done, total_items,
                         100.0 * double(*items_done) / double(total_items));
          else std::fprintf(stderr, "\r[fiber] %zu done", *items_done);
          if (total_items && *items_done >= total_items) std::fputc('\n', stderr);
        }
      };
    }
    return detail::make_call<R>(target::id, std::move(on_progress));
  }

  // Python's rule (multiprocessing/pool.py, _map_async): about 4 chunks per
  // worker, so 4 tasks on 4 workers are 4 chunks of 1 — all run at once; at
  // most maxtasksperchild, so a worker's budget is not overrun.
  std::size_t auto_chunksize(std::size_t n) const {
    if (n == 0) return 1;
    std::size_t per = std::size_t(processes_) * 4;
    std::size_t c = std::max<std::size_t>(1, n / per + (n % per ? 1 : 0));
    return opt_.maxtasksperchild ? std::min<std::size_t>(c, opt_.maxtasksperchild) : c;
  }

  template <bool Star, class In>
  std::shared_ptr<state> submit_range(In& inputs, std::size_t chunksize) {
    check_open();
    if (chunksize == 0) chunksize = opt_.chunksize;
    std::size_t n = detail::size_hint(inputs);
    if (chunksize == 0) chunksize = std::ranges::sized_range<In> ? auto_chunksize(n) : 1;
    auto st = new_state(n);
    // Chunks leave in batches of about stream_bytes of arguments while the
    // rest are serialized, so workers start on a large map at once (a map
    // that throws part way lets the chunks already sent run; their results
    // are dropped).
    constexpr std::size_t stream_bytes = 256 * 1024;
    std::vector<detail::chunk_input> chunks;
    std::vector<std::uint32_t> counts;
    std::uint64_t next_seq = 0;
    std::size_t unsent = 0;
    detail::chunk_builder b(target::id, chunksize);
    auto flush = [&] {
      if (!b.count()) return;
      unsent += b.bytes();
      counts.push_back(b.count());
      chunks.push_back(b.take(next_seq++));
      if (unsent >= stream_bytes) {
        detail::submit_chunks(core_, st, std::exchange(chunks, {}));
        unsent = 0;
      }
    };
    for (auto&& x : inputs) {
      if (b.add([&](writer& w) {
            if constexpr (Star) write_tuple(w, x);
            else detail::write_arg<std::tuple_element_t<0, params>>(w, x);
          }))
        flush();
    }
    flush();
    {
      std::lock_guard lk(st->m);
      st->expected = next_seq;
      st->input_done = true;
      st->counts = std::move(counts);
    }
    if (!chunks.empty()) detail::submit_chunks(core_, st, std::move(chunks));
    return st;
  }

  template <class Tuple>
  static void write_tuple(writer& w, const Tuple& t) {
    static_assert(std::tuple_size_v<std::remove_cvref_t<Tuple>> == traits::arity,
                  "fiber::Pool::starmap: each tuple must hold exactly the target's arguments");
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (detail::write_arg<std::tuple_element_t<I, params>>(w, std::get<I>(t)), ...);
    }
    (std::make_index_sequence<traits::arity>{});
  }

  template <bool Ordered, class In>
  auto make_imap(In&& inputs, std::size_t chunksize) {
    check_open();
    return detail::imap_range<R, std::tuple_element_t<0, params>, In, Ordered>(core_, new_state(0),
                                                                               std::size_t(processes_) * 4 + 2,
                                                                               std::forward<In>(inputs),
                                                                               chunksize ? chunksize : 1, target::id);
  }

  template <class... A>
  std::shared_ptr<state> submit_one(A&&... args) {
    check_open();
    auto st = new_state(1, false);
    writer w;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (detail::write_arg<std::tuple_element_t<I, params>>(w, std::forward<A>(args)), ...);
    }
    (std::index_sequence_for<A...>{});
    {
      std::lock_guard lk(st->m);
      st->expected = 1;
      st->input_done = true;
      st->counts = {1};
    }
    std::vector<detail::chunk_input> chunks;
    chunks.push_back({0, detail::chunk_msg{0, target::id, 1, w.release()}, {}});
    detail::submit_chunks(core_, st, std::move(chunks));
    return st;
  }

  // async_map and async_starmap: every result, in order.
  template <bool Star, class In, class Token>
  auto async_collect(In& inputs, Token&& token) {
    return initiate<std::vector<result_type>>(std::forward<Token>(token), submit_range<Star>(inputs, 0),
                                              [](auto& st) { return detail::collect<R>(*st); });
  }

  // The return type of a misused async call, after its static_assert fired.
  template <class T, class Token>
  static auto misused(Token& token) {
    return asio::async_initiate<Token, void(std::exception_ptr, T)>([](auto&&...) {}, token);
  }

  template <class T, class Token, class Extract>
  auto initiate(Token&& token, std::shared_ptr<state> st, Extract extract) {
    return asio::async_initiate<Token, void(std::exception_ptr, T)>(
        [st, extract](auto handler) mutable {
          auto op = detail::async_op<decltype(handler)>(std::move(handler), detail::runtime::instance().executor());
          auto finish = [st, extract, op = std::move(op)](detail::via v) mutable {
            std::exception_ptr e;
            T value{};
            try {
              value = extract(st);
            } catch (...) {
              e = std::current_exception();
            }
            op.complete(v, std::move(e), std::move(value));
          };
          std::unique_lock lk(st->m);
          if (st->complete()) {
            lk.unlock();
            finish(detail::via::post);
          } else {
            st->on_complete = [f = std::make_shared<decltype(finish)>(std::move(finish))]() mutable {
              (*f)(detail::via::dispatch);
            };
          }
        },
        token);
  }

  pool_options opt_;
  std::shared_ptr<detail::pool_core> core_;
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
