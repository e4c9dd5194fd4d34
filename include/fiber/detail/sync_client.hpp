// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/sync_client.hpp
/// The client side of requests that may wait at a service (synchronization
/// primitives, JoinableQueue::task_done / join): send, read the wait_tag,
/// turn misuse and broken into exceptions; blocking and Asio forms.

#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/broker_wire.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service_state.hpp>
#include <fiber/detail/sync_wire.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

#include <asio/async_result.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace fiber::detail {

/// A reply to a request that may wait: its tag and what follows it.
struct wait_reply {
  wait_tag tag = wait_tag::done;
  std::vector<std::byte> bytes; ///< the whole reply, tag first

  /// What follows the tag.
  std::span<const std::byte> rest() const { return std::span<const std::byte>(bytes).subspan(1); }
  /// The result that follows the tag (serialization_error if it is not a T).
  template <class T>
  T result() const {
    reader r(rest());
    return r.read<T>();
  }
};

/// Sends `payload` as operation `op` to the service `r`; `done` runs on the
/// runtime thread with the reply, or with the exception it stands for:
/// misuse → std::logic_error, broken → fiber::broken_barrier_error, a
/// malformed reply → fiber::serialization_error, and the service's own
/// failures (worker_lost, fiber::error); revoked → fiber::hold_revoked_error.
/// An acquire or cond_wait that fails with worker_lost (its link was lost:
/// the grant may have been lost with it) is abandoned (sync_wire.hpp).
/// `bound` (ms, -1: none): the request's timeout, which also bounds the wait
/// for a link being set up (expiry_of; the reply is then `timeout`).
inline void async_wait_request(const service_ref& r, std::uint32_t op, std::vector<std::byte> payload,
                               std::function<void(std::exception_ptr, wait_reply)> done, std::int64_t bound = -1) {
  std::vector<std::byte> abandon;
  if (op == sync_op::acquire || op == sync_op::cond_wait) {
    reader rd(payload);
    auto q = sync_header::read_from(rd);
    abandon = sync_payload_as(q.thread, q.h.wait, 0);
  }
  runtime::instance().request(
      r.url, r.id, op, std::move(payload),
      [r, abandon = std::move(abandon), done = std::move(done)](std::exception_ptr e, std::vector<std::byte> p) {
        wait_reply out;
        if (!abandon.empty() && is_worker_lost(e)) deliver_request(r, sync_op::abandon, std::move(abandon));
        if (!e) {
          try {
            auto tag = p.empty() ? 255u : std::to_integer<unsigned>(p[0]);
            if (tag > unsigned(wait_tag::revoked)) throw serialization_error("fiber: malformed reply from a service");
            out.tag = wait_tag(tag);
            out.bytes = std::move(p);
            if (out.tag == wait_tag::misuse) throw std::logic_error(out.result<std::string>());
            if (out.tag == wait_tag::broken) throw broken_barrier_error(out.result<std::string>());
            if (out.tag == wait_tag::revoked) throw hold_revoked_error(out.result<std::string>());
          } catch (...) {
            e = std::current_exception();
          }
        }
        done(std::move(e), std::move(out)); // the waiter holds the only reference
      },
      expiry_of(bound, std::uint8_t(wait_tag::timeout)));
}

/// The same, waited for on the calling thread (std::logic_error on fiber's
/// runtime thread, where it would deadlock).
inline wait_reply wait_request(const char* what, const service_ref& r, std::uint32_t op, std::vector<std::byte> payload,
                               std::int64_t bound = -1) {
  return wait_on_runtime<wait_reply>(what, [&](auto cb) { async_wait_request(r, op, std::move(payload), cb, bound); });
}

/// Starts an Asio operation: the request (whose wait id is `wait`), a cancel
/// request when the handler's cancellation slot fires, and the handler called
/// with (exception_ptr, results...) where `finish(reply)` gives the results
/// as a tuple (default-constructed on error; a `cancelled` reply is
/// operation_aborted).
template <class Handler, class Finish>
void start_async_wait(const service_ref& r, std::uint32_t op, std::uint64_t wait, std::vector<std::byte> payload,
                      Handler&& handler, Finish finish, std::int64_t bound = -1) {
  using results = std::invoke_result_t<Finish&, const wait_reply&>;
  auto o = make_broker_op(std::move(handler));
  o->on_cancel(withdraw(r, 0, wait));
  async_wait_request(
      r, op, std::move(payload),
      [o, finish = std::move(finish)](std::exception_ptr e, wait_reply rep) {
        results res{};
        if (!e && rep.tag == wait_tag::cancelled) e = aborted();
        if (!e) {
          try {
            res = finish(rep);
          } catch (...) {
            e = std::current_exception();
          }
        }
        std::apply([&](auto&... a) { o->complete(via::dispatch, std::move(e), std::move(a)...); }, res);
      },
      bound);
}

/// What a synchronization handle holds: the service it names (shared by
/// the handle's copies), and the requests it sends there. Any thread.
class sync_handle {
public:
  sync_handle() = default;
  /// A new object whose service `make` builds on first use.
  sync_handle(service_state::factory make, std::string gone)
      : st_(std::make_shared<service_state>(std::move(make), std::move(gone))) {}

  /// A blocking request in the name of the calling thread.
  template <class... A>
  wait_reply call(const char* what, std::uint32_t op, std::int64_t timeout, const A&... args) const {
    return send(what, op, sync_payload(next_wait_id(), timeout, args...));
  }
  /// A blocking request whose payload (sync_payload) is built.
  wait_reply send(const char* what, std::uint32_t op, std::vector<std::byte> payload) const {
    return wait_request(what, ref(), op, std::move(payload));
  }

  /// An Asio operation of signature `Sig` (`void(std::exception_ptr, R...)`):
  /// the request, built now in the name of the calling thread; `finish`
  /// maps the reply to a std::tuple<R...>; cancellation withdraws it.
  template <class Sig, class Token, class Finish, class... A>
  auto async_call(Token&& token, std::uint32_t op, std::int64_t timeout, Finish finish, const A&... args) const {
    return async_call_bounded<Sig>(std::forward<Token>(token), op, timeout, -1, std::move(finish), args...);
  }

  /// A blocking request that may time out: true if it was granted.
  /// A link still being set up counts against the timeout (expiry_of).
  template <class... A>
  bool call_done(const char* what, std::uint32_t op, std::int64_t timeout, const A&... args) const {
    return wait_request(what, ref(), op, sync_payload(next_wait_id(), timeout, args...), timeout).tag == wait_tag::done;
  }

  /// An Asio operation completing with `void(std::exception_ptr)`.
  template <class Token, class... A>
  auto async_plain(Token&& token, std::uint32_t op, const A&... args) const {
    return async_call<void(std::exception_ptr)>(
        std::forward<Token>(token), op, -1, [](const wait_reply&) { return std::tuple<>{}; }, args...);
  }
  /// An Asio operation with a timeout, completing with
  /// `void(std::exception_ptr, bool granted)` (false: it timed out).
  template <class Token, class... A>
  auto async_timed(Token&& token, std::uint32_t op, std::int64_t timeout, const A&... args) const {
    return async_call_bounded<void(std::exception_ptr, bool)>(
        std::forward<Token>(token), op, timeout, timeout,
        [](const wait_reply& r) { return std::tuple<bool>{r.tag == wait_tag::done}; }, args...);
  }

  /// The service (started here on first use). std::logic_error for an
  /// empty handle (default-constructed, never assigned).
  const service_ref& ref() const {
    if (!st_) throw std::logic_error("fiber: use of an empty handle (default-constructed, never assigned)");
    return st_->ref();
  }
  bool same(const sync_handle& o) const { return st_ == o.st_ || (st_ && o.st_ && service_state::same(*st_, *o.st_)); }
  /// Serialization: the service's URL and id.
  void write(writer& w) const {
    (void)ref();
    st_->write(w);
  }
  void read(reader& r) { st_ = std::make_shared<service_state>(service_state::read(r)); }

private:
  // async_call, whose wait for a link being set up is bounded by `bound`
  // ms (-1: none; see async_wait_request).
  template <class Sig, class Token, class Finish, class... A>
  auto async_call_bounded(Token&& token, std::uint32_t op, std::int64_t timeout, std::int64_t bound, Finish finish,
                          const A&... args) const {
    const auto wait = next_wait_id();
    return asio::async_initiate<Token, Sig>(
        [r = ref(), op, wait, bound, finish = std::move(finish)](auto handler, std::vector<std::byte> payload) {
          start_async_wait(r, op, wait, std::move(payload), std::move(handler), finish, bound);
        },
        token, sync_payload(wait, timeout, args...));
  }

  std::shared_ptr<service_state> st_;
};

} // namespace fiber::detail
