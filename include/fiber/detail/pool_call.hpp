// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_call.hpp
/// One call on a Pool (map, apply, imap, ...) as the caller sees it: its
/// chunks as they are built and submitted, and its results as they arrive.

#include <fiber/detail/pool_core.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/serialize.hpp>

#include <asio/post.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ranges>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace fiber::detail {

/// Results of one submitted call, filled on the runtime thread, read by the caller.
template <class R>
struct call_state : pool_job {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::uint64_t, shared_bytes> blobs;            // seq -> results (in their frame)
  std::map<std::uint64_t, std::exception_ptr> failed;    // seq -> why
  std::deque<std::uint64_t> arrival;                     // completion order
  std::size_t expected = 0;                              // chunks submitted
  std::size_t finished = 0;
  std::size_t chunk_waiters = 0; // imap consumers waiting for the next chunk (others wait for completion)
  bool input_done = false;
  std::function<void()> on_complete;                     // runtime thread, once
  std::function<void(std::size_t)> on_progress;          // chunks' items done
  std::vector<std::uint32_t> counts;                     // items per chunk, by seq

  bool complete() const { return input_done && finished == expected; }
  /// Under m: chunk `seq` has finished (its result or failure is stored).
  /// True if waiters must be woken — a map's caller waits for the whole
  /// call, and waking it per chunk would cost a context switch per task.
  /// Moves on_complete into `done` once the call is complete.
  bool chunk_finished_locked(std::uint64_t seq, std::function<void()>& done) {
    arrival.push_back(seq);
    ++finished;
    if (!complete()) return chunk_waiters > 0;
    done = std::move(on_complete);
    return true;
  }
};

template <class R>
using item_result = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

/// Reads one chunk's results blob: (value or exception) per item.
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

/// Hands `chunks` of call `st` to the Pool's scheduler (runtime thread).
template <class State>
void submit_chunks(const std::shared_ptr<pool_core>& core, const std::shared_ptr<State>& st,
                   std::vector<chunk_input> chunks) {
  asio::post(runtime::instance().executor(),
             [core, st, chunks = std::move(chunks)]() mutable { core->submit(st, std::move(chunks)); });
}

} // namespace fiber::detail
