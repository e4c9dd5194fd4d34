// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/imap_range.hpp
/// The lazy range Pool::imap and imap_unordered return: a feeder thread reads
/// the input into chunks as results are consumed; the range owns what it
/// uses, so it stays valid after its Pool is gone.

#include <fiber/detail/pool_call.hpp>
#include <fiber/detail/pool_scheduler.hpp>
#include <fiber/serialize.hpp>

#include <asio/post.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Results of an imap (`Ordered`: in input order) or imap_unordered (in
/// completion order). An input range's element is written as the target's
/// parameter type `Param`. Thread-safety: iterate from one thread at a time.
/// Destroying the range stops the feeder; chunks already sent still run.
template <class R, class Param, class In, bool Ordered>
class imap_range {
  using result_type = item_result<R>;
  using state = call_state<R>;
  struct impl;

public:
  /// Reads `in` on a feeder thread into chunks of `chunksize` of target
  /// `target_id`, submitted to `core` for call `st`, at most `window` chunks
  /// ahead of the consumer.
  imap_range(std::shared_ptr<pool_scheduler> core, std::shared_ptr<state> st, std::size_t window, In&& in,
             std::size_t chunksize, std::uint64_t target_id)
      : impl_(std::make_shared<impl>(std::move(core), std::move(st), window, std::forward<In>(in), chunksize,
                                     target_id)) {
    impl_->start();
  }

  class iterator {
  public:
    using value_type = result_type;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(impl* i) : self_(i) { ++*this; }
    const result_type& operator*() const { return *cur_; }
    result_type& operator*() { return *cur_; }
    iterator& operator++() {
      cur_ = self_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) { return !it.cur_; }

  private:
    impl* self_ = nullptr;
    std::optional<result_type> cur_;
  };

  iterator begin() { return iterator(impl_.get()); }
  std::default_sentinel_t end() { return {}; }

private:
  struct impl {
    std::shared_ptr<detail::pool_scheduler> core; // not the Pool: the range may outlive it
    std::remove_cvref_t<In> input;
    std::size_t chunksize;
    std::shared_ptr<state> st;
    std::jthread feeder;
    std::uint64_t next_seq = 0;
    std::deque<std::pair<std::optional<result_type>, std::exception_ptr>> ready;
    std::size_t window;
    std::uint64_t target;
    std::size_t consumed = 0;        // chunks taken by the consumer
    std::exception_ptr input_error;  // the input range threw (feeder, under st->m)
    bool input_error_raised = false; // consumer only

    impl(std::shared_ptr<pool_scheduler> c, std::shared_ptr<state> s, std::size_t w, In&& in, std::size_t cs,
         std::uint64_t t)
        : core(std::move(c)), input(std::forward<In>(in)), chunksize(cs), st(std::move(s)), window(w), target(t) {}
    ~impl() {
      if (feeder.joinable()) {
        feeder.request_stop();
        st->cv.notify_all();
      }
    }

    void start() {
      core->feed_begin(st);
      feeder = std::jthread([this](std::stop_token stop) {
        // However the feeder ends, a closing Pool stops waiting for it after
        // its last submission (posted after them, so handled after them).
        struct fed {
          std::shared_ptr<pool_scheduler> core;
          ~fed() {
            asio::post(runtime::instance().executor(), [c = std::move(core)] { c->feed_end(); });
          }
        } guard{core};
        std::uint64_t seq = 0;
        chunk_builder b(target, chunksize);
        // False once no more chunks are wanted: the consumer is gone, or
        // the Pool was terminated (its chunks fail; reading on is pointless).
        auto flush = [&] {
          if (!b.count()) return true;
          {
            std::unique_lock lk(st->m);
            // Back-pressure: don't run ahead of the consumer unboundedly,
            // unless the Pool is closed (its join waits for every task).
            st->cv.wait(lk, [&] {
              return stop.stop_requested() || core->feeders_released() || st->expected - consumed < window;
            });
            if (stop.stop_requested()) return false;
            st->counts.push_back(b.count());
            ++st->expected;
          }
          std::vector<chunk_input> c;
          c.push_back(b.take(seq++));
          submit_chunks(core, st, std::move(c));
          return !core->terminated();
        };
        // No exception may leave this thread: one from the input range
        // reaches the consumer at its position, after the items before it.
        std::exception_ptr failed;
        try {
          for (auto&& x : input) {
            if (stop.stop_requested()) return;
            if (b.add([&](writer& w) { write_arg<Param>(w, x); }) && !flush()) break;
          }
        } catch (...) {
          failed = std::current_exception();
        }
        try {
          flush();
        } catch (...) {
          if (!failed) failed = std::current_exception();
        }
        std::lock_guard lk(st->m);
        input_error = failed;
        st->input_done = true;
        st->cv.notify_all();
      });
    }

    std::optional<result_type> next() {
      for (;;) {
        if (!ready.empty()) {
          auto [v, e] = std::move(ready.front());
          ready.pop_front();
          if (e) std::rethrow_exception(e);
          return v;
        }
        std::unique_lock lk(st->m);
        std::uint64_t seq = 0;
        bool have = false;
        ++st->chunk_waiters;
        st->cv.wait(lk, [&] {
          if constexpr (Ordered) {
            have = st->blobs.count(next_seq) || st->failed.count(next_seq);
            seq = next_seq;
          } else {
            have = !st->arrival.empty();
            if (have) seq = st->arrival.front();
          }
          return have || (st->input_done && consumed == st->expected);
        });
        --st->chunk_waiters;
        if (!have) {
          // Every chunk is consumed: the input range's exception, if any,
          // comes at its position (once), then the end.
          if (input_error && !std::exchange(input_error_raised, true)) std::rethrow_exception(input_error);
          return std::nullopt;
        }
        if constexpr (!Ordered) st->arrival.pop_front();
        ++next_seq;
        ++consumed;
        st->cv.notify_all();
        auto count = st->counts.at(seq);
        if (auto f = st->failed.find(seq); f != st->failed.end()) {
          // Every task of a chunk that could not run raises at its own
          // position, so a consumer that catches and goes on stays aligned.
          auto e = f->second;
          st->failed.erase(f);
          lk.unlock();
          for (std::uint32_t i = 0; i < count; ++i) ready.emplace_back(std::nullopt, e);
          continue;
        }
        auto blob = std::move(st->blobs.at(seq));
        st->blobs.erase(seq);
        lk.unlock();
        // Each item in its place: a task that threw raises at its position.
        decode_results<R>(
            blob.bytes, count, [&](std::size_t, result_type&& v) { ready.emplace_back(std::move(v), nullptr); },
            [&](std::size_t, std::exception_ptr e) { ready.emplace_back(std::nullopt, e); });
      }
    }
  };
  std::shared_ptr<impl> impl_;
};

/// Pool::imap (`Ordered`) or imap_unordered of `call` over `inputs`, in
/// chunks of `chunksize` (0: 1), at most about four chunks per worker ahead
/// of the consumer.
template <bool Ordered, class R, class Params, class In>
auto make_imap(const pool_call<R, Params>& call, In&& inputs, std::size_t chunksize) {
  return imap_range<R, std::tuple_element_t<0, Params>, In, Ordered>(call.core(), call.start_map(0),
                                                                     std::size_t(call.options().processes) * 4 + 2,
                                                                     std::forward<In>(inputs),
                                                                     chunksize ? chunksize : 1, call.target_id());
}

} // namespace fiber::detail
