// SPDX-License-Identifier: BSL-1.0
// Fault tests (issue 27, item 6): a lost link is not a death. A Lock holder
// and a Queue getter cut from the object's owner by iptables, while their
// link to the master stays up, keep what they hold: no second holder enters
// the critical section, and no item is delivered twice.
//
// Rig: both cases need the Slurm rig with three network-namespace hosts
// (`bash tests/rigs/slurm-up.sh --nodes 3 --netns`: righost1..3 =
// 10.200.0.11..13, the master in the root namespace) and root (iptables in
// the hosts' namespaces). Three one-node Slurm jobs (8 CPUs each, so one per
// host) play the roles by their host: .11 owns the object, .12 is cut from
// it, .13 competes. Every iptables rule carries the comment "fiber-fencing";
// a guard removes them however a case ends, and the CTest fixture
// test_faults_fencing_iptables_cleanup removes any left (killed test).
// Each case takes about 15-25 s.

#include <fiber/backend/slurm.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>
#include <fiber/synchronize.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "integration_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using fiber_test::host_address;
using fiber_test::lines;
using fiber_test::poll_until;
using fiber_test::shell;
using fiber_test::trim;

namespace {

constexpr const char* owner_addr = "10.200.0.11";
constexpr const char* cut_addr = "10.200.0.12";

/// What a fiber::error thrown by release() was: the fencing error or another.
std::string outcome_of(const fiber::error& e) {
  return std::string(dynamic_cast<const fiber::hold_revoked_error*>(&e) ? "revoked: " : "failed: ") + e.what();
}

// ---- targets (Slurm jobs) ---------------------------------------------------

/// .11 creates the Lock and hands it out; .12 (H) holds it across the cut;
/// .13 (C) waits for it. Each records what it does in `events`.
void lock_node(fiber::Queue<std::string> events, fiber::Queue<fiber::Lock> locks, fiber::Queue<int> go_owner,
               fiber::Queue<int> go_holder, fiber::Queue<int> go_contender) {
  const auto addr = host_address();
  if (addr == owner_addr) {
    fiber::Lock lock; // its service lives here
    locks.put(lock);
    locks.put(lock);
    events.put("owner ready");
    go_owner.get();
  } else if (addr == cut_addr) {
    auto lock = locks.get();
    lock.acquire();
    events.put("H enter");
    go_holder.get(); // the cut comes and heals meanwhile
    events.put("H leave");
    try {
      lock.release();
      events.put("H release ok");
    } catch (const fiber::error& e) {
      events.put("H release " + outcome_of(e));
    }
  } else {
    auto lock = locks.get();
    go_contender.get();
    events.put("C waits");
    lock.acquire();
    events.put("C enter");
    events.put("C leave");
    lock.release();
    events.put("C released");
  }
}

/// .11 creates the Queue; .12 (G) takes one item, whose ack the cut drops;
/// .13 (C) takes every other item until -1.
void queue_node(fiber::Queue<std::string> events, fiber::Queue<fiber::Queue<int>> queues, fiber::Queue<int> go_owner,
                fiber::Queue<int> go_getter, fiber::Queue<int> go_contender) {
  const auto addr = host_address();
  if (addr == owner_addr) {
    fiber::Queue<int> q; // its broker lives here
    for (int i = 0; i < 3; ++i) queues.put(q);
    events.put("owner ready");
    go_owner.get();
  } else if (addr == cut_addr) {
    auto q = queues.get();
    (void)q.qsize(); // the link to the owner is up: the get below leaves at once
    auto got = std::make_shared<std::promise<int>>();
    auto fut = got->get_future();
    q.async_get([got](std::exception_ptr e, int v) {
      if (e) got->set_exception(e);
      else got->set_value(v);
    });
    events.put("G waits");
    try {
      events.put("G got " + std::to_string(fut.get()));
    } catch (const std::exception& e) {
      events.put(std::string("G failed: ") + e.what());
    }
    go_getter.get();
  } else {
    auto q = queues.get();
    go_contender.get();
    events.put("C waits");
    for (int v; (v = q.get()) >= 0;) events.put("C got " + std::to_string(v));
  }
}

// ---- master side ---------------------------------------------------------------

using SlurmProcess = fiber::basic_process<fiber::backend::slurm>;

void require_netns_rig() {
  auto nodes = lines(shell("sinfo -h -N -o %N 2>/dev/null"));
  if (nodes.size() < 3 || !std::filesystem::exists("/run/netns/righost2"))
    FAIL("needs the three-host Slurm rig: bash tests/rigs/slurm-up.sh --nodes 3 --netns");
  if (std::system("ip netns exec righost1 iptables -w -S >/dev/null 2>&1") != 0)
    FAIL("needs root and iptables in the rig's namespaces");
}

void configure() {
  static const bool once = [] {
    fiber::set_config("slurm.poll_interval_ms", "200");
    fiber::set_config("heartbeat_interval_ms", "300");
    fiber::set_config("heartbeat_timeout_ms", "3000");
    return true;
  }();
  (void)once;
}

/// How long an owner gives a process nobody knows (liveness::grace) with
/// the configuration above, plus a margin: a wrongly released hold shows
/// within it.
constexpr auto watch_window = 3000ms + 2 * 300ms + 2000ms;

/// DROP rules in the rig's namespaces, removed however the test ends.
struct cut_guard {
  std::vector<std::pair<std::string, std::string>> rules; // (namespace, chain and match)
  static std::string command(const std::string& ns, const char* verb, const std::string& rule) {
    return "ip netns exec " + ns + " iptables -w " + verb + " " + rule + " -m comment --comment fiber-fencing -j DROP";
  }
  void drop(const std::string& ns, const std::string& rule) {
    REQUIRE(std::system(command(ns, "-I", rule).c_str()) == 0);
    rules.emplace_back(ns, rule);
  }
  void heal() {
    for (auto& [ns, rule] : std::exchange(rules, {})) (void)std::system(command(ns, "-D", rule).c_str());
  }
  ~cut_guard() { heal(); }
};

/// TCP connections of namespace `ns` to `peer` that are established (their
/// "Recv-Q Send-Q" columns).
std::vector<std::string> connections(const std::string& ns, const std::string& peer) {
  return lines(shell("ip netns exec " + ns + " ss -Htn state established dst " + peer + " 2>/dev/null"));
}

/// Namespace `ns` has a connection to `peer`, and has sent everything on it.
bool all_sent(const std::string& ns, const std::string& peer) {
  auto c = connections(ns, peer);
  return !c.empty() && std::all_of(c.begin(), c.end(), [](const std::string& l) {
    auto t = trim(l);
    auto sp = t.find_first_of(" \t");
    return sp != std::string::npos && trim(t.substr(sp)).rfind("0 ", 0) == 0;
  });
}

/// What the roles reported, in the order the master's queue received it.
struct journal {
  fiber::Queue<std::string>& q;
  std::vector<std::string> seen;

  /// Reads until an event starting with `prefix` arrives (false after `limit`).
  bool wait_for(const std::string& prefix, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    if (has(prefix)) return true;
    for (auto now = std::chrono::steady_clock::now(); now < deadline; now = std::chrono::steady_clock::now()) {
      auto e = q.get(deadline - now);
      if (!e) return false;
      seen.push_back(*e);
      if (e->rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
  /// Reads whatever arrives during `d` (an observation window).
  void watch(std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    for (auto now = std::chrono::steady_clock::now(); now < end; now = std::chrono::steady_clock::now())
      if (auto e = q.get(end - now)) seen.push_back(*e);
  }
  std::ptrdiff_t index(const std::string& prefix) const {
    auto it = std::find_if(seen.begin(), seen.end(), [&](auto& s) { return s.rfind(prefix, 0) == 0; });
    return it == seen.end() ? -1 : it - seen.begin();
  }
  bool has(const std::string& prefix) const { return index(prefix) >= 0; }
  std::size_t count(const std::string& prefix) const {
    return std::size_t(std::count_if(seen.begin(), seen.end(), [&](auto& s) { return s.rfind(prefix, 0) == 0; }));
  }
  std::string all() const {
    std::string s;
    for (auto& e : seen) s += e + "; ";
    return s;
  }
};

/// Three jobs of one node each (8 CPUs: the whole host), started.
template <auto F, class... A>
std::vector<std::unique_ptr<SlurmProcess>> start_three(const std::string& name, const A&... args) {
  std::vector<std::unique_ptr<SlurmProcess>> v;
  for (int i = 0; i < 3; ++i) {
    auto p = std::make_unique<SlurmProcess>(fiber::target<F>, args...);
    p->set_name(name + "-" + std::to_string(i));
    p->set_resources({.cpu = 8});
    p->start();
    v.push_back(std::move(p));
  }
  return v;
}

/// After each case: no job of ours in squeue, no worker left.
void check_clean() {
  auto ours = [] {
    std::vector<std::string> v;
    for (auto& l : lines(shell("squeue -h -r -o '%i %j' 2>/dev/null")))
      if (l.find(" fiberit-fence") != std::string::npos) v.push_back(l);
    return v;
  };
  CHECK(poll_until([&] { return ours().empty(); }, 20s));
  CHECK(poll_until([] { return fiber_test::stray_workers().empty(); }, 15s));
}

} // namespace

TEST_CASE("fencing: a Lock holder cut from the lock's owner keeps the lock; nobody else enters", "[fencing]") {
  require_netns_rig();
  configure();
  fiber::Queue<std::string> events;
  fiber::Queue<fiber::Lock> locks;
  fiber::Queue<int> go_owner, go_holder, go_contender;
  journal j{events, {}};
  {
    cut_guard cut;
    auto procs = start_three<&lock_node>("fiberit-fence-lock", events, locks, go_owner, go_holder, go_contender);
    REQUIRE(j.wait_for("owner ready", 90s));
    REQUIRE(j.wait_for("H enter", 60s));
    go_contender.put(1);
    REQUIRE(j.wait_for("C waits", 30s));

    // H <-> owner cut both ways; H's link to the master stays up.
    cut.drop("righost1", std::string("INPUT -s ") + cut_addr);
    cut.drop("righost1", std::string("OUTPUT -d ") + cut_addr);
    // The owner's link to H goes silent and is closed after heartbeat_timeout_ms.
    REQUIRE(poll_until([] { return connections("righost1", cut_addr).empty(); }, 30s));
    j.watch(watch_window);
    INFO("events: " << j.all());
    CHECK_FALSE(j.has("C enter")); // H is alive (its master says so): the lock stays H's

    cut.heal();
    go_holder.put(1);
    REQUIRE(j.wait_for("H release", 60s));
    REQUIRE(j.wait_for("C released", 60s));
    go_owner.put(1); // the lock's service ends with it
    for (auto& p : procs) {
      REQUIRE(p->join(60s));
      INFO(p->name() << " exit code " << p->exitcode().value_or(-1000));
      CHECK(p->exitcode() == 0);
    }
  }
  INFO("events: " << j.all());
  const auto h_release = j.seen.at(std::size_t(j.index("H release")));
  CHECK((h_release == "H release ok" || h_release.rfind("H release revoked: ", 0) == 0));
  CHECK(j.index("H leave") < j.index("C enter")); // one holder inside at a time
  CHECK(j.index("H enter") < j.index("H leave"));
  check_clean();
}

TEST_CASE("fencing: a Queue item whose get ack is dropped with the getter's link is delivered once", "[fencing]") {
  require_netns_rig();
  configure();
  fiber::Queue<std::string> events;
  fiber::Queue<fiber::Queue<int>> queues;
  fiber::Queue<int> go_owner, go_getter, go_contender;
  journal j{events, {}};
  {
    cut_guard cut;
    auto procs = start_three<&queue_node>("fiberit-fence-queue", events, queues, go_owner, go_getter, go_contender);
    auto q = queues.get(90s);
    REQUIRE(q);
    REQUIRE(j.wait_for("owner ready", 90s));
    REQUIRE(j.wait_for("G waits", 60s));
    // G's get has reached the owner's host: nothing of it is unacknowledged.
    REQUIRE(poll_until([] { return all_sent("righost2", owner_addr); }, 10s));
    go_contender.put(1);
    REQUIRE(j.wait_for("C waits", 30s));

    // G -> owner dropped: the item reaches G, its ack does not.
    cut.drop("righost1", std::string("INPUT -s ") + cut_addr);
    q->put(42);
    REQUIRE(j.wait_for("G got", 30s));
    CHECK(j.seen.back() == "G got 42");
    REQUIRE(poll_until([] { return connections("righost1", cut_addr).empty(); }, 30s));
    j.watch(watch_window);
    INFO("events: " << j.all());
    CHECK_FALSE(j.has("C got 42")); // G is alive: the item stays G's

    cut.heal();
    q->put(43);
    REQUIRE(j.wait_for("C got 43", 30s));
    // G sends its ack again over a new link (its first ack, then its dial,
    // were dropped): let it end once that link is up; it waits for the ack
    // to be answered before it ends. Nothing comes back at its end.
    REQUIRE(poll_until([] { return !connections("righost1", cut_addr).empty(); }, 60s));
    go_getter.put(1);
    auto ended = [&] { return std::count_if(procs.begin(), procs.end(), [](auto& p) { return !p->is_alive(); }); };
    REQUIRE(poll_until([&] { return ended() == 1; }, 60s)); // G
    j.watch(watch_window);
    q->put(-1);
    go_owner.put(1);
    for (auto& p : procs) {
      REQUIRE(p->join(60s));
      INFO(p->name() << " exit code " << p->exitcode().value_or(-1000));
      CHECK(p->exitcode() == 0);
    }
  }
  INFO("events: " << j.all());
  CHECK(j.count("G got 42") + j.count("C got 42") == 1);
  CHECK(j.count("C got 43") == 1);
  check_clean();
}
