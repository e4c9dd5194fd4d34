// SPDX-License-Identifier: BSL-1.0
// The one asynchronous operation, the one blocking wait, and the one rule
// for exceptions: every fiber::error subclass keeps its class on the wire,
// between threads, and between processes.
#include <fiber/detail/async_op.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/broker_client.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/wire_status.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>
#include <fiber/process.hpp>

#include <catch2/catch.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/io_context.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "support.hpp"

namespace {

// One entry per fiber::error subclass fiber sends as data (remote_error has its own body).
struct error_kind {
  std::function<void()> raise;
  std::type_index type;
};

template <class E>
error_kind kind_of() {
  return {[] { throw E("the message"); }, typeid(E)};
}

std::vector<error_kind> kinds() {
  return {
      kind_of<fiber::error>(),           kind_of<fiber::worker_lost>(),          kind_of<fiber::serialization_error>(),
      kind_of<fiber::eof_error>(),       kind_of<fiber::timeout_error>(),        kind_of<fiber::backend_error>(),
      kind_of<fiber::handshake_error>(), kind_of<fiber::broken_barrier_error>(), kind_of<fiber::hold_revoked_error>(),
      kind_of<fiber::config_error>()};
}

// The dynamic type and what() of the exception `e` holds.
std::pair<std::type_index, std::string> caught(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return {typeid(x), x.what()};
  }
}

// A service that fails request `op` with kinds()[op]'s exception.
struct thrower : fiber::detail::service {
  void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte>, fiber::detail::reply_fn reply) override {
    if (op >= kinds().size()) return reply(fiber::detail::wire_status::ok, {});
    kinds()[op].raise();
  }
};

// In a child process: asks the master's thrower for every kind; exits with
// 0 when each arrived with its class and message, else 1 + the first wrong one.
int ask_every_kind(std::string url, std::uint64_t service) {
  auto ks = kinds();
  for (std::uint32_t op = 0; op < ks.size(); ++op) {
    try {
      fiber::detail::wait_on_runtime<std::vector<std::byte>>("test", [&](auto cb) {
        fiber::detail::runtime::instance().request(url, service, op, {}, cb);
      });
      return int(op) + 1;
    } catch (const std::exception& x) {
      if (std::type_index(typeid(x)) != ks[op].type || std::string(x.what()) != "the message") return int(op) + 1;
    }
  }
  return 0;
}

} // namespace

TEST_CASE("every fiber::error subclass keeps its class and message on the wire", "[errors]") {
  for (auto& k : kinds()) {
    try {
      k.raise();
    } catch (...) {
      auto [status, payload] = fiber::detail::current_failure();
      auto [type, what] = caught(fiber::detail::failure_of(status, payload));
      CHECK(type == k.type);
      CHECK(what == "the message");
    }
  }
  SECTION("remote_error keeps the remote type; another exception becomes one") {
    try {
      throw fiber::remote_error("std::out_of_range", "vector::at");
    } catch (...) {
      auto [status, payload] = fiber::detail::current_failure();
      CHECK(status == fiber::detail::wire_status::remote_error);
      try {
        std::rethrow_exception(fiber::detail::failure_of(status, payload));
      } catch (const fiber::remote_error& e) {
        CHECK(e.type_name() == "std::out_of_range");
        CHECK(e.message() == "vector::at");
      }
    }
    try {
      throw std::invalid_argument("bad");
    } catch (...) {
      auto [status, payload] = fiber::detail::current_failure();
      CHECK_THROWS_AS(std::rethrow_exception(fiber::detail::failure_of(status, payload)), fiber::remote_error);
    }
  }
  SECTION("a status outside the vocabulary is a serialization_error") {
    auto payload = fiber::detail::failure_payload("x");
    CHECK(caught(fiber::detail::failure_of(fiber::detail::wire_status(200), payload)).first ==
          std::type_index(typeid(fiber::serialization_error)));
  }
}

TEST_CASE("every fiber::error subclass keeps its class between threads", "[errors]") {
  for (auto& k : kinds()) {
    auto r = std::make_shared<fiber::detail::blocking_result<int>>();
    std::thread t([&] {
      std::exception_ptr e;
      try {
        k.raise();
      } catch (...) {
        e = std::current_exception();
      }
      r->set(std::move(e)); // after the catch block: see blocking_result
    });
    try {
      r->take();
      FAIL("no exception");
    } catch (const std::exception& x) {
      CHECK(std::type_index(typeid(x)) == k.type);
    }
    t.join();
  }
}

TEST_CASE("every fiber::error subclass keeps its class between processes", "[errors]") {
  auto& rt = fiber::detail::runtime::instance();
  auto id = rt.add_service(std::make_shared<thrower>());
  auto url = rt.listen_url();
  SECTION("in this process") { CHECK(ask_every_kind(url, id) == 0); }
  SECTION("from a child") {
    fiber::Process p{fiber::target<&ask_every_kind>, url, id};
    p.start();
    p.join();
    CHECK(p.exitcode() == 0);
  }
  rt.remove_service(id);
  fiber_test::require_no_children();
}

TEST_CASE("blocking_result: the first outcome counts; get() reads it again", "[blocking]") {
  fiber::detail::blocking_result<int> r;
  CHECK_FALSE(r.ready());
  CHECK_FALSE(r.wait_for(std::chrono::milliseconds(1)));
  r.set_value(7);
  r.set_exception(std::make_exception_ptr(fiber::error("late")));
  CHECK(r.ready());
  CHECK_FALSE(r.failed());
  CHECK(r.get() == 7);
  CHECK(r.get() == 7);
  CHECK(r.take() == 7);

  fiber::detail::blocking_result<> f;
  f.set_exception(std::make_exception_ptr(fiber::eof_error("gone")));
  CHECK(f.failed());
  CHECK_THROWS_AS(f.get(), fiber::eof_error);
  CHECK_THROWS_AS(f.get(), fiber::eof_error);
}

TEST_CASE("async_op: completes once on the handler's executor, with its work tracked", "[async_op]") {
  asio::io_context io;
  int calls = 0;
  std::thread::id ran_on;
  auto op = std::make_unique<fiber::detail::async_op<std::function<void(int)>>>(std::function<void(int)>([&](int v) {
                                                                                  calls += v;
                                                                                  ran_on = std::this_thread::get_id();
                                                                                }),
                                                                                io.get_executor());
  // Outstanding work: run() would not return before the completion.
  std::thread t([&] { io.run(); });
  const auto runner = t.get_id();
  op->complete(fiber::detail::via::post, 1);
  t.join(); // returns once the handler ran and the work is released
  CHECK(calls == 1);
  CHECK(ran_on == runner);
}

TEST_CASE("async_op: cancellation runs its action until it completes", "[async_op]") {
  asio::io_context io;
  asio::cancellation_signal sig;
  int cancelled = 0;
  std::exception_ptr got;
  bool done = false;
  auto h = asio::bind_cancellation_slot(sig.slot(), [&](std::exception_ptr e) {
    got = e;
    done = true;
  });
  fiber::detail::async_op<decltype(h)> op(std::move(h), io.get_executor());
  REQUIRE(op.cancellable());
  op.on_cancel([&](asio::cancellation_type) { ++cancelled; });
  sig.emit(asio::cancellation_type::terminal);
  CHECK(cancelled == 1);
  op.complete(fiber::detail::via::post, fiber::detail::aborted());
  io.run();
  CHECK(done);
  CHECK(fiber_test::is_aborted(got));
  sig.emit(asio::cancellation_type::terminal); // the slot was cleared: nothing runs
  CHECK(cancelled == 1);
}
