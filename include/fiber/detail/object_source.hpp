// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_source.hpp
/// One object's bytes served to other hosts: by its owner, and by every
/// host's copy while and after it is fetched, so that hosts fetch from one
/// another in a chain and the owner sends about one copy.

#include <fiber/detail/service.hpp>
#include <fiber/detail/shared_segment.hpp>
#include <fiber/serialize.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Operations of an object's sources, and of every process's drop listener.
enum store_op : std::uint32_t {
  store_attach = 1, ///< (owner) [listener url, id]: tell it when the object goes
  store_read = 2,   ///< [offset, length] → those bytes (waits for them at a copy being fetched)
  store_drop = 3,   ///< (listener) [nonce]: the owner dropped it
  store_where = 4,  ///< (owner) [new source url, id][failed url, id] → [url, id] to read from
};

/// Serves one object's segment, `have` bytes of it so far (all of it at the
/// owner); a read past them waits until the fetch brings them. At the owner
/// it also places fetching hosts in the chain. Runtime thread only.
class object_source final : public service {
public:
  /// `view`: the whole segment mapped; `have`: bytes already in it; `owner`:
  /// this is the owner's (it answers attach and where); `on_shutdown(listeners)`
  /// runs once, when it shuts down (the owner's last handle went, or the copy
  /// was dropped).
  object_source(std::shared_ptr<const segment_view> view, std::uint64_t have, bool owner,
                std::function<void(std::vector<service_ref>)> on_shutdown = {})
      : view_(std::move(view)),
        size_(view_->data().size()),
        have_(have),
        owner_(owner),
        on_shutdown_(std::move(on_shutdown)) {}

  /// Any thread: its mapping goes now, and reads from here on fail (the
  /// owner's last handle went; the service shuts down later, on the runtime
  /// thread), so that the bytes no longer count against the host's bound.
  void release() {
    std::shared_ptr<const segment_view> gone;
    std::lock_guard lk(view_mu_);
    gone = std::move(view_);
  }

  /// Bytes served to other processes so far (for tests and benchmarks).
  static std::atomic<std::uint64_t>& served() {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }

  /// Bytes this process serves before it holds further reads back until it
  /// ends (tests: a source that stops mid-fetch, then dies). Unlimited by default.
  static std::atomic<std::uint64_t>& serve_limit() {
    static std::atomic<std::uint64_t> n{UINT64_MAX};
    return n;
  }

  /// The fetch has `have` bytes in place: answer the reads waiting for them.
  void advance(std::uint64_t have) {
    have_ = std::max(have_, have);
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& w : waiting) read(w.at, w.n, std::move(w.reply));
  }

  void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    if (closed_) return reply(wire_status::error, failure_payload("fiber: this copy of the object is gone"));
    if (op == store_read) {
      const auto [at, n] = deserialize<std::pair<std::uint64_t, std::uint64_t>>(payload);
      if (at > size_ || n > size_ - at)
        return reply(wire_status::error, failure_payload("fiber: object read past its end"));
      return read(at, n, std::move(reply));
    }
    if (op == store_attach && owner_) {
      listeners_.insert(deserialize<std::pair<std::string, std::uint64_t>>(payload));
      return reply(wire_status::ok, {});
    }
    if (op == store_where && owner_) {
      using ref = std::pair<std::string, std::uint64_t>;
      const auto [fresh, failed] = deserialize<std::pair<ref, ref>>(payload);
      std::erase(chain_, failed);
      // A new fetcher reads from the last one (a pipelined chain); one whose
      // source failed resumes from the owner (named {"", 0}), which has every byte.
      ref from = failed.second || chain_.empty() ? ref{} : chain_.back();
      if (!failed.second) chain_.push_back(fresh);
      return reply(wire_status::ok, serialize(from));
    }
    reply(wire_status::error, failure_payload("fiber: unknown object store operation"));
  }

  void shutdown(const std::string&) override {
    closed_ = true;
    for (auto& w : std::exchange(waiting_, {}))
      w.reply(wire_status::error, failure_payload("fiber: this copy of the object is gone"));
    if (on_shutdown_) {
      std::vector<service_ref> ls;
      for (auto& [url, id] : listeners_) ls.push_back({url, id});
      std::exchange(on_shutdown_, nullptr)(std::move(ls));
    }
    release();
  }

private:
  struct pending {
    std::uint64_t at, n;
    reply_fn reply;
  };

  void read(std::uint64_t at, std::uint64_t n, reply_fn reply) {
    if (at + n > have_ || served() + n > serve_limit()) return waiting_.push_back({at, n, std::move(reply)});
    std::shared_ptr<const segment_view> view;
    {
      std::lock_guard lk(view_mu_);
      view = view_;
    }
    if (!view) return reply(wire_status::error, failure_payload("fiber: this copy of the object is gone"));
    auto data = view->data().subspan(std::size_t(at), std::size_t(n));
    served() += n;
    reply(wire_status::ok, std::vector<std::byte>(data.begin(), data.end()));
  }

  std::mutex view_mu_;
  std::shared_ptr<const segment_view> view_; // under view_mu_
  const std::uint64_t size_;                 // the view's, kept after release()
  std::uint64_t have_;
  bool owner_;
  std::function<void(std::vector<service_ref>)> on_shutdown_;
  std::set<std::pair<std::string, std::uint64_t>> listeners_;
  std::vector<std::pair<std::string, std::uint64_t>> chain_;
  std::vector<pending> waiting_;
  bool closed_ = false;
};

} // namespace fiber::detail
