// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_call.hpp
/// One call on a Pool (map, apply, imap, ...) as the caller sees it, as in
/// Ray's task_caller.h: its chunks built and submitted, its results as they
/// arrive, its Asio completion; and the Pool's start and stop.

#include <fiber/detail/async_op.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/call_sync.hpp>
#include <fiber/detail/pool_scheduler.hpp>
#include <fiber/detail/pool_progress.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/runtime_host.hpp>
#include <fiber/serialize.hpp>

#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace fiber::detail {

/// Results of one submitted call, filled on the runtime thread, read by the
/// caller. Create with make_call().
template <class R>
struct call_state : pool_job, call_sync {
  std::map<std::uint64_t, shared_bytes> blobs;        // seq -> results (in their frame)
  std::map<std::uint64_t, std::exception_ptr> failed; // seq -> why
  std::deque<std::uint64_t> arrival;                  // completion order
  std::function<void(std::size_t)> on_progress;       // chunks' items done
  std::vector<std::uint32_t> counts;                  // items per chunk, by seq

  /// Runtime thread: chunk `seq` has finished; `store` records how, under m.
  /// Waiters are woken when the call is complete or an imap consumer waits
  /// for chunks: a map's caller waits for the whole call, and waking it per
  /// chunk would cost a context switch per task.
  template <class Store>
  void finish(std::uint64_t seq, Store&& store) {
    std::function<void()> done;
    bool wake = false;
    {
      std::lock_guard lk(m);
      store();
      arrival.push_back(seq);
      ++finished;
      wake = complete() || chunk_waiters > 0;
      if (complete()) done = std::move(on_complete);
    }
    if (wake) cv.notify_all();
    if (done) done();
  }
};

template <class R>
using item_result = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

/// Reads one chunk's results blob: (value or exception) per item. Throws
/// serialization_error for a blob that is short or has bytes after them.
template <class R>
void decode_results(std::span<const std::byte> blob, std::size_t count,
                    const std::function<void(std::size_t, item_result<R>&&)>& on_value,
                    const std::function<void(std::size_t, std::exception_ptr)>& on_error) {
  reader r(blob);
  for (std::size_t i = 0; i < count; ++i) {
    if (auto e = read_item(r)) {
      on_error(i, std::move(e));
      continue;
    }
    item_result<R> v{};
    if constexpr (!std::is_same_v<item_result<R>, std::monostate>) r.read(v);
    on_value(i, std::move(v));
  }
  if (!r.empty()) r.fail("trailing bytes after a chunk's results");
}

inline int next_pool_number() {
  static std::atomic<int> counter{1};
  return counter++;
}

template <class Range>
std::size_t size_hint(Range& r) {
  if constexpr (std::ranges::sized_range<Range>) return std::size_t(std::ranges::size(r));
  else return 0;
}

/// Serializes tasks into chunks of `chunksize`, recording where each task's
/// arguments end (so that a chunk whose worker dies can be split).
class chunk_builder {
public:
  chunk_builder(std::uint64_t target_id, std::size_t chunksize) : target_(target_id), chunksize_(chunksize) {}

  /// Appends one task's arguments, written by `write(writer&)`; true once
  /// the chunk is full.
  template <class Write>
  bool add(Write&& write) {
    const auto mark = w_.size();
    try {
      write(w_);
    } catch (...) {
      w_.buffer().resize(mark); // the chunk keeps only whole tasks
      throw;
    }
    ends_.push_back(std::uint32_t(w_.size())); // where this task's arguments end
    return ++count_ == chunksize_;
  }

  std::uint32_t count() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return w_.size(); }

  /// The chunk so far as chunk `seq` of its call, for its target (the
  /// scheduler sends it as it is); the builder starts afresh.
  chunk_input take(std::uint64_t seq) {
    chunk_input c{seq, chunk_msg{.chunk_id = 0, .target_id = target_, .count = count_, .args = w_.release()},
                  std::exchange(ends_, {})};
    w_ = writer();
    count_ = 0;
    return c;
  }

private:
  std::uint64_t target_;
  std::size_t chunksize_;
  writer w_;
  std::uint32_t count_ = 0;
  std::vector<std::uint32_t> ends_;
};

/// A call's state; `on_progress` (optional) gets the items of each finished
/// chunk, before waiters are woken. Its chunks carry their target id (chunk_builder).
template <class R>
std::shared_ptr<call_state<R>> make_call(std::function<void(std::size_t)> on_progress = {}) {
  auto st = std::make_shared<call_state<R>>();
  st->on_progress = std::move(on_progress);
  std::weak_ptr<call_state<R>> weak = st;
  st->on_chunk = [weak](std::uint64_t seq, std::uint32_t items, shared_bytes blob) {
    auto s = weak.lock();
    if (!s) return;
    if (s->on_progress) s->on_progress(items);
    s->finish(seq, [&] { s->blobs.emplace(seq, std::move(blob)); });
  };
  st->on_chunk_failed = [weak](std::uint64_t seq, std::exception_ptr e) {
    auto s = weak.lock();
    // Moved, not copied: the runtime thread keeps no reference, so the
    // exception is released by the thread that reads it (TSan cannot see
    // the ordering of libstdc++'s uninstrumented reference count).
    if (s) s->finish(seq, [&] { s->failed.emplace(seq, std::move(e)); });
  };
  return st;
}

/// Every result of a complete call, in input order. Rethrows the first
/// failure in input order (a chunk that could not run raises at its place,
/// after any earlier task's remote_error). Decodes anew each time.
template <class R>
std::vector<item_result<R>> collect(call_state<R>& st) {
  st.wait();
  std::lock_guard lk(st.m);
  std::vector<item_result<R>> out;
  std::size_t total = 0;
  for (auto c : st.counts) total += c;
  out.reserve(total);
  std::exception_ptr first;
  for (std::size_t seq = 0; seq < st.counts.size(); ++seq) {
    if (auto f = st.failed.find(seq); f != st.failed.end()) std::rethrow_exception(f->second);
    decode_results<R>(
        st.blobs.at(seq).bytes, st.counts[seq], [&](std::size_t, item_result<R>&& v) { out.push_back(std::move(v)); },
        [&](std::size_t, std::exception_ptr e) {
          if (!first) first = e;
          out.emplace_back();
        });
    if (first) std::rethrow_exception(first);
  }
  return out;
}

/// The one result of a complete call of one task (apply). Rethrows its failure.
template <class R>
item_result<R> take_one(call_state<R>& st) {
  std::lock_guard lk(st.m);
  if (!st.failed.empty()) std::rethrow_exception(st.failed.begin()->second);
  std::optional<item_result<R>> out;
  std::exception_ptr err;
  decode_results<R>(
      st.blobs.at(0).bytes, 1, [&](std::size_t, item_result<R>&& v) { out = std::move(v); },
      [&](std::size_t, std::exception_ptr e) { err = e; });
  if (err) std::rethrow_exception(err);
  return std::move(*out);
}

/// Writes an argument as parameter type P: as is when it already has that
/// type (no converted copy of, say, a large vector), else converted first.
/// A move-only argument passed as an rvalue (a Connection end) is taken
/// from the caller, as a Process takes it: the caller's object is empty
/// afterwards and no longer holds the end.
template <class P, class A>
void write_arg(writer& w, A&& a) {
  if constexpr (!std::is_same_v<std::remove_cvref_t<A>, P>) {
    w.write(P(std::forward<A>(a)));
  } else if constexpr (!std::is_copy_constructible_v<P> && !std::is_lvalue_reference_v<A> &&
                       !std::is_const_v<std::remove_reference_t<A>>) {
    P taken(std::move(a));
    w.write(taken);
  } else {
    w.write(a);
  }
}

/// Writes one task's `args` as the parameters `Params` (a std::tuple).
template <class Params, class... A>
void write_args(writer& w, A&&... args) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (write_arg<std::tuple_element_t<I, Params>>(w, std::forward<A>(args)), ...);
  }
  (std::index_sequence_for<A...>{});
}

/// Hands `chunks` of call `st` to the Pool's scheduler (runtime thread). A
/// chunk whose arguments do not fit in a frame (frame_limit.hpp) fails here,
/// on the caller's thread, so no worker is involved and the caller holds the
/// last reference to its error.
template <class State>
void submit_chunks(const std::shared_ptr<pool_scheduler>& core, const std::shared_ptr<State>& st,
                   std::vector<chunk_input> chunks) {
  std::erase_if(chunks, [&](const chunk_input& c) {
    if (fits_in_frame(c.msg.args.size())) return false;
    const auto what = c.msg.count == 1 ? std::string("a task's arguments")
                                       : "the arguments of a chunk of " + std::to_string(c.msg.count) + " tasks";
    st->on_chunk_failed(c.seq, std::make_exception_ptr(error(oversize_message(what, c.msg.args.size()))));
    return true;
  });
  if (chunks.empty()) return;
  asio::post(runtime::instance().executor(),
             [core, st, chunks = std::move(chunks)]() mutable { core->submit(st, std::move(chunks)); });
}

/// What a call reads of its Pool's options, at submission.
struct call_options {
  unsigned processes = 1;        // workers asked for now
  std::size_t chunksize = 0;     // pool_options::chunksize; 0: automatic
  unsigned maxtasksperchild = 0; // caps the automatic chunksize
  pool_progress progress{};      // reported for maps only
};

/// One call on a Pool's target (`Params`: its parameter types, a std::tuple;
/// R: its result type), made by the Pool per call: builds the tasks'
/// chunks, submits them and returns the state their results arrive in.
template <class R, class Params>
class pool_call {
public:
  using state = call_state<R>;

  pool_call(std::shared_ptr<pool_scheduler> core, std::uint64_t target_id, call_options o)
      : core_(std::move(core)), target_(target_id), o_(std::move(o)) {}

  /// map: one task per element of `inputs`; `chunksize` 0: the Pool's, else automatic.
  template <class In>
  std::shared_ptr<state> map(In& inputs, std::size_t chunksize) const {
    return submit_range<false>(inputs, chunksize);
  }
  /// starmap: as map, each element a tuple of the target's arguments.
  template <class In>
  std::shared_ptr<state> starmap(In& tuples, std::size_t chunksize) const {
    return submit_range<true>(tuples, chunksize);
  }

  /// apply: one task of `args`, in a chunk of its own (no progress reported).
  template <class... A>
  std::shared_ptr<state> apply(A&&... args) const {
    auto st = make_call<R>();
    chunk_builder b(target_, 1);
    b.add([&](writer& w) { write_args<Params>(w, std::forward<A>(args)...); });
    {
      std::lock_guard lk(st->m);
      st->expected = 1;
      st->input_done = true;
      st->counts = {1};
    }
    std::vector<chunk_input> chunks;
    chunks.push_back(b.take(0));
    submit_chunks(core_, st, std::move(chunks));
    return st;
  }

  /// A map's state before its chunks are known (imap), its progress reported.
  std::shared_ptr<state> start_map(std::size_t total_items) const {
    return make_call<R>(o_.progress.hook(total_items));
  }
  const std::shared_ptr<pool_scheduler>& core() const noexcept { return core_; }
  std::uint64_t target_id() const noexcept { return target_; }
  const call_options& options() const noexcept { return o_; }

private:
  // Python's rule (multiprocessing/pool.py, _map_async): about 4 chunks per
  // worker, so 4 tasks on 4 workers are 4 chunks of 1 — all run at once; at
  // most maxtasksperchild, so a worker's budget is not overrun.
  std::size_t auto_chunksize(std::size_t n) const {
    if (n == 0) return 1;
    std::size_t per = std::size_t(o_.processes) * 4;
    std::size_t c = std::max<std::size_t>(1, n / per + (n % per ? 1 : 0));
    return o_.maxtasksperchild ? std::min<std::size_t>(c, o_.maxtasksperchild) : c;
  }

  template <bool Star, class In>
  std::shared_ptr<state> submit_range(In& inputs, std::size_t chunksize) const {
    if (chunksize == 0) chunksize = o_.chunksize;
    std::size_t n = size_hint(inputs);
    if (chunksize == 0) chunksize = std::ranges::sized_range<In> ? auto_chunksize(n) : 1;
    auto st = start_map(n);
    // Chunks leave in batches of about stream_bytes of arguments while the
    // rest are serialized, so workers start on a large map at once (a map
    // that throws part way lets the chunks already sent run; their results
    // are dropped).
    constexpr std::size_t stream_bytes = 256 * 1024;
    std::vector<chunk_input> chunks;
    std::vector<std::uint32_t> counts;
    std::uint64_t next_seq = 0;
    std::size_t unsent = 0;
    chunk_builder b(target_, chunksize);
    auto flush = [&] {
      if (!b.count()) return;
      unsent += b.bytes();
      counts.push_back(b.count());
      chunks.push_back(b.take(next_seq++));
      if (unsent >= stream_bytes) {
        submit_chunks(core_, st, std::exchange(chunks, {}));
        unsent = 0;
      }
    };
    for (auto&& x : inputs) {
      if (b.add([&](writer& w) {
            if constexpr (Star) write_tuple(w, x);
            else write_arg<std::tuple_element_t<0, Params>>(w, x);
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
    if (!chunks.empty()) submit_chunks(core_, st, std::move(chunks));
    return st;
  }

  template <class Tuple>
  static void write_tuple(writer& w, const Tuple& t) {
    constexpr std::size_t arity = std::tuple_size_v<Params>;
    static_assert(std::tuple_size_v<std::remove_cvref_t<Tuple>> == arity,
                  "fiber::Pool::starmap: each tuple must hold exactly the target's arguments");
    if constexpr (std::tuple_size_v<std::remove_cvref_t<Tuple>> == arity)
      std::apply([&](const auto&... a) { write_args<Params>(w, a...); }, t);
  }

  std::shared_ptr<pool_scheduler> core_;
  std::uint64_t target_;
  call_options o_;
};

/// Completes `token` with `extract(*st)` (or what it throws) once call `st`
/// is complete: on the handler's associated executor, posted if the call
/// was complete already, so that no handler runs inside its initiation.
template <class T, class Token, class State, class Extract>
auto async_complete(Token&& token, std::shared_ptr<State> st, Extract extract) {
  return asio::async_initiate<Token, void(std::exception_ptr, T)>(
      [st, extract](auto handler) mutable {
        auto op = async_op<decltype(handler)>(std::move(handler), runtime::instance().executor());
        auto finish = [st, extract, op = std::move(op)](via v) mutable {
          std::exception_ptr e;
          T value{};
          try {
            value = extract(*st);
          } catch (...) {
            e = std::current_exception();
          }
          op.complete(v, std::move(e), std::move(value));
        };
        std::unique_lock lk(st->m);
        if (st->complete()) {
          lk.unlock();
          finish(via::post);
        } else {
          st->on_complete = [f = std::make_shared<decltype(finish)>(std::move(finish))]() mutable {
            (*f)(via::dispatch);
          };
        }
      },
      token);
}

/// async_apply's completion: the one result of call `st`.
template <class Token, class R>
auto async_take_one(Token&& token, std::shared_ptr<call_state<R>> st) {
  return async_complete<item_result<R>>(std::forward<Token>(token), std::move(st),
                                        [](call_state<R>& s) { return take_one<R>(s); });
}

/// async_map's and async_starmap's completion: every result of call `st`, in order.
template <class Token, class R>
auto async_collect(Token&& token, std::shared_ptr<call_state<R>> st) {
  return async_complete<std::vector<item_result<R>>>(std::forward<Token>(token), std::move(st),
                                                     [](call_state<R>& s) { return collect<R>(s); });
}

/// The return type of a misused async call, after its static_assert fired.
template <class T, class Token>
auto async_misused(Token& token) {
  return asio::async_initiate<Token, void(std::exception_ptr, T)>([](auto&&...) {}, token);
}

/// Starts a Pool's scheduler and its workers with launcher `Backend`.
/// Throws backend_error if the backend cannot start them.
template <class Backend>
std::shared_ptr<pool_scheduler> start_pool(pool_settings s) {
  auto& rt = runtime::instance();
  auto launcher = rt.template prepared_launcher<Backend>();
  std::shared_ptr<pool_scheduler> core;
  rt.sync([&] {
    core = std::make_shared<pool_scheduler>(std::move(s), launcher, runtime_host::instance());
    core->start();
    stats_sources::instance().add(core);
  });
  return core;
}

/// Shuts `core` down (`now`: terminate, else when the work submitted is
/// done) and waits until its workers have exited.
inline void stop_pool(const std::shared_ptr<pool_scheduler>& core, bool now) {
  auto done = std::make_shared<blocking_result<>>();
  runtime::instance().sync([&] { core->shutdown(now, [done] { done->set(nullptr); }); });
  done->wait();
}

} // namespace fiber::detail
