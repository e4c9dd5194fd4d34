// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file queue.hpp
/// fiber::Queue<T> and fiber::JoinableQueue<T> — multiprocessing.Queue and
/// JoinableQueue across processes and machines.
///
/// ```cpp
/// fiber::Queue<int> q;                          // unbounded; fiber::Queue<int> q{8} holds at most 8
/// fiber::Process p{fiber::target<&worker>, q};  // handles are serializable
/// q.put(1);  int v = q.get();
/// std::optional<int> w = q.get(std::chrono::milliseconds{50});  // nullopt on timeout
/// int x = co_await q.async_get(asio::use_awaitable);
/// fiber::JoinableQueue<int> jq;  jq.put(1);  ...  jq.task_done();  jq.join();
/// ```

#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/broker.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/queue_state.hpp>
#include <fiber/detail/sync_client.hpp>
#include <fiber/serialize.hpp>

#include <asio/async_result.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace fiber {

/// A multi-producer, multi-consumer FIFO shared by processes: every item put
/// is got exactly once, by one getter, whichever process it is in.
///
/// **Where the items live.** In a broker inside the process that created the
/// queue (the one that constructed it, or first used a default-constructed
/// handle), served by that process's fiber runtime thread; items are kept as
/// bytes there and decoded by the getter. Other processes reach it through
/// the handle, which names the broker (creator's URL + id): a copy (or a
/// serialized copy passed to a Process or a Pool task) names the same queue.
/// Consequences: the creating process must outlive the queue's users, and
/// must keep at least one handle while others use it. If it exits, the items
/// are lost and every other process gets fiber::worker_lost from its next
/// operation (and from operations waiting at that moment). If its last handle
/// is destroyed, the broker shuts down: operations waiting at that moment
/// get fiber::worker_lost too (so a creator that drops its last handle as it
/// exits gives one answer), later ones fiber::error (no such queue).
///
/// **Delivery.** A blocking `get` waits at the broker; a timed get's timeout
/// is the broker's, so an item is never taken and then dropped. While the
/// link to the broker's process is still being set up (a first call to an
/// owner that is stopped or hung), a timed call returns at its own timeout
/// (its request withdrawn unsent) and an untimed one fails with
/// fiber::worker_lost after connect_timeout_ms. An item larger than
/// max_message_size_mb fails its put with fiber::error; the link stays. An item
/// handed to a getter in another process is kept until that process
/// confirms receipt; if its connection dies first, the item is put back at
/// the front. Waiting getters and putters are served first come, first served.
///
/// **Bounded queues.** With `maxsize > 0`, `put` blocks while the queue holds
/// `maxsize` items (back-pressure), `put(v, timeout)` returns false if no
/// room appeared in time.
///
/// **Errors.** A stored item that does not decode as T (a handle of another
/// type naming the same queue) throws fiber::serialization_error from the
/// get that received it; that item is dropped and the queue keeps working.
/// fiber::worker_lost: the creating process is unreachable, or dropped its
/// last handle while this operation waited. fiber::error: the queue was shut
/// down. std::logic_error: a blocking call on fiber's
/// runtime thread (e.g. inside a completion handler running there; use the
/// async_ forms); a put or get through a handle after its close().
///
/// **Thread safety.** A handle may be used (and copied) from any thread
/// concurrently. Blocking calls wait on the calling thread; the runtime
/// thread never blocks.
template <class T>
class Queue : detail::check_item_type<T> {
public:
  using value_type = T; ///< the item type

  /// An unbounded queue. Its broker starts in this process on first use.
  Queue() : Queue(0) {}
  /// A queue of at most `maxsize` items (0: unbounded).
  explicit Queue(std::size_t maxsize) : st_(std::make_shared<detail::queue_state>(maxsize)) {}
  /// The same from any integer type, so `Queue<T> q{n}` with an `int n`
  /// compiles; as in Python, maxsize <= 0 means unbounded.
  template <std::integral I>
    requires(!std::same_as<I, std::size_t> && !std::same_as<I, bool>)
  explicit Queue(I maxsize) : Queue(maxsize > 0 ? static_cast<std::size_t>(maxsize) : std::size_t{0}) {}

  /// Blocks until there is room, then stores a copy of `v`.
  void put(const T& v) {
    st_->check_open("fiber::Queue::put");
    auto wait = detail::next_wait_id();
    auto payload = detail::put_payload(detail::op_header{wait, -1, 0}, v);
    (void)give("fiber::Queue::put", std::move(payload));
  }

  /// Waits at most `timeout` for room; false if there was none (nothing stored).
  template <class Rep, class Period>
  bool put(const T& v, std::chrono::duration<Rep, Period> timeout) {
    st_->check_open("fiber::Queue::put");
    auto wait = detail::next_wait_id();
    const auto ms = detail::timeout_ms(timeout);
    auto payload = detail::put_payload(detail::op_header{wait, ms, 0}, v);
    return give("fiber::Queue::put", std::move(payload), ms) == detail::give_tag::stored;
  }

  /// Stores `v` if there is room now; false otherwise.
  bool put_nowait(const T& v) { return put(v, std::chrono::milliseconds(0)); }

  /// Blocks until an item is available and returns it.
  T get() { return *take("fiber::Queue::get", -1); }

  /// Waits at most `timeout`; std::nullopt if no item came.
  template <class Rep, class Period>
  std::optional<T> get(std::chrono::duration<Rep, Period> timeout) {
    return take("fiber::Queue::get", detail::timeout_ms(timeout));
  }

  /// An item if one is there now.
  std::optional<T> get_nowait() { return take("fiber::Queue::get_nowait", 0); }

  /// Items stored at the broker now (approximate: others may put and get meanwhile).
  std::size_t qsize() const {
    const auto& r = st_->ref();
    return detail::wait_on_runtime<std::size_t>("fiber::Queue::qsize", [&](auto cb) {
      detail::runtime::instance().request(r.url, r.id, detail::queue_op::size, {},
                                          [cb](std::exception_ptr e, std::vector<std::byte> p) {
                                            std::size_t n = 0;
                                            if (!e) {
                                              try {
                                                n = std::size_t(fiber::deserialize<std::uint64_t>(p));
                                              } catch (...) {
                                                e = std::current_exception();
                                              }
                                            }
                                            cb(e, n);
                                          });
    });
  }
  /// qsize() == 0 (approximate).
  bool empty() const { return qsize() == 0; }
  /// True if the queue is bounded and holds maxsize() items (approximate).
  bool full() const { return st_->maxsize > 0 && qsize() >= st_->maxsize; }
  /// The bound given at construction (0: unbounded).
  std::size_t maxsize() const noexcept { return st_->maxsize; }

  /// No more puts or gets through this handle and the copies made from it
  /// in this process (Python: "no more data will be put on this queue by
  /// the current process"); they throw std::logic_error. Other handles, in
  /// this process or others, and the items already stored are unaffected.
  /// Idempotent.
  void close() noexcept { st_->closed.store(true, std::memory_order_release); }

  /// Python's join_thread(): after close(), waits until every put made
  /// through this handle has reached the broker. put() returns only once
  /// its item is stored, so this waits only for async_put operations still
  /// in flight (their items are then stored, or their handlers report why
  /// not). std::logic_error before close(), as Python's assertion.
  void join_thread() {
    if (!st_->closed.load(std::memory_order_acquire))
      throw std::logic_error("fiber::Queue::join_thread: call close() first");
    st_->wait_puts();
  }
  /// Python's cancel_join_thread(): nothing to cancel here (no feeder
  /// thread buffers items; nothing is lost when a process exits). No effect.
  void cancel_join_thread() noexcept {}

  /// Takes one item asynchronously (std::logic_error at once after close()). Completion signature
  /// `void(std::exception_ptr, T)`; the handler runs on its associated
  /// executor (default: fiber's runtime executor). Per-operation
  /// cancellation (any type) withdraws the request at the broker: if an item
  /// was already handed out, the operation completes normally with it;
  /// otherwise with std::system_error(operation_aborted). No item is lost.
  template <class Token>
  auto async_get(Token&& token) {
    st_->check_open("fiber::Queue::async_get");
    return asio::async_initiate<Token, void(std::exception_ptr, T)>(
        [st = st_](auto handler) { detail::start_async_take<T>(st->ref(), 0, std::move(handler)); }, token);
  }

  /// Stores a copy of `v` asynchronously (waits for room in a bounded
  /// queue). Completion signature `void(std::exception_ptr)`. Cancellation
  /// while waiting for room: operation_aborted and nothing stored; once
  /// stored it completes normally. std::logic_error at once after close().
  template <class Token>
  auto async_put(const T& v, Token&& token) {
    st_->check_open("fiber::Queue::async_put");
    auto wait = detail::next_wait_id();
    auto payload = detail::put_payload(detail::op_header{wait, -1, 0}, v); // copied now
    return asio::async_initiate<Token, void(std::exception_ptr)>(
        [st = st_, wait](auto handler, std::vector<std::byte> payload) {
          const auto& r = st->ref();
          st->put_started();
          detail::start_async_give(r, 0, wait, std::move(payload), std::move(handler), [st] { st->put_done(); });
        },
        token, std::move(payload));
  }

  /// fiber::wait's hook: a queue is ready when get() would not block (an
  /// item waits, or its broker is unreachable: get() then reports that).
  friend std::function<void()> fiber_watch(Queue& q, std::function<void()> ready) {
    q.st_->check_open("fiber::wait on a Queue");
    return detail::watch_readable(q.st_->ref(), 0, std::move(ready));
  }
  /// fiber::wait's hook: calls `done` with whether get() would not block now.
  friend void fiber_probe(Queue& q, std::function<void(bool)> done) {
    q.st_->check_open("fiber::wait on a Queue");
    detail::probe_readable(q.st_->ref(), 0, std::move(done));
  }

  /// True if both handles name the same queue.
  friend bool operator==(const Queue& a, const Queue& b) {
    return a.st_ == b.st_ || detail::service_state::same(a.st_->svc, b.st_->svc);
  }

  /// Serialization hook: the broker's URL and id, and maxsize. Serializing a
  /// queue that was never used starts its broker here. A deserialized
  /// handle is open (close() is per handle).
  friend void fiber_serialize(writer& w, const Queue& q) {
    q.st_->svc.write(w);
    w.write(std::uint64_t(q.st_->maxsize));
  }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, Queue& q) {
    auto ref = detail::service_state::read(r);
    auto maxsize = r.read<std::uint64_t>();
    // Back in the creating process, the handle keeps the broker alive like any local one.
    q.st_ = std::make_shared<detail::queue_state>(std::move(ref), std::size_t(maxsize));
  }

protected:
  /// A blocking put of an encoded item (header + bytes) whose header holds `timeout` (ms, -1: none).
  detail::give_tag give(const char* what, std::vector<std::byte> payload, std::int64_t timeout = -1) {
    const auto& r = st_->ref();
    return detail::wait_on_runtime<detail::give_tag>(what, [&](auto cb) {
      detail::async_give(r, std::move(payload), cb, timeout);
    });
  }

  /// A blocking get (-1: forever, 0: now); nullopt if none came.
  std::optional<T> take(const char* what, std::int64_t timeout) {
    st_->check_open(what);
    const auto& r = st_->ref();
    auto rep = detail::wait_on_runtime<detail::take_reply>(what, [&](auto cb) {
      detail::async_take(r, 0, detail::next_wait_id(), timeout, cb);
    });
    if (rep.tag != detail::take_tag::item) return std::nullopt;
    return detail::decode_item<T>(rep.item()); // bad bytes: serialization_error; the item is gone
  }

  std::shared_ptr<detail::queue_state> st_; ///< shared by this handle's copies
};

/// multiprocessing.JoinableQueue: a Queue whose broker also counts the
/// items put and not yet marked done, so a producer can wait until every
/// item has been processed. The count lives at the broker: every put
/// (through any handle of this queue, in any process) adds one, every
/// task_done (from any process) takes one away. An item a consumer got and
/// never marked done (its process died after receiving it) stays unfinished,
/// as in Python; one whose consumer died before receiving it goes back to
/// the queue and is still to be done. Everything else is Queue's.
template <class T>
class JoinableQueue : public Queue<T> {
public:
  using Queue<T>::Queue;

  /// Marks one item got earlier as done. std::logic_error if called more
  /// times than items were put (Python's ValueError).
  void task_done() {
    (void)detail::wait_request("fiber::JoinableQueue::task_done", this->st_->ref(), detail::queue_op::task_done,
                               detail::op_header{detail::next_wait_id(), -1, 0}.bytes());
  }

  /// Blocks until every item put has been marked done (at once if that
  /// holds now). Items put meanwhile are waited for too.
  void join() { (void)join_ms(-1); }
  /// The same, waiting at most `timeout`; false if items were still unfinished.
  template <class Rep, class Period>
  bool join(std::chrono::duration<Rep, Period> timeout) {
    return join_ms(detail::timeout_ms(timeout));
  }

  /// join() asynchronously. Completion signature `void(std::exception_ptr)`;
  /// the handler runs on its associated executor (default: fiber's runtime
  /// executor). Per-operation cancellation (any type) withdraws the wait
  /// at the broker: std::system_error(operation_aborted), unless every item
  /// was done first.
  template <class Token>
  auto async_join(Token&& token) {
    const auto wait = detail::next_wait_id();
    return asio::async_initiate<Token, void(std::exception_ptr)>(
        [st = this->st_, wait](auto handler) {
          detail::start_async_wait(st->ref(), detail::queue_op::join, wait, detail::op_header{wait, -1, 0}.bytes(),
                                   std::move(handler), [](const detail::wait_reply&) { return std::tuple<>{}; });
        },
        token);
  }

  /// Serialization hooks: as Queue's (a JoinableQueue's bytes read as a
  /// Queue name the same queue, and the reverse).
  friend void fiber_serialize(writer& w, const JoinableQueue& q) {
    fiber_serialize(w, static_cast<const Queue<T>&>(q));
  }
  /// Serialization hook: reads what fiber_serialize wrote.
  friend void fiber_deserialize(reader& r, JoinableQueue& q) { fiber_deserialize(r, static_cast<Queue<T>&>(q)); }

private:
  bool join_ms(std::int64_t ms) {
    auto rep = detail::wait_request("fiber::JoinableQueue::join", this->st_->ref(), detail::queue_op::join,
                                    detail::op_header{detail::next_wait_id(), ms, 0}.bytes());
    return rep.tag == detail::wait_tag::done;
  }
};

} // namespace fiber
