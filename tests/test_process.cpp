#include <fiber/process.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <thread>
#include <unistd.h>

#include "support.hpp"

namespace {

void exit_with(int code) { std::exit(code); }
void throws_runtime() { throw std::runtime_error("boom"); }
void raise_signal(int sig) { ::raise(sig); }
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
void returns_normally(std::string s, std::vector<int> v) {
  if (s != "hello" || v.size() != 3) std::exit(9);
}
int pid_in_worker() { return ::getpid(); }

} // namespace

TEST_CASE("a Process reports its target's exit status", "[process]") {
  fiber::Process ok{fiber::target<&returns_normally>, std::string("hello"), std::vector<int>{1, 2, 3}};
  CHECK_FALSE(ok.exitcode());
  ok.start();
  ok.join();
  CHECK(ok.exitcode() == 0);

  fiber::Process p{fiber::target<&exit_with>, 7};
  p.start();
  p.join();
  CHECK(p.exitcode() == 7);
  CHECK_FALSE(p.is_alive());
  fiber_test::require_no_children();
}

TEST_CASE("an uncaught exception in the target gives exit code 1", "[process]") {
  fiber::Process p{fiber::target<&throws_runtime>};
  p.start();
  p.join();
  CHECK(p.exitcode() == 1);
}

TEST_CASE("killed by signal N gives -N", "[process]") {
  // SIGUSR1 (default action: terminate): ASan and TSan catch SIGSEGV and exit
  // with their own status instead.
  fiber::Process p{fiber::target<&raise_signal>, int(SIGUSR1)};
  p.start();
  p.join();
  CHECK(p.exitcode() == -SIGUSR1);
}

TEST_CASE("join with a timeout, is_alive, terminate, kill, pid, name", "[process]") {
  fiber::Process p{fiber::target<&sleep_ms>, 60000};
  CHECK(p.name().rfind("Process-", 0) == 0);
  p.start();
  REQUIRE(p.pid());
  CHECK(*p.pid() != ::getpid());
  CHECK(p.is_alive());
  CHECK_FALSE(p.join(std::chrono::milliseconds(50)));
  CHECK(fiber::active_children().size() >= 1);
  p.terminate();
  CHECK(p.join(std::chrono::seconds(10)));
  CHECK(p.exitcode() == -SIGTERM);

  fiber::Process k{fiber::target<&sleep_ms>, 60000};
  k.start();
  k.kill();
  k.join();
  CHECK(k.exitcode() == -SIGKILL);
  CHECK(fiber_test::process_gone(*k.pid()));
}

TEST_CASE("destroying a started, unjoined Process terminates and reaps it", "[process]") {
  std::int64_t pid = 0;
  {
    fiber::Process p{fiber::target<&sleep_ms>, 60000};
    p.start();
    pid = *p.pid();
    CHECK(fiber_test::process_exists(pid));
  }
  CHECK(fiber_test::process_gone(pid));
  fiber_test::require_no_children();
}

TEST_CASE("start twice and join before start are logic errors", "[process]") {
  fiber::Process p{fiber::target<&exit_with>, 0};
  CHECK_THROWS_AS(p.join(), std::logic_error);
  p.start();
  CHECK_THROWS_AS(p.start(), std::logic_error);
  p.join();
}

TEST_CASE("the target runs in another process", "[process]") {
  // exit code carries the low byte of the worker's pid relation: compare via a file-free check
  fiber::Process p{fiber::target<&pid_in_worker>};
  p.start();
  auto pid = p.pid();
  p.join();
  CHECK(pid);
  CHECK(*pid != ::getpid());
  CHECK(p.exitcode() == 0);
}

TEST_CASE("the handshake refuses a worker with a different registry", "[process][handshake]") {
  // The salt changes the registry hash a worker presents (simulates another binary).
  ::setenv("FIBER_INTERNAL_REGISTRY_SALT", "other-build", 1);
  fiber::Process p{fiber::target<&exit_with>, 0};
  p.start();
  ::unsetenv("FIBER_INTERNAL_REGISTRY_SALT");
  try {
    p.join();
    FAIL("join() should throw fiber::handshake_error");
  } catch (const fiber::handshake_error& e) {
    std::string what = e.what();
    CHECK(what.find("registry") != std::string::npos);
    CHECK(what.find("master runs build") != std::string::npos);
  }
  CHECK(p.exitcode() != 0);
}
