// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/broker.hpp
/// The broker that keeps a Queue's items or a Pipe's messages: a runtime
/// service in the creating process that hands each item out exactly once.

#include <fiber/detail/broker_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// One FIFO of opaque items with waiting getters, putters and pollers.
/// Runtime thread only. Invariants: getters wait only while `items_` is
/// empty; putters wait only while the channel is full (bounded channels).
class channel : public std::enable_shared_from_this<channel> {
public:
  /// `maxsize` 0: unbounded.
  channel(asio::any_io_executor ex, std::size_t maxsize) : ex_(std::move(ex)), maxsize_(maxsize) {}

  void put(std::uint64_t peer, const op_header& h, std::vector<std::byte> item, reply_fn reply) {
    if (dead_) return reply_text(reply, dead_status_, dead_why_);
    if (h.timeout_ms == 0 && getters_.empty() && !room()) return reply_byte(reply, std::uint8_t(give_tag::full));
    putters_.push_back(waiter{peer, h.wait, std::move(reply), nullptr, std::move(item)});
    wait_then_pump(putters_, kind::putter, peer, h);
  }

  void get(std::uint64_t peer, const op_header& h, reply_fn reply) {
    if (dead_) return reply_text(reply, dead_status_, dead_why_); // nothing will come any more
    if (abandoned_.count({proc_of(peer), h.wait})) return reply_byte(reply, std::uint8_t(take_tag::cancelled));
    if (items_.empty() && !eof_ && h.timeout_ms == 0) return reply_byte(reply, std::uint8_t(take_tag::empty));
    getters_.push_back(waiter{peer, h.wait, std::move(reply), nullptr, {}});
    wait_then_pump(getters_, kind::getter, peer, h);
  }

  /// Answers true as soon as an item is there (none is taken) or EOF is known.
  void poll(std::uint64_t peer, const op_header& h, reply_fn reply) {
    if (!items_.empty() || eof_ || dead_) return reply_byte(reply, 1);
    if (h.timeout_ms == 0) return reply_byte(reply, 0);
    pollers_.push_back(waiter{peer, h.wait, std::move(reply), nullptr, {}});
    if (h.timeout_ms > 0) arm(pollers_.back(), kind::poller, h.timeout_ms);
  }

  /// JoinableQueue::task_done: one item put earlier is done; misuse if
  /// every item put has been marked done already.
  void task_done(reply_fn reply) {
    if (unfinished_ == 0)
      return reply_wait(reply, wait_tag::misuse,
                        std::string("fiber::JoinableQueue::task_done: called more times than items were put"));
    --unfinished_;
    pump();
    reply_wait(reply, wait_tag::done);
  }

  /// JoinableQueue::join: answers `done` once every item put has been
  /// marked done (at once if that holds now).
  void join(std::uint64_t peer, const op_header& h, reply_fn reply) {
    if (dead_) return reply_text(reply, dead_status_, dead_why_);
    if (unfinished_ == 0) return reply_wait(reply, wait_tag::done);
    if (h.timeout_ms == 0) return reply_wait(reply, wait_tag::timeout);
    joiners_.push_back(waiter{peer, h.wait, std::move(reply), nullptr, {}});
    if (h.timeout_ms > 0) arm(joiners_.back(), kind::joiner, h.timeout_ms);
  }

  /// A waiter still waiting is answered `cancelled`; one already answered is not touched.
  void cancel(std::uint64_t peer, std::uint64_t wait) {
    for (auto k : {kind::getter, kind::putter, kind::poller, kind::joiner})
      if (auto w = take(k, peer, wait)) answer_cancelled(k, *w);
  }

  /// The getter received the item it was handed: forget the copy.
  void ack(std::uint64_t peer, std::uint64_t wait) { in_flight_.erase({proc_of(peer), wait}); }

  /// The getter's get `wait` failed with its link: it is withdrawn if it
  /// still waits, the item it was handed, if any, goes back in front, and
  /// the get is refused should it arrive later (over the old link).
  void abandon(std::uint64_t peer, std::uint64_t wait) {
    const auto proc = proc_of(peer);
    abandoned_.insert({proc, wait});
    std::erase_if(getters_, [&](const waiter& w) { return proc_of(w.peer) == proc && w.wait == wait; });
    give_back([&](const in_flight_key& k) { return k == in_flight_key{proc, wait}; });
  }

  std::size_t size() const noexcept { return items_.size(); }

  /// A client link closed: drop its waiters (their replies would go
  /// nowhere). The items its process has not acknowledged stay reserved for
  /// it (it may come back and ack them) until it is known dead
  /// (runtime::when_dead); then they go back in front, in order.
  void peer_gone(std::uint64_t peer) {
    for (auto* l : {&getters_, &putters_, &pollers_, &joiners_})
      std::erase_if(*l, [&](const waiter& w) { return w.peer == peer; });
    const auto proc = proc_of(peer);
    const bool holds = std::any_of(in_flight_.begin(), in_flight_.end(),
                                   [&](auto& e) { return e.first.first == proc; });
    if (proc != 0 && holds && watched_.insert(proc).second)
      runtime::instance().when_dead(proc, [weak = weak_from_this(), proc](const std::string&) {
        if (auto self = weak.lock()) {
          self->watched_.erase(proc);
          self->give_back([&](const in_flight_key& k) { return k.first == proc; });
        }
      });
    pump();
  }

  /// Nothing more will be put (the writing end is gone): once drained, getters get EOF.
  void set_eof(std::string why) {
    if (eof_) return;
    eof_ = true;
    eof_why_ = std::move(why);
    pump();
  }

  /// Nothing will be got any more (the reading end is gone): drop the items;
  /// puts fail with EOF ("broken pipe").
  void set_dead(std::string why) {
    if (dead_) return;
    dead_ = true;
    dead_why_ = std::move(why);
    items_.clear();
    in_flight_.clear();
    for (auto* l : {&putters_, &getters_})
      for (auto& w : std::exchange(*l, {})) reply_text(w.reply, wire_status::eof, dead_why_);
    for (auto& w : std::exchange(pollers_, {})) reply_byte(w.reply, 1);
  }

  /// The owner dropped the queue: everyone still waiting gets fiber::error.
  /// The owner is gone: every waiter, and every later call, fails with
  /// worker_lost — the same as when the creating process's link is lost, so
  /// a creator that drops its last handle as it exits gives one answer
  /// whether or not this reply leaves before the process does.
  void shutdown(const std::string& why) {
    dead_ = true;
    dead_status_ = wire_status::worker_lost;
    dead_why_ = why;
    items_.clear();
    in_flight_.clear();
    for (auto* l : {&putters_, &getters_, &pollers_, &joiners_})
      for (auto& w : std::exchange(*l, {})) reply_text(w.reply, wire_status::worker_lost, why);
  }

private:
  enum class kind { getter, putter, poller, joiner };
  using in_flight_key = std::pair<std::uint64_t, std::uint64_t>; // (runtime::process_of, wait id)

  static std::uint64_t proc_of(std::uint64_t peer) { return runtime::instance().process_of(peer); }

  // The unacknowledged items whose key matches go back in front, in order.
  template <class Match>
  void give_back(Match match) {
    std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> back;
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (match(it->first)) {
        back.emplace_back(it->second.first, std::move(it->second.second));
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
    std::sort(back.begin(), back.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (auto& [seq, item] : back) items_.push_front(std::move(item));
    if (dead_) items_.clear();
    pump();
  }

  struct waiter {
    std::uint64_t peer = 0, wait = 0;
    reply_fn reply;
    std::unique_ptr<asio::steady_timer> timer; // destroyed (cancelled) with the waiter
    std::vector<std::byte> item;               // putters: what to store
  };

  std::deque<waiter>& list(kind k) {
    switch (k) {
    case kind::getter: return getters_;
    case kind::putter: return putters_;
    case kind::poller: return pollers_;
    default: return joiners_;
    }
  }

  bool room() const noexcept { return maxsize_ == 0 || items_.size() < maxsize_; }

  std::optional<waiter> take(kind k, std::uint64_t peer, std::uint64_t wait) {
    auto& l = list(k);
    auto it = std::find_if(l.begin(), l.end(), [&](const waiter& w) { return w.peer == peer && w.wait == wait; });
    if (it == l.end()) return std::nullopt;
    waiter w = std::move(*it);
    l.erase(it);
    return w;
  }

  // Queue the waiter (already pushed at the back of `l`), let it match, and
  // arm its timer only if it still waits; a zero timeout answers at once.
  void wait_then_pump(std::deque<waiter>& l, kind k, std::uint64_t peer, const op_header& h) {
    pump();
    auto it = std::find_if(l.begin(), l.end(), [&](const waiter& w) { return w.peer == peer && w.wait == h.wait; });
    if (it == l.end()) return;
    if (h.timeout_ms == 0) {
      auto w = take(k, peer, h.wait);
      answer_timeout(k, *w);
    } else if (h.timeout_ms > 0) {
      arm(*it, k, h.timeout_ms);
    }
  }

  void arm(waiter& w, kind k, std::int64_t ms) {
    w.timer = std::make_unique<asio::steady_timer>(ex_, std::chrono::milliseconds(ms));
    w.timer->async_wait([weak = weak_from_this(), k, peer = w.peer, wait = w.wait](std::error_code ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      // Already answered (the waiter is gone from its list): nothing to do.
      if (auto w = self->take(k, peer, wait)) self->answer_timeout(k, *w);
    });
  }

  static void answer_timeout(kind k, waiter& w) {
    if (k == kind::getter) reply_byte(w.reply, std::uint8_t(take_tag::empty));
    else if (k == kind::putter) reply_byte(w.reply, std::uint8_t(give_tag::full));
    else if (k == kind::joiner) reply_wait(w.reply, wait_tag::timeout);
    else reply_byte(w.reply, 0);
  }
  static void answer_cancelled(kind k, waiter& w) {
    if (k == kind::getter) reply_byte(w.reply, std::uint8_t(take_tag::cancelled));
    else if (k == kind::putter) reply_byte(w.reply, std::uint8_t(give_tag::cancelled));
    else if (k == kind::joiner) reply_wait(w.reply, wait_tag::cancelled);
    else reply_byte(w.reply, 0);
  }

  void deliver(waiter& g, std::vector<std::byte> item) {
    const bool remote = g.peer != 0; // in-process replies cannot be lost: no ack
    std::vector<std::byte> p;
    p.reserve(item.size() + 2);
    p.push_back(std::byte(take_tag::item));
    p.push_back(std::byte(remote ? 1 : 0));
    p.insert(p.end(), item.begin(), item.end());
    if (remote) in_flight_[{proc_of(g.peer), g.wait}] = {next_seq_++, std::move(item)};
    g.reply(wire_status::ok, std::move(p));
  }

  void pump() {
    for (bool moved = true; moved;) {
      moved = false;
      while (!getters_.empty() && !items_.empty()) {
        waiter g = std::move(getters_.front());
        getters_.pop_front();
        auto item = std::move(items_.front());
        items_.pop_front();
        deliver(g, std::move(item));
        moved = true;
      }
      while (!putters_.empty() && room() && !dead_) {
        waiter p = std::move(putters_.front());
        putters_.pop_front();
        items_.push_back(std::move(p.item));
        ++unfinished_;
        reply_byte(p.reply, std::uint8_t(give_tag::stored));
        moved = true;
      }
    }
    if (eof_ && items_.empty())
      for (auto& w : std::exchange(getters_, {})) reply_text(w.reply, wire_status::eof, eof_why_);
    if ((!items_.empty() || eof_) && !pollers_.empty())
      for (auto& w : std::exchange(pollers_, {})) reply_byte(w.reply, 1);
    if (unfinished_ == 0 && !joiners_.empty())
      for (auto& w : std::exchange(joiners_, {})) reply_wait(w.reply, wait_tag::done);
  }

  asio::any_io_executor ex_;
  std::size_t maxsize_;
  std::deque<std::vector<std::byte>> items_;
  std::deque<waiter> getters_, putters_, pollers_, joiners_;
  std::uint64_t unfinished_ = 0; // items stored and not yet marked done (JoinableQueue)
  // (process, wait) → (delivery order, copy of the item) until the getter acks.
  std::map<in_flight_key, std::pair<std::uint64_t, std::vector<std::byte>>> in_flight_;
  std::set<std::uint64_t> watched_;   // getter processes whose death is awaited
  std::set<in_flight_key> abandoned_; // gets abandoned by their getters
  std::uint64_t next_seq_ = 0;
  bool eof_ = false, dead_ = false;
  wire_status dead_status_ = wire_status::eof; // pipes: broken pipe; a shut-down queue: worker_lost
  std::string eof_why_, dead_why_;
};

/// The service behind a fiber::Queue: one channel. Runtime thread only.
class queue_broker : public service {
public:
  queue_broker(asio::any_io_executor ex, std::size_t maxsize)
      : ch_(std::make_shared<channel>(std::move(ex), maxsize)) {}

  std::string_view kind() const noexcept override { return "queue"; }
  std::uint64_t depth() const noexcept override { return ch_->size(); }

  void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    if (op == queue_op::size) {
      writer w;
      w.write(std::uint64_t(ch_->size()));
      return reply(wire_status::ok, w.release());
    }
    auto h = op_header::read_from(r);
    switch (op) {
    case queue_op::put: {
      auto rest = r.read_span(r.remaining());
      return ch_->put(peer, h, {rest.begin(), rest.end()}, std::move(reply));
    }
    case queue_op::get: return ch_->get(peer, h, std::move(reply));
    case queue_op::poll: return ch_->poll(peer, h, std::move(reply));
    case queue_op::cancel: ch_->cancel(peer, h.wait); return reply(wire_status::ok, {});
    case queue_op::ack: ch_->ack(peer, h.wait); return reply(wire_status::ok, {});
    case queue_op::abandon: ch_->abandon(peer, h.wait); return reply(wire_status::ok, {});
    case queue_op::task_done: return ch_->task_done(std::move(reply));
    case queue_op::join: return ch_->join(peer, h, std::move(reply));
    default: return reply_text(reply, wire_status::error, "fiber::Queue: unknown operation " + std::to_string(op));
    }
  }

  void peer_gone(std::uint64_t peer) override { ch_->peer_gone(peer); }
  void shutdown(const std::string& why) override { ch_->shutdown(why); }

private:
  std::shared_ptr<channel> ch_;
};

/// The service behind a fiber::Pipe: `ch_[e]` holds what end `e` will
/// receive. It counts the holders of each end — attached Connection objects,
/// per client process (runtime::process_of; 0: this process), which keep
/// them across a lost link until they are known dead (runtime::when_dead) —
/// and the transfers in flight (serialized, not yet deserialized ends). An
/// end with neither is gone: its peer reads EOF once drained, and sends to
/// it fail. When both ends are gone the broker removes itself. Runtime
/// thread only.
class pipe_broker : public service, public std::enable_shared_from_this<pipe_broker> {
public:
  explicit pipe_broker(asio::any_io_executor ex)
      : ch_{std::make_shared<channel>(ex, 0), std::make_shared<channel>(ex, 0)} {
    // Pipe<T>() hands out one Connection per end in this process.
    ends_[0].holders[0] = 1;
    ends_[1].holders[0] = 1;
  }

  std::string_view kind() const noexcept override { return "pipe"; }
  std::uint64_t depth() const noexcept override { return ch_[0]->size() + ch_[1]->size(); }

  void set_id(std::uint64_t id) { id_ = id; }

  void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    if (op == queue_op::attach || op == queue_op::detach || op == queue_op::transfer) {
      auto e = end_of(r.read<std::uint8_t>());
      auto token = r.read<std::uint64_t>();
      if (op == queue_op::attach) attach(peer, e, token);
      else if (op == queue_op::detach) detach(peer, e);
      else transfer(e, token);
      return reply(wire_status::ok, {});
    }
    auto h = op_header::read_from(r);
    auto e = end_of(h.end);
    switch (op) {
    case queue_op::put: {
      auto rest = r.read_span(r.remaining());
      return ch_[1 - e]->put(peer, h, {rest.begin(), rest.end()}, std::move(reply));
    }
    case queue_op::get: return ch_[e]->get(peer, h, std::move(reply));
    case queue_op::poll: return ch_[e]->poll(peer, h, std::move(reply));
    case queue_op::cancel:
      ch_[0]->cancel(peer, h.wait);
      ch_[1]->cancel(peer, h.wait);
      return reply(wire_status::ok, {});
    case queue_op::ack: ch_[e]->ack(peer, h.wait); return reply(wire_status::ok, {});
    case queue_op::abandon: ch_[e]->abandon(peer, h.wait); return reply(wire_status::ok, {});
    default: return reply_text(reply, wire_status::error, "fiber::Connection: unknown operation " + std::to_string(op));
    }
  }

  void peer_gone(std::uint64_t peer) override {
    ch_[0]->peer_gone(peer);
    ch_[1]->peer_gone(peer);
    const auto proc = runtime::instance().process_of(peer);
    if (proc == 0 || (!ends_[0].holders.count(proc) && !ends_[1].holders.count(proc))) return;
    if (watched_.insert(proc).second)
      runtime::instance().when_dead(proc, [weak = weak_from_this(), proc](const std::string&) {
        auto self = weak.lock();
        if (!self) return;
        self->watched_.erase(proc);
        for (int e : {0, 1}) {
          self->ends_[e].holders.erase(proc);
          self->check_gone(e);
        }
      });
  }

private:
  struct end_state {
    std::map<std::uint64_t, std::size_t> holders; // client process → attached Connections
    std::set<std::uint64_t> transfers;            // tokens serialized, not yet claimed
    bool gone = false;
  };

  static int end_of(std::uint8_t e) {
    if (e > 1) throw serialization_error("fiber::Connection: bad end " + std::to_string(e));
    return e;
  }

  void attach(std::uint64_t peer, int e, std::uint64_t token) {
    ++ends_[e].holders[runtime::instance().process_of(peer)];
    // A claim may overtake its transfer (they travel on different links).
    if (token != 0 && ends_[e].transfers.erase(token) == 0) early_claims_.insert(token);
  }

  void detach(std::uint64_t peer, int e) {
    auto& h = ends_[e].holders;
    if (auto it = h.find(runtime::instance().process_of(peer)); it != h.end() && --it->second == 0) h.erase(it);
    check_gone(e);
  }

  void transfer(int e, std::uint64_t token) {
    if (early_claims_.erase(token) == 0) ends_[e].transfers.insert(token);
  }

  void check_gone(int e) {
    auto& s = ends_[e];
    if (s.gone || !s.holders.empty() || !s.transfers.empty()) return;
    s.gone = true;
    ch_[e]->set_dead("fiber::Connection::send: the receiving end is closed (broken pipe)");
    ch_[1 - e]->set_eof("fiber::Connection::recv: the peer end is closed and everything it sent has been read");
    if (ends_[1 - e].gone && id_ != 0) runtime::instance().remove_service(id_);
  }

  std::shared_ptr<channel> ch_[2];
  end_state ends_[2];
  std::set<std::uint64_t> early_claims_;
  std::set<std::uint64_t> watched_; // holder processes whose death is awaited
  std::uint64_t id_ = 0;
};

} // namespace fiber::detail
