// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/dialer.hpp
/// The runtime's one way to connect: a dial and the client handshake, each
/// try bounded; transient failures dialled again after a jittered pause.

#include <fiber/backend/detail/async_util.hpp>
#include <fiber/detail/handshake_session.hpp>
#include <fiber/detail/inherited_link.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/run_identity.hpp>
#include <fiber/detail/socket_byte_stream.hpp>
#include <fiber/detail/transport.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace fiber::detail {

/// What a connect reports: an error, or the authenticated link and the
/// configuration its peer sent.
using connect_done =
    std::function<void(std::exception_ptr, std::shared_ptr<peer_link>, std::map<std::string, std::string>)>;

/// A connect in progress: where, as whom, what it reports to, its budget.
struct dial_job {
  std::string url;
  role r;
  std::uint64_t worker_id;
  bool masters_link; // a worker's first link to its master: its own nonce, the link it inherited
  connect_done done;
  std::chrono::steady_clock::time_point give_up;
  std::chrono::milliseconds per_try, pause; // connect_timeout_ms; the next pause between tries
};

/// Dials for one runtime. `id` and `transport` are read at each try (a
/// process becomes a worker after it made its runtime). Runtime thread.
class dialer {
public:
  using clock = std::chrono::steady_clock;

  dialer(asio::any_io_executor ex, run_identity& id, std::function<transport_options()> transport)
      : ex_(std::move(ex)), id_(id), transport_(std::move(transport)) {}

  /// One dial and handshake, bounded by `j->per_try` and by `j->give_up`;
  /// the first of the dial, the handshake and the timer to finish decides.
  /// A failure is reported to `j->done`, or dialled again (see failed()).
  void dial(std::shared_ptr<dial_job> j) {
    struct attempt {
      explicit attempt(asio::any_io_executor ex) : timer(std::move(ex)) {}
      asio::steady_timer timer;
      asio::cancellation_signal cancel; // the dial
      std::shared_ptr<stream> s;        // the handshake
      bool over = false;
    };
    auto a = std::make_shared<attempt>(ex_);
    const auto limit = std::max<clock::duration>(std::min<clock::duration>(j->per_try, j->give_up - clock::now()),
                                                 std::chrono::milliseconds(1));
    a->timer.expires_after(limit);
    a->timer.async_wait([this, a, j, limit](std::error_code ec) {
      if (ec || a->over) return;
      a->over = true;
      a->cancel.emit(asio::cancellation_type::all);
      if (a->s) a->s->close();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(limit).count();
      // Made in a statement of its own: no temporary here outlives the
      // handover, so the thread that reads the error releases it.
      auto e = std::make_exception_ptr(
          worker_lost("fiber: connecting to " + j->url + " timed out after " + std::to_string(ms) +
                      " ms (connect_timeout_ms = " + std::to_string(j->per_try.count()) +
                      "): no answer to the dial or the handshake; is that process stopped or hung?"));
      failed(j, std::move(e), dials_patiently(j->r));
    });
    auto connected = [this, a, j](std::error_code ec, stream s) {
      if (a->over) return;
      if (ec) {
        a->over = true;
        a->timer.cancel();
        // connect.hpp reports errno values (std::errc conditions), not Asio's enums.
        const bool busy = ec == std::errc::resource_unavailable_try_again; // a Unix socket's full backlog
        // A Unix socket that refuses or is gone has no listener: its process ended.
        const bool gone = (j->url.starts_with("ipc://") || j->url.starts_with("abstract://")) &&
                          (ec == std::errc::connection_refused || ec == std::errc::no_such_file_or_directory);
        auto e = std::make_exception_ptr(worker_lost("fiber: cannot connect to " + j->url + ": " + ec.message()));
        return failed(j, std::move(e), busy || (dials_patiently(j->r) && !gone));
      }
      std::optional<nonce_t> issued;
      if (j->masters_link) issued = id_.take_own_nonce(); // the first link only
      a->s = std::make_shared<stream>(std::move(s));
      const auto o = transport_();
      client_handshake(a->s, id_.handshake(), j->r, j->worker_id, o.max_message_size, issued,
                       [this, a, j, o](std::exception_ptr e, stream st, std::map<std::string, std::string> cfg) {
                         if (a->over) return;
                         a->over = true;
                         a->timer.cancel();
                         if (e && is_tls_url(j->url)) e = name_tls_failure(std::move(e), j->url, o);
                         if (e) // closed before authentication: a worker retries, a client if unchallenged
                           return failed(j, e, worth_dialling_again(j->r, e));
                         j->done(nullptr, std::make_shared<peer_link>(std::move(st), peer_identity{}), std::move(cfg));
                       });
    };
    auto by_url = [this, a, j](auto connected) {
      async_connect(ex_, j->url, transport_(), asio::bind_cancellation_slot(a->cancel.slot(), std::move(connected)));
    };
    // A local worker's first link to its master was made at launch; the
    // URL stays the way in if adopting it fails.
    if (const int fd = j->masters_link ? take_inherited_link() : -1; fd >= 0)
      return asio::post(ex_, [this, j, fd, connected = std::move(connected), by_url]() mutable {
        std::error_code ec;
        auto s = adopt_socket(ex_, fd, ec);
        if (!ec) return connected({}, socket_stream(ex_, std::move(s), transport_()));
        log(log_level::warning, "the link to the master inherited at launch failed (", ec.message(), "): dialing ",
            j->url);
        by_url(std::move(connected));
      });
    by_url(std::move(connected));
  }

private:
  // Reports `e`, or dials again after a pause if it is `transient` and the
  // budget allows.
  void failed(std::shared_ptr<dial_job> j, std::exception_ptr e, bool transient) {
    if (!transient || clock::now() + j->pause >= j->give_up) return j->done(std::move(e), nullptr, {});
    log(log_level::info, "dialing ", j->url, " failed (", exception_text(e, "unknown error"), "): trying again");
    auto t = std::make_shared<asio::steady_timer>(ex_);
    std::uniform_int_distribution<int> jitter(0, int(j->pause.count()));
    t->expires_after(j->pause + std::chrono::milliseconds(jitter(rng_)));
    j->pause = std::min(j->pause * 2, max_pause);
    t->async_wait([this, t, j](std::error_code) { dial(j); });
  }

  static constexpr std::chrono::milliseconds max_pause{500};
  asio::any_io_executor ex_;
  run_identity& id_;
  std::function<transport_options()> transport_;
  std::minstd_rand rng_{static_cast<std::minstd_rand::result_type>(::getpid())};
};

} // namespace fiber::detail
