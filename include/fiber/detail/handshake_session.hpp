// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/handshake_session.hpp
/// Both ends of the connection handshake on a fresh stream: the server's
/// challenge, the client's proof and identity, the server's proof and its
/// configuration, or a refusal naming both binaries (see handshake.hpp).

#include <fiber/detail/host_name.hpp>
#include <fiber/detail/frame.hpp>
#include <fiber/detail/handshake.hpp>
#include <fiber/detail/log_limit.hpp>
#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/tls_config.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <unistd.h>

namespace fiber::detail {

/// What this process proves and compares in a handshake.
struct handshake_identity {
  std::string secret;              ///< the run's secret (hex)
  std::string build_id;            ///< build_id() of this executable
  std::uint64_t registry_hash = 0; ///< the target registry's hash
  std::string name;                ///< this process's name, sent by clients
};

/// Who is on the other end of a link.
struct peer_identity {
  role r = role::client;
  std::uint64_t worker_id = 0;
  std::int64_t pid = 0;
  std::string host, name;
  std::uint64_t incarnation = 0; ///< its process_incarnation()
};

/// What the server side reports. Each runs on the stream's executor.
struct server_handshake_hooks {
  /// The peer proved the secret and runs this binary; auth_ok is on its way.
  std::function<void(peer_identity, stream)> authenticated;
  /// The peer proved the secret but runs another binary: it was sent
  /// `refused` with `reason`.
  std::function<void(const peer_identity&, const std::string& reason)> mismatched;
  /// A peer was dropped before it proved anything (bad frame, bad proof):
  /// for the refused-peers count.
  std::function<void()> dropped;
  /// Whether `a`'s proof is good, given this connection's `challenge`; empty:
  /// the proof must cover the challenge. The runtime also accepts a local
  /// worker's proof over the one-time nonce issued to it (runtime.hpp).
  std::function<bool(const auth_msg& a, const nonce_t& challenge, const channel_binding& tls)> verify;
};

/// Server side of the challenge–response on an accepted stream. Nothing but
/// the bounded auth frame is read before the peer proves it knows the
/// secret; a peer silent for 5 s is dropped. `config` is the configuration
/// sent to an authenticated peer; frames after the handshake are bounded by
/// `max_message_size` and, with `frame_macs` on a link that is not ipc://,
/// carry tags both ways (frame_mac.hpp). `keep` lives as long as the
/// handshake (a slot count).
inline void server_handshake(asio::any_io_executor ex, std::shared_ptr<stream> s, const handshake_identity& me,
                             std::map<std::string, std::string> config, std::size_t max_message_size, bool frame_macs,
                             std::shared_ptr<void> keep, server_handshake_hooks hooks) {
  s->set_max_message_size(max_auth_frame); // refused before allocating
  auto nonce = random_nonce();
  s->async_send(frame(frame_kind::challenge, challenge_msg{nonce, protocol_version}), [](std::error_code) {});
  auto timer = std::make_shared<asio::steady_timer>(ex, std::chrono::seconds(5));
  timer->async_wait([s](std::error_code ec) {
    if (!ec) s->close(); // too slow: drop it
  });
  s->async_recv([s, nonce, timer, keep, me, config = std::move(config), max_message_size, frame_macs,
                 hooks = std::move(hooks)](std::error_code ec, message m) mutable {
    timer->cancel();
    if (ec == asio::error::message_size) {
      hooks.dropped();
      refusal_log()(log_level::warning, "refused a peer: handshake frame over ", max_auth_frame, " bytes");
    }
    if (ec) return;
    auth_msg a;
    try {
      a = decode_auth_frame(m);
    } catch (const std::exception& e) {
      hooks.dropped();
      refusal_log()(log_level::warning, "refused a peer: malformed handshake (", e.what(), ")");
      return s->close();
    }
    const auto tls = s->binding(); // all zero without TLS
    const bool proven = hooks.verify ? hooks.verify(a, nonce, tls)
                                     : mac_equal(a.mac, client_proof(me.secret, nonce, a, tls));
    if (!proven) {
      hooks.dropped();
      refusal_log()(log_level::warning, "refused a peer from pid ", a.pid, ": authentication failed");
      return s->close();
    }
    s->set_max_message_size(max_message_size);
    peer_identity peer{role(a.role), a.worker_id, a.pid, a.host, a.name, a.incarnation};
    if (a.registry_hash != me.registry_hash || a.build_id != me.build_id) {
      std::string reason = "fiber: handshake refused: worker '" + a.name + "' (pid " + std::to_string(a.pid) + " on " +
                           a.host + ") runs build " + a.build_id + " with registry " + std::to_string(a.registry_hash) +
                           ", master runs build " + me.build_id + " with registry " + std::to_string(me.registry_hash);
      log(log_level::error, reason);
      s->async_send(frame(frame_kind::refused, refused_msg{reason}), [s](std::error_code) { s->close(); });
      return hooks.mismatched(peer, reason);
    }
    auth_ok_msg ok{{}, std::move(config), std::uint8_t(s->is_tls() || (frame_macs && !s->is_ipc()))};
    ok.mac = server_proof(me.secret, a.nonce, ok, tls);
    s->async_send(frame(frame_kind::auth_ok, ok), [](std::error_code) {}); // queued before: no tag (TLS: encrypted)
    if (ok.frame_mac) {
      const auto k = derive_session_keys(me.secret, a);
      s->enable_mac(k.server_to_client, k.client_to_server);
    }
    hooks.authenticated(std::move(peer), std::move(*s));
  });
}

/// Completion of the client side: the error (handshake_error: refused or a
/// server that failed to authenticate; worker_lost: the connection failed),
/// or the stream and the server's configuration.
using client_handshake_done =
    std::function<void(std::exception_ptr, stream, std::map<std::string, std::string> config)>;

/// The client's auth frame, proving the secret over `server_nonce`.
inline auth_msg make_auth(const handshake_identity& me, const nonce_t& server_nonce, role r, std::uint64_t worker_id,
                          const channel_binding& tls) {
  auth_msg a;
  a.nonce = random_nonce();
  a.role = std::uint8_t(r);
  a.worker_id = worker_id;
  a.registry_hash = me.registry_hash;
  a.build_id = me.build_id;
  a.pid = ::getpid();
  a.host = host_name();
  a.name = me.name;
  a.incarnation = process_incarnation();
  a.mac = client_proof(me.secret, server_nonce, a, tls);
  return a;
}

/// A TLS handshake the client gave up: the server's certificate failed
/// verification against tls_ca (chain or name), or the server spoke no TLS.
/// A refusal (retrying cannot help); runtime::dial adds the name expected.
struct tls_verify_failed : handshake_error {
  using handshake_error::handshake_error;
};

/// `e` with, when it is a tls_verify_failed and the client has a CA, the
/// CA file and the name the master's certificate had to carry (tls_name_for
/// `url`); else `e` itself. Example: e = name_tls_failure(e, url, transport()).
inline std::exception_ptr name_tls_failure(std::exception_ptr e, const std::string& url, const transport_options& o) {
  try {
    std::rethrow_exception(e);
  } catch (const tls_verify_failed& t) {
    if (o.tls_ca_file.empty()) return e;
    return std::make_exception_ptr(handshake_error(std::string(t.what()) + ": its certificate must chain to tls_ca (" +
                                                   o.tls_ca_file + ") and carry the name '" + tls_name_for(url, o) +
                                                   "' (set tls_server_name to the name it carries)"));
  } catch (...) {
    return e;
  }
}

/// A stream closed before the server's challenge: what a master whose
/// pending handshakes are full does (not a refusal; runtime::dial retries).
struct dropped_before_challenge : worker_lost {
  using worker_lost::worker_lost;
};

/// The error for a stream that failed before the server proved itself:
/// `Lost` (a worker_lost) unless TLS failed.
template <class Lost = worker_lost>
std::exception_ptr handshake_stream_error(std::error_code ec) {
  if (ec.category() == tls_category())
    return std::make_exception_ptr(tls_verify_failed("fiber: the TLS handshake with the master failed (" +
                                                     ec.message() + ")"));
  return std::make_exception_ptr(Lost("fiber: handshake failed: " + ec.message()));
}

/// A worker's or a relay's dial to its master (or host relay) keeps trying
/// within start_timeout_s: it has nothing to do until it gets through.
/// A client's is bounded by connect_timeout_ms.
inline bool dials_patiently(role r) { return r == role::worker || r == role::relay; }

/// Whether a client handshake that failed with `e` is worth dialling again:
/// for a worker unless the other end refused (handshake_error: another
/// binary, a failed proof); for a client only when dropped before the
/// challenge (the other end's pending handshakes full).
inline bool worth_dialling_again(role r, const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const dropped_before_challenge&) {
    return true;
  } catch (const handshake_error&) {
    return false;
  } catch (...) {
    return dials_patiently(r);
  }
}

/// The client's wait for the server's proof after sending `a`; a challenge
/// that arrives first is skipped once when `skip_challenge` (the proof went
/// out over an issued nonce).
inline void await_auth_ok(std::shared_ptr<stream> s, const handshake_identity& me, auth_msg a, bool skip_challenge,
                          std::size_t max_message_size, client_handshake_done done) {
  s->async_recv([s, a = std::move(a), me, skip_challenge, max_message_size, done = std::move(done)](std::error_code ec,
                                                                                                    message m) mutable {
    if (ec) return done(handshake_stream_error(ec), stream{}, {});
    try {
      auto [k, body] = unframe(m);
      if (k == frame_kind::challenge && skip_challenge)
        return await_auth_ok(std::move(s), me, std::move(a), false, max_message_size, std::move(done));
      if (k == frame_kind::refused) // the server has proven nothing yet
        throw handshake_error(peer_text(deserialize<refused_msg>(body).reason, max_refusal_text));
      if (k != frame_kind::auth_ok) throw handshake_error("fiber: unexpected handshake reply");
      auto ok = deserialize<auth_ok_msg>(body);
      if (!mac_equal(ok.mac, server_proof(me.secret, a.nonce, ok, s->binding())))
        throw handshake_error("fiber: the master failed to authenticate");
      if (s->is_tls() && !ok.frame_mac) throw handshake_error("fiber: the master turned encryption off on TLS");
      s->set_max_message_size(max_message_size);
      if (ok.frame_mac) {
        const auto k = derive_session_keys(me.secret, a);
        s->enable_mac(k.client_to_server, k.server_to_client);
      }
      done(nullptr, std::move(*s), std::move(ok.config));
    } catch (...) {
      done(std::current_exception(), stream{}, {});
    }
  });
}

/// Client side on a connected stream: answer the challenge as `r` (worker
/// `worker_id`, or a client), then check the server's proof (which covers
/// its configuration, and whether frames carry tags from then on). A local worker
/// given a one-time nonce at spawn (`issued`) proves itself at once instead,
/// which saves the wait for the challenge. Until the server has proven
/// itself frames are bounded by max_handshake_reply; afterwards by
/// `max_message_size`. No timer of its own: the caller bounds the wait
/// (runtime::dial, connect_timeout_ms) by closing `s`.
inline void client_handshake(std::shared_ptr<stream> s, const handshake_identity& me, role r, std::uint64_t worker_id,
                             std::size_t max_message_size, std::optional<nonce_t> issued, client_handshake_done done) {
  s->set_max_message_size(max_handshake_reply); // the server is not authenticated yet
  if (issued && !s->is_tls()) { // over TLS the proof covers the channel, known once its handshake is done
    auto a = make_auth(me, *issued, r, worker_id, {});
    s->async_send(frame(frame_kind::auth, a), [](std::error_code) {});
    return await_auth_ok(std::move(s), me, std::move(a), true, max_message_size, std::move(done));
  }
  s->async_recv([s, me, r, worker_id, max_message_size, done = std::move(done)](std::error_code ec, message m) mutable {
    if (ec) return done(handshake_stream_error<dropped_before_challenge>(ec), stream{}, {});
    challenge_msg c;
    try {
      c = decode_frame<challenge_msg>(frame_kind::challenge, m);
    } catch (const std::exception& e) {
      return done(std::make_exception_ptr(handshake_error(std::string("fiber: bad challenge: ") + e.what())), stream{},
                  {});
    }
    auto a = make_auth(me, c.nonce, r, worker_id, s->binding());
    s->async_send(frame(frame_kind::auth, a), [](std::error_code) {});
    await_auth_ok(std::move(s), me, std::move(a), false, max_message_size, std::move(done));
  });
}

} // namespace fiber::detail
