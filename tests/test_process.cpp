// SPDX-License-Identifier: BSL-1.0
#include <fiber/process.hpp>
#include <fiber/queue.hpp>

#include <fiber/pipe.hpp>
#include <fiber/wait.hpp>
#include <fiber/stats.hpp>

#include <fiber/backend/local.hpp>
#include <fiber/backend/slurm.hpp>
#include <fiber/detail/frame.hpp>
#include <fiber/detail/worker.hpp>

#include <catch2/catch.hpp>

#include <asio/use_future.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <optional>
#include <thread>
#include <unistd.h>

#include "support.hpp"

namespace {

void exit_with(int code) { std::exit(code); }
void throws_runtime() { throw std::runtime_error("boom"); }
void raise_signal(int sig) { ::raise(sig); }
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
// Exits with `code` while another thread keeps the link to the master
// writing 4 MiB frames (a kind the master's Process ignores) back to back.
void exit_while_link_writes(int code) {
  // Not static: std::exit would destroy it under the writing thread.
  const auto* filler = new auto(fiber::detail::frame(fiber::detail::frame_kind::results,
                                                     std::vector<std::byte>(4 << 20)));
  static std::atomic<int> sent{0};
  std::thread([filler] {
    for (;;) {
      if (!fiber::detail::master_writer().try_send(*filler)) continue;
      sent.fetch_add(1);
      sent.notify_all();
    }
  }).detach();
  sent.wait(0);
  std::exit(code);
}
void returns_normally(std::string s, std::vector<int> v) {
  if (s != "hello" || v.size() != 3) std::exit(9);
}
int pid_in_worker() { return ::getpid(); }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::filesystem::rename(path + ".tmp", path); // readers never see half a file
}

// A daemon child: waits for SIGTERM (PR_SET_PDEATHSIG would send SIGKILL)
// and records that it came, from the handler (async-signal-safe calls only).
char sigterm_marker[256];
void wait_for_sigterm(std::string marker, fiber::Connection<int> ready) {
  std::snprintf(sigterm_marker, sizeof sigterm_marker, "%s", marker.c_str());
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    int fd = ::open(sigterm_marker, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      (void)!::write(fd, "SIGTERM", 7);
      ::close(fd);
    }
    ::_exit(0);
  };
  ::sigaction(SIGTERM, &sa, nullptr);
  ready.send(1);
  for (;;) ::pause();
}

// A non-daemon child: still busy when its parent exits; the marker proves it
// finished (a child whose parent did not wait would die with it).
void finish_late(std::string marker) {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  write_file(marker, "done");
}

// A nested master: a daemon and a non-daemon child, then std::exit(3)
// without joining either.
void exit_with_children(std::string dir) {
  auto [ready, ready_w] = fiber::Pipe<int>(false);
  fiber::Process d{fiber::target<&wait_for_sigterm>, dir + "/daemon", std::move(ready_w)};
  d.set_daemon(true);
  d.start();
  (void)ready.recv();                                                                // its SIGTERM handler is in place
  auto* kept = new fiber::Process{fiber::target<&finish_late>, dir + "/non-daemon"}; // outlives exit
  kept->start();
  write_file(dir + "/daemon.pid", std::to_string(*d.pid()));
  write_file(dir + "/non-daemon.pid", std::to_string(*kept->pid()));
  std::exit(3); // d's destructor does not run: at-exit handling ends both
}

// Echoes one item back, then returns.
void echo_once(fiber::Connection<int> c) { c.send(c.recv() * 2); }

void report_pid_and_sleep(fiber::Queue<int> pids) {
  pids.put(int(::getpid()));
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

// Starts a Process of its own (a grandchild of the test), which reports its pid.
void start_grandchild(fiber::Queue<int> pids) {
  fiber::Process g{fiber::target<&report_pid_and_sleep>, pids};
  g.start();
  g.join();
}

// 0 when parent_process() names this process's parent, else which check failed.
void check_parent(std::int64_t expected_pid) {
  auto p = fiber::parent_process();
  if (!p) std::exit(10);
  if (p->pid != expected_pid) std::exit(11);
  if (p->name != "master") std::exit(12);
  if (!p->is_alive()) std::exit(13);
  if (p->join(std::chrono::milliseconds(10))) std::exit(14);
}

// The local backend, with exits reported as an srun step reports them: one
// exit status, 128+n for a task killed by signal n, mapped by the Slurm
// backend's own srun_exit.
class srun_like_launcher : public fiber::backend::launcher {
public:
  explicit srun_like_launcher(asio::any_io_executor ex) : local_(fiber::backend::local::make(std::move(ex))) {}
  std::string_view name() const noexcept override { return local_->name(); }
  std::string listen_url() override { return local_->listen_url(); }
  std::vector<fiber::backend::job> launch(const std::vector<fiber::backend::job_spec>& specs,
                                          std::vector<fiber::backend::exit_handler> on_exit) override {
    for (auto& h : on_exit)
      h = [h](const fiber::backend::job_exit& ex) {
        const bool signalled = ex.how == fiber::backend::job_exit::kind::signalled;
        const int srun_status = signalled ? 128 + ex.code : ex.code;
        h(fiber::detail::slurm_impl::srun_exit(srun_status << 8, 0)); // as waitpid gives it
      };
    return local_->launch(specs, std::move(on_exit));
  }
  void cancel(const fiber::backend::job& j, int signal) override { local_->cancel(j, signal); }

private:
  std::shared_ptr<fiber::backend::launcher> local_;
};

struct srun_like {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    return std::make_shared<srun_like_launcher>(std::move(ex));
  }
};

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

TEST_CASE("an exit status above 128 is not mistaken for a signal where the backend cannot tell them apart",
          "[process]") {
  // srun's exit status is 130 both for exit(130) and for death by SIGINT.
  fiber::basic_process<srun_like> exited{fiber::target<&exit_with>, 130};
  fiber::basic_process<srun_like> signalled{fiber::target<&raise_signal>, int(SIGUSR1)};
  fiber::basic_process<srun_like> killed{fiber::target<&sleep_ms>, 60000};
  exited.start();
  signalled.start();
  killed.start();
  REQUIRE(killed.pid());
  killed.kill();
  for (auto* p : {&exited, &signalled, &killed}) REQUIRE(p->join(std::chrono::seconds(30)));
  CHECK(exited.exitcode() == 130);
  CHECK(signalled.exitcode() == -SIGUSR1);
  CHECK(killed.exitcode() == -SIGKILL);
  fiber_test::require_no_children();
}

TEST_CASE("an exit status above 128 is told apart while the link is busy writing", "[process]") {
  // The exit report queues behind the frame being written instead of being dropped.
  fiber::basic_process<srun_like> p{fiber::target<&exit_while_link_writes>, 130};
  p.start();
  REQUIRE(p.join(std::chrono::seconds(30)));
  CHECK(p.exitcode() == 130);
  fiber_test::require_no_children();
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

TEST_CASE("fiber::stats lists a Process: starting or running, then exited with its code", "[process][stats]") {
  const auto snapshot = [](const std::string& name) -> std::optional<fiber::process_stats> {
    for (auto& p : fiber::stats().processes)
      if (p.worker.name == name) return p;
    return std::nullopt;
  };
  std::string name;
  {
    fiber::Process p{fiber::target<&sleep_ms>, 60000};
    name = p.name();
    CHECK_FALSE(snapshot(name)); // not started
    p.start();
    REQUIRE(fiber_test::eventually([&] {
      auto s = snapshot(name);
      return s && s->worker.state == fiber::worker_state::busy;
    }));
    auto s = *snapshot(name);
    CHECK(s.backend == "local");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    CHECK(s.worker.host == host);
    CHECK(s.worker.bytes_sent > 0); // its run frame
    CHECK_FALSE(s.exitcode);
    p.terminate();
    p.join();
    s = *snapshot(name);
    CHECK(s.worker.state == fiber::worker_state::exited);
    CHECK(s.exitcode == -SIGTERM);
    CHECK(s.worker.bytes_sent > 0); // the link's counts outlive the link
  }
  CHECK_FALSE(snapshot(name)); // its handle is gone
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

TEST_CASE("at exit, daemon children are terminated and non-daemon children joined", "[process][daemon]") {
  std::string dir = "/tmp/fiber-daemon-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()));
  fiber::Process parent{fiber::target<&exit_with_children>, dir};
  parent.start();
  REQUIRE(parent.join(std::chrono::seconds(60)));
  CHECK(parent.exitcode().value_or(-1000) == 3);
  auto read = [&](const std::string& f) {
    std::string s;
    std::ifstream(dir + "/" + f) >> s;
    return s;
  };
  CHECK(read("non-daemon") == "done"); // joined before the parent exited
  CHECK(read("daemon") == "SIGTERM");  // terminated, not killed with its parent
  for (auto f : {"daemon.pid", "non-daemon.pid"}) {
    auto pid = std::stoll(read(f));
    CHECK(fiber_test::process_gone(pid));
  }
  std::filesystem::remove_all(dir);
  fiber_test::require_no_children();
}

TEST_CASE("set_daemon after start is a logic error; daemon() reads it", "[process][daemon]") {
  fiber::Process p{fiber::target<&exit_with>, 0};
  CHECK_FALSE(p.daemon());
  p.set_daemon(true);
  CHECK(p.daemon());
  p.start();
  CHECK_THROWS_AS(p.set_daemon(false), std::logic_error);
  p.join();
}

TEST_CASE("fiber::wait on a Connection and a Process, and on a sentinel", "[process][wait]") {
  auto [a, b] = fiber::Pipe<int>();
  fiber::Process p{fiber::target<&echo_once>, std::move(b)};
  p.start();
  // The child blocks in recv: nothing is ready yet.
  CHECK(fiber::wait({a, p}, std::chrono::milliseconds(50)).empty());
  a.send(21);
  auto ready = fiber::wait({a, p});
  REQUIRE_FALSE(ready.empty());
  CHECK(ready.front() == fiber::waitable(a)); // a comes first in the list
  CHECK(a.recv() == 42);
  p.join();
  auto ended = fiber::wait({p.sentinel()}, std::chrono::seconds(10));
  REQUIRE(ended.size() == 1);
  CHECK(ended[0] == fiber::waitable(p));
  fiber_test::require_no_children();
}

// multiprocessing.connection.wait returns every ready object (CPython
// TestWait.test_wait_integer), not only the first one seen.
TEST_CASE("fiber::wait returns every ready object, in the order given", "[process][wait]") {
  auto [a, b] = fiber::Pipe<int>();
  auto [c, d] = fiber::Pipe<int>();
  fiber::Queue<int> q;
  fiber::Queue<int> empty_q;
  fiber::Process p{fiber::target<&sleep_ms>, 300};
  fiber::Process still{fiber::target<&sleep_ms>, 60000};
  p.start();
  still.start();
  auto ended = fiber::wait({a, p, b}, std::chrono::seconds(30));
  REQUIRE(ended.size() == 1);
  CHECK(ended[0] == fiber::waitable(p));
  a.send(0); // b now has data
  c.send(1); // d too
  q.put(7);  // q has an item
  REQUIRE(fiber_test::eventually([&] { return b.poll() && d.poll() && !q.empty(); }));
  auto ready = fiber::wait({a, p, still, b, empty_q, c, q, d}, std::chrono::seconds(2));
  REQUIRE(ready.size() == 4);
  CHECK(ready[0] == fiber::waitable(p));
  CHECK(ready[1] == fiber::waitable(b));
  CHECK(ready[2] == fiber::waitable(q));
  CHECK(ready[3] == fiber::waitable(d));
  CHECK(b.recv() == 0);
  CHECK(q.get() == 7);
  // Only the Process is left ready; a Queue alone waits like a Connection.
  auto only = fiber::wait({b, q, p, d}, std::chrono::seconds(2));
  REQUIRE(only.size() == 2);
  CHECK(only[0] == fiber::waitable(p));
  CHECK(only[1] == fiber::waitable(d));
  CHECK(fiber::wait({empty_q, b}, std::chrono::milliseconds(50)).empty());
  still.terminate();
  still.join();
  p.join();
  fiber_test::require_no_children();
}

// A grandchild's master is its parent Process: fiber's model (workers end
// with their master) ends it with its parent, where Python's lives on.
// Locally the kernel kills it with its parent (PR_SET_PDEATHSIG).
TEST_CASE("a grandchild Process ends when its parent is terminated", "[process][grandchild]") {
  // Adopt orphans for this test only, so the grandchild's status can be read.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  fiber::Queue<int> pids;
  fiber::Process parent{fiber::target<&start_grandchild>, pids};
  parent.start();
  const int grandchild = fiber_test::next(pids);
  CHECK(grandchild != parent.pid().value_or(-1));
  parent.terminate();
  parent.join();
  // The grandchild, now ours, ends at once: killed by the kernel, or, when
  // its link's end arrives first (the kernel closes the parent's sockets
  // before it signals), exiting as a worker whose master is lost.
  int status = 0, r = 0;
  REQUIRE(fiber_test::eventually([&] { return (r = ::waitpid(grandchild, &status, WNOHANG)) != 0; }));
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  REQUIRE(r == grandchild);
  INFO("wait status " << status);
  const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  const bool master_lost = WIFEXITED(status) && WEXITSTATUS(status) == fiber::detail::exit_master_lost;
  CHECK((killed || master_lost));
  fiber_test::require_no_children();
}

TEST_CASE("close releases an ended Process; it refuses while running and after", "[process][close]") {
  fiber::Process p{fiber::target<&sleep_ms>, 60000};
  p.set_name("closing");
  p.start();
  CHECK_THROWS_AS(p.close(), std::logic_error);
  p.terminate();
  p.join();
  p.close();
  CHECK(p.name() == "closing");
  CHECK_THROWS_WITH(p.exitcode(), Catch::Contains("closing was closed"));
  CHECK_THROWS_AS(p.join(), std::logic_error);
  p.close(); // twice is harmless
}

TEST_CASE("async_join completes when the process ends", "[process][async]") {
  fiber::Process p{fiber::target<&exit_with>, 7};
  CHECK_THROWS_AS(p.async_join(asio::use_future), std::logic_error);
  p.start();
  auto done = p.async_join(asio::use_future);
  done.get();
  CHECK(p.exitcode() == 7);
  // Already ended: completes at once.
  std::promise<std::exception_ptr> again;
  p.async_join([&](std::exception_ptr e) { again.set_value(e); });
  CHECK(again.get_future().get() == nullptr);
}

TEST_CASE("parent_process names the master in a worker and is empty in the master", "[process][helpers]") {
  CHECK_FALSE(fiber::parent_process());
  fiber::Process p{fiber::target<&check_parent>, std::int64_t(::getpid())};
  p.start();
  p.join();
  CHECK(p.exitcode() == 0);
}
