// SPDX-License-Identifier: BSL-1.0
// Integration tests of fiber's public API on a real Slurm cluster
// (bash tests/rigs/slurm-up.sh): Process, Queue and Pool with
// fiber::backend::slurm, their exit codes (as batch jobs and as srun steps
// of an allocation), reruns after scancel, and (with
// `slurm-up.sh --nodes 3 --netns`, tag [netns], hidden by default) workers on
// three hosts and a cut link detected by fiber's heartbeats long before Slurm
// notices. CTest: `test_slurm_integration` (label slurm) runs everything but
// [netns]; `test_slurm_integration_netns` (label netns, see the .cmake file)
// runs only [netns] and needs the three-host rig.
//
// Every job these tests submit has a name starting with "fiberit", so
// check_clean() can tell that none is left in squeue after each test, and
// that no worker process (this executable, started by slurmstepd) survives.

#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <csignal>
#include <fcntl.h>
#include <unistd.h>

#include "backend_scenarios.hpp"
#include "integration_support.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

using fiber_test::exit_with;
using fiber_test::host_address;
using fiber_test::lines;
using fiber_test::parent_of;
using fiber_test::poll_until;
using fiber_test::produce;
using fiber_test::raise_signal;
using fiber_test::returns_normally;
using fiber_test::seconds_since;
using fiber_test::shell;
using fiber_test::sleep_ms;
using fiber_test::stray_workers;
using fiber_test::throws_runtime;
using fiber_test::trim;

// ---------------------------------------------------------------------------
// Targets (run in Slurm jobs)
// ---------------------------------------------------------------------------

std::string env_or_empty(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

struct task_in {
  std::int64_t x = 0;
  int sleep_ms = 0;
  std::string start_log; ///< if set, "x\n" is appended when the task starts
};

/// The job this process runs in, as Slurm's tools name it: "1234" for a
/// plain job, "1234_5" for a task of an array. (An array task also has a
/// job id of its own in SLURM_JOB_ID, but on Slurm 22.05 `scancel <it>`
/// fails with "Invalid job id specified", and the last task's own id is the
/// array's id: scancel would end every task.)
std::string slurm_job_id() {
  auto array = env_or_empty("SLURM_ARRAY_JOB_ID");
  if (!array.empty()) return array + "_" + env_or_empty("SLURM_ARRAY_TASK_ID");
  return env_or_empty("SLURM_JOB_ID");
}

struct task_out {
  std::int64_t y = 0;
  std::string job;  ///< slurm_job_id() of the worker that ran it
  std::string node; ///< SLURMD_NODENAME
  std::string addr; ///< host_address()
  std::int64_t pid = 0;
};

task_out square_where(task_in in) {
  if (!in.start_log.empty()) {
    int fd = ::open(in.start_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      auto line = std::to_string(in.x) + "\n"; // one write(2) with O_APPEND: lines never interleave
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (in.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(in.sleep_ms));
  return {in.x * in.x, slurm_job_id(), env_or_empty("SLURMD_NODENAME"), host_address(), ::getpid()};
}

using SlurmProcess = fiber::basic_process<fiber::backend::slurm>;
using SlurmPool = fiber::Pool<&square_where, fiber::backend::slurm>;

// ---------------------------------------------------------------------------
// Helpers (master side)
// ---------------------------------------------------------------------------

void require_rig() {
  if (!fiber_test::slurm_answers()) FAIL("no Slurm cluster answers: start it with bash tests/rigs/slurm-up.sh");
}

/// The jobs these tests submitted (named "fiberit...") that squeue lists.
std::vector<std::string> fiber_jobs() { return fiber_test::slurm_jobs("fiberit"); }

/// After each test: squeue lists none of its jobs and no worker process is
/// left (bounded waits: a job cancelled at the end of a test may still be
/// COMPLETING for a moment). Leftovers are cancelled so later tests start clean.
void check_clean() {
  bool no_jobs = poll_until([] { return fiber_jobs().empty(); }, 20s);
  auto jobs = fiber_jobs();
  if (!jobs.empty()) shell("squeue -h -o '%i %j' | awk '$2 ~ /^fiberit/ {print $1}' | xargs -r scancel");
  INFO("jobs still listed by squeue: " << jobs.size() << (jobs.empty() ? "" : ", first: " + jobs.front()));
  CHECK(no_jobs);
  bool no_workers = poll_until([] { return stray_workers().empty(); }, 15s);
  INFO("worker processes left: " << stray_workers().size());
  CHECK(no_workers);
  fiber_test::require_no_children(); // sbatch/squeue/scancel children all reaped
}

/// Parent's command name of `pid` ("slurmstepd" for a Slurm job's process).
std::string parent_comm(std::int64_t pid) {
  std::ifstream comm("/proc/" + std::to_string(parent_of(pid)) + "/comm");
  std::string c;
  std::getline(comm, c);
  return c;
}

struct temp_dir : fiber_test::temp_dir {
  temp_dir() : fiber_test::temp_dir("fiberit") {}
};

std::map<std::int64_t, int> count_lines(const fs::path& p) {
  std::map<std::int64_t, int> m;
  std::ifstream in(p);
  for (std::int64_t x; in >> x;) ++m[x];
  return m;
}

std::vector<task_in> inputs(int n, int sleep, const std::string& log = {}) {
  std::vector<task_in> v;
  for (int i = 0; i < n; ++i) v.push_back({i, sleep, log});
  return v;
}

fiber::pool_options pool_opts(unsigned n, std::string name, int cpus = 1) {
  fiber::pool_options o;
  o.processes = n;
  o.name = std::move(name);
  o.resources.cpu = cpus;
  return o;
}

void configure() {
  static const bool once = [] {
    fiber::set_config("slurm.poll_interval_ms", "200"); // job ends seen within 0.2 s
    return true;
  }();
  (void)once;
}

} // namespace

// ===========================================================================
// 1-node rig (bash slurm-up.sh)
// ===========================================================================

TEST_CASE("slurm: Process exit codes through Slurm jobs", "[slurm][process]") {
  require_rig();
  configure();
  {
    SlurmProcess ok{fiber::target<&returns_normally>};
    SlurmProcess seven{fiber::target<&exit_with>, 7};
    SlurmProcess thrower{fiber::target<&throws_runtime>};
    SlurmProcess term{fiber::target<&sleep_ms>, 120000};
    SlurmProcess killed{fiber::target<&sleep_ms>, 120000};
    ok.set_name("fiberit-exit0");
    seven.set_name("fiberit-exit7");
    thrower.set_name("fiberit-throw");
    term.set_name("fiberit-term");
    killed.set_name("fiberit-kill");
    auto t0 = clk::now();
    for (auto* p : {&ok, &seven, &thrower, &term, &killed}) p->start();
    // Both sleepers run (connected back) before they are stopped.
    REQUIRE(poll_until([&] { return term.pid() && killed.pid(); }, 60s));
    std::printf("slurm Process: start -> connected %.2f s\n", seconds_since(t0));
    CHECK(parent_comm(*term.pid()) == "slurmstepd"); // really a Slurm job's process
    CHECK(term.is_alive());
    term.terminate();
    killed.kill();
    for (auto* p : {&ok, &seven, &thrower, &term, &killed}) {
      INFO(p->name());
      REQUIRE(p->join(60s));
    }
    CHECK(ok.exitcode() == 0);
    CHECK(seven.exitcode() == 7);
    CHECK(thrower.exitcode() == 1);
    CHECK(term.exitcode() == -15);
    CHECK(killed.exitcode() == -9);
    CHECK(fiber_test::process_gone(*killed.pid()));
  }
  check_clean();
}

// The same through srun steps: the test re-runs itself inside an allocation
// (salloc), where the backend launches each Process as a step. srun reports
// a task killed by signal n as exit status 128+n, so exit(130) and SIGINT
// look alike to it: the worker's own report must keep them apart.
TEST_CASE("slurm (child): Process exit codes through srun steps", "[.][srun-child]") {
  require_rig();
  configure();
  REQUIRE_FALSE(env_or_empty("SLURM_JOB_ID").empty()); // run by salloc
  fiber::set_config("slurm.launch_mode", "srun");
  {
    SlurmProcess ok{fiber::target<&returns_normally>};
    SlurmProcess seven{fiber::target<&exit_with>, 7};
    SlurmProcess high{fiber::target<&exit_with>, 130};
    SlurmProcess usr1{fiber::target<&raise_signal>, int(SIGUSR1)};
    SlurmProcess term{fiber::target<&sleep_ms>, 120000};
    SlurmProcess killed{fiber::target<&sleep_ms>, 120000};
    for (auto* p : {&ok, &seven, &high, &usr1, &term, &killed}) p->start();
    REQUIRE(poll_until([&] { return term.pid() && killed.pid(); }, 60s));
    CHECK(parent_comm(*term.pid()) == "slurmstepd"); // really a step's process
    term.terminate();
    killed.kill();
    for (auto* p : {&ok, &seven, &high, &usr1, &term, &killed}) {
      INFO(p->name());
      REQUIRE(p->join(60s));
    }
    CHECK(ok.exitcode() == 0);
    CHECK(seven.exitcode() == 7);
    CHECK(high.exitcode() == 130);
    CHECK(usr1.exitcode() == -SIGUSR1);
    CHECK(term.exitcode() == -SIGTERM);
    CHECK(killed.exitcode() == -SIGKILL);
  }
  // The allocation is still ours here: the parent checks squeue afterwards.
  CHECK(poll_until([] { return stray_workers().empty(); }, 15s));
  fiber_test::require_no_children(); // every srun reaped
}

TEST_CASE("slurm: Process exit codes through srun steps of an allocation", "[slurm][process]") {
  require_rig();
  auto self = fs::read_symlink("/proc/self/exe").string();
  auto out = shell("salloc --job-name=fiberit-alloc --nodes=1 --ntasks=6 " + self +
                   " \"[srun-child]\" 2>&1; echo rc=$?");
  INFO(out);
  CHECK(out.find("All tests passed") != std::string::npos);
  CHECK(out.find("rc=0") != std::string::npos);
  check_clean();
}

namespace {

/// Two producer Processes, Slurm jobs, put 200 items each into a Queue made
/// here; every item arrives here exactly once.
void queue_roundtrip() {
  constexpr int per_producer = 200;
  fiber::Queue<int> q;
  SlurmProcess a{fiber::target<&produce>, q, 1000, per_producer};
  SlurmProcess b{fiber::target<&produce>, q, 5000, per_producer};
  a.set_name("fiberit-producer-a");
  b.set_name("fiberit-producer-b");
  a.start();
  b.start();
  std::map<int, int> got;
  int received = 0;
  auto failed = [](SlurmProcess& p) { return !p.is_alive() && p.exitcode() != 0; };
  for (auto deadline = clk::now() + 60s; received < 2 * per_producer && clk::now() < deadline;) {
    if (auto v = q.get(500ms)) {
      ++got[*v];
      ++received;
    } else if (failed(a) || failed(b)) {
      break; // a producer could not reach the queue: no need to wait longer
    }
  }
  INFO("producer exit codes: " << a.exitcode().value_or(999) << ", " << b.exitcode().value_or(999));
  REQUIRE(received == 2 * per_producer);
  REQUIRE(a.join(60s));
  REQUIRE(b.join(60s));
  CHECK(a.exitcode() == 0);
  CHECK(b.exitcode() == 0);
  CHECK_FALSE(q.get(300ms)); // nothing more than what was put
  std::map<int, int> want;
  for (int i = 0; i < per_producer; ++i) want[1000 + i] = want[5000 + i] = 1;
  CHECK(got == want);
}

} // namespace

TEST_CASE("slurm: a Queue shared by Slurm jobs delivers every item exactly once", "[slurm][queue]") {
  require_rig();
  configure();
  queue_roundtrip();
  check_clean();
}

// The same, from a master whose /tmp no node sees (as on a real cluster): the
// test re-runs itself in a private mount namespace with TMPDIR on a tmpfs
// there. Its run dir (secret file, ipc socket) is then invisible to the jobs,
// and the Queue, made before any Slurm job, was named by that ipc socket:
// the workers must get the secret from their environment and reach the
// queue through the TCP address they dialled.
TEST_CASE("slurm (child): Queue from a master with a private /tmp", "[.][queue-child]") {
  require_rig();
  configure();
  queue_roundtrip();
  check_clean();
}

TEST_CASE("slurm: a Queue made before any job, master's /tmp not shared with the nodes", "[slurm][queue]") {
  require_rig();
  if (::geteuid() != 0) FAIL("needs root for unshare -m");
  temp_dir mnt; // empty here; a tmpfs in the child's mount namespace
  auto self = fs::read_symlink("/proc/self/exe").string();
  auto out = shell("unshare -m --propagation private sh -c 'mount -t tmpfs fiberit " + mnt.path.string() +
                   " && TMPDIR=" + mnt.path.string() + " exec " + self + " \"[queue-child]\"' 2>&1; echo rc=$?");
  INFO(out);
  CHECK(out.find("All tests passed") != std::string::npos);
  CHECK(out.find("rc=0") != std::string::npos);
  check_clean();
}

TEST_CASE("slurm: Pool map over 8 Slurm workers", "[slurm][pool]") {
  require_rig();
  configure();
  {
    auto t0 = clk::now();
    SlurmPool pool{fiber::target<&square_where>, pool_opts(8, "fiberit-map")};
    auto first = pool.apply(task_in{3, 0, {}});
    std::printf("slurm Pool(8): construction -> first result %.2f s\n", seconds_since(t0));
    CHECK(first.y == 9);
    CHECK_FALSE(first.job.empty()); // ran inside a Slurm job
    REQUIRE(poll_until([&] { return pool.live_workers() == 8; }, 60s));
    std::printf("slurm Pool(8): construction -> 8 workers connected %.2f s\n", seconds_since(t0));

    auto in = inputs(400, 5);
    auto out = pool.map(in, 10); // 40 chunks: every worker gets two in the first dispatch
    REQUIRE(out.size() == in.size());
    std::set<std::string> jobs;
    std::set<std::int64_t> pids;
    for (std::size_t i = 0; i < out.size(); ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i * i));
      CHECK_FALSE(out[i].job.empty());
      jobs.insert(out[i].job);
      pids.insert(out[i].pid);
    }
    CHECK(jobs.size() == 8);
    CHECK(pids.size() == 8);
    // The jobs are the pool's own, listed by Slurm under the pool's name.
    auto listed = lines(shell("squeue -h -r -o %i -n fiberit-map"));
    for (auto& j : jobs) {
      INFO("job " << j);
      CHECK(std::find(listed.begin(), listed.end(), j) != listed.end());
    }
    // fiber::stats(): Slurm's own states of the 8 jobs, as of its last poll.
    CHECK(poll_until([] { return fiber_test::backend_jobs("slurm", "RUNNING") == 8; }, 60s));
  }
  check_clean();
}

TEST_CASE("slurm: scancel of a worker's job mid-map: complete, exactly-once results", "[slurm][pool]") {
  require_rig();
  configure();
  temp_dir dir;
  const auto log = (dir.path / "starts").string();
  constexpr int n = 96;
  {
    SlurmPool pool{fiber::target<&square_where>, pool_opts(8, "fiberit-scancel")};
    REQUIRE(poll_until([&] { return pool.live_workers() == 8; }, 60s));
    auto in = inputs(n, 150, log);
    std::vector<task_out> out;
    std::string victim;
    auto t0 = clk::now();
    for (auto&& r : pool.imap(in, 1)) {
      if (victim.empty()) {
        // A worker that has just delivered a result holds more work
        // (prefetch 2) and is running its next task: cancel its job.
        victim = r.job;
        REQUIRE_FALSE(victim.empty());
        auto res = shell("scancel -v " + victim + " 2>&1"); // -v: scancel exits 0 even on errors, says them
        INFO("scancel said: " << res);
        REQUIRE(res.find("error") == std::string::npos);
      }
      out.push_back(std::move(r));
    }
    std::printf("slurm Pool(8): 96 x 150 ms with job %s cancelled mid-map: %.2f s\n", victim.c_str(),
                seconds_since(t0));
    REQUIRE(out.size() == std::size_t(n));
    for (int i = 0; i < n; ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i) * i);
    }
    // Slurm ended the job as cancelled; the pool replaced its worker.
    CHECK(poll_until([&] { return trim(shell("squeue -h -t all -j " + victim + " -o %T")) == "CANCELLED"; }, 10s));
    // Its replacement was submitted: 8 jobs again, none of them the victim.
    CHECK(poll_until(
        [&] {
          auto j = fiber_jobs();
          return j.size() == 8 &&
                 std::none_of(j.begin(), j.end(), [&](auto& l) { return l.rfind(victim + " ", 0) == 0; });
        },
        30s));
    CHECK(poll_until([&] { return pool.live_workers() == 8; }, 60s));
    // Every task started at least once; tasks of the cancelled worker that
    // had started were started again elsewhere (at-least-once execution),
    // yet map delivered each result once, in place.
    auto starts = count_lines(log);
    CHECK(starts.size() == std::size_t(n));
    int reruns = 0;
    for (auto& [x, c] : starts) reruns += c - 1;
    std::printf("slurm Pool(8): %d task(s) started again after the cancel\n", reruns);
  }
  check_clean();
}

// ===========================================================================
// 3-host rig (bash slurm-up.sh --nodes 3 --netns): hidden, run with [netns]
// ===========================================================================

namespace {

int slurmd_timeout_s() {
  for (auto& l : lines(shell("scontrol show config 2>/dev/null")))
    if (l.rfind("SlurmdTimeout", 0) == 0) return std::atoi(l.substr(l.find('=') + 1).c_str());
  return 0;
}

void require_netns_rig() {
  require_rig();
  auto nodes = lines(shell("sinfo -h -N -o %N 2>/dev/null"));
  INFO("nodes: " << nodes.size());
  if (nodes.size() < 3 || !fs::exists("/run/netns/righost2"))
    FAIL("needs the three-host rig: bash tests/rigs/slurm-up.sh --nodes 3 --netns");
}

/// Brings the link of host `i` back up however the test ends.
struct link_guard {
  std::string dev;
  bool down = false;
  explicit link_guard(int i) : dev("rigv" + std::to_string(i)) {}
  void cut() {
    REQUIRE(std::system(("ip link set dev " + dev + " down").c_str()) == 0);
    down = true;
  }
  void restore() {
    if (down && std::system(("ip link set dev " + dev + " up").c_str()) == 0) down = false;
  }
  ~link_guard() { restore(); }
};

} // namespace

TEST_CASE("slurm netns: workers on three hosts; a cut link is caught by heartbeats", "[.][netns]") {
  require_netns_rig();
  configure();
  const int sd_timeout = slurmd_timeout_s();
  REQUIRE(sd_timeout > 0);
  temp_dir dir;
  const auto log = (dir.path / "starts").string();
  {
    // 4 CPUs per worker, 8 per host: two workers on each of the three hosts.
    SlurmPool pool{fiber::target<&square_where>, pool_opts(6, "fiberit-netns", 4)};
    REQUIRE(poll_until([&] { return pool.live_workers() == 6; }, 60s));

    auto where = pool.map(inputs(48, 20), 1);
    REQUIRE(where.size() == 48);
    std::map<std::string, std::set<std::string>> addr_nodes; // address -> node names seen there
    for (std::size_t i = 0; i < where.size(); ++i) {
      CHECK(where[i].y == std::int64_t(i * i));
      addr_nodes[where[i].addr].insert(where[i].node);
    }
    std::set<std::string> want{"10.200.0.11", "10.200.0.12", "10.200.0.13"};
    std::set<std::string> seen;
    for (auto& [a, n] : addr_nodes) {
      seen.insert(a);
      CHECK(n.size() == 1); // one node per address
    }
    CHECK(seen == want);
    std::string host2_node;
    if (addr_nodes.count("10.200.0.12")) host2_node = *addr_nodes["10.200.0.12"].begin();

    // Cut host 2 off in the middle of a map: its workers' links go silent;
    // the master declares them dead after heartbeat_timeout_ms and reruns
    // their tasks on the other hosts.
    constexpr int n = 120;
    auto in = inputs(n, 100, log);
    link_guard guard(2);
    std::vector<task_out> out;
    auto t0 = clk::now();
    clk::time_point cut_at{};
    for (auto&& r : pool.imap(in, 1)) {
      if (!guard.down && out.size() >= 12) {
        guard.cut();
        cut_at = clk::now();
      }
      out.push_back(std::move(r));
    }
    double total = seconds_since(t0), after_cut = seconds_since(cut_at);
    std::printf("slurm netns: map of %d x 100 ms on 6 workers with host 2 cut: %.2f s (%.2f s after the cut; "
                "SlurmdTimeout %d s)\n",
                n, total, after_cut, sd_timeout);
    // Slurm still thinks the node is fine (it needs ~SlurmdTimeout to notice).
    auto state = trim(shell("sinfo -h -n " + host2_node + " -o %t"));
    INFO("host 2 node " << host2_node << " state in Slurm at map end: " << state);
    CHECK(state.find("down") == std::string::npos);
    REQUIRE(out.size() == std::size_t(n));
    std::size_t from_host2_after = 0;
    for (int i = 0; i < n; ++i) {
      INFO("item " << i);
      CHECK(out[i].y == std::int64_t(i) * i);
      from_host2_after += out[i].addr == "10.200.0.12";
    }
    INFO("results from host 2: " << from_host2_after);
    CHECK(after_cut < sd_timeout / 2.0); // far less than Slurm's own node timeout
    auto starts = count_lines(log);
    CHECK(starts.size() == std::size_t(n));
    guard.restore();
    // Destroying the pool waits until Slurm reports host 2's jobs ended: with
    // the link back, slurmd delivers their end.
  }
  check_clean();
}
