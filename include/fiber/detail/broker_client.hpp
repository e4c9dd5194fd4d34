// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/broker_client.hpp
/// The client side of a broker: take and give items, cancel a waiting
/// request, and the glue that completes Asio handlers with the outcome.

#include <fiber/detail/async_op.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/broker_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

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

/// The expiry (runtime's request_expiry) of a request waiting at most
/// `timeout` ms (-1: no bound) whose answer to a timeout is the byte `tag`.
/// A poll (0) still gives a link being set up min_expiry.
inline request_expiry expiry_of(std::int64_t timeout, std::uint8_t tag) {
  constexpr std::int64_t min_expiry = 50; // ms
  if (timeout < 0) return {};
  return {std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout, min_expiry)),
          {std::byte{tag}}};
}

/// A get reply: [tag], or for an item [tag][ack?][item bytes].
struct take_reply {
  take_tag tag = take_tag::empty;
  std::vector<std::byte> bytes;
  std::span<const std::byte> item() const { return std::span<const std::byte>(bytes).subspan(2); }
};

/// Sends a request whose effect must reach the service (an ack, an abandon):
/// one that fails with worker_lost (a lost link; or the owner is gone, and
/// nothing answers any more) is sent again, after 0.1 s, then twice as long
/// each time up to 5 s, 20 times at most. Fire and forget; any thread; it
/// counts as a delivery (runtime::deliveries) until it is done.
inline void deliver_request(const service_ref& r, std::uint32_t op, std::vector<std::byte> payload, int tries = 20,
                            std::chrono::milliseconds pause = std::chrono::milliseconds(100), bool counted = false) {
  auto& rt = runtime::instance();
  if (!counted) rt.deliveries().started();
  rt.request(r.url, r.id, op, payload, [&rt, r, op, payload, tries, pause](std::exception_ptr e, auto) mutable {
    auto finished = [&rt] { rt.deliveries().done(); };
    if (!e || tries <= 1) return finished();
    try {
      std::rethrow_exception(e);
    } catch (const worker_lost&) {
    } catch (...) {
      return finished();
    }
    auto t = std::make_shared<asio::steady_timer>(rt.executor(), pause);
    t->async_wait([t, r, op, payload = std::move(payload), tries, pause](std::error_code ec) mutable {
      if (ec) return runtime::instance().deliveries().done();
      deliver_request(r, op, std::move(payload), tries - 1, std::min(pause * 2, std::chrono::milliseconds(5000)), true);
    });
  });
}

/// Whether `e` is a fiber::worker_lost.
inline bool is_worker_lost(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const worker_lost&) {
    return true;
  } catch (...) {
  }
  return false;
}

inline std::exception_ptr bad_reply() {
  return std::make_exception_ptr(serialization_error("fiber: malformed reply from a queue broker"));
}

/// Send a get; `done` runs on the runtime thread. A remote delivery is acked
/// before `done` runs, so the broker forgets its copy only once the item is
/// here; a get that fails with worker_lost (its link was lost: the reply may
/// have been lost with it) is abandoned, so that the broker puts back what it
/// handed out. Acks and abandons are delivered through lost links.
inline void async_take(const service_ref& r, std::uint8_t end, std::uint64_t wait, std::int64_t timeout,
                       std::function<void(std::exception_ptr, take_reply)> done) {
  op_header h{wait, timeout, end};
  runtime::instance().request(
      r.url, r.id, queue_op::get, h.bytes(),
      [r, h, done = std::move(done)](std::exception_ptr e, std::vector<std::byte> p) {
        take_reply out;
        if (is_worker_lost(e)) deliver_request(r, queue_op::abandon, h.bytes());
        if (!e) {
          auto tag = p.empty() ? 255u : std::to_integer<unsigned>(p[0]);
          if (tag > 2 || (tag == unsigned(take_tag::item) && p.size() < 2)) {
            e = bad_reply();
          } else {
            out.tag = take_tag(tag);
            if (out.tag == take_tag::item && p[1] != std::byte{0}) deliver_request(r, queue_op::ack, h.bytes());
            out.bytes = std::move(p);
          }
        }
        done(std::move(e), std::move(out)); // the waiter holds the only reference
      },
      expiry_of(timeout, std::uint8_t(take_tag::empty)));
}

/// Send a put whose payload (header + item) is already built; `timeout` is
/// the header's (ms, -1: none).
inline void async_give(const service_ref& r, std::vector<std::byte> payload,
                       std::function<void(std::exception_ptr, give_tag)> done, std::int64_t timeout = -1) {
  runtime::instance().request(
      r.url, r.id, queue_op::put, std::move(payload),
      [done = std::move(done)](std::exception_ptr e, std::vector<std::byte> p) {
        give_tag t = give_tag::full;
        if (!e) {
          if (p.size() != 1 || std::to_integer<unsigned>(p[0]) > 2) e = bad_reply();
          else t = give_tag(std::to_integer<unsigned>(p[0]));
        }
        done(std::move(e), t);
      },
      expiry_of(timeout, std::uint8_t(give_tag::full)));
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
inline void send_cancel(const service_ref& r, std::uint8_t end, std::uint64_t wait) {
  runtime::instance().request(r.url, r.id, queue_op::cancel, op_header{wait, 0, end}.bytes(),
                              [](std::exception_ptr, auto) {});
}

/// Calls `ready` once end `end` of broker `r` is readable (an item waits, or
/// the other end is gone), or its broker is unreachable; returns what
/// withdraws the watch (safe after `ready` ran). `ready` runs on fiber's
/// runtime thread. For fiber::wait.
inline std::function<void()> watch_readable(const service_ref& r, std::uint8_t end, std::function<void()> ready) {
  auto wait = next_wait_id();
  runtime::instance().request(r.url, r.id, queue_op::poll, op_header{wait, -1, end}.bytes(),
                              [ready = std::move(ready)](std::exception_ptr e, std::vector<std::byte> p) {
                                // An error is ready too: the recv() that follows reports it.
                                if (e || (p.size() == 1 && p[0] != std::byte{0})) ready();
                              });
  return [r, end, wait] { send_cancel(r, end, wait); };
}

/// Calls `done(readable)` with whether end `end` of broker `r` is readable
/// now (an unreachable broker counts as readable, as in watch_readable).
/// `done` runs on fiber's runtime thread. For fiber::wait.
inline void probe_readable(const service_ref& r, std::uint8_t end, std::function<void(bool)> done) {
  runtime::instance().request(r.url, r.id, queue_op::poll, op_header{next_wait_id(), 0, end}.bytes(),
                              [done = std::move(done)](std::exception_ptr e, std::vector<std::byte> p) {
                                done(e || (p.size() == 1 && p[0] != std::byte{0}));
                              });
}

/// Run `start(callback)` and wait on the calling thread for the callback's
/// outcome (a blocking_result: the exception moved to this thread). Blocking
/// on the runtime thread would deadlock it: that is a logic_error.
template <class R, class Start>
R wait_on_runtime(const char* what, Start&& start) {
  if (runtime::instance().on_runtime_thread())
    throw std::logic_error(std::string(what) +
                           ": blocking call on fiber's runtime thread (e.g. in a completion handler); "
                           "use the async_ form there");
  auto s = std::make_shared<blocking_result<R>>();
  start([s](std::exception_ptr e, R v) { s->set(std::move(e), std::move(v)); });
  return s->take();
}

/// A control request (attach/detach/transfer): waited for off the runtime
/// thread (so its effect is in place when the caller goes on), fire and
/// forget on it; requests from one thread reach the broker in order either
/// way. Errors (the owner is gone) are swallowed: nothing is left to update.
inline void control(const service_ref& r, std::uint32_t op, std::uint8_t end, std::uint64_t token) {
  writer w;
  w.write(end);
  w.write(token);
  auto& rt = runtime::instance();
  if (rt.on_runtime_thread()) return rt.request(r.url, r.id, op, w.release(), [](std::exception_ptr, auto) {});
  auto answered = std::make_shared<blocking_result<>>();
  rt.request(r.url, r.id, op, w.release(), [answered](std::exception_ptr, auto) { answered->set(nullptr); });
  // Bounded: a runtime already stopped (static destruction) must not hang us.
  if (!answered->wait_for(std::chrono::seconds(10)))
    log(log_level::warning, "fiber: no answer from the broker at ", r.url, " (pipe bookkeeping skipped)");
}

inline std::exception_ptr aborted() {
  return std::make_exception_ptr(std::system_error(asio::error::make_error_code(asio::error::operation_aborted)));
}

/// An operation on a broker: an async_op whose handler runs, by default,
/// on fiber's runtime executor. Shared by the reply callback that completes it.
template <class Handler>
auto make_broker_op(Handler&& handler) {
  return std::make_shared<async_op<std::decay_t<Handler>>>(std::forward<Handler>(handler),
                                                           runtime::instance().executor());
}

/// The cancellation action of a waiting request: withdraw it at the broker.
inline auto withdraw(service_ref r, std::uint8_t end, std::uint64_t wait) {
  return [r = std::move(r), end, wait](asio::cancellation_type) { send_cancel(r, end, wait); };
}

/// Take one item and complete `handler(std::exception_ptr, T)`: the item, or
/// serialization_error (bytes not a T: the item is dropped), eof_error,
/// worker_lost, fiber::error, or operation_aborted when cancelled while waiting.
template <class T, class Handler>
void start_async_take(const service_ref& r, std::uint8_t end, Handler&& handler) {
  auto op = make_broker_op(std::move(handler));
  auto wait = next_wait_id();
  op->on_cancel(withdraw(r, end, wait));
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
    op->complete(via::dispatch, std::move(e), std::move(v));
  });
}

/// Put one item (already encoded) and complete `handler(std::exception_ptr)`.
/// `settled` (optional) runs on the runtime thread when the broker has
/// answered, before the handler is dispatched.
template <class Handler>
void start_async_give(const service_ref& r, std::uint8_t end, std::uint64_t wait, std::vector<std::byte> payload,
                      Handler&& handler, std::function<void()> settled = {}) {
  auto op = make_broker_op(std::move(handler));
  op->on_cancel(withdraw(r, end, wait));
  async_give(r, std::move(payload), [op, settled = std::move(settled)](std::exception_ptr e, give_tag t) {
    if (!e && t != give_tag::stored) e = aborted();
    if (settled) settled();
    op->complete(via::dispatch, std::move(e));
  });
}

} // namespace fiber::detail
