// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm.hpp
/// The Slurm backend: each job-backed process is one Slurm batch job, one task
/// of a job array, or one job step of the allocation the master runs in.
///
/// fiber runs `sbatch`, `srun`, `squeue`, `scontrol` and `scancel` with
/// posix_spawn (no shell: arguments are a vector, so no quoting bugs; a
/// clean signal mask; output captured through pipes), not libslurm, which
/// has no stable API or ABI (docs/RATIONALE.md). Needs Slurm >= 20.11
/// (`squeue -O exit_code`, `srun --exact`); checked on 22.05.
///
/// ## Launch modes (key `slurm.launch_mode`)
/// * `sbatch`: one `sbatch --parsable` per spec. Job id "1234".
/// * `array`: specs with identical argv and resources become one job array
///   (`--array=0-(n-1)`, at most 1000 tasks per array); a group of one is a
///   plain job. Job id "1234_5". What differs between specs of one array is
///   their environment (worker id, name) and output paths: variables equal in
///   every spec are exported as they are; a variable that differs (or is
///   missing from some spec) reaches sbatch as `__FIBER_SLURM_<task>_<k>`
///   and the generated batch script copies task `$SLURM_ARRAY_TASK_ID`'s
///   value into the real name, unsets all `__FIBER_SLURM_*`, and execs the
///   command. So each array task sees exactly its own spec's environment;
///   the runtime needs to do nothing special.
/// * `srun`: inside an allocation (`SLURM_JOB_ID` set: the master runs in
///   `sbatch`/`salloc`), one `srun --jobid=$SLURM_JOB_ID -n1 -N1 --exact`
///   child process per spec; its exit is watched through a pidfd. Job id
///   "srun-<pid of srun>". `slurm.extra_args`, partition, account and time
///   limit do not apply to steps (the allocation has them). When the master
///   itself is a step (`srun ./app`: SLURM_STEP_ID set) steps add
///   `--overlap`, since the master's step holds the allocation's CPUs.
/// * `auto` (default): `srun` inside an allocation, else `array` for more
///   than one spec, else `sbatch`.
///
/// Steps skip Slurm's scheduling pass and start about 4x faster than batch
/// jobs; an array only saves submission calls (docs/RATIONALE.md).
///
/// ## The secret never reaches argv or the batch script
/// The spec's environment (it carries fiber's secret) goes into the
/// *environment* of sbatch/srun (posix_spawn envp) with `--export=ALL`; never
/// into `--export=NAME=value`, `--wrap` or the script. The batch script is
/// fed to sbatch on stdin from an anonymous memfd (no file, no path). Checked
/// on Slurm 22.05: neither `scontrol show job -dd`, `squeue -o %all`,
/// `scontrol write batch_script` nor `ps` shows an exported value; the job's
/// environment is kept only in slurmctld's 0700 state directory and in the
/// job processes' /proc/PID/environ (owner-only). (Sites with
/// `AccountingStoreFlags=job_env` keep it in the accounting database too,
/// readable by the owner and Slurm admins.)
///
/// ## Watching jobs
/// One poll loop per launcher, on the runtime's executor, every
/// `slurm.poll_interval_ms` (default 500) while a batch job is live: an
/// asynchronous `squeue -h -r -t all -j <ids> -O JobArrayID,State,exit_code,
/// NodeList,Reason` (posix_spawn + pipes read through Asio; the runtime
/// thread never blocks on it). `-t all` lists finished jobs too, with their
/// wait status, until MinJobAge purges them, so `scontrol show job` adds
/// nothing (and `sacct` is not used: accounting may be disabled). Mapping:
///   COMPLETED -> exited(code); FAILED -> exited(code), or signalled(n) when
///   the wait status says signal n, or lost when Slurm failed it without a
///   status (e.g. JobLaunchFailure 0:0); CANCELLED -> signalled(the signal we
///   asked for; 15 when cancelled by someone else); TIMEOUT, NODE_FAIL,
///   BOOT_FAIL, DEADLINE, OUT_OF_MEMORY, PREEMPTED, ... -> lost, reason =
///   "<STATE> (<reason>) on <node>"; a job Slurm no longer knows -> lost.
/// Jobs are submitted `--no-requeue`: fiber reruns a lost worker's tasks
/// itself, and a requeued job would come back as a worker already declared
/// dead. A job that stays PENDING is the runtime's business (start_timeout);
/// pending_reason() says why Slurm holds it.
/// srun steps: srun's exit status (128+n means the task died of signal n; a
/// fiber worker that exits with 128+n says so on its link first, and
/// Process reports that status rather than -n).
///
/// ## Listen address
/// `listen_url()` is `tcp://<addr>:0` (`tls+tcp://` when `tls_cert` is set:
/// the nodes then need tls_cert, tls_key and tls_ca at the same paths),
/// addr = (1) the `listen_address` key;
/// else (2) the first non-loopback address the master's hostname resolves to;
/// else (3) the local address of the interface that routes to slurmctld
/// (`scontrol show config`: SlurmctldHost/SlurmctldAddr; found with a UDP
/// connect + getsockname, nothing is sent) when that is not loopback; else
/// (4) 127.0.0.1 (a one-host cluster). On the rig's `--nodes 3 --netns` the
/// hostname resolves to 127.0.0.1, so rule 3 gives 10.200.0.1.
///
/// ## Output
/// `stdout_path`/`stderr_path` become `--output`/`--error` (or, when they
/// differ between tasks of one array, redirections in the script). nullopt:
/// srun steps forward to the master's stdout/stderr; batch jobs cannot, so
/// their output is discarded (/dev/null) — set `worker_output_dir` to keep
/// it. Paths must exist on the compute nodes; Slurm expands `%` patterns in
/// `--output`. Jobs run in the master's working directory.
///
/// Thread-safety: as for every launcher, call it from the runtime thread
/// only; destroy it there or after the executor stopped. Destruction cancels
/// (scancel) every job it submitted that has not ended and does not call
/// their exit handlers.

#include <fiber/backend/detail/async_command.hpp>
#include <fiber/backend/detail/child_watch.hpp>
#include <fiber/backend/detail/command.hpp>
#include <fiber/backend/detail/environment.hpp>
#include <fiber/backend/detail/net_address.hpp>
#include <fiber/backend/detail/shell_words.hpp>
#include <fiber/backend/detail/slurm_commands.hpp>
#include <fiber/backend/detail/slurm_options.hpp>
#include <fiber/backend/detail/slurm_status.hpp>
#include <fiber/backend/detail/spawn.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <netdb.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

namespace fiber {
namespace detail {

/// fiber's Slurm launcher (see the file comment). Create with
/// std::make_shared (it hands weak references to its asynchronous work).
class slurm_launcher final : public backend::launcher, public std::enable_shared_from_this<slurm_launcher> {
public:
  slurm_launcher(asio::any_io_executor ex, slurm_options opts)
      : ex_(std::move(ex)), opts_(std::move(opts)), timer_(ex_) {
    if (!opts_.warn) opts_.warn = [](const std::string& m) { detail::log(log_level::warning, m); };
  }

  /// Cancels every job not yet seen ending (one `scancel` for the batch
  /// jobs; steps are cancelled and their srun reaped, at most ~5 s). Exit
  /// handlers of those jobs are not called.
  ~slurm_launcher() override {
    timer_.cancel();
    for (auto& c : inflight_) c->abort();
    std::vector<std::string> batch_ids;
    std::vector<child_watch*> sruns;
    for (auto& [id, r] : jobs_) {
      if (r.watch) sruns.push_back(r.watch.get());
      else batch_ids.push_back(id);
    }
    try {
      if (!batch_ids.empty()) scancel_blocking(batch_ids, 0);
    } catch (const std::exception& e) {
      warn(std::string("slurm: cancelling jobs at shutdown: ") + e.what());
    }
    stop_steps(sruns);
  }

  std::string_view name() const noexcept override { return "slurm"; }

  /// "tcp://<address>:0"; see the file comment for how the address is chosen.
  /// Blocks once for `scontrol show config` when rules 1-2 give nothing.
  std::string listen_url() override {
    if (!listen_url_) listen_url_ = fiber::detail::tcp_listen_url(listen_address(), !config_string("tls_cert").empty());
    return *listen_url_;
  }

  /// Submit `specs` (see "Launch modes"); on_exit[i] fires once, on the
  /// executor, after this returns. Blocks for sbatch (~10 ms per
  /// submission; bounded by command_timeout). Throws fiber::backend_error
  /// with Slurm's message when a submission fails (jobs submitted earlier in
  /// the same call are cancelled first), std::invalid_argument for
  /// mismatched sizes or an empty argv.
  std::vector<backend::job> launch(const std::vector<backend::job_spec>& specs,
                                   std::vector<backend::exit_handler> on_exit) override {
    if (specs.size() != on_exit.size()) throw std::invalid_argument("slurm: launch: one exit handler per spec");
    for (auto& s : specs)
      if (s.argv.empty()) throw std::invalid_argument("slurm: launch: empty argv in spec '" + s.name + "'");
    if (weak_from_this().expired()) throw std::logic_error("slurm: the launcher must be owned by a shared_ptr");
    std::vector<backend::job> jobs(specs.size());
    if (specs.empty()) return jobs;
    auto mode = effective_mode(specs.size());
    if (mode == slurm_options::mode::srun) launch_steps(specs, on_exit, jobs);
    else launch_batch(specs, on_exit, jobs, mode == slurm_options::mode::array);
    return jobs;
  }

  /// Stop the job. Batch jobs: 15 -> `scancel` (SIGTERM, SIGKILL after
  /// KillWait), 9 -> `scancel --signal=KILL --full`, other n -> `scancel
  /// --signal=n --full`. srun steps: `scancel` of the step (found by srun's
  /// pid through `scontrol show step`), repeated until srun exits (see
  /// cancel_step). Asynchronous: never blocks the runtime thread; the end is
  /// reported through on_exit as signalled(signal). Unknown or finished jobs
  /// are ignored; a failing scancel is logged, not thrown.
  void cancel(const backend::job& j, int signal) override {
    auto it = jobs_.find(j.id);
    if (it == jobs_.end()) return;
    auto& r = it->second;
    r.asked = signal;
    if (!r.watch) return async_scancel({j.id}, signal);
    cancel_step(j.id, signal, 0);
  }

  /// Why Slurm keeps `j` PENDING (e.g. "Resources", "Priority",
  /// "ReqNodeNotAvail"), as of the last poll; empty when not pending or
  /// unknown.
  std::string pending_reason(const backend::job& j) const {
    auto it = jobs_.find(j.id);
    return it != jobs_.end() && it->second.state == "PENDING" ? it->second.reason : std::string();
  }

  /// Slurm's state of `j` as of the last poll ("PENDING", "RUNNING", ...;
  /// "" before the first poll, for srun steps, and once ended).
  std::string state(const backend::job& j) const {
    auto it = jobs_.find(j.id);
    return it != jobs_.end() ? it->second.state : std::string();
  }

  /// Node(s) `j` runs on, as of the last poll ("" if unknown).
  std::string node(const backend::job& j) const {
    auto it = jobs_.find(j.id);
    return it != jobs_.end() ? it->second.nodes : std::string();
  }

  /// Number of jobs not yet reported ended.
  std::size_t live_jobs() const noexcept { return jobs_.size(); }

  const slurm_options& options() const noexcept { return opts_; }

private:
  struct record {
    backend::exit_handler on_exit;
    int asked = 0;                      // signal asked with cancel()
    std::string state, reason, nodes;   // last poll
    int missing = 0;                    // polls in a row not listing it
    std::shared_ptr<child_watch> watch; // srun steps only
  };

  void warn(const std::string& m) const {
    try {
      opts_.warn(m);
    } catch (...) {
    }
  }

  slurm_options::mode effective_mode(std::size_t n) const {
    auto m = opts_.launch_mode;
    if (m == slurm_options::mode::automatic)
      return opts_.allocation ? slurm_options::mode::srun
             : n > 1          ? slurm_options::mode::array
                              : slurm_options::mode::sbatch;
    if (m == slurm_options::mode::srun && !opts_.allocation)
      throw backend_error("slurm: launch_mode=srun needs an allocation (SLURM_JOB_ID is not set: run the master "
                          "inside sbatch or salloc)");
    return m;
  }

  // ---- batch jobs and arrays ----------------------------------------------

  void launch_batch(const std::vector<backend::job_spec>& specs, std::vector<backend::exit_handler>& on_exit,
                    std::vector<backend::job>& jobs, bool arrays) {
    // Groups: specs sharing argv and resources share an array.
    std::vector<std::vector<std::size_t>> groups;
    if (arrays) {
      std::map<std::tuple<std::vector<std::string>, int, int, int>, std::size_t> index;
      for (std::size_t i = 0; i < specs.size(); ++i) {
        auto& r = specs[i].resources;
        auto [it, fresh] = index.try_emplace({specs[i].argv, r.cpu, r.memory_mb, r.gpu}, groups.size());
        if (fresh) groups.emplace_back();
        auto& g = groups[it->second];
        if (g.size() == max_array_) { // Slurm's default MaxArraySize is 1001
          it->second = groups.size();
          groups.emplace_back();
        }
        groups[it->second].push_back(i);
      }
    } else {
      for (std::size_t i = 0; i < specs.size(); ++i) groups.push_back({i});
    }

    std::vector<std::pair<std::size_t, std::string>> ids; // spec index -> job id
    std::vector<std::string> submitted;
    try {
      for (auto& g : groups) {
        std::vector<const backend::job_spec*> members;
        for (auto i : g) members.push_back(&specs[i]);
        if (members.size() > 1 && !slurm_impl::arrayable(members)) {
          for (auto i : g) {
            auto id = submit({&specs[i]});
            submitted.push_back(id);
            ids.emplace_back(i, id);
          }
          continue;
        }
        auto id = submit(members);
        submitted.push_back(id);
        for (std::size_t k = 0; k < g.size(); ++k)
          ids.emplace_back(g[k], members.size() > 1 ? id + "_" + std::to_string(k) : id);
      }
    } catch (...) {
      if (!submitted.empty()) {
        try {
          scancel_blocking(submitted, 0);
        } catch (const std::exception& e) {
          warn(std::string("slurm: cancelling after a failed submission: ") + e.what());
        }
      }
      throw;
    }
    for (auto& [i, id] : ids) {
      jobs[i] = backend::job{id, -1, {}};
      auto& r = jobs_[id];
      r.on_exit = std::move(on_exit[i]);
    }
    ensure_polling();
  }

  /// Submit one plain job (one member) or one array; returns the job id.
  std::string submit(const std::vector<const backend::job_spec*>& members) {
    auto plan = slurm_impl::plan_batch(members);
    spawn_request req;
    req.argv = slurm_impl::sbatch_argv(opts_, plan, members.front()->resources);
    req.env = merged_environment(plan.env);
    auto script = memory_file(plan.script);
    req.stdin_fd = script.get();
    auto res = run_blocking(req, "submit '" + plan.name + "'");
    if (!res.ok())
      throw backend_error("slurm: sbatch failed to submit '" + plan.name + "' (" + res.describe() +
                          "): " + res.message());
    auto id = slurm_impl::parse_job_id(res.out);
    if (!id) throw backend_error("slurm: sbatch printed no job id for '" + plan.name + "': " + res.message());
    return *id;
  }

  command_result run_blocking(const spawn_request& req, const std::string& what) {
    try {
      return run(req, opts_.command_timeout);
    } catch (const std::system_error& e) {
      throw backend_error("slurm: cannot run " + req.argv[0] + " to " + what + ": " + e.code().message() +
                          (e.code().value() == ENOENT ? " (is Slurm installed and on PATH?)" : ""));
    }
  }

  // ---- srun steps -----------------------------------------------------------

  void launch_steps(const std::vector<backend::job_spec>& specs, std::vector<backend::exit_handler>& on_exit,
                    std::vector<backend::job>& jobs) {
    std::vector<std::string> started;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      spawn_request req;
      req.argv = slurm_impl::srun_argv(opts_, *opts_.allocation, specs[i]);
      req.env = merged_environment(specs[i].env);
      req.out = req.err = stdio::inherit; // task output -> the master's
      req.new_process_group = true;       // the terminal's ^C is not srun's
      spawned child;
      try {
        child = spawn(req);
      } catch (const std::system_error& e) {
        for (auto& id : started) { // started in this call: stop, and forget their handlers
          jobs_[id].on_exit = nullptr;
          jobs_[id].asked = SIGTERM;
          jobs_[id].watch->kill(SIGTERM);
        }
        throw backend_error("slurm: cannot run " + req.argv[0] + " for '" + specs[i].name + "': " + e.code().message() +
                            (e.code().value() == ENOENT ? " (is Slurm on PATH?)" : ""));
      }
      std::string id = "srun-" + std::to_string(child.pid);
      auto& r = jobs_[id];
      r.on_exit = std::move(on_exit[i]);
      r.watch = child_watch::start(ex_, child.pid, [self = weak_from_this(), id](int status) {
        if (auto s = self.lock()) s->step_ended(id, status);
      });
      started.push_back(id);
      jobs[i] = backend::job{id, -1, {}};
    }
  }

  void step_ended(const std::string& id, int status) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    auto r = std::move(it->second);
    jobs_.erase(it);
    if (r.on_exit) r.on_exit(slurm_impl::srun_exit(status, r.asked));
  }

  /// Cancel an srun step until its srun exits: find the step id (by srun's
  /// pid) and scancel it, and look again after 1 s (a cancel that reaches
  /// slurmd while the step's tasks are still being launched is lost; seen on
  /// 22.05). While the step does not exist yet, signal srun instead (that ends
  /// a srun still waiting for resources; srun does not forward a signal that
  /// arrives before its tasks start) and look again after 200 ms. After ~25
  /// rounds, SIGKILL srun as a last resort.
  void cancel_step(const std::string& id, int signal, int attempt) {
    auto self = weak_from_this();
    start_async({opts_.bin("scontrol"), "show", "step", *opts_.allocation}, [self, id, signal,
                                                                             attempt](command_result res) {
      auto s = self.lock();
      if (!s) return;
      auto it = s->jobs_.find(id);
      if (it == s->jobs_.end() || it->second.watch->done()) return;
      if (attempt >= 25) return it->second.watch->kill(SIGKILL);
      auto steps = slurm_impl::parse_steps(res.out);
      auto st = steps.find(it->second.watch->pid());
      if (st != steps.end()) s->async_scancel({st->second}, signal);
      else it->second.watch->kill(signal == 9 ? SIGTERM : signal);
      auto t = std::make_shared<asio::steady_timer>(s->ex_, std::chrono::milliseconds(st != steps.end() ? 1000 : 200));
      t->async_wait([self, id, signal, attempt, t](std::error_code ec) {
        if (auto s2 = self.lock(); s2 && !ec) s2->cancel_step(id, signal, attempt + 1);
      });
    });
  }

  /// Destructor: scancel the steps of live sruns and SIGTERM them; repeat
  /// each second (a cancel can be lost while a step is launching) with
  /// SIGKILL for the steps; after ~5 s SIGKILL srun. Reaps every srun.
  void stop_steps(std::vector<child_watch*> sruns) noexcept {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (int round = 0; !sruns.empty(); ++round) {
      try {
        std::vector<std::string> steps;
        auto map = step_ids_blocking();
        for (auto* w : sruns)
          if (auto it = map.find(w->pid()); it != map.end()) steps.push_back(it->second);
        if (!steps.empty()) scancel_blocking(steps, round == 0 ? 0 : 9);
      } catch (const std::exception& e) {
        warn(std::string("slurm: cancelling steps at shutdown: ") + e.what());
      }
      if (round == 0)
        for (auto* w : sruns) w->kill(SIGTERM);
      auto round_end = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      while (!sruns.empty() && std::chrono::steady_clock::now() < round_end) {
        std::erase_if(sruns, [](auto* w) { return w->reap_silently(); });
        if (!sruns.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
    }
    for (auto* w : sruns) w->detach_and_reap(std::chrono::milliseconds(0)); // SIGKILL + reap
  }

  std::map<pid_t, std::string> step_ids_blocking() {
    spawn_request req;
    req.argv = {opts_.bin("scontrol"), "show", "step", *opts_.allocation};
    return slurm_impl::parse_steps(run_blocking(req, "list steps").out);
  }

  // ---- cancellation ---------------------------------------------------------

  std::vector<std::string> scancel_argv(const std::vector<std::string>& ids, int signal) const {
    std::vector<std::string> a{opts_.bin("scancel")};
    if (signal == 9) a.insert(a.end(), {"--signal=KILL", "--full"});
    else if (signal != 0 && signal != 15) a.insert(a.end(), {"--signal=" + std::to_string(signal), "--full"});
    a.insert(a.end(), ids.begin(), ids.end());
    return a;
  }

  void scancel_blocking(const std::vector<std::string>& ids, int signal) {
    spawn_request req;
    req.argv = scancel_argv(ids, signal);
    auto res = run_blocking(req, "cancel jobs");
    if (!res.ok() && !benign_scancel_error(res.message()))
      warn("slurm: scancel " + join(ids, " ") + " (" + res.describe() + "): " + res.message());
  }

  static bool benign_scancel_error(const std::string& m) {
    return m.find("already completing or completed") != std::string::npos ||
           m.find("Invalid job id") != std::string::npos;
  }

  void async_scancel(const std::vector<std::string>& ids, int signal) {
    auto self = weak_from_this();
    start_async(scancel_argv(ids, signal), [self, ids](command_result res) {
      auto s = self.lock();
      if (s && !res.ok() && !benign_scancel_error(res.message()))
        s->warn("slurm: scancel " + join(ids, " ") + " (" + res.describe() + "): " + res.message());
    });
  }

  void start_async(std::vector<std::string> argv, std::function<void(command_result)> done) {
    spawn_request req;
    req.argv = std::move(argv);
    std::erase_if(inflight_, [](auto& c) { return c->finished(); });
    try {
      inflight_.push_back(async_command::start(ex_, req, opts_.command_timeout, std::move(done)));
    } catch (const std::system_error& e) {
      warn("slurm: cannot run " + req.argv[0] + ": " + e.code().message());
    }
  }

  // ---- the poll loop --------------------------------------------------------

  void ensure_polling() {
    if (polling_) return;
    polling_ = true;
    schedule_poll();
  }

  void schedule_poll() {
    timer_.expires_after(opts_.poll_interval);
    timer_.async_wait([self = weak_from_this()](std::error_code ec) {
      if (auto s = self.lock(); s && !ec) s->poll();
    });
  }

  std::vector<std::string> polled_ids() const {
    std::vector<std::string> ids;
    for (auto& [id, r] : jobs_)
      if (!r.watch) ids.push_back(id);
    return ids;
  }

  void poll() {
    auto ids = polled_ids();
    if (ids.empty()) {
      polling_ = false;
      return;
    }
    auto self = weak_from_this();
    std::erase_if(inflight_, [](auto& c) { return c->finished(); });
    spawn_request req;
    req.argv = {opts_.bin("squeue"),
                "-h",
                "-r",
                "-t",
                "all",
                "-j",
                join(ids, ","),
                "-O",
                "JobArrayID:0|,State:0|,exit_code:0|,NodeList:0|,Reason:0"};
    try {
      inflight_.push_back(async_command::start(ex_, req, opts_.command_timeout, [self, ids](command_result res) {
        if (auto s = self.lock()) s->on_poll(ids, res);
      }));
    } catch (const std::system_error& e) {
      warn("slurm: cannot run squeue: " + e.code().message());
      schedule_poll();
    }
  }

  void on_poll(const std::vector<std::string>& ids, const command_result& res) {
    std::vector<std::pair<backend::exit_handler, backend::job_exit>> ended;
    auto end_job = [&](const std::string& id, backend::job_exit x) {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return;
      ended.emplace_back(std::move(it->second.on_exit), std::move(x));
      jobs_.erase(it);
    };
    if (!res.ok()) {
      auto m = res.message();
      if (m.find("Invalid job id") != std::string::npos) { // none of them is known any more
        for (auto& id : ids) end_job(id, {backend::job_exit::kind::lost, 0, "job no longer known to Slurm"});
      } else if (++failed_polls_ == 1 || failed_polls_ % 20 == 0) {
        warn("slurm: squeue failed (" + res.describe() + ", " + std::to_string(failed_polls_) + " in a row): " + m +
             "; jobs are still watched by heartbeats");
      }
    } else {
      failed_polls_ = 0;
      auto q = slurm_impl::parse_queue(res.out);
      for (auto& id : ids) {
        auto it = jobs_.find(id);
        if (it == jobs_.end()) continue; // ended meanwhile (cannot happen for batch jobs, but be safe)
        auto e = q.find(id);
        if (e == q.end()) {
          // Purged (MinJobAge) before we saw it end; allow one odd poll.
          if (++it->second.missing >= 2)
            end_job(id, {backend::job_exit::kind::lost, 0, "job no longer known to Slurm"});
          continue;
        }
        it->second.missing = 0;
        if (slurm_impl::is_terminal(e->second.state)) {
          end_job(id, slurm_impl::to_exit(e->second, it->second.asked));
        } else {
          it->second.state = e->second.state;
          it->second.reason = e->second.reason;
          it->second.nodes = e->second.nodes;
        }
      }
    }
    if (!polled_ids().empty()) schedule_poll();
    else polling_ = false;
    // One handler each: a handler that throws (out of io_context::run) must
    // not cost the others their call; a handler may re-enter launch/cancel.
    for (auto& [h, x] : ended)
      if (h) asio::post(ex_, [h = std::move(h), x = std::move(x)] { h(x); });
  }

  // ---- listen address -------------------------------------------------------

  std::string listen_address() {
    if (opts_.listen_address) return *opts_.listen_address;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0)
      if (auto a = resolve(host); !a.empty()) return a.front();
    try {
      spawn_request req;
      req.argv = {opts_.bin("scontrol"), "show", "config"};
      auto res = run(req, std::chrono::seconds(15));
      for (auto& h : slurm_impl::controller_hosts(res.out)) {
        auto src = route_source(h);
        if (src.empty()) continue;
        addrinfo hints{};
        hints.ai_flags = AI_NUMERICHOST;
        addrinfo* ai = nullptr;
        auto bare = src.front() == '[' ? src.substr(1, src.size() - 2) : src;
        bool loop = true;
        if (::getaddrinfo(bare.c_str(), nullptr, &hints, &ai) == 0) {
          loop = is_loopback(ai->ai_addr);
          ::freeaddrinfo(ai);
        }
        if (!loop) return src;
      }
    } catch (const std::exception&) {
      // no scontrol: fall through
    }
    return "127.0.0.1";
  }

  static constexpr std::size_t max_array_ = 1000;

  asio::any_io_executor ex_;
  slurm_options opts_;
  asio::steady_timer timer_;
  bool polling_ = false;
  int failed_polls_ = 0;
  std::map<std::string, record> jobs_; // live jobs by id
  std::vector<std::shared_ptr<async_command>> inflight_;
  std::optional<std::string> listen_url_;
};

} // namespace detail

namespace backend {

/// Policy: job-backed processes are Slurm jobs (see backend/slurm.hpp).
struct slurm {
  static constexpr std::string_view name = "slurm"; ///< the backend's name, as FIBER_BACKEND spells it
  /// Reads the configuration table now. Throws fiber::backend_error for a
  /// malformed slurm.* value (fiber::config_error for an unknown key).
  static std::shared_ptr<launcher> make(asio::any_io_executor ex) {
    return std::make_shared<detail::slurm_launcher>(std::move(ex), detail::slurm_options::from_config());
  }
};

static_assert(policy<slurm>);

} // namespace backend
} // namespace fiber
