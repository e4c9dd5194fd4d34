// SPDX-License-Identifier: BSL-1.0
// fiber::error hierarchy: every fiber exception is catchable as fiber::error
// and as std::runtime_error, and remote_error keeps the remote type and message.
#include <fiber/error.hpp>

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace {

template <class E>
void check_is_fiber_error() {
  STATIC_REQUIRE(std::is_base_of_v<fiber::error, E>);
  STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, E>);
  STATIC_REQUIRE(std::is_copy_constructible_v<E>);
}

} // namespace

TEST_CASE("every fiber exception derives from fiber::error") {
  check_is_fiber_error<fiber::remote_error>();
  check_is_fiber_error<fiber::worker_lost>();
  check_is_fiber_error<fiber::serialization_error>();
  check_is_fiber_error<fiber::eof_error>();
  check_is_fiber_error<fiber::timeout_error>();
  check_is_fiber_error<fiber::backend_error>();
  check_is_fiber_error<fiber::handshake_error>();
  check_is_fiber_error<fiber::broken_barrier_error>();
  STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, fiber::error>);
}

TEST_CASE("remote_error carries the remote type name and message") {
  const fiber::remote_error e{"std::out_of_range", "vector::at"};
  CHECK(e.type_name() == "std::out_of_range");
  CHECK(e.message() == "vector::at");
  CHECK(std::string{e.what()} == "std::out_of_range: vector::at");
}

TEST_CASE("fiber exceptions are caught through the base class") {
  auto thrower = [] { throw fiber::timeout_error{"get() timed out after 50 ms"}; };
  CHECK_THROWS_AS(thrower(), fiber::error);
  CHECK_THROWS_WITH(thrower(), "get() timed out after 50 ms");
  try {
    throw fiber::worker_lost{"worker 3 lost"};
  } catch (const std::runtime_error& e) {
    CHECK(std::string{e.what()} == "worker 3 lost");
  }
}
