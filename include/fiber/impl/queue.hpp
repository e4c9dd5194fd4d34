#pragma once
/// @file impl/queue.hpp
/// Internals shared by fiber::Queue and fiber::Pipe: the broker that keeps
/// the items (a runtime service in the creating process), and the client
/// side of its small request protocol. Not a public header.
///
/// Protocol (runtime::request, op codes in `queue_op`). Every item operation
/// starts with the header [u64 wait id][i64 timeout ms: -1 forever, 0 now]
/// [u8 end]; `wait id` is unique in the calling process, so (link, wait id)
/// names one waiting request at the broker (for cancel and ack).
///  - put:    header, item bytes    → [u8 give_tag]            (status 3: the reader is gone)
///  - get:    header                → [u8 take_tag] (item: then [u8 ack?][item bytes...]; status 3: EOF)
///  - poll:   header                → [u8 0/1]
///  - cancel: header                → empty; the waiter (if still waiting) is answered `cancelled`
///  - ack:    header                → empty; a remote getter confirms it received the item
///  - size:   —                     → [u64]
///  - attach / detach / transfer (pipes): [u8 end][u64 token] → empty
///
/// Exactly once: an item leaves the broker in the reply to one get. A reply
/// to another process may be lost if that process dies, so the broker keeps
/// a copy until the getter acks it; when the getter's link closes
/// (service::peer_gone) unacknowledged items go back to the front of the
/// queue. Timeouts are the broker's (a timer on the runtime thread that
/// answers "empty"), so an item is never taken and then dropped.

#include <fiber/detail/runtime.hpp>
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

namespace queue_op {
inline constexpr std::uint32_t put = 1, get = 2, poll = 3, cancel = 4, ack = 5, size = 6;
inline constexpr std::uint32_t attach = 10, detach = 11, transfer = 12;
} // namespace queue_op

/// First byte of a get reply.
enum class take_tag : std::uint8_t { item = 0, empty = 1, cancelled = 2 };
/// The byte of a put reply.
enum class give_tag : std::uint8_t { stored = 0, full = 1, cancelled = 2 };

inline void reply_text(const reply_fn& reply, wire_status status, const std::string& msg) {
  reply(status, failure_payload(msg));
}

inline void reply_byte(const reply_fn& reply, std::uint8_t b) { reply(wire_status::ok, {std::byte{b}}); }

/// Header of an item operation.
struct op_header {
  std::uint64_t wait = 0;
  std::int64_t timeout_ms = -1;
  std::uint8_t end = 0;

  void write_to(writer& w) const {
    w.write(wait);
    w.write(timeout_ms);
    w.write(end);
  }
  static op_header read_from(reader& r) {
    op_header h;
    h.wait = r.read<std::uint64_t>();
    h.timeout_ms = r.read<std::int64_t>();
    h.end = r.read<std::uint8_t>();
    return h;
  }
  std::vector<std::byte> bytes() const {
    writer w;
    write_to(w);
    return w.release();
  }
};

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

  /// A waiter still waiting is answered `cancelled`; one already answered is not touched.
  void cancel(std::uint64_t peer, std::uint64_t wait) {
    for (auto k : {kind::getter, kind::putter, kind::poller})
      if (auto w = take(k, peer, wait)) answer_cancelled(k, *w);
  }

  /// The getter received the item it was handed: forget the copy.
  void ack(std::uint64_t peer, std::uint64_t wait) { in_flight_.erase({peer, wait}); }

  std::size_t size() const noexcept { return items_.size(); }

  /// A client link closed: drop its waiters (their replies would go nowhere)
  /// and put the items it never acknowledged back in front, in order.
  void peer_gone(std::uint64_t peer) {
    for (auto* l : {&getters_, &putters_, &pollers_})
      std::erase_if(*l, [&](const waiter& w) { return w.peer == peer; });
    std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> back;
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (it->first.first == peer) {
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
    for (auto* l : {&putters_, &getters_, &pollers_})
      for (auto& w : std::exchange(*l, {})) reply_text(w.reply, wire_status::worker_lost, why);
  }

private:
  enum class kind { getter, putter, poller };

  struct waiter {
    std::uint64_t peer = 0, wait = 0;
    reply_fn reply;
    std::unique_ptr<asio::steady_timer> timer; // destroyed (cancelled) with the waiter
    std::vector<std::byte> item;               // putters: what to store
  };

  std::deque<waiter>& list(kind k) { return k == kind::getter ? getters_ : k == kind::putter ? putters_ : pollers_; }

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
    else reply_byte(w.reply, 0);
  }
  static void answer_cancelled(kind k, waiter& w) {
    if (k == kind::getter) reply_byte(w.reply, std::uint8_t(take_tag::cancelled));
    else if (k == kind::putter) reply_byte(w.reply, std::uint8_t(give_tag::cancelled));
    else reply_byte(w.reply, 0);
  }

  void deliver(waiter& g, std::vector<std::byte> item) {
    const bool remote = g.peer != 0; // in-process replies cannot be lost: no ack
    std::vector<std::byte> p;
    p.reserve(item.size() + 2);
    p.push_back(std::byte(take_tag::item));
    p.push_back(std::byte(remote ? 1 : 0));
    p.insert(p.end(), item.begin(), item.end());
    if (remote) in_flight_[{g.peer, g.wait}] = {next_seq_++, std::move(item)};
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
        reply_byte(p.reply, std::uint8_t(give_tag::stored));
        moved = true;
      }
    }
    if (eof_ && items_.empty())
      for (auto& w : std::exchange(getters_, {})) reply_text(w.reply, wire_status::eof, eof_why_);
    if ((!items_.empty() || eof_) && !pollers_.empty())
      for (auto& w : std::exchange(pollers_, {})) reply_byte(w.reply, 1);
  }

  asio::any_io_executor ex_;
  std::size_t maxsize_;
  std::deque<std::vector<std::byte>> items_;
  std::deque<waiter> getters_, putters_, pollers_;
  // (peer, wait) → (delivery order, copy of the item) until the getter acks.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<std::uint64_t, std::vector<std::byte>>> in_flight_;
  std::uint64_t next_seq_ = 0;
  bool eof_ = false, dead_ = false;
  wire_status dead_status_ = wire_status::eof; // pipes: broken pipe; a shut-down queue: worker_lost
  std::string eof_why_, dead_why_;
};

/// The service behind a fiber::Queue: one channel. Runtime thread only.
class queue_broker : public service {
public:
  queue_broker(asio::any_io_executor ex, std::size_t maxsize) : ch_(std::make_shared<channel>(std::move(ex), maxsize)) {}

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
    case queue_op::cancel: ch_->cancel(peer, h.wait); return reply(wire_status::ok, {});
    case queue_op::ack: ch_->ack(peer, h.wait); return reply(wire_status::ok, {});
    default: return reply_text(reply, wire_status::error, "fiber::Queue: unknown operation " + std::to_string(op));
    }
  }

  void peer_gone(std::uint64_t peer) override { ch_->peer_gone(peer); }
  void shutdown(const std::string& why) { ch_->shutdown(why); }

private:
  std::shared_ptr<channel> ch_;
};

/// The service behind a fiber::Pipe: `ch_[e]` holds what end `e` will
/// receive. It counts the holders of each end — attached Connection objects,
/// per client link (0: this process) — and the transfers in flight
/// (serialized, not yet deserialized ends). An end with neither is gone: its
/// peer reads EOF once drained, and sends to it fail. When both ends are
/// gone the broker removes itself. Runtime thread only.
class pipe_broker : public service {
public:
  explicit pipe_broker(asio::any_io_executor ex)
      : ch_{std::make_shared<channel>(ex, 0), std::make_shared<channel>(ex, 0)} {
    // Pipe<T>() hands out one Connection per end in this process.
    ends_[0].holders[0] = 1;
    ends_[1].holders[0] = 1;
  }

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
    default: return reply_text(reply, wire_status::error, "fiber::Connection: unknown operation " + std::to_string(op));
    }
  }

  void peer_gone(std::uint64_t peer) override {
    ch_[0]->peer_gone(peer);
    ch_[1]->peer_gone(peer);
    for (int e : {0, 1}) {
      ends_[e].holders.erase(peer);
      check_gone(e);
    }
  }

private:
  struct end_state {
    std::map<std::uint64_t, std::size_t> holders; // client link → attached Connections
    std::set<std::uint64_t> transfers;            // tokens serialized, not yet claimed
    bool gone = false;
  };

  static int end_of(std::uint8_t e) {
    if (e > 1) throw serialization_error("fiber::Connection: bad end " + std::to_string(e));
    return e;
  }

  void attach(std::uint64_t peer, int e, std::uint64_t token) {
    ++ends_[e].holders[peer];
    // A claim may overtake its transfer (they travel on different links).
    if (token != 0 && ends_[e].transfers.erase(token) == 0) early_claims_.insert(token);
  }

  void detach(std::uint64_t peer, int e) {
    auto& h = ends_[e].holders;
    if (auto it = h.find(peer); it != h.end() && --it->second == 0) h.erase(it);
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
  std::uint64_t id_ = 0;
};

// ---- client side ---------------------------------------------------------------

/// Names a broker: the URL of the process it lives in and its service id.
struct broker_ref {
  std::string url;
  std::uint64_t id = 0;
};

/// Unique in this process (names one waiting request at a broker).
inline std::uint64_t next_wait_id() {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}

/// A random 64-bit token (transfer ids: unique across processes).
inline std::uint64_t random_token() {
  static const std::uint64_t seed = [] {
    std::random_device rd;
    return (std::uint64_t(rd()) << 32) ^ rd() ^ (std::uint64_t(::getpid()) << 20);
  }();
  static std::atomic<std::uint64_t> counter{0};
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * ++counter; // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z ? z : 1;
}

/// Milliseconds for the broker: 0 for a non-positive timeout, else rounded up.
template <class Rep, class Period>
std::int64_t timeout_ms(std::chrono::duration<Rep, Period> d) {
  if (d <= d.zero()) return 0;
  constexpr double cap = 1e12; // ~30 years: no overflow in the broker's timer
  double ms = std::chrono::duration<double, std::milli>(d).count();
  if (ms >= cap) return std::int64_t(cap);
  return std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::milliseconds>(d).count());
}

/// A get reply: [tag], or for an item [tag][ack?][item bytes].
struct take_reply {
  take_tag tag = take_tag::empty;
  std::vector<std::byte> bytes;
  std::span<const std::byte> item() const { return std::span<const std::byte>(bytes).subspan(2); }
};

inline std::exception_ptr bad_reply() {
  return std::make_exception_ptr(serialization_error("fiber: malformed reply from a queue broker"));
}

/// Send a get; `done` runs on the runtime thread. A remote delivery is acked
/// before `done` runs, so the broker forgets its copy only once the item is here.
inline void async_take(const broker_ref& r, std::uint8_t end, std::uint64_t wait, std::int64_t timeout,
                       std::function<void(std::exception_ptr, take_reply)> done) {
  op_header h{wait, timeout, end};
  runtime::instance().request(
      r.url, r.id, queue_op::get, h.bytes(),
      [r, h, done = std::move(done)](std::exception_ptr e, std::vector<std::byte> p) {
        take_reply out;
        if (!e) {
          auto tag = p.empty() ? 255u : std::to_integer<unsigned>(p[0]);
          if (tag > 2 || (tag == unsigned(take_tag::item) && p.size() < 2)) {
            e = bad_reply();
          } else {
            out.tag = take_tag(tag);
            if (out.tag == take_tag::item && p[1] != std::byte{0})
              runtime::instance().request(r.url, r.id, queue_op::ack, h.bytes(), [](std::exception_ptr, auto) {});
            out.bytes = std::move(p);
          }
        }
        done(e, std::move(out));
      });
}

/// Send a put whose payload (header + item) is already built.
inline void async_give(const broker_ref& r, std::vector<std::byte> payload,
                       std::function<void(std::exception_ptr, give_tag)> done) {
  runtime::instance().request(r.url, r.id, queue_op::put, std::move(payload),
                              [done = std::move(done)](std::exception_ptr e, std::vector<std::byte> p) {
                                give_tag t = give_tag::full;
                                if (!e) {
                                  if (p.size() != 1 || std::to_integer<unsigned>(p[0]) > 2) e = bad_reply();
                                  else t = give_tag(std::to_integer<unsigned>(p[0]));
                                }
                                done(e, t);
                              });
}

/// Header + encoded value, in one buffer.
template <class T>
std::vector<std::byte> put_payload(const op_header& h, const T& v) {
  writer w;
  h.write_to(w);
  if constexpr (serializable<T>) w.write(v); // else check_item_type has said why
  return w.release();
}

/// An item's value (serialization_error for bytes that are not a T).
template <class T>
T decode_item(std::span<const std::byte> bytes) {
  if constexpr (serializable<T>) return fiber::deserialize<T>(bytes);
  else throw serialization_error("fiber: not serializable"); // check_item_type has said why
}

/// Withdraw a waiting request (fire and forget; the waiter's own reply says
/// whether it was still waiting).
inline void send_cancel(const broker_ref& r, std::uint8_t end, std::uint64_t wait) {
  runtime::instance().request(r.url, r.id, queue_op::cancel, op_header{wait, 0, end}.bytes(),
                              [](std::exception_ptr, auto) {});
}

/// Run `start(callback)` and wait on the calling thread for the callback.
/// Blocking on the runtime thread would deadlock it: that is a logic_error.
template <class R, class Start>
R wait_on_runtime(const char* what, Start&& start) {
  if (runtime::instance().on_runtime_thread())
    throw std::logic_error(std::string(what) +
                           ": blocking call on fiber's runtime thread (e.g. in a completion handler); "
                           "use the async_ form there");
  auto pr = std::make_shared<std::promise<R>>();
  auto fut = pr->get_future();
  start([pr](std::exception_ptr e, R v) {
    if (e) pr->set_exception(e);
    else pr->set_value(std::move(v));
  });
  return fut.get();
}

/// A control request (attach/detach/transfer): waited for off the runtime
/// thread (so its effect is in place when the caller goes on), fire and
/// forget on it; requests from one thread reach the broker in order either
/// way. Errors (the owner is gone) are swallowed: nothing is left to update.
inline void control(const broker_ref& r, std::uint32_t op, std::uint8_t end, std::uint64_t token) {
  writer w;
  w.write(end);
  w.write(token);
  auto& rt = runtime::instance();
  if (rt.on_runtime_thread()) return rt.request(r.url, r.id, op, w.release(), [](std::exception_ptr, auto) {});
  auto pr = std::make_shared<std::promise<void>>();
  auto fut = pr->get_future();
  rt.request(r.url, r.id, op, w.release(), [pr](std::exception_ptr, auto) { pr->set_value(); });
  // Bounded: a runtime already stopped (static destruction) must not hang us.
  if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready)
    log(log_level::warning, "fiber: no answer from the broker at ", r.url, " (pipe bookkeeping skipped)");
}

inline std::exception_ptr aborted() {
  return std::make_exception_ptr(std::system_error(asio::error::make_error_code(asio::error::operation_aborted)));
}

/// State of one async operation: the handler, work on its executor, and its
/// cancellation slot (cleared on that executor just before the handler runs).
template <class Handler>
struct async_op {
  using executor_type = asio::associated_executor_t<Handler, asio::any_io_executor>;
  using slot_type = asio::associated_cancellation_slot_t<Handler>;

  explicit async_op(Handler&& h)
      : handler(std::move(h)),
        work(asio::make_work_guard(asio::get_associated_executor(handler, runtime::instance().executor()))),
        slot(asio::get_associated_cancellation_slot(handler)) {}

  /// Cancellation (any type) asks the broker to withdraw the request.
  void on_cancel(broker_ref r, std::uint8_t end, std::uint64_t wait) {
    if (slot.is_connected())
      slot.assign([r = std::move(r), end, wait](asio::cancellation_type) { send_cancel(r, end, wait); });
  }

  /// Run the handler with `args` on its associated executor.
  template <class... Args>
  static void complete(std::shared_ptr<async_op> self, Args... args) {
    auto ex = self->work.get_executor();
    asio::dispatch(ex, [self = std::move(self), args = std::make_tuple(std::move(args)...)]() mutable {
      if (self->slot.is_connected()) self->slot.clear();
      auto h = std::move(self->handler);
      self->work.reset();
      std::apply([&](auto&&... a) { std::move(h)(std::move(a)...); }, std::move(args));
    });
  }

  Handler handler;
  asio::executor_work_guard<executor_type> work;
  slot_type slot;
};

/// Take one item and complete `handler(std::exception_ptr, T)`: the item, or
/// serialization_error (bytes not a T: the item is dropped), eof_error,
/// worker_lost, fiber::error, or operation_aborted when cancelled while waiting.
template <class T, class Handler>
void start_async_take(const broker_ref& r, std::uint8_t end, Handler&& handler) {
  auto op = std::make_shared<async_op<std::decay_t<Handler>>>(std::move(handler));
  auto wait = next_wait_id();
  op->on_cancel(r, end, wait);
  async_take(r, end, wait, -1, [op](std::exception_ptr e, take_reply rep) {
    T v{};
    if (!e) {
      if (rep.tag == take_tag::item) {
        try {
          v = decode_item<T>(rep.item());
        } catch (...) {
          e = std::current_exception();
        }
      } else {
        e = aborted();
      }
    }
    async_op<std::decay_t<Handler>>::complete(op, e, std::move(v));
  });
}

/// Put one item (already encoded) and complete `handler(std::exception_ptr)`.
template <class Handler>
void start_async_give(const broker_ref& r, std::uint8_t end, std::uint64_t wait, std::vector<std::byte> payload,
                      Handler&& handler) {
  auto op = std::make_shared<async_op<std::decay_t<Handler>>>(std::move(handler));
  op->on_cancel(r, end, wait);
  async_give(r, std::move(payload), [op](std::exception_ptr e, give_tag t) {
    if (!e && t != give_tag::stored) e = aborted();
    async_op<std::decay_t<Handler>>::complete(op, e);
  });
}

// ---- queues owned by this process ---------------------------------------------

/// Keeps a Queue's broker registered while a handle exists in the creating
/// process; the last one out shuts it down (waiters get fiber::error).
struct queue_owner {
  queue_owner(std::uint64_t id, std::shared_ptr<queue_broker> b) : id(id), broker(std::move(b)) {}
  queue_owner(const queue_owner&) = delete;
  queue_owner& operator=(const queue_owner&) = delete;
  ~queue_owner();

  std::uint64_t id;
  std::shared_ptr<queue_broker> broker;
};

/// Queues created by this process, so a handle that comes back (deserialized
/// here) keeps its broker alive too. Any thread.
class local_queues {
public:
  static local_queues& instance() {
    static local_queues q;
    return q;
  }
  void add(std::uint64_t id, std::string url, const std::shared_ptr<queue_owner>& o) {
    std::lock_guard lk(m_);
    map_[id] = {std::move(url), o};
  }
  std::shared_ptr<queue_owner> find(std::uint64_t id, const std::string& url) {
    std::lock_guard lk(m_);
    auto it = map_.find(id);
    if (it == map_.end() || it->second.first != url) return nullptr;
    return it->second.second.lock();
  }
  void erase_expired(std::uint64_t id) {
    std::lock_guard lk(m_);
    if (auto it = map_.find(id); it != map_.end() && it->second.second.expired()) map_.erase(it);
  }

private:
  std::mutex m_;
  std::unordered_map<std::uint64_t, std::pair<std::string, std::weak_ptr<queue_owner>>> map_;
};

inline queue_owner::~queue_owner() {
  local_queues::instance().erase_expired(id);
  auto& rt = runtime::instance();
  asio::post(rt.executor(), [b = std::move(broker)] {
    b->shutdown("fiber::Queue: the queue is gone (its last handle in the creating process was destroyed)");
  });
  rt.remove_service(id);
}

/// What every copy of one Queue handle shares. The broker is created on
/// first use, so that a default-constructed handle about to be overwritten
/// (deserialization builds values empty first) costs nothing.
struct queue_state {
  explicit queue_state(std::size_t maxsize) : maxsize(maxsize) {}
  queue_state(broker_ref r, std::size_t maxsize, std::shared_ptr<queue_owner> keep)
      : ref_(std::move(r)), maxsize(maxsize), keepalive(std::move(keep)) {
    std::call_once(once_, [] {});
  }

  const broker_ref& ref() {
    std::call_once(once_, [this] {
      auto& rt = runtime::instance();
      auto b = std::make_shared<queue_broker>(rt.executor(), maxsize);
      ref_.id = rt.add_service(b);
      ref_.url = rt.service_url();
      keepalive = std::make_shared<queue_owner>(ref_.id, std::move(b));
      local_queues::instance().add(ref_.id, ref_.url, keepalive);
    });
    return ref_;
  }

private:
  std::once_flag once_;
  broker_ref ref_;

public:
  const std::size_t maxsize;
  std::shared_ptr<queue_owner> keepalive; // set once (in call_once or the constructor)
};

} // namespace fiber::detail
