// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file pipe.hpp
/// fiber::Pipe<T> and fiber::Connection<T> — multiprocessing.Pipe across
/// processes and machines.
///
/// ```cpp
/// auto [a, b] = fiber::Pipe<std::string>();            // duplex
/// fiber::Process p{fiber::target<&child>, std::move(b)}; // the child owns b now
/// p.start();
/// a.send("ping");  std::string r = a.recv();
/// auto [rx, tx] = fiber::Pipe<int>(false);              // rx receives only, tx sends only
/// ```
///
/// **Where the data lives.** In a broker in the process that called Pipe()
/// (on its runtime thread), as two one-way channels: what `a` sends waits
/// there until `b` receives it, and the reverse. The creating process must
/// outlive the pipe's users; if it exits, the ends elsewhere get
/// fiber::worker_lost and buffered data is lost.
///
/// **EOF: the holder rule.** Each end is *open* while it has a holder — a
/// live Connection object attached to it, in any process — or a transfer in
/// flight. Pipe() attaches both ends in the creating process. Serializing an
/// end (e.g. passing it to a Process) registers a transfer before the bytes
/// leave, so the sender's own object may be destroyed before the receiver
/// deserializes (which attaches it and consumes the transfer). An end stops
/// being held when its Connection is closed or destroyed, or when the
/// process holding it exits (its connection to the broker closes). When an
/// end has no holder and no transfer it is *gone*, for good: the other end
/// reads what was already sent, then `recv` throws fiber::eof_error; `send`
/// towards a gone end throws fiber::eof_error (broken pipe). As in Python:
/// a process that passes an end on and keeps a copy must close its copy,
/// or the peer never sees EOF. A serialized end that is never deserialized
/// (bytes dropped, child killed before it started) keeps the end open.
///
/// **Errors.** A received item that does not decode as T throws
/// fiber::serialization_error from that recv; it is dropped and the
/// connection keeps working. std::logic_error: use of a closed or empty
/// Connection, send on a receive-only end, recv/poll on a send-only end, a
/// blocking call on fiber's runtime thread.

#include <fiber/detail/api_checks.hpp>
#include <fiber/detail/broker.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/queue_state.hpp>
#include <fiber/serialize.hpp>

#include <asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace fiber {

template <class T>
class Connection;

namespace detail {
struct connection_access {
  template <class T>
  static Connection<T> make(service_ref r, std::uint8_t end, bool readable, bool writable) {
    Connection<T> c;
    c.ref_ = std::move(r);
    c.end_ = end;
    c.readable_ = readable;
    c.writable_ = writable;
    c.attached_ = true; // the broker starts with one holder per end in this process
    return c;
  }
};
} // namespace detail

/// One end of a Pipe. Move-only; serializable (passing it to a Process or a
/// Pool task moves the end there, see the holder rule in pipe.hpp). A
/// default-constructed Connection is empty: every operation throws
/// std::logic_error. Not thread-safe: use one end from one thread at a time.
template <class T>
class Connection : detail::check_item_type<T> {
public:
  using value_type = T; ///< the message type sent and received

  Connection() = default;
  /// Takes over `o`'s end; `o` is left closed.
  Connection(Connection&& o) noexcept { take_from(o); }
  /// Closes this end, then takes over `o`'s; `o` is left closed.
  Connection& operator=(Connection&& o) noexcept {
    if (this != &o) {
      close();
      take_from(o);
    }
    return *this;
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  /// Closes the end (see close()).
  ~Connection() { close(); }

  /// Sends a copy of `v`; returns once the broker holds it (unbounded: never
  /// waits for the reader). Throws fiber::eof_error if the other end is gone.
  void send(const T& v) {
    require(writable_, "send", "a receive-only end");
    auto payload = detail::put_payload(detail::op_header{detail::next_wait_id(), -1, end_}, v);
    detail::wait_on_runtime<detail::give_tag>("fiber::Connection::send",
                                              [&](auto cb) { detail::async_give(ref_, std::move(payload), cb); });
  }

  /// Blocks until an item arrives and returns it. Throws fiber::eof_error
  /// once the other end is gone and everything it sent has been read.
  T recv() {
    require(readable_, "recv", "a send-only end");
    auto rep = detail::wait_on_runtime<detail::take_reply>("fiber::Connection::recv", [&](auto cb) {
      detail::async_take(ref_, end_, detail::next_wait_id(), -1, cb);
    });
    return detail::decode_item<T>(rep.item()); // bad bytes: serialization_error; the item is gone
  }

  /// True if recv() would not block: an item is waiting, or the other end
  /// is gone (recv then throws eof_error). Waits at most `timeout` (default: none).
  template <class Rep = std::int64_t, class Period = std::milli>
  bool poll(std::chrono::duration<Rep, Period> timeout = std::chrono::milliseconds(0)) {
    require(readable_, "poll", "a send-only end");
    detail::op_header h{detail::next_wait_id(), detail::timeout_ms(timeout), end_};
    return detail::wait_on_runtime<bool>("fiber::Connection::poll", [&](auto cb) {
      detail::runtime::instance().request(
          ref_.url, ref_.id, detail::queue_op::poll, h.bytes(),
          [cb](std::exception_ptr e, std::vector<std::byte> p) {
            if (!e && p.size() != 1) e = detail::bad_reply();
            cb(e, !e && p[0] != std::byte{0});
          },
          detail::expiry_of(h.timeout_ms, 0));
    });
  }

  /// Receives asynchronously. Completion signature `void(std::exception_ptr, T)`
  /// on the handler's associated executor (default: fiber's runtime
  /// executor). Cancellation while waiting: operation_aborted, nothing lost.
  template <class Token>
  auto async_recv(Token&& token) {
    require(readable_, "async_recv", "a send-only end");
    return asio::async_initiate<Token, void(std::exception_ptr, T)>(
        [r = ref_, e = end_](auto handler) { detail::start_async_take<T>(r, e, std::move(handler)); }, token);
  }

  /// Sends asynchronously. Completion signature `void(std::exception_ptr)`.
  template <class Token>
  auto async_send(const T& v, Token&& token) {
    require(writable_, "async_send", "a receive-only end");
    auto wait = detail::next_wait_id();
    auto payload = detail::put_payload(detail::op_header{wait, -1, end_}, v);
    return asio::async_initiate<Token, void(std::exception_ptr)>(
        [r = ref_, e = end_, wait](auto handler, std::vector<std::byte> payload) {
          detail::start_async_give(r, e, wait, std::move(payload), std::move(handler));
        },
        token, std::move(payload));
  }

  /// Detaches this end (idempotent, never throws). When it was the end's
  /// last holder, the other end gets EOF after draining. Off the runtime
  /// thread the broker has recorded it when close() returns.
  void close() noexcept {
    if (!attached_) return;
    attached_ = false;
    try {
      detail::control(ref_, detail::queue_op::detach, end_, 0);
    } catch (...) { // nothing sensible to do: the end is closed here either way
    }
  }

  /// fiber::wait's hook: a readable end is ready when recv() would not
  /// block. Throws std::logic_error for a closed or send-only end.
  friend std::function<void()> fiber_watch(Connection& c, std::function<void()> ready) {
    c.require(c.readable_, "wait on", "a send-only end");
    return detail::watch_readable(c.ref_, c.end_, std::move(ready));
  }
  /// fiber::wait's hook: calls `done` with whether recv() would not block now.
  friend void fiber_probe(Connection& c, std::function<void(bool)> done) {
    c.require(c.readable_, "wait on", "a send-only end");
    detail::probe_readable(c.ref_, c.end_, std::move(done));
  }

  /// True after close(), after being moved from, and when default-constructed.
  bool closed() const noexcept { return !attached_; }
  /// Whether this end may recv.
  bool readable() const noexcept { return readable_; }
  /// Whether this end may send.
  bool writable() const noexcept { return writable_; }

  /// Serialization hook: registers a transfer (so the end stays open until
  /// the receiver attaches), then writes the broker's URL, id, the end, its
  /// direction and the transfer token. Throws std::logic_error if closed.
  friend void fiber_serialize(writer& w, const Connection& c) {
    c.require(true, "serialize", "");
    auto token = detail::random_token();
    detail::control(c.ref_, detail::queue_op::transfer, c.end_, token);
    w.write(c.ref_.url);
    w.write(c.ref_.id);
    w.write(c.end_);
    w.write(c.readable_);
    w.write(c.writable_);
    w.write(token);
  }
  /// Attaches the received end as a holder (claiming the transfer).
  friend void fiber_deserialize(reader& r, Connection& c) {
    detail::service_ref ref;
    ref.url = r.read<std::string>();
    ref.id = r.read<std::uint64_t>();
    auto end = r.read<std::uint8_t>();
    if (end > 1) r.fail("fiber::Connection: bad end");
    auto readable = r.read<bool>();
    auto writable = r.read<bool>();
    auto token = r.read<std::uint64_t>();
    c.close();
    c.ref_ = std::move(ref);
    c.end_ = end;
    c.readable_ = readable;
    c.writable_ = writable;
    c.attached_ = true;
    detail::control(c.ref_, detail::queue_op::attach, c.end_, token);
  }

private:
  friend struct detail::connection_access;

  void take_from(Connection& o) noexcept {
    ref_ = std::move(o.ref_);
    end_ = o.end_;
    readable_ = o.readable_;
    writable_ = o.writable_;
    attached_ = std::exchange(o.attached_, false);
  }

  void require(bool allowed, const char* what, const char* side) const {
    if (!attached_)
      throw std::logic_error(std::string("fiber::Connection::") + what + ": the connection is closed (or empty)");
    if (!allowed) throw std::logic_error(std::string("fiber::Connection::") + what + ": not allowed on " + side);
  }

  detail::service_ref ref_;
  std::uint8_t end_ = 0;
  bool readable_ = false, writable_ = false, attached_ = false;
};

/// Creates a pipe whose broker lives in this process and returns its two
/// ends. `duplex` (default): both ends send and receive. `duplex == false`:
/// the first end only receives, the second only sends (as multiprocessing).
template <class T>
std::pair<Connection<T>, Connection<T>> Pipe(bool duplex = true) {
  auto& rt = detail::runtime::instance();
  auto b = std::make_shared<detail::pipe_broker>(rt.executor());
  detail::service_ref r;
  r.id = rt.sync([&] {
    auto id = rt.add_service(b);
    b->set_id(id);
    return id;
  });
  r.url = rt.service_url();
  auto a = detail::connection_access::make<T>(r, 0, true, duplex);
  auto z = detail::connection_access::make<T>(r, 1, duplex, true);
  return {std::move(a), std::move(z)};
}

} // namespace fiber
