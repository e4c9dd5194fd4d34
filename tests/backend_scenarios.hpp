// SPDX-License-Identifier: BSL-1.0
#pragma once
// What every job-backed backend must do alike (the Docker and Kubernetes
// integration tests run these): the targets its jobs run, and the checks of
// Process exit codes, a Queue shared with jobs and a duplex Pipe. `InJob`
// tells a job from the test process (in a container, in a pod).

#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "integration_support.hpp"

namespace fiber_test {

inline void exit_with(int code) { std::exit(code); }
inline void returns_normally() {}
inline void throws_runtime() { throw std::runtime_error("boom"); }
inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
inline void raise_signal(int sig) { ::raise(sig); }
inline void produce(fiber::Queue<int> q, int base, int n) {
  for (int i = 0; i < n; ++i) q.put(base + i);
}

/// Puts `label` into `q` when run in a job, "host" otherwise.
template <auto InJob>
void where_am_i(fiber::Queue<std::string> q, std::string label) {
  q.put(InJob() ? label : "host");
}

/// Sends back twice each value received (-1 outside a job) until a negative one.
template <auto InJob>
void echo(fiber::Connection<int> c) {
  for (;;) {
    int v = c.recv();
    if (v < 0) return;
    c.send(InJob() ? v * 2 : -1);
  }
}

/// Seven Processes of type `P` that end every way a job can: return, exit(7),
/// exit(130) (a shell would read it as SIGINT: the worker says which),
/// SIGUSR1, an exception, terminate() and kill().
template <class P = fiber::Process>
struct exit_code_processes {
  P ok{fiber::target<&returns_normally>};
  P seven{fiber::target<&exit_with>, 7};
  P high{fiber::target<&exit_with>, 130};
  P usr1{fiber::target<&raise_signal>, int(SIGUSR1)};
  P thrower{fiber::target<&throws_runtime>};
  P term{fiber::target<&sleep_ms>, 120000};
  P killed{fiber::target<&sleep_ms>, 120000};

  std::array<P*, 7> all() { return {&ok, &seven, &high, &usr1, &thrower, &term, &killed}; }

  /// Starts them all and waits until both sleepers are connected.
  void start() {
    for (auto* p : all()) p->start();
    REQUIRE(poll_until([&] { return term.pid() && killed.pid(); }, std::chrono::seconds(60)));
    CHECK(term.is_alive());
  }

  /// Terminates one sleeper, kills the other, joins all and checks each exit code.
  void stop_and_check() {
    term.terminate();
    killed.kill();
    for (auto* p : all()) {
      INFO(p->name());
      REQUIRE(p->join(std::chrono::seconds(60)));
    }
    CHECK(ok.exitcode() == 0);
    CHECK(seven.exitcode() == 7);
    CHECK(high.exitcode() == 130);
    CHECK(usr1.exitcode() == -SIGUSR1);
    CHECK(thrower.exitcode() == 1);
    CHECK(term.exitcode() == -15);
    CHECK(killed.exitcode() == -9);
  }
};

/// Two producer jobs put 200 items each into a Queue made here, and a third
/// says where it runs (`label`): every item arrives exactly once.
template <auto InJob, class P = fiber::Process>
void check_queue_exactly_once(const std::string& label) {
  using namespace std::chrono_literals;
  constexpr int per_producer = 200;
  fiber::Queue<int> q;
  fiber::Queue<std::string> where;
  P a{fiber::target<&produce>, q, 1000, per_producer};
  P b{fiber::target<&produce>, q, 5000, per_producer};
  P w{fiber::target<&where_am_i<InJob>>, where, label};
  a.start();
  b.start();
  w.start();
  std::map<int, int> got;
  int received = 0;
  for (auto deadline = std::chrono::steady_clock::now() + 60s;
       received < 2 * per_producer && std::chrono::steady_clock::now() < deadline;)
    if (auto v = q.get(500ms)) {
      ++got[*v];
      ++received;
    }
  REQUIRE(received == 2 * per_producer);
  CHECK(where.get(30s) == std::optional<std::string>(label));
  for (auto* p : {&a, &b, &w}) {
    REQUIRE(p->join(60s));
    CHECK(p->exitcode() == 0);
  }
  CHECK_FALSE(q.get(300ms)); // nothing more than what was put
  std::map<int, int> want;
  for (int i = 0; i < per_producer; ++i) want[1000 + i] = want[5000 + i] = 1;
  CHECK(got == want);
}

/// A duplex Pipe with a job that doubles what it gets: 20 round trips, then
/// the job ends and the Pipe reports end of file.
template <auto InJob, class P = fiber::Process>
void check_duplex_pipe() {
  using namespace std::chrono_literals;
  auto [a, b] = fiber::Pipe<int>();
  P p{fiber::target<&echo<InJob>>, std::move(b)};
  p.start();
  for (int i = 1; i <= 20; ++i) {
    a.send(i);
    REQUIRE(a.poll(60s));
    CHECK(a.recv() == 2 * i);
  }
  a.send(-1);
  REQUIRE(p.join(60s));
  CHECK(p.exitcode() == 0);
  CHECK_THROWS_AS(a.recv(), fiber::eof_error);
}

} // namespace fiber_test
