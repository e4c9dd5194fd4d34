// SPDX-License-Identifier: BSL-1.0
// Tests for the TLS 1.3 handshake fiber drives with OpenSSL over an nng
// byte stream (include/fiber/detail/tls_handshake.hpp, tls_context.hpp).

#include <fiber/detail/nng_byte_stream.hpp>
#include <fiber/detail/self_signed_cert.hpp>
#include <fiber/detail/tls_handshake.hpp>

#include "integration_support.hpp"

#include <catch2/catch.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace fd = fiber::detail;
using fiber_test::temp_dir;

namespace {

/// Two ends of one loopback TCP connection, as nng byte streams whose
/// completions run on `io`.
struct tcp_pair {
  asio::io_context io;
  std::unique_ptr<fd::byte_stream> server, client;
  tcp_pair() {
    nng_stream_listener* l = nullptr;
    REQUIRE(nng_stream_listener_alloc(&l, "tcp://127.0.0.1:0") == 0);
    fd::listener_ptr lp(l);
    REQUIRE(nng_stream_listener_listen(l) == 0);
    int port = 0;
    REQUIRE(nng_stream_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0);
    nng_stream_dialer* d = nullptr;
    REQUIRE(nng_stream_dialer_alloc(&d, ("tcp://127.0.0.1:" + std::to_string(port)).c_str()) == 0);
    fd::dialer_ptr dp(d);
    nng_aio *aa = nullptr, *da = nullptr;
    REQUIRE(nng_aio_alloc(&aa, nullptr, nullptr) == 0);
    fd::aio_ptr aap(aa);
    REQUIRE(nng_aio_alloc(&da, nullptr, nullptr) == 0);
    fd::aio_ptr dap(da);
    nng_stream_listener_accept(l, aa);
    nng_stream_dialer_dial(d, da);
    nng_aio_wait(aa);
    nng_aio_wait(da);
    REQUIRE(nng_aio_result(aa) == 0);
    REQUIRE(nng_aio_result(da) == 0);
    server = std::make_unique<fd::nng_byte_stream>(io.get_executor(),
                                                   static_cast<nng_stream*>(nng_aio_get_output(aa, 0)));
    client = std::make_unique<fd::nng_byte_stream>(io.get_executor(),
                                                   static_cast<nng_stream*>(nng_aio_get_output(da, 0)));
  }
};

/// Blocking raw send/recv on a stream (the test's thread).
void raw_send(fd::byte_stream* s, std::string_view text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const nng_iov iov{const_cast<char*>(text.data()) + sent, text.size() - sent};
    std::size_t n = 0;
    REQUIRE_FALSE(s->write_some({&iov, 1}, n));
    sent += n;
  }
}
std::string raw_recv(fd::byte_stream* s, std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    std::size_t k = 0;
    REQUIRE_FALSE(s->read_some({out.data() + got, n - got}, k));
    REQUIRE(k > 0);
    got += k;
  }
  return out;
}

/// A self-signed certificate for `name` (CN and subjectAltName) and its key,
/// `<tag>c.pem` and `<tag>k.pem` in `dir`, made by the openssl command.
void self_signed(const temp_dir& dir, const std::string& tag, const std::string& name) {
  const std::string san = name.find_first_not_of("0123456789.") == std::string::npos ? "IP:" + name : "DNS:" + name;
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + name +
                          " -addext subjectAltName=" + san + " -days 1 -keyout " + (dir / (tag + "k.pem")) + " -out " +
                          (dir / (tag + "c.pem")) + " >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

fd::transport_options identity(const temp_dir& dir, const std::string& tag) {
  fd::transport_options o;
  o.tls_cert_file = dir / (tag + "c.pem");
  o.tls_key_file = dir / (tag + "k.pem");
  return o;
}

struct outcome {
  std::optional<std::error_code> ec;
  fd::tls_handshake_result r;
};

/// Runs both ends' handshakes to completion on one io_context.
std::pair<outcome, outcome> handshake(tcp_pair& p, const fd::transport_options& srv, const fd::transport_options& cli,
                                      const std::string& name) {
  auto& io = p.io;
  outcome s, c;
  fd::async_tls_handshake(io.get_executor(), *p.server, fd::tls_context(fd::tls_context::role::server, srv), "",
                          [&](std::error_code ec, fd::tls_handshake_result r) {
                            s = {ec, std::move(r)};
                            if (ec) p.server.reset(); // as fiber does: the peer's read ends
                          });
  fd::async_tls_handshake(io.get_executor(), *p.client, fd::tls_context(fd::tls_context::role::client, cli), name,
                          [&](std::error_code ec, fd::tls_handshake_result r) {
                            c = {ec, std::move(r)};
                            if (ec) p.client.reset();
                          });
  io.run();
  REQUIRE(s.ec);
  REQUIRE(c.ec);
  return {std::move(s), std::move(c)};
}

bool have_openssl() {
  if (!fd::libssl_api::get()) WARN("libssl 3 cannot be loaded: TLS tests skipped");
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) WARN("openssl not found: TLS tests skipped");
  return fd::libssl_api::get() && std::system("command -v openssl >/dev/null 2>&1") == 0;
}

} // namespace

TEST_CASE("tls: both ends derive one channel binding and the frame keys; no TLS record follows", "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  self_signed(dir, "a", "localhost");
  tcp_pair p;
  SECTION("a client that verifies nothing") {
    auto [s, c] = handshake(p, identity(dir, "a"), {}, "localhost");
    REQUIRE_FALSE(*s.ec);
    REQUIRE_FALSE(*c.ec);
    CHECK(s.r.binding == c.r.binding);
    CHECK(s.r.binding != fd::channel_binding{});
    CHECK(s.r.client_to_server == c.r.client_to_server);
    CHECK(s.r.server_to_client == c.r.server_to_client);
    CHECK(s.r.client_to_server != s.r.server_to_client);
    CHECK(s.r.client_to_server != s.r.binding);
  }
  SECTION("a client that verifies the server's chain and name") {
    auto cli = fd::transport_options{};
    cli.tls_ca_file = dir / "ac.pem";
    auto [s, c] = handshake(p, identity(dir, "a"), cli, "localhost");
    REQUIRE_FALSE(*s.ec);
    REQUIRE_FALSE(*c.ec);
    CHECK(s.r.binding == c.r.binding);
  }
  // Nothing of TLS is left on the wire: fiber's frames follow directly.
  raw_send(p.server.get(), "challenge");
  CHECK(raw_recv(p.client.get(), 9) == "challenge");
  raw_send(p.client.get(), "auth");
  CHECK(raw_recv(p.server.get(), 4) == "auth");
}

TEST_CASE("tls: bytes a client sends right after its handshake reach the server, early or later", "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  self_signed(dir, "a", "localhost");
  tcp_pair p;
  auto& io = p.io;
  std::optional<std::error_code> sec, cec;
  fd::tls_handshake_result sr;
  fd::async_tls_handshake(io.get_executor(), *p.server,
                          fd::tls_context(fd::tls_context::role::server, identity(dir, "a")), "",
                          [&](std::error_code ec, fd::tls_handshake_result r) {
                            sec = ec;
                            sr = std::move(r);
                          });
  fd::async_tls_handshake(io.get_executor(), *p.client, fd::tls_context(fd::tls_context::role::client, {}), "localhost",
                          [&](std::error_code ec, fd::tls_handshake_result) {
                            cec = ec;
                            if (!ec) raw_send(p.client.get(), "auth-frame"); // before the server may be done
                          });
  io.run();
  REQUIRE(sec);
  REQUIRE(cec);
  REQUIRE_FALSE(*sec);
  REQUIRE_FALSE(*cec);
  std::string got(reinterpret_cast<const char*>(sr.early.data()), sr.early.size());
  got += raw_recv(p.server.get(), 10 - got.size());
  CHECK(got == "auth-frame");
}

TEST_CASE("tls: a relay that terminates TLS on both sides holds two bindings", "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  self_signed(dir, "m", "localhost"); // the master's
  self_signed(dir, "r", "localhost"); // the relay's own, same name
  tcp_pair worker_to_relay, relay_to_master;
  auto [relay_srv, worker] = handshake(worker_to_relay, identity(dir, "r"), {}, "localhost");
  auto [master, relay_cli] = handshake(relay_to_master, identity(dir, "m"), {}, "localhost");
  REQUIRE_FALSE(*worker.ec);
  REQUIRE_FALSE(*master.ec);
  CHECK(worker.r.binding == relay_srv.r.binding);
  CHECK(master.r.binding == relay_cli.r.binding);
  CHECK(worker.r.binding != master.r.binding); // so proofs over it cannot be passed through
}

TEST_CASE("tls: a verifying client refuses another name, another CA; a server without a client certificate",
          "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  self_signed(dir, "a", "localhost");
  self_signed(dir, "b", "localhost");
  self_signed(dir, "i", "10.200.0.1");
  tcp_pair p;
  auto cli = fd::transport_options{};
  SECTION("the certificate names another host") {
    cli.tls_ca_file = dir / "ac.pem";
    auto [s, c] = handshake(p, identity(dir, "a"), cli, "fiber-run-1");
    CHECK(fd::is_tls_verify_failure(*c.ec));
    CHECK(c.r.detail == "hostname mismatch");
    CHECK(c.ec->message() == "the peer's TLS certificate failed verification: hostname mismatch");
    CHECK(*s.ec); // the server got the client's alert, or its close
  }
  SECTION("an IP address is checked against the certificate's addresses") {
    cli.tls_ca_file = dir / "ic.pem";
    auto [s, c] = handshake(p, identity(dir, "i"), cli, "10.200.0.1");
    CHECK_FALSE(*c.ec);
    CHECK_FALSE(*s.ec);
  }
  SECTION("an IP address the certificate does not carry") {
    cli.tls_ca_file = dir / "ic.pem";
    auto [s, c] = handshake(p, identity(dir, "i"), cli, "10.200.0.2");
    CHECK(fd::is_tls_verify_failure(*c.ec));
    CHECK(c.r.detail == "IP address mismatch");
  }
  SECTION("the certificate is from another CA") {
    cli.tls_ca_file = dir / "bc.pem";
    auto [s, c] = handshake(p, identity(dir, "a"), cli, "localhost");
    CHECK(fd::is_tls_verify_failure(*c.ec));
    CHECK(c.r.detail == "self-signed certificate");
  }
  SECTION("a server with a CA requires the client's certificate") {
    auto srv = identity(dir, "a");
    srv.tls_ca_file = dir / "bc.pem";
    auto [s, c] = handshake(p, srv, {}, "localhost");
    CHECK(*s.ec == fd::make_error_code(fd::tls_errc::protocol));
    CHECK(s.r.detail.find("peer did not return a certificate") != std::string::npos);
    SECTION("and accepts one that chains to it") {
      tcp_pair q;
      auto [s2, c2] = handshake(q, srv, identity(dir, "b"), "localhost");
      CHECK_FALSE(*s2.ec);
      CHECK_FALSE(*c2.ec);
    }
  }
}

TEST_CASE("tls: a peer that speaks no TLS, closes, or stalls ends the handshake with an error", "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  self_signed(dir, "a", "localhost");
  tcp_pair p;
  auto& io = p.io;
  std::optional<std::error_code> got;
  fd::tls_handshake_result res;
  auto done = [&](std::error_code ec, fd::tls_handshake_result r) {
    got = ec;
    res = std::move(r);
  };
  SECTION("a client that sends HTTP") {
    raw_send(p.client.get(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    fd::async_tls_handshake(io.get_executor(), *p.server,
                            fd::tls_context(fd::tls_context::role::server, identity(dir, "a")), "", done);
    io.run();
    REQUIRE(got);
    CHECK(*got == fd::make_error_code(fd::tls_errc::protocol));
    CHECK_FALSE(res.detail.empty());
  }
  SECTION("a server that answers with bytes that are not TLS") {
    fd::async_tls_handshake(io.get_executor(), *p.client, fd::tls_context(fd::tls_context::role::client, {}),
                            "localhost", done);
    raw_send(p.server.get(), std::string(64, 'x'));
    io.run();
    REQUIRE(got);
    CHECK(*got == fd::make_error_code(fd::tls_errc::protocol));
  }
  SECTION("a server that closes") {
    fd::async_tls_handshake(io.get_executor(), *p.client, fd::tls_context(fd::tls_context::role::client, {}),
                            "localhost", done);
    p.server.reset();
    io.run();
    REQUIRE(got);
    CHECK(*got);
  }
  SECTION("a client that never speaks: cancellation ends the wait") {
    asio::cancellation_signal sig;
    fd::async_tls_handshake(io.get_executor(), *p.server,
                            fd::tls_context(fd::tls_context::role::server, identity(dir, "a")), "",
                            asio::bind_cancellation_slot(sig.slot(), done));
    io.run_one(); // the first step: OpenSSL now waits for the ClientHello
    CHECK_FALSE(got);
    sig.emit(asio::cancellation_type::terminal);
    io.run();
    REQUIRE(got);
    CHECK(*got == asio::error::operation_aborted);
  }
}

TEST_CASE("tls: a certificate fiber makes (the kubernetes default) verifies under its name only", "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  const auto id = fd::make_self_signed("fiber-run-42");
  { std::ofstream(dir / "pin.pem") << id.cert_pem; }
  fd::transport_options srv;
  srv.tls_cert_pem = id.cert_pem;
  srv.tls_key_pem = id.key_pem;
  fd::transport_options cli;
  cli.tls_ca_file = dir / "pin.pem";
  tcp_pair p;
  SECTION("its name") {
    auto [s, c] = handshake(p, srv, cli, "fiber-run-42");
    CHECK_FALSE(*s.ec);
    CHECK_FALSE(*c.ec);
  }
  SECTION("another") {
    auto [s, c] = handshake(p, srv, cli, "fiber-run-43");
    CHECK(c.ec->message() == "the peer's TLS certificate failed verification: hostname mismatch");
  }
}

TEST_CASE("tls: settings OpenSSL refuses are a clear error", "[transport][tls]") {
  if (!have_openssl()) return;
  temp_dir dir("fiber-tls");
  self_signed(dir, "a", "localhost");
  self_signed(dir, "b", "localhost");
  auto o = identity(dir, "a");
  o.tls_key_file = dir / "bk.pem"; // another certificate's key
  CHECK_THROWS_WITH(fd::tls_context(fd::tls_context::role::server, o),
                    Catch::Contains("private key for certificate") && Catch::Contains("ac.pem"));
  CHECK_THROWS_WITH(fd::tls_context(fd::tls_context::role::server, {}), Catch::Contains("needs tls_cert_file"));
  fd::transport_options c;
  c.tls_ca_file = dir / "ak.pem"; // a key, not a certificate
  CHECK_THROWS_WITH(fd::tls_context(fd::tls_context::role::client, c), Catch::Contains("CA file"));
  c.tls_ca_file = dir / "missing.pem";
  CHECK_THROWS_WITH(fd::tls_context(fd::tls_context::role::client, c), Catch::Contains("cannot read TLS file"));
}
