// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm/launcher.hpp
/// The Slurm backend's launcher: batch jobs, job arrays and srun steps,
/// submitted and watched without blocking. See backend/slurm.hpp for the behaviour.

#include <fiber/backend/detail/async_command.hpp>
#include <fiber/backend/detail/child_watch.hpp>
#include <fiber/backend/detail/command.hpp>
#include <fiber/backend/detail/environment.hpp>
#include <fiber/backend/detail/job_table.hpp>
#include <fiber/backend/detail/listen_once.hpp>
#include <fiber/backend/detail/net_address.hpp>
#include <fiber/backend/slurm/address.hpp>
#include <fiber/backend/detail/reaper.hpp>
#include <fiber/backend/detail/shell_words.hpp>
#include <fiber/backend/slurm/commands.hpp>
#include <fiber/backend/slurm/options.hpp>
#include <fiber/backend/slurm/status.hpp>
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
#include <deque>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

namespace fiber {
namespace detail {

/// fiber's Slurm launcher (see backend/slurm.hpp). Create with
/// std::make_shared (it hands weak references to its asynchronous work).
class slurm_launcher final : public backend::launcher, public std::enable_shared_from_this<slurm_launcher> {
public:
  slurm_launcher(asio::any_io_executor ex, slurm_options opts)
      : ex_(std::move(ex)), opts_(std::move(opts)), timer_(ex_), jobs_(ex_) {
    if (!opts_.warn) opts_.warn = [](const std::string& m) { detail::log(log_level::warning, m); };
  }

  /// Cancels every job not yet seen ending (one `scancel` for the batch
  /// jobs; steps are cancelled and their srun reaped, at most ~5 s). Exit
  /// handlers of those jobs are not called. Submissions still running are
  /// stopped (a job sbatch created meanwhile is not known, see "Reaper").
  ~slurm_launcher() override {
    timer_.cancel();
    for (auto& c : inflight_) c->abort();
    std::vector<std::string> batch_ids;
    std::vector<child_watch*> sruns;
    for (auto& [key, r] : jobs_) {
      if (r.watch) sruns.push_back(r.watch.get());
      else if (!r.slurm_id.empty()) batch_ids.push_back(r.slurm_id);
    }
    bool cleaned = true;
    try {
      if (!batch_ids.empty()) cleaned = scancel_blocking(batch_ids, 0);
    } catch (const std::exception& e) {
      cleaned = false;
      warn(std::string("slurm: cancelling jobs at shutdown: ") + e.what());
    }
    if (cleaned) reaper_.disarm();
    else reaper_.leave_armed();
    stop_steps(sruns);
  }

  std::string_view name() const noexcept override { return "slurm"; }

  /// Finds the listen address (see "Listen address": may resolve the host
  /// name and run `scontrol show config`, up to ~15 s). Once; any thread.
  void prepare() override { (void)listen_url(); }

  /// "tcp://<address>:0"; see the file comment for how the address is chosen.
  /// Blocks for the lookup when prepare() has not run.
  std::string listen_url() override {
    return listen_.get([this] {
      return fiber::detail::tcp_listen_url(slurm_impl::listen_address(opts_), !config_string("tls_cert").empty());
    });
  }

  /// Start `specs` (see "Launch modes" and "Submission never blocks");
  /// on_exit[i] fires once, on the executor, after this returns. Never
  /// blocks: batch jobs are submitted after it returned; srun steps are
  /// spawned now. Throws std::invalid_argument for mismatched sizes or an
  /// empty argv, fiber::backend_error for launch_mode=srun outside an
  /// allocation or when srun cannot be started.
  std::vector<backend::job> launch(const std::vector<backend::job_spec>& specs,
                                   std::vector<backend::exit_handler> on_exit) override {
    check_handlers("slurm", specs.size(), on_exit.size());
    for (auto& s : specs)
      if (s.argv.empty()) throw std::invalid_argument("slurm: launch: empty argv in spec '" + s.name + "'");
    if (weak_from_this().expired()) throw std::logic_error("slurm: the launcher must be owned by a shared_ptr");
    std::vector<backend::job> jobs(specs.size());
    if (specs.empty()) return jobs;
    if (effective_mode(specs.size()) == slurm_options::mode::srun) {
      launch_steps(specs, on_exit, jobs);
      return jobs;
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto key = "slurm-" + std::to_string(++next_key_);
      jobs_.add(key, std::move(on_exit[i]));
      queued_.push_back({key, specs[i]});
      jobs[i] = backend::job{key, -1, {}};
    }
    if (!std::exchange(flush_posted_, true))
      asio::post(ex_, [self = weak_from_this()] {
        if (auto s = self.lock()) s->submit_queued();
      });
    return jobs;
  }

  /// Stop the job. Batch jobs: 15 -> `scancel` (SIGTERM, SIGKILL after
  /// KillWait), 9 -> `scancel --signal=KILL --full`, other n -> `scancel
  /// --signal=n --full`; one not submitted yet ends at once as
  /// signalled(signal), one being submitted is cancelled once sbatch
  /// answered. srun steps: `scancel` of the step (found by srun's pid
  /// through `scontrol show step`), repeated until srun exits (see
  /// cancel_step). Asynchronous: never blocks the runtime thread; the end is
  /// reported through on_exit as signalled(signal). Unknown or finished jobs
  /// are ignored; a failing scancel is logged, not thrown.
  void cancel(const backend::job& j, int signal) override {
    auto* r = jobs_.find(j.id);
    if (!r) return;
    r->ask(signal);
    if (r->watch) return cancel_step(j.id, signal, 0);
    if (!r->slurm_id.empty()) return async_scancel({r->slurm_id}, signal);
    if (!r->submitting)
      end_job(j.id, {backend::job_exit::kind::signalled, signal, "cancelled before it was submitted"});
  }

  /// The job's Slurm id ("1234", "1234_5", "srun-<pid>"); empty while its
  /// submission runs, and once it ended.
  std::string slurm_id(const backend::job& j) const {
    auto* r = jobs_.find(j.id);
    if (!r) return {};
    return r->watch ? j.id : r->slurm_id;
  }

  /// Why Slurm keeps `j` PENDING (e.g. "Resources", "Priority",
  /// "ReqNodeNotAvail"), as of the last poll; empty when not pending or
  /// unknown.
  std::string pending_reason(const backend::job& j) const {
    auto* r = jobs_.find(j.id);
    return r && r->state == "PENDING" ? r->reason : std::string();
  }

  /// Slurm's state of `j` as of the last poll ("PENDING", "RUNNING", ...;
  /// "" before the first poll, for srun steps, and once ended).
  std::string state(const backend::job& j) const {
    auto* r = jobs_.find(j.id);
    return r ? r->state : std::string();
  }

  /// Node(s) `j` runs on, as of the last poll ("" if unknown).
  std::string node(const backend::job& j) const {
    auto* r = jobs_.find(j.id);
    return r ? r->nodes : std::string();
  }

  /// Number of jobs not yet reported ended.
  std::size_t live_jobs() const noexcept { return jobs_.live(); }

  const slurm_options& options() const noexcept { return opts_; }

  /// Slurm's state of each job as of the last poll; "SUBMITTING" before
  /// sbatch answered, "SUBMITTED" before a poll listed it.
  std::map<std::string, unsigned> job_states() const override {
    return jobs_.states([](const record& r) -> std::string {
      if (!r.state.empty()) return r.state;
      return r.slurm_id.empty() && r.submitting ? "SUBMITTING" : "SUBMITTED";
    });
  }

private:
  struct record : job_record {
    std::string slurm_id;               // batch jobs: "" until sbatch answered
    bool submitting = false;            // its sbatch runs (or waits for a slot)
    std::string state, reason, nodes;   // last poll
    int missing = 0;                    // polls in a row not listing it
    std::shared_ptr<child_watch> watch; // srun steps only
  };

  struct queued_spec {
    std::string key;
    backend::job_spec spec;
  };
  using submission = std::vector<queued_spec>; // one sbatch: a plain job, or an array

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

  /// Report the end of job `key` (posted: a handler may re-enter launch).
  void end_job(const std::string& key, backend::job_exit x) {
    auto* r = jobs_.find(key);
    if (!r) return;
    if (!r->slurm_id.empty()) reaper_.note("-" + r->slurm_id);
    jobs_.finish(key, std::move(x));
  }

  // ---- batch jobs and arrays ----------------------------------------------

  /// Everything launched since the last call, as submissions: specs sharing
  /// argv and resources share an array (array mode, or auto with more than
  /// one spec), else one job each.
  void submit_queued() {
    flush_posted_ = false;
    auto q = std::exchange(queued_, {});
    std::erase_if(q, [&](const queued_spec& s) { return !jobs_.contains(s.key); }); // cancelled meanwhile
    if (q.empty()) return;
    const bool arrays = effective_mode(q.size()) == slurm_options::mode::array;
    std::map<std::tuple<std::vector<std::string>, int, int, int>, std::size_t> index;
    std::vector<submission> groups;
    for (auto& s : q) {
      jobs_.find(s.key)->submitting = true;
      auto& r = s.spec.resources;
      auto [it, fresh] = index.try_emplace({s.spec.argv, r.cpu, r.memory_mb, r.gpu}, groups.size());
      if (!arrays || fresh || groups[it->second].size() == max_array_) { // Slurm's default MaxArraySize is 1001
        it->second = groups.size();
        groups.emplace_back();
      }
      groups[it->second].push_back(std::move(s));
    }
    for (auto& g : groups) {
      std::vector<const backend::job_spec*> members;
      for (auto& m : g) members.push_back(&m.spec);
      if (g.size() > 1 && !slurm_impl::arrayable(members)) {
        for (auto& m : g) waiting_.push_back({std::move(m)});
      } else {
        waiting_.push_back(std::move(g));
      }
    }
    pump();
  }

  /// Start waiting submissions while fewer than max_submitting_ run.
  void pump() {
    while (submitting_ < max_submitting_ && !waiting_.empty()) {
      auto g = std::move(waiting_.front());
      waiting_.pop_front();
      std::erase_if(g, [&](const queued_spec& s) { // cancelled while it waited: ended already
        auto* r = jobs_.find(s.key);
        if (!r) return true;
        if (!r->asked) return false;
        end_job(s.key, {backend::job_exit::kind::signalled, r->asked, "cancelled before it was submitted"});
        return true;
      });
      if (!g.empty()) submit(std::move(g));
    }
  }

  /// Run sbatch for one plain job (one member) or one array.
  void submit(submission g) {
    std::vector<const backend::job_spec*> members;
    for (auto& m : g) members.push_back(&m.spec);
    auto plan = slurm_impl::plan_batch(members);
    spawn_request req;
    req.argv = slurm_impl::sbatch_argv(opts_, plan, members.front()->resources);
    req.env = merged_environment(plan.env);
    std::vector<std::string> keys;
    for (auto& m : g) keys.push_back(m.key);
    std::erase_if(inflight_, [](auto& c) { return c->finished(); });
    try {
      auto script = memory_file(plan.script);
      req.stdin_fd = script.get();
      auto self = weak_from_this();
      inflight_.push_back(async_command::start(
          ex_, req, opts_.command_timeout, [self, keys, name = plan.name, array = plan.array_size](command_result res) {
            if (auto s = self.lock()) s->submitted(keys, name, array, res);
          }));
      ++submitting_;
    } catch (const std::system_error& e) {
      fail_submission(keys, "slurm: cannot run " + req.argv[0] + " to submit '" + plan.name +
                                "': " + e.code().message() +
                                (e.code().value() == ENOENT ? " (is Slurm installed and on PATH?)" : ""));
    }
  }

  void submitted(const std::vector<std::string>& keys, const std::string& name, std::size_t array,
                 const command_result& res) {
    --submitting_;
    std::optional<std::string> id;
    if (res.ok()) id = slurm_impl::parse_job_id(res.out);
    if (!res.ok())
      fail_submission(keys, "slurm: sbatch failed to submit '" + name + "' (" + res.describe() + "): " + res.message());
    else if (!id) fail_submission(keys, "slurm: sbatch printed no job id for '" + name + "': " + res.message());
    else start_reaper();
    for (std::size_t k = 0; id && k < keys.size(); ++k) {
      auto* rp = jobs_.find(keys[k]);
      if (!rp) continue;
      auto& r = *rp;
      r.submitting = false;
      r.slurm_id = array ? *id + "_" + std::to_string(k) : *id;
      reaper_.note(r.slurm_id);
      if (r.asked) async_scancel({r.slurm_id}, r.asked);
    }
    if (id) ensure_polling();
    pump();
  }

  void fail_submission(const std::vector<std::string>& keys, const std::string& why) {
    warn(why);
    for (auto& key : keys) {
      backend::job_exit x{backend::job_exit::kind::lost, 0, why};
      x.start_failed = true;
      end_job(key, std::move(x));
    }
  }

  /// The watchdog that cancels the jobs of a master that died (see "Reaper").
  void start_reaper() {
    if (reaper_.armed() || reaper_tried_) return;
    reaper_tried_ = true;
    if (!reaper_.arm(slurm_impl::reaper_argv(opts_), true))
      warn("slurm: cannot start the reaper (awk): jobs of a master that dies are not cancelled");
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
          auto* r = jobs_.find(id);
          r->on_exit = nullptr;
          r->ask(SIGTERM);
          r->watch->kill(SIGTERM);
        }
        throw backend_error("slurm: cannot run " + req.argv[0] + " for '" + specs[i].name + "': " + e.code().message() +
                            (e.code().value() == ENOENT ? " (is Slurm on PATH?)" : ""));
      }
      std::string id = "srun-" + std::to_string(child.pid);
      auto watch = child_watch::start(ex_, child.pid, [self = weak_from_this(), id](int status) {
        if (auto s = self.lock()) s->step_ended(id, status);
      });
      jobs_.add(id, std::move(on_exit[i])).watch = std::move(watch);
      started.push_back(id);
      jobs[i] = backend::job{id, -1, {}};
    }
  }

  void step_ended(const std::string& id, int status) {
    if (auto* r = jobs_.find(id)) jobs_.finish(id, slurm_impl::srun_exit(status, r->asked), delivery::call);
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
      auto* r = s->jobs_.find(id);
      if (!r || r->watch->done()) return;
      if (attempt >= 25) return r->watch->kill(SIGKILL);
      auto steps = slurm_impl::parse_steps(res.out);
      auto st = steps.find(r->watch->pid());
      if (st != steps.end()) s->async_scancel({st->second}, signal);
      else r->watch->kill(signal == 9 ? SIGTERM : signal);
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

  /// Whether every job was cancelled (or had ended already).
  bool scancel_blocking(const std::vector<std::string>& ids, int signal) {
    spawn_request req;
    req.argv = slurm_impl::scancel_argv(opts_, ids, signal);
    auto res = run_blocking(req, "cancel jobs");
    if (res.ok() || benign_scancel_error(res.message())) return true;
    warn("slurm: scancel " + join(ids, " ") + " (" + res.describe() + "): " + res.message());
    return false;
  }

  static bool benign_scancel_error(const std::string& m) {
    return m.find("already completing or completed") != std::string::npos ||
           m.find("Invalid job id") != std::string::npos;
  }

  void async_scancel(const std::vector<std::string>& ids, int signal) {
    auto self = weak_from_this();
    start_async(slurm_impl::scancel_argv(opts_, ids, signal), [self, ids](command_result res) {
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

  /// Keys of the batch jobs with a Slurm id.
  std::vector<std::string> polled_keys() const {
    return jobs_.ids([](const record& r) { return !r.watch && !r.slurm_id.empty(); });
  }

  void poll() {
    auto keys = polled_keys();
    if (keys.empty()) {
      polling_ = false;
      return;
    }
    std::vector<std::string> ids;
    for (auto& k : keys) ids.push_back(jobs_.find(k)->slurm_id);
    auto self = weak_from_this();
    std::erase_if(inflight_, [](auto& c) { return c->finished(); });
    spawn_request req;
    req.argv = slurm_impl::squeue_argv(opts_, ids);
    try {
      inflight_.push_back(async_command::start(ex_, req, opts_.command_timeout, [self, keys](command_result res) {
        if (auto s = self.lock()) s->on_poll(keys, res);
      }));
    } catch (const std::system_error& e) {
      warn("slurm: cannot run squeue: " + e.code().message());
      schedule_poll();
    }
  }

  // Each end is posted (end_job): a handler that throws (out of
  // io_context::run) must not cost the others their call; a handler may
  // re-enter launch/cancel.
  void on_poll(const std::vector<std::string>& keys, const command_result& res) {
    if (!res.ok()) {
      auto m = res.message();
      if (m.find("Invalid job id") != std::string::npos) { // none of them is known any more
        for (auto& k : keys) end_job(k, {backend::job_exit::kind::lost, 0, "job no longer known to Slurm"});
      } else if (++failed_polls_ == 1 || failed_polls_ % 20 == 0) {
        warn("slurm: squeue failed (" + res.describe() + ", " + std::to_string(failed_polls_) + " in a row): " + m +
             "; jobs are still watched by heartbeats");
      }
    } else {
      failed_polls_ = 0;
      auto q = slurm_impl::parse_queue(res.out);
      for (auto& k : keys) {
        auto* r = jobs_.find(k);
        if (!r) continue; // ended meanwhile (cannot happen for batch jobs, but be safe)
        auto e = q.find(r->slurm_id);
        if (e == q.end()) {
          // Purged (MinJobAge) before we saw it end; allow one odd poll.
          if (++r->missing >= 2) end_job(k, {backend::job_exit::kind::lost, 0, "job no longer known to Slurm"});
          continue;
        }
        r->missing = 0;
        if (slurm_impl::is_terminal(e->second.state)) {
          end_job(k, slurm_impl::to_exit(e->second, r->asked));
        } else {
          r->state = e->second.state;
          r->reason = e->second.reason;
          r->nodes = e->second.nodes;
        }
      }
    }
    if (!polled_keys().empty()) schedule_poll();
    else polling_ = false;
  }

  static constexpr std::size_t max_array_ = 1000;
  static constexpr int max_submitting_ = 8; // sbatch commands at once

  asio::any_io_executor ex_;
  slurm_options opts_;
  asio::steady_timer timer_;
  bool polling_ = false;
  int failed_polls_ = 0;
  job_table<record> jobs_; // live jobs by key ("slurm-<n>", "srun-<pid>")
  std::uint64_t next_key_ = 0;
  std::vector<queued_spec> queued_; // launched, submitted at the next turn
  bool flush_posted_ = false;
  std::deque<submission> waiting_; // grouped, waiting for a free sbatch slot
  int submitting_ = 0;
  std::vector<std::shared_ptr<async_command>> inflight_;
  reaper reaper_;
  bool reaper_tried_ = false;
  listen_once listen_;
};

} // namespace detail
} // namespace fiber
