// SPDX-License-Identifier: BSL-1.0
// The runtime's service parts on fakes (detail/service_host.hpp,
// detail/service_client.hpp): requests, replies, failures with their class,
// links that end and requests that expire, on one io_context, no process.
#include <fiber/detail/service_client.hpp>
#include <fiber/detail/service_host.hpp>

#include "fake_link.hpp"

#include <catch2/catch.hpp>

#include <asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace d = fiber::detail;

std::vector<std::byte> bytes_of(int v) {
  fiber::writer w;
  w.write(v);
  return w.release();
}
int int_of(const std::vector<std::byte>& b) {
  fiber::reader r(b);
  return r.read<int>();
}

// Op 1 answers its int plus one; op 2 throws broken_barrier_error; op 3
// keeps its reply for later. Records who went away.
struct echo_service final : d::service {
  std::vector<std::uint64_t> gone;
  std::vector<std::uint64_t> callers;
  d::reply_fn kept;
  void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, d::reply_fn reply) override {
    callers.push_back(peer);
    if (op == 2) throw fiber::broken_barrier_error("the barrier broke");
    if (op == 3) {
      kept = std::move(reply);
      return;
    }
    fiber::reader r(payload);
    reply(d::wire_status::ok, bytes_of(r.read<int>() + 1));
  }
  void peer_gone(std::uint64_t peer) override { gone.push_back(peer); }
};

// The reply frame `f` (sent by a service host), decoded.
d::reply_msg reply_in(const std::vector<std::byte>& f) {
  auto [k, body] = d::unframe(f);
  REQUIRE(k == d::frame_kind::reply);
  return fiber::deserialize<d::reply_msg>(body);
}

std::vector<std::byte> request_frame(std::uint64_t id, std::uint64_t service, std::uint32_t op, int v) {
  return d::frame(d::frame_kind::request, d::request_msg{id, service, op, bytes_of(v)});
}

std::shared_ptr<fiber_test::fake_link> make_link(asio::io_context& io, std::uint64_t number) {
  auto l = std::make_shared<fiber_test::fake_link>();
  l->ex = io.get_executor();
  l->number = number;
  l->who.name = "peer" + std::to_string(number);
  l->who.pid = 4000 + int(number);
  l->who.host = "h";
  return l;
}

// What a request_done got.
struct outcome {
  std::exception_ptr e;
  std::vector<std::byte> payload;
  bool called = false;
};
d::request_done record(outcome& o) {
  return [&o](std::exception_ptr e, std::vector<std::byte> p) {
    CHECK_FALSE(o.called); // exactly once
    o = {std::move(e), std::move(p), true};
  };
}

} // namespace

TEST_CASE("service_host: a served link's requests reach their service, and its end is told", "[service_host]") {
  asio::io_context io;
  d::service_host host(io.get_executor(), d::process_ref{"h", 1, 1});
  auto svc = std::make_shared<echo_service>();
  const auto id = host.add(svc);
  auto l = make_link(io, 7);
  host.serve(l);
  CHECK(host.peer_description(7) == "peer7 (pid 4007 on h)");
  CHECK(host.peer_description(0) == "this process");

  l->receive(request_frame(11, id, 1, 41));
  REQUIRE(l->sent.size() == 1);
  auto r = reply_in(l->sent[0]);
  CHECK(r.request_id == 11);
  CHECK(r.status == d::wire_status::ok);
  CHECK(int_of(r.payload) == 42);
  CHECK(svc->callers == std::vector<std::uint64_t>{7});

  SECTION("a service that throws answers with the failure's class") {
    l->receive(request_frame(12, id, 2, 0));
    REQUIRE(l->sent.size() == 2);
    r = reply_in(l->sent[1]);
    CHECK(r.status == d::wire_status::broken_barrier);
    CHECK_THROWS_AS(std::rethrow_exception(d::failure_of(r.status, r.payload)), fiber::broken_barrier_error);
  }
  SECTION("a service removed, or never there, answers with an error naming its id") {
    host.remove(id);
    l->receive(request_frame(13, id, 1, 0));
    l->receive(request_frame(14, 999, 1, 0));
    REQUIRE(l->sent.size() == 3);
    for (auto i : {1, 2}) {
      r = reply_in(l->sent[std::size_t(i)]);
      CHECK(r.status == d::wire_status::error);
      CHECK_THROWS_WITH(std::rethrow_exception(d::failure_of(r.status, r.payload)),
                        Catch::Contains("no such object or queue"));
    }
  }
  SECTION("a reply too large for a frame fails the request, not the link") {
    l->receive(request_frame(15, id, 3, 0));
    REQUIRE(svc->kept);
    fiber::set_config("max_message_size_mb", "1"); // the smallest allowed: 1 MiB
    svc->kept(d::wire_status::ok, std::vector<std::byte>(std::size_t(1) << 20));
    REQUIRE(l->sent.size() == 2);
    r = reply_in(l->sent[1]);
    CHECK(r.request_id == 15);
    CHECK(r.status == d::wire_status::error);
    CHECK_FALSE(l->closed());
  }
  SECTION("a link that ends is told to every service once") {
    l->close("gone");
    io.run();
    CHECK(svc->gone == std::vector<std::uint64_t>{7});
    CHECK(host.peer_description(7) == "link 7");
  }
}

TEST_CASE("service_host: a request from this process completes later, as over a link", "[service_host]") {
  asio::io_context io;
  d::service_host host(io.get_executor(), d::process_ref{"h", 1, 1});
  auto svc = std::make_shared<echo_service>();
  const auto id = host.add(svc);
  outcome ok, failed;
  host.request(id, 1, bytes_of(1), record(ok));
  host.request(id, 2, {}, record(failed));
  CHECK_FALSE(ok.called); // posted, not called inside request()
  io.run();
  REQUIRE(ok.called);
  CHECK_FALSE(ok.e);
  CHECK(int_of(ok.payload) == 2);
  REQUIRE(failed.called);
  CHECK_THROWS_AS(std::rethrow_exception(failed.e), fiber::broken_barrier_error);
  CHECK(svc->callers == std::vector<std::uint64_t>{0, 0});
}

TEST_CASE("service_client: requests wait for their link, then replies find their request", "[service_client]") {
  asio::io_context io;
  std::vector<std::pair<std::string, std::function<void(std::exception_ptr, std::shared_ptr<d::worker_link>)>>> dials;
  d::service_client client(io.get_executor(),
                           [&](const std::string& url, auto done) { dials.emplace_back(url, std::move(done)); });
  outcome a, b;
  client.send("tcp://x:1", 5, 1, bytes_of(1), record(a));
  client.send("tcp://x:1", 5, 1, bytes_of(2), record(b));
  REQUIRE(dials.size() == 1); // one link per process
  CHECK(dials[0].first == "tcp://x:1");

  SECTION("connected: both are sent, and each reply completes its own request") {
    auto l = make_link(io, 1);
    dials[0].second(nullptr, l);
    REQUIRE(l->sent.size() == 2);
    auto [k, body] = d::unframe(l->sent[1]);
    auto second = fiber::deserialize<d::request_msg>(body);
    l->receive(d::frame(d::frame_kind::reply, d::reply_msg{second.request_id, d::wire_status::ok, bytes_of(20)}));
    CHECK_FALSE(a.called);
    REQUIRE(b.called);
    CHECK(int_of(b.payload) == 20);
    outcome c;
    client.send("tcp://x:1", 5, 1, bytes_of(3), record(c)); // the link is there: sent at once
    CHECK(l->sent.size() == 3);
    CHECK(dials.size() == 1);

    l->close("reset by peer"); // the rest fail with worker_lost naming the URL
    io.run();
    REQUIRE(a.called);
    REQUIRE(c.called);
    CHECK_THROWS_AS(std::rethrow_exception(a.e), fiber::worker_lost);
    CHECK_THROWS_WITH(std::rethrow_exception(c.e), Catch::Contains("tcp://x:1") && Catch::Contains("reset by peer"));
  }
  SECTION("a connect that fails fails every request waiting on it, and the next request dials again") {
    dials[0].second(std::make_exception_ptr(fiber::handshake_error("refused")), nullptr);
    REQUIRE(a.called);
    REQUIRE(b.called);
    CHECK_THROWS_AS(std::rethrow_exception(a.e), fiber::handshake_error);
    CHECK_THROWS_AS(std::rethrow_exception(b.e), fiber::handshake_error);
    outcome c;
    client.send("tcp://x:1", 5, 1, bytes_of(3), record(c));
    CHECK(dials.size() == 2);
  }
}

TEST_CASE("service_client: a request whose link is late expires with the service's own timeout reply",
          "[service_client]") {
  asio::io_context io;
  std::function<void(std::exception_ptr, std::shared_ptr<d::worker_link>)> dialed;
  d::service_client client(io.get_executor(), [&](const std::string&, auto done) { dialed = std::move(done); });
  outcome timed, plain;
  d::request_expiry ex;
  ex.at = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  ex.reply = bytes_of(-1);
  client.send("tcp://y:1", 5, 1, bytes_of(1), record(timed), std::move(ex));
  client.send("tcp://y:1", 5, 1, bytes_of(2), record(plain));
  io.run(); // the expiry's timer is all there is to run
  REQUIRE(timed.called);
  CHECK_FALSE(timed.e);
  CHECK(int_of(timed.payload) == -1);
  CHECK_FALSE(plain.called);

  auto l = make_link(io, 1);
  dialed(nullptr, l);
  REQUIRE(l->sent.size() == 1); // the expired request is not sent
  auto [k, body] = d::unframe(l->sent[0]);
  CHECK(int_of(fiber::deserialize<d::request_msg>(body).payload) == 2);
}

// A long run replaces workers (maxtasksperchild, deaths): the master's
// registry of them must not grow with every worker it ever had.
TEST_CASE("liveness: a master remembers the last dead_kept dead workers, not every one", "[liveness]") {
  asio::io_context io;
  d::liveness l(io.get_executor(), d::process_ref{"master", 1, 1});
  const auto ref = [](std::uint64_t i) { return d::process_ref{"host", std::int64_t(i + 2), 7}; };
  const std::uint64_t n = d::liveness::dead_kept + 1000;
  for (std::uint64_t i = 0; i < n; ++i) {
    l.connected(i, ref(i));
    l.ended(i, "exit status 0");
  }
  l.connected(n, ref(n)); // alive
  CHECK(l.size() == d::liveness::dead_kept + 1);
  CHECK(l.knows(ref(n)));
  CHECK_FALSE(l.knows(ref(0))); // forgotten: a watcher counts it dead after grace()
  std::string why;
  l.watch(ref(n - 1), [&](const std::string& w) { why = w; });
  CHECK(why == "exit status 0"); // the recent dead are still answered at once
}
