// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_call.hpp
/// One call on a Pool (map, apply, imap, ...) as the caller sees it: its
/// chunks as they are built and submitted, and its results as they arrive.

#include <fiber/detail/call_sync.hpp>
#include <fiber/detail/pool_core.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/serialize.hpp>

#include <asio/post.hpp>

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

  /// The chunk so far as chunk `seq` of its call; the builder starts afresh.
  chunk_input take(std::uint64_t seq) {
    chunk_input c{seq, chunk_msg{0, target_, count_, w_.release()}, std::exchange(ends_, {})};
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

/// A call's state for target `target_id`; `on_progress` (optional) gets the
/// items of each finished chunk, before waiters are woken.
template <class R>
std::shared_ptr<call_state<R>> make_call(std::uint64_t target_id, std::function<void(std::size_t)> on_progress = {}) {
  auto st = std::make_shared<call_state<R>>();
  st->target_id = target_id;
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

/// Hands `chunks` of call `st` to the Pool's scheduler (runtime thread). A
/// chunk whose arguments do not fit in a frame (frame_limit.hpp) fails here,
/// on the caller's thread, so no worker is involved and the caller holds the
/// last reference to its error.
template <class State>
void submit_chunks(const std::shared_ptr<pool_core>& core, const std::shared_ptr<State>& st,
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

} // namespace fiber::detail
