// SPDX-License-Identifier: BSL-1.0
// Tests of fiber::backend::slurm against a real Slurm cluster
// (bash tests/rigs/slurm-up.sh). CTest label `slurm`; the [unit]
// cases need no cluster. Every rig case owns its launcher, so a failing
// REQUIRE unwinds through ~slurm_launcher, which scancels what it submitted.

#include <fiber/backend/slurm.hpp>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration_support.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using fiber::backend::job;
using fiber::backend::job_exit;
using fiber::backend::job_spec;
using fiber::detail::slurm_launcher;
using fiber::detail::slurm_options;
namespace si = fiber::detail::slurm_impl;

namespace {

using fiber_test::poll_until;
using fiber_test::shell;

bool rig_up() { return !fiber::detail::trim(shell("sinfo -h -o %t 2>/dev/null")).empty(); }

void require_rig() {
  static const bool up = rig_up(); // once: sinfo retries ~9 s against a dead controller
  if (!up) FAIL("no Slurm cluster answers: start it with bash tests/rigs/slurm-up.sh");
}

/// Drive `ctx` until `pred` holds or `timeout` passes.
template <class Pred>
bool run_until(asio::io_context& ctx, Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (ctx.stopped()) ctx.restart();
    if (ctx.run_for(20ms) == 0 && ctx.stopped()) std::this_thread::sleep_for(5ms); // no work queued
  }
  return true;
}

/// Base job id: "12_3" -> "12".
std::string base_id(const std::string& id) { return id.substr(0, id.find('_')); }

/// Whether default squeue (pending, running, completing) still lists any of `ids`.
bool any_listed(const std::vector<std::string>& ids) {
  if (ids.empty()) return false;
  std::string list;
  for (auto& id : ids) list += (list.empty() ? "" : ",") + id;
  return !fiber::detail::trim(shell("squeue -h -r -j " + list + " -o %i 2>/dev/null")).empty();
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string t = "/tmp/fiber-slurm-test-XXXXXX";
    REQUIRE(::mkdtemp(t.data()));
    path = t;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string random_hex() {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    s += buf;
  }
  return s;
}

slurm_options test_options(slurm_options::mode m = slurm_options::mode::sbatch) {
  slurm_options o;
  o.launch_mode = m;
  o.poll_interval = 100ms;
  o.allocation = std::nullopt; // even when the test runs inside an allocation
  o.warn = [](const std::string& w) { UNSCOPED_INFO("launcher warning: " << w); };
  return o;
}

job_spec sh_spec(const std::string& name, const std::string& script) {
  job_spec s;
  s.name = name;
  s.argv = {"/bin/sh", "-c", script};
  return s;
}

/// One launch with a slot per job for its exit.
struct launched {
  std::vector<job> jobs;
  std::vector<std::optional<job_exit>> exits;
  std::vector<int> calls;
  bool all_done() const {
    return std::all_of(exits.begin(), exits.end(), [](auto& e) { return e.has_value(); });
  }
};

std::shared_ptr<launched> launch(slurm_launcher& l, const std::vector<job_spec>& specs) {
  auto r = std::make_shared<launched>();
  r->exits.resize(specs.size());
  r->calls.resize(specs.size());
  std::vector<fiber::backend::exit_handler> handlers;
  for (std::size_t i = 0; i < specs.size(); ++i)
    handlers.push_back([r, i](const job_exit& x) {
      r->exits[i] = x;
      ++r->calls[i];
    });
  r->jobs = l.launch(specs, std::move(handlers));
  return r;
}

/// The Slurm ids of `r`'s jobs, once sbatch answered (launch returns before).
std::vector<std::string> ids_of(asio::io_context& ctx, slurm_launcher& l, const launched& r) {
  REQUIRE(run_until(
      ctx,
      [&] { return std::all_of(r.jobs.begin(), r.jobs.end(), [&](const job& j) { return !l.slurm_id(j).empty(); }); },
      30s));
  std::vector<std::string> v;
  for (auto& j : r.jobs) v.push_back(l.slurm_id(j));
  return v;
}

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

} // namespace

// ===========================================================================
// Pure parts: no cluster needed
// ===========================================================================

TEST_CASE("slurm: shell_split and sh_quote", "[slurm][unit]") {
  CHECK(fiber::detail::shell_split("") == std::vector<std::string>{});
  CHECK(fiber::detail::shell_split("  --qos=low   --constraint='a b' \"x\\\"y\" c\\ d") ==
        std::vector<std::string>{"--qos=low", "--constraint=a b", "x\"y", "c d"});
  CHECK_THROWS_AS(fiber::detail::shell_split("--comment='open"), fiber::backend_error);
  CHECK(fiber::detail::sh_quote("it's $HOME") == "'it'\\''s $HOME'");
}

TEST_CASE("slurm: sbatch command and script for one spec", "[slurm][unit]") {
  job_spec s = sh_spec("pool-1-w0", "echo 'hi there' $X");
  s.env = {{"FIBER_INTERNAL_SECRET", "s3cr3t"}, {"FIBER_INTERNAL_WORKER_ID", "7"}};
  s.resources = {.cpu = 2, .memory_mb = 512, .gpu = 1};
  s.stdout_path = "/tmp/o.out";
  auto plan = si::plan_batch({&s});
  CHECK(plan.array_size == 0);
  CHECK(plan.name == "pool-1-w0");
  CHECK(plan.output == "/tmp/o.out");
  CHECK(plan.error == "/dev/null");
  CHECK(plan.script ==
        "#!/bin/sh\n# fiber (slurm backend): one worker\nexec '/bin/sh' '-c' 'echo '\\''hi there'\\'' $X'\n");
  CHECK(plan.env == s.env);

  slurm_options o;
  o.partition = "debug";
  o.account = "lab";
  o.time_limit = "10:00";
  o.extra_args = {"--qos=low"};
  auto argv = si::sbatch_argv(o, plan, s.resources);
  std::vector<std::string> want{
      "sbatch",        "--job-name=pool-1-w0", "--output=/tmp/o.out", "--error=/dev/null", "--ntasks=1",
      "--nodes=1",     "--cpus-per-task=2",    "--mem=512M",          "--gres=gpu:1",      "--partition=debug",
      "--account=lab", "--time=10:00",         "--qos=low",           "--parsable",        "--export=ALL",
      "--no-requeue"};
  CHECK(argv == want);
  for (auto& a : argv) CHECK(a.find("s3cr3t") == std::string::npos);
  CHECK(plan.script.find("s3cr3t") == std::string::npos);
}

TEST_CASE("slurm: array plan: common and per-task variables", "[slurm][unit]") {
  std::vector<job_spec> specs;
  for (int i = 0; i < 3; ++i) {
    auto s = sh_spec("pool-2-w" + std::to_string(i), "true");
    s.env = {{"FIBER_INTERNAL_SECRET", "common-secret"}, {"FIBER_INTERNAL_WORKER_ID", std::to_string(10 + i)}};
    if (i == 1) s.env.emplace_back("ONLY_ONE", "x y");
    s.stdout_path = "/tmp/w" + std::to_string(i) + ".out";
    specs.push_back(s);
  }
  std::vector<const job_spec*> ptrs{&specs[0], &specs[1], &specs[2]};
  auto plan = si::plan_batch(ptrs);
  CHECK(plan.array_size == 3);
  CHECK(plan.name == "pool-2");
  CHECK(plan.output == "/dev/null"); // differs per task: redirected in the script
  CHECK(plan.error == "/dev/null");
  std::map<std::string, std::string> env(plan.env.begin(), plan.env.end());
  CHECK(env.at("FIBER_INTERNAL_SECRET") == "common-secret");
  // varying keys in sorted order: FIBER_INTERNAL_WORKER_ID (k=0), ONLY_ONE (k=1)
  CHECK(env.at("__FIBER_SLURM_0_0") == "10");
  CHECK(env.at("__FIBER_SLURM_2_0") == "12");
  CHECK(env.at("__FIBER_SLURM_1_1") == "x y");
  CHECK(env.count("__FIBER_SLURM_0_1") == 0);
  CHECK(plan.script.find("1) FIBER_INTERNAL_WORKER_ID=\"$__FIBER_SLURM_1_0\"; export FIBER_INTERNAL_WORKER_ID; "
                         "ONLY_ONE=\"$__FIBER_SLURM_1_1\"; export ONLY_ONE; exec >'/tmp/w1.out'; ;;") !=
        std::string::npos);
  CHECK(plan.script.find("0) FIBER_INTERNAL_WORKER_ID=\"$__FIBER_SLURM_0_0\"; export FIBER_INTERNAL_WORKER_ID; "
                         "unset ONLY_ONE;") != std::string::npos);
  CHECK(plan.script.find("unset __FIBER_SLURM_0_0 __FIBER_SLURM_1_0 __FIBER_SLURM_1_1 __FIBER_SLURM_2_0") !=
        std::string::npos);
  CHECK(plan.script.find("common-secret") == std::string::npos);
  CHECK(plan.script.find("x y") == std::string::npos);
  auto argv = si::sbatch_argv(slurm_options{}, plan, specs[0].resources);
  CHECK(argv.back() == "--array=0-2");
}

TEST_CASE("slurm: srun command construction for a step", "[slurm][unit]") {
  job_spec s;
  s.name = "pool-3-w1";
  s.argv = {"/opt/app/bin/train", "--epochs", "3"};
  s.env = {{"FIBER_INTERNAL_SECRET", "never-in-argv"}};
  s.resources = {.cpu = 4, .memory_mb = 0, .gpu = 2};
  slurm_options o;
  o.partition = "ignored-for-steps";
  o.extra_args = {"--qos=ignored"};
  auto argv = si::srun_argv(o, "4242", s);
  std::vector<std::string> want{"srun",
                                "--jobid=4242",
                                "--ntasks=1",
                                "--nodes=1",
                                "--exact",
                                "--quiet",
                                "--input=none",
                                "--export=ALL",
                                "--job-name=pool-3-w1",
                                "--cpus-per-task=4",
                                "--gres=gpu:2",
                                "/opt/app/bin/train",
                                "--epochs",
                                "3"};
  CHECK(argv == want);
  s.stdout_path = "/tmp/x.out";
  o.overlap = true; // the master is itself a step
  argv = si::srun_argv(o, "4242", s);
  CHECK(std::find(argv.begin(), argv.end(), "--output=/tmp/x.out") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "--overlap") != argv.end());

  // auto mode inside an allocation chooses srun; outside, arrays for >1 spec.
  asio::io_context ctx;
  auto inside = test_options(slurm_options::mode::automatic);
  inside.allocation = "4242";
  inside.bin_dir = "/nonexistent-slurm";
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), inside);
  try {
    launch(*l, {s});
    FAIL("srun from a missing bin dir should throw");
  } catch (const fiber::backend_error& e) {
    CHECK(std::string(e.what()).find("/nonexistent-slurm/srun") != std::string::npos);
  }
  auto outside = test_options(slurm_options::mode::srun);
  auto l2 = std::make_shared<slurm_launcher>(ctx.get_executor(), outside);
  CHECK_THROWS_WITH(launch(*l2, {s}), Catch::Contains("SLURM_JOB_ID"));
}

TEST_CASE("slurm: squeue parsing and state mapping", "[slurm][unit]") {
  auto q = si::parse_queue("4_0|COMPLETED|0|vm|None\n2|FAILED|768|vm|NonZeroExitCode\n3|FAILED|9|vm|JobLaunchFailure\n"
                           "7|CANCELLED|15|vm|None\n8|NODE_FAIL|0|node2|None\n9|PENDING|0||Resources\n"
                           "10|FAILED|0|vm|JobLaunchFailure\n");
  REQUIRE(q.size() == 7);
  using kind = job_exit::kind;
  auto x = si::to_exit(q.at("4_0"), 0);
  CHECK((x.how == kind::exited && x.code == 0));
  x = si::to_exit(q.at("2"), 0);
  CHECK((x.how == kind::exited && x.code == 3 && x.exitcode() == 3));
  x = si::to_exit(q.at("3"), 0);
  CHECK((x.how == kind::signalled && x.code == 9));
  x = si::to_exit(q.at("7"), 9); // we asked for KILL; Slurm records 15
  CHECK((x.how == kind::signalled && x.exitcode() == -9));
  x = si::to_exit(q.at("7"), 0);
  CHECK((x.how == kind::signalled && x.code == 15));
  CHECK(x.reason.find("not by fiber") != std::string::npos);
  x = si::to_exit(q.at("8"), 0);
  CHECK((x.how == kind::lost && x.reason == "NODE_FAIL on node2" && x.exitcode() == -9));
  x = si::to_exit(q.at("10"), 0);
  CHECK(x.how == kind::lost);
  CHECK_FALSE(si::is_terminal("PENDING"));
  CHECK_FALSE(si::is_terminal("COMPLETING"));
  CHECK(si::is_terminal("OUT_OF_MEMORY"));
  CHECK(q.at("9").reason == "Resources");

  CHECK(si::parse_job_id("1234\n") == std::optional<std::string>("1234"));
  CHECK(si::parse_job_id("1234;cluster\n") == std::optional<std::string>("1234"));
  CHECK_FALSE(si::parse_job_id("sbatch: error"));

  CHECK(si::srun_exit(7 << 8, 0).code == 7);
  CHECK(si::srun_exit(143 << 8, 0).exitcode() == -15);
  CHECK(si::srun_exit(0, 15).exitcode() == -15);
  CHECK(si::controller_hosts("ClusterName = rig\nSlurmctldHost[0]        = vm(127.0.0.1)\n") ==
        std::vector<std::string>{"127.0.0.1"});
}

TEST_CASE("slurm: listen_url honours listen_address", "[slurm][unit]") {
  asio::io_context ctx;
  auto o = test_options();
  o.listen_address = "10.1.2.3";
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);
  CHECK(l->listen_url() == "tcp://10.1.2.3:0");
  CHECK(l->name() == "slurm");
}

// ===========================================================================
// Against the rig
// ===========================================================================

TEST_CASE("slurm: exit code of a batch job", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
  auto r = launch(*l, {sh_spec("fiber-test-exit3", "exit 3")});
  REQUIRE(r->jobs.size() == 1);
  CHECK(si::parse_job_id(ids_of(ctx, *l, *r)[0]));
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  CHECK(r->exits[0]->how == job_exit::kind::exited);
  CHECK(r->exits[0]->code == 3);
  CHECK(r->calls[0] == 1);
  CHECK(l->live_jobs() == 0);
  // exactly once: more polling rounds do not call it again
  run_until(
      ctx, [] { return false; }, 300ms);
  CHECK(r->calls[0] == 1);
}

TEST_CASE("slurm: cancel a running job: TERM and KILL", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
  auto r = launch(*l, {sh_spec("fiber-test-term", "exec sleep 60"), sh_spec("fiber-test-kill", "exec sleep 60")});
  auto ids = ids_of(ctx, *l, *r);
  REQUIRE(run_until(
      ctx, [&] { return l->state(r->jobs[0]) == "RUNNING" && l->state(r->jobs[1]) == "RUNNING"; }, 30s));
  CHECK_FALSE(l->node(r->jobs[0]).empty());
  l->cancel(r->jobs[0], 15);
  l->cancel(r->jobs[1], 9);
  l->cancel(r->jobs[1], 9); // idempotent
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  CHECK(r->exits[0]->exitcode() == -15);
  CHECK(r->exits[1]->exitcode() == -9);
  CHECK(r->calls == std::vector<int>{1, 1});
  l->cancel(r->jobs[0], 15); // ended: ignored
  CHECK(poll_until([&] { return !any_listed(ids); }, 15s));
}

TEST_CASE("slurm: job cancelled by someone else counts as signalled", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
  auto r = launch(*l, {sh_spec("fiber-test-ext", "exec sleep 60")});
  REQUIRE(run_until(
      ctx, [&] { return l->state(r->jobs[0]) == "RUNNING"; }, 30s));
  shell("scancel " + l->slurm_id(r->jobs[0]));
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  CHECK(r->exits[0]->how == job_exit::kind::signalled);
  CHECK(r->exits[0]->reason.find("CANCELLED") != std::string::npos);
}

TEST_CASE("slurm: a bad partition ends the job as a failed start with Slurm's message", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto o = test_options();
  o.partition = "no-such-partition";
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);
  auto r = launch(*l, {sh_spec("fiber-test-badpart", "true")}); // returns before sbatch answers
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  CHECK(r->exits[0]->start_failed);
  CHECK(r->exits[0]->how == job_exit::kind::lost);
  CHECK(r->exits[0]->reason.find("slurm") != std::string::npos);
  CHECK(r->exits[0]->reason.find("Invalid partition name specified") != std::string::npos);
  CHECK(l->live_jobs() == 0);
}

TEST_CASE("slurm: a failed submission ends only its own jobs", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options(slurm_options::mode::array));
  auto good = sh_spec("fiber-test-good", "exec sleep 60");
  auto bad = sh_spec("fiber-test-bad", "exec sleep 60");
  bad.resources.gpu = 1; // the rig has no GPUs: sbatch refuses the gres
  auto r = launch(*l, {good, good, bad});
  REQUIRE(run_until(
      ctx, [&] { return r->exits[2] && !l->slurm_id(r->jobs[0]).empty() && !l->slurm_id(r->jobs[1]).empty(); }, 30s));
  CHECK(r->exits[2]->start_failed);
  CHECK(r->exits[2]->reason.find("Invalid generic resource") != std::string::npos);
  CHECK(l->slurm_id(r->jobs[1]) == base_id(l->slurm_id(r->jobs[0])) + "_1"); // the good ones share an array
  REQUIRE(run_until(
      ctx, [&] { return l->state(r->jobs[0]) == "RUNNING" && l->state(r->jobs[1]) == "RUNNING"; }, 30s));
  for (int i = 0; i < 2; ++i) l->cancel(r->jobs[i], 15);
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  CHECK(r->exits[0]->exitcode() == -15);
  CHECK(l->live_jobs() == 0);
  CHECK(poll_until([&] { return fiber::detail::trim(shell("squeue -h -n fiber-test-good -o %i")).empty(); }, 15s));
}

TEST_CASE("slurm: a job cancelled before its submission answered never runs", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
  auto r = launch(*l, {sh_spec("fiber-test-early1", "exec sleep 60")});
  l->cancel(r->jobs[0], 15); // not submitted yet: ends at once
  auto r2 = launch(*l, {sh_spec("fiber-test-early2", "exec sleep 60")});
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 10s));
  CHECK(r->exits[0]->exitcode() == -15);
  ctx.poll(); // the posted submission starts: cancel while sbatch runs
  l->cancel(r2->jobs[0], 9);
  REQUIRE(run_until(
      ctx, [&] { return r2->all_done(); }, 30s));
  CHECK(r2->exits[0]->exitcode() == -9);
  CHECK(fiber::detail::trim(shell("squeue -h -n fiber-test-early1,fiber-test-early2 -o %i")).empty());
}

TEST_CASE("slurm: sbatch missing or controller down end the job as a failed start", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  {
    auto o = test_options();
    o.bin_dir = "/nonexistent-slurm-bin";
    auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);
    auto r = launch(*l, {sh_spec("x", "true")});
    REQUIRE(run_until(
        ctx, [&] { return r->all_done(); }, 10s));
    CHECK(r->exits[0]->start_failed);
    CHECK_THAT(r->exits[0]->reason,
               Catch::Contains("slurm") && Catch::Contains("sbatch") && Catch::Contains("No such file"));
  }
  {
    // sbatch honours SLURM_CONF from the spec's environment: point it at a
    // copy whose controller port nobody listens on.
    temp_dir dir;
    const char* conf = std::getenv("SLURM_CONF");
    std::string text = slurp(conf ? conf : "/etc/slurm/slurm.conf");
    REQUIRE(!text.empty());
    std::string bad;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("SlurmctldPort") || line.starts_with("MessageTimeout")) continue;
      bad += line + "\n";
    }
    bad = "SlurmctldPort=9\nMessageTimeout=1\n" + bad;
    std::ofstream(dir / "slurm.conf") << bad;
    auto spec = sh_spec("fiber-test-noctld", "true");
    spec.env = {{"SLURM_CONF", dir / "slurm.conf"}};
    auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
    auto r = launch(*l, {spec});
    REQUIRE(run_until(
        ctx, [&] { return r->all_done(); }, 60s));
    CHECK(r->exits[0]->start_failed);
    CHECK_THAT(r->exits[0]->reason, Catch::Contains("slurm") && Catch::Contains("Unable to contact slurm controller"));
  }
}

TEST_CASE("slurm: job array of 4: each task gets its own identity", "[slurm][rig]") {
  require_rig();
  temp_dir dir;
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options(slurm_options::mode::array));
  std::vector<job_spec> specs;
  for (int i = 0; i < 4; ++i) {
    auto s = sh_spec("fiber-test-arr-w" + std::to_string(i),
                     "echo \"$FIBER_INTERNAL_WORKER_ID $FIBER_INTERNAL_WORKER_NAME $COMMON_VAR "
                     "$(env | grep -c __FIBER_SLURM_)\"");
    s.env = {{"FIBER_INTERNAL_WORKER_ID", std::to_string(100 + i)},
             {"FIBER_INTERNAL_WORKER_NAME", s.name},
             {"COMMON_VAR", "same for all"}};
    s.stdout_path = dir / ("w" + std::to_string(i) + ".out");
    s.stderr_path = dir / "all.err";
    specs.push_back(s);
  }
  auto r = launch(*l, specs);
  REQUIRE(r->jobs.size() == 4);
  auto ids = ids_of(ctx, *l, *r);
  for (int i = 0; i < 4; ++i) CHECK(ids[i] == base_id(ids[0]) + "_" + std::to_string(i));
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    CHECK(r->exits[i]->how == job_exit::kind::exited);
    CHECK(r->exits[i]->code == 0);
    auto out = fiber::detail::trim(slurp(dir / ("w" + std::to_string(i) + ".out")));
    CHECK(out == std::to_string(100 + i) + " fiber-test-arr-w" + std::to_string(i) + " same for all 0");
    seen.insert(out);
  }
  CHECK(seen.size() == 4);
  INFO("stderr: " << slurp(dir / "all.err"));
  CHECK(fiber::detail::trim(slurp(dir / "all.err")).empty());
}

TEST_CASE("slurm: the secret is in no command line, job record or script", "[slurm][rig]") {
  require_rig();
  temp_dir dir;
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options(slurm_options::mode::array));
  const std::string common = random_hex(), w0 = random_hex(), w1 = random_hex();
  std::vector<job_spec> specs;
  for (int i = 0; i < 2; ++i) {
    auto s = sh_spec("fiber-test-secret", "printf '%s %s' \"$FIBER_INTERNAL_SECRET\" \"$PER_WORKER_TOKEN\" > " +
                                              dir / "seen.tmp$SLURM_ARRAY_TASK_ID" + " && mv " +
                                              dir / "seen.tmp$SLURM_ARRAY_TASK_ID" + " " +
                                              dir / "seen$SLURM_ARRAY_TASK_ID" + "; exec sleep 60");
    s.env = {{"FIBER_INTERNAL_SECRET", common}, {"PER_WORKER_TOKEN", i == 0 ? w0 : w1}};
    specs.push_back(s);
  }
  auto single = sh_spec("fiber-test-secret1", "printf '%s' \"$FIBER_INTERNAL_SECRET\" > " + dir / "one.tmp" +
                                                  " && mv " + dir / "one.tmp " + dir / "one; exec sleep 60");
  single.env = {{"FIBER_INTERNAL_SECRET", common}};
  auto r = launch(*l, specs);
  auto r1 = launch(*l, {single});
  REQUIRE(run_until(
      ctx, [&] { return fs::exists(dir / "seen0") && fs::exists(dir / "seen1") && fs::exists(dir / "one"); }, 30s));
  // The jobs did receive their variables...
  CHECK(slurp(dir / "seen0") == common + " " + w0);
  CHECK(slurp(dir / "seen1") == common + " " + w1);
  CHECK(slurp(dir / "one") == common);
  // ...and nobody else can read them from Slurm or ps.
  std::string arr = base_id(ids_of(ctx, *l, *r)[0]), one = ids_of(ctx, *l, *r1)[0];
  std::string seen = shell("scontrol show job -dd " + arr + " " + one + " 2>&1; scontrol show job -dd " + one +
                           " 2>&1; scontrol show step " + one + " 2>&1; squeue -h -j " + arr + "," + one +
                           " -o %all 2>&1; scontrol write batch_script " + arr +
                           " - 2>&1; scontrol write batch_script " + one + " - 2>&1; ps -eww -o args 2>&1");
  INFO(seen.substr(0, 4000));
  CHECK(seen.find("fiber (slurm backend)") != std::string::npos); // we did read the scripts
  CHECK(seen.find(common) == std::string::npos);
  CHECK(seen.find(w0) == std::string::npos);
  CHECK(seen.find(w1) == std::string::npos);
}

TEST_CASE("slurm: destroying the launcher cancels its live jobs", "[slurm][rig]") {
  require_rig();
  std::vector<std::string> ids;
  {
    asio::io_context ctx;
    auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options(slurm_options::mode::array));
    auto a = launch(*l, {sh_spec("fiber-test-dtor", "exec sleep 60"), sh_spec("fiber-test-dtor", "exec sleep 60")});
    auto b = launch(*l, {sh_spec("fiber-test-dtor1", "exec sleep 60")});
    ids = ids_of(ctx, *l, *a);
    ids.push_back(ids_of(ctx, *l, *b)[0]);
    REQUIRE(run_until(
        ctx, [&] { return l->state(b->jobs[0]) == "RUNNING"; }, 30s));
    CHECK(any_listed(ids));
    l.reset();
    CHECK(a->calls == std::vector<int>{0, 0}); // documented: no handler after destruction
  }
  CHECK(poll_until([&] { return !any_listed(ids); }, 15s));
}

TEST_CASE("slurm: a held job reports its pending reason", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto o = test_options();
  o.extra_args = {"--hold"};
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);
  auto r = launch(*l, {sh_spec("fiber-test-held", "true")});
  REQUIRE(run_until(
      ctx, [&] { return l->state(r->jobs[0]) == "PENDING"; }, 10s));
  CHECK(l->pending_reason(r->jobs[0]) == "JobHeldUser");
  l->cancel(r->jobs[0], 15);
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 15s));
  CHECK(r->exits[0]->exitcode() == -15);
}

TEST_CASE("slurm: a job whose node goes down is lost", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
  auto r = launch(*l, {sh_spec("fiber-test-nodefail", "exec sleep 60")});
  REQUIRE(run_until(
      ctx, [&] { return l->state(r->jobs[0]) == "RUNNING"; }, 30s));
  std::string node = l->node(r->jobs[0]);
  REQUIRE(!node.empty());
  struct resume {
    std::string node;
    ~resume() {
      shell("scontrol update NodeName=" + node + " State=RESUME 2>&1");
      poll_until([&] { return shell("sinfo -h -n " + node + " -o %t").find("idle") != std::string::npos; }, 60s);
    }
  } guard{node};
  shell("scontrol update NodeName=" + node + " State=DOWN Reason=fiber-slurm-test 2>&1");
  REQUIRE(run_until(
      ctx, [&] { return r->all_done(); }, 30s));
  CHECK(r->exits[0]->how == job_exit::kind::lost);
  CHECK(r->exits[0]->reason.find("NODE_FAIL") != std::string::npos);
}

TEST_CASE("slurm: jobs on every node reach the master at listen_url()", "[slurm][rig]") {
  require_rig();
  asio::io_context ctx;
  auto o = test_options(slurm_options::mode::array);
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);
  auto url = l->listen_url(); // default rule: no listen_address configured
  REQUIRE(url.starts_with("tcp://"));
  REQUIRE(url.ends_with(":0"));
  auto addr = url.substr(6, url.size() - 8);
  INFO("listen_url " << url);
  asio::ip::tcp::acceptor acceptor(ctx, asio::ip::tcp::endpoint(asio::ip::make_address(addr), 0));
  auto port = acceptor.local_endpoint().port();
  std::set<std::string> heard;
  std::function<void()> accept_one = [&] {
    auto sock = std::make_shared<asio::ip::tcp::socket>(ctx);
    acceptor.async_accept(*sock, [&, sock](std::error_code ec) {
      if (ec) return;
      auto buf = std::make_shared<asio::streambuf>();
      asio::async_read_until(*sock, *buf, '\n', [sock, buf, &heard](std::error_code ec2, std::size_t) {
        if (ec2) return;
        std::istream in(buf.get());
        std::string line;
        std::getline(in, line);
        heard.insert(line);
      });
      accept_one();
    });
  };
  accept_one();
  // A whole node each (8 CPUs): on --nodes 3 the three land on three hosts.
  int nodes = std::max(1, std::atoi(fiber::detail::trim(shell("sinfo -h -o %D")).c_str()));
  std::vector<job_spec> specs;
  for (int i = 0; i < nodes; ++i) {
    auto s = sh_spec("fiber-test-dial",
                     "exec bash -c 'echo \"$FIBER_INTERNAL_WORKER_ID $(hostname -I 2>/dev/null)\" > /dev/tcp/" + addr +
                         "/" + std::to_string(port) + "'");
    s.env = {{"FIBER_INTERNAL_WORKER_ID", std::to_string(i)}};
    s.resources.cpu = 8;
    specs.push_back(s);
  }
  auto r = launch(*l, specs);
  REQUIRE(run_until(
      ctx, [&] { return r->all_done() && heard.size() == specs.size(); }, 60s));
  for (auto& x : r->exits) CHECK(x->exitcode() == 0);
  for (auto& h : heard) UNSCOPED_INFO("heard: " << h);
  CHECK(heard.size() == specs.size());
}

// The srun path needs an allocation: this hidden case runs inside one (the
// next case submits this very binary as a batch job that runs only it).
TEST_CASE("slurm srun steps inside an allocation", "[.slurm-inner]") {
  const char* alloc = std::getenv("SLURM_JOB_ID");
  REQUIRE(alloc);
  const char* dir_env = std::getenv("SLURMTEST_INNER_DIR");
  REQUIRE(dir_env);
  std::string dir = dir_env;
  asio::io_context ctx;
  auto o = slurm_options::from_config(); // the real path: SLURM_JOB_ID, SLURM_STEP_ID
  REQUIRE(o.allocation == std::optional<std::string>(alloc));
  CHECK(o.overlap == (std::getenv("SLURM_STEP_ID") != nullptr));
  o.poll_interval = 100ms;
  o.warn = [](const std::string& w) { UNSCOPED_INFO("launcher warning: " << w); };
  auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), o);

  std::vector<job_spec> specs{sh_spec("inner-exit3", "exit 3"), sh_spec("inner-term", "exec sleep 60"),
                              sh_spec("inner-running", "touch " + dir + "/running; exec sleep 60")};
  for (int i = 0; i < 2; ++i) {
    auto s = sh_spec("inner-w" + std::to_string(i),
                     "echo \"$FIBER_INTERNAL_WORKER_ID $SLURM_STEP_ID\" > " + dir + "/id$FIBER_INTERNAL_WORKER_ID");
    s.env = {{"FIBER_INTERNAL_WORKER_ID", std::to_string(i)}};
    specs.push_back(s);
  }
  auto r = launch(*l, specs);
  for (auto& j : r->jobs) CHECK(j.id.starts_with("srun-"));
  l->cancel(r->jobs[1], 15); // probably before its step exists: srun is signalled
  REQUIRE(run_until(
      ctx, [&] { return fs::exists(dir + "/running"); }, 20s));
  l->cancel(r->jobs[2], 9); // a running step: scancel --signal=KILL <job>.<step>
  bool done = run_until(
      ctx, [&] { return r->all_done(); }, 30s);
  for (std::size_t i = 0; i < r->exits.size(); ++i)
    UNSCOPED_INFO("job " << r->jobs[i].id << ": "
                         << (r->exits[i] ? std::to_string(r->exits[i]->exitcode()) + " " + r->exits[i]->reason
                                         : "no exit"));
  UNSCOPED_INFO(shell(std::string("squeue -s -j ") + alloc));
  REQUIRE(done);
  CHECK(r->exits[0]->exitcode() == 3);
  CHECK(r->exits[1]->exitcode() == -15);
  CHECK(r->exits[2]->exitcode() == -9);
  CHECK(r->exits[3]->exitcode() == 0);
  CHECK(r->exits[4]->exitcode() == 0);
  auto id0 = fiber::detail::trim(slurp(dir + "/id0")), id1 = fiber::detail::trim(slurp(dir + "/id1"));
  CHECK(id0.starts_with("0 "));
  CHECK(id1.starts_with("1 "));
  CHECK(id0 != id1);

  // Destruction cancels live steps.
  auto d = launch(*l, {sh_spec("inner-dtor", "touch " + dir + "/dtor; exec sleep 60")});
  REQUIRE(run_until(
      ctx, [&] { return fs::exists(dir + "/dtor"); }, 20s));
  l.reset();
  std::string mine = std::getenv("SLURM_STEP_ID") ? std::string(alloc) + "." + std::getenv("SLURM_STEP_ID") : "none";
  std::string left;
  CHECK(poll_until(
      [&] {
        left = fiber::detail::trim(shell(std::string("squeue -h -s -j ") + alloc +
                                         " -o %i | grep -v -e batch -e extern -e '^" + mine + "$'"));
        return left.empty();
      },
      15s));
  INFO("steps left: " << left);
}

TEST_CASE("slurm: srun steps when the master runs inside an allocation", "[slurm][rig]") {
  require_rig();
  // The master (this binary running the hidden case) is the batch script
  // itself, or a step of its own (`srun ./app`: its step holds the CPUs).
  for (bool as_step : {false, true}) {
    INFO((as_step ? "master is a job step" : "master is the batch script"));
    temp_dir dir;
    asio::io_context ctx;
    auto l = std::make_shared<slurm_launcher>(ctx.get_executor(), test_options());
    job_spec master;
    master.name = "fiber-test-srun-master";
    master.argv = {self_exe(), "slurm srun steps inside an allocation"};
    if (as_step) master.argv.insert(master.argv.begin(), {"srun", "--ntasks=1", "--cpus-per-task=6", "--quiet"});
    master.env = {{"SLURMTEST_INNER_DIR", dir.path.string()}};
    master.resources.cpu = 6; // room for 5 one-CPU steps
    master.stdout_path = master.stderr_path = dir / "master.out";
    auto r = launch(*l, {master});
    REQUIRE(run_until(
        ctx, [&] { return r->all_done(); }, 90s));
    INFO("inner test output:\n" << slurp(dir / "master.out"));
    CHECK(r->exits[0]->how == job_exit::kind::exited);
    CHECK(r->exits[0]->code == 0);
  }
}
