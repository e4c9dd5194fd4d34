// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/local/launcher.hpp
/// The local backend's launcher: jobs are child processes started with
/// posix_spawn and watched through pidfds. See backend/local.hpp for the behaviour.

#include <fiber/detail/host_name.hpp>
#include <fiber/backend/detail/child_watch.hpp>
#include <fiber/backend/detail/environment.hpp>
#include <fiber/backend/detail/job_table.hpp>
#include <fiber/backend/detail/spawn.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>

#include <chrono>
#include <memory>
#include <signal.h>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace fiber {
namespace detail {

/// Starts jobs as child processes. Runtime thread only (as every launcher).
class local_launcher final : public backend::launcher, public std::enable_shared_from_this<local_launcher> {
public:
  explicit local_launcher(asio::any_io_executor ex) : ex_(ex), jobs_(std::move(ex)) {}

  /// Jobs still running when the runtime goes away must not outlive it:
  /// each one's process group is killed and the job reaped (not reaped
  /// before: the group id is still theirs).
  ~local_launcher() override {
    for (auto& [id, r] : jobs_) {
      ::kill(-r.watch->pid(), SIGKILL);
      r.watch->detach_and_reap(std::chrono::milliseconds(0));
    }
  }

  std::string_view name() const noexcept override { return "local"; }
  backend::launcher_traits traits() const noexcept override { return {true, true, true, 1, true}; }
  std::string listen_url() override { return "ipc://"; } // the runtime picks the path in its 0700 run dir

  /// Throws backend_error when posix_spawn fails (jobs of earlier specs of
  /// the same call keep running and report their ends), std::invalid_argument
  /// for mismatched sizes.
  std::vector<backend::job> launch(const std::vector<backend::job_spec>& specs,
                                   std::vector<backend::exit_handler> on_exit) override {
    check_handlers("local", specs.size(), on_exit.size());
    std::vector<backend::job> jobs;
    jobs.reserve(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) jobs.push_back(launch_one(specs[i], std::move(on_exit[i])));
    return jobs;
  }

  /// Sends `signal` to the job's whole process group; ignored once it ended.
  void cancel(const backend::job& j, int signal) override {
    auto* r = jobs_.find(j.id);
    if (j.pid <= 0 || !r || r->watch->done()) return;
    ::kill(-pid_t(j.pid), signal);
  }

private:
  backend::job launch_one(const backend::job_spec& spec, backend::exit_handler on_exit) {
    spawn_request r;
    r.argv = spec.argv;
    if (r.argv.empty()) r.argv.push_back(self_exe());
    r.env = merged_environment(spec.env);
    r.out = r.err = stdio::inherit;
    r.out_file = spec.stdout_path;
    r.err_file = spec.stderr_path;
    r.new_process_group = true;
    if (spec.link_fd) r.keep_fds[0] = *spec.link_fd;
    if (spec.reply_fd) r.keep_fds[1] = *spec.reply_fd;
    spawned child;
    try {
      child = spawn(r);
    } catch (const std::system_error& e) {
      throw backend_error("local backend: posix_spawn " + r.argv[0] + " failed: " + e.code().message());
    }
    const pid_t pid = child.pid;
    // Stragglers in the job's process group die with it (killed before the
    // job is reaped, so that the group id cannot be another's yet).
    auto id = std::to_string(pid);
    auto watch = child_watch::start(
        ex_, pid,
        [self = weak_from_this(), id](int status) {
          if (auto s = self.lock()) s->ended(id, status);
        },
        true);
    jobs_.add(id, std::move(on_exit)).watch = std::move(watch);
    return backend::job{id, pid, fiber::detail::host_name()};
  }

  void ended(const std::string& id, int status) {
    backend::job_exit ex;
    if (status < 0) {
      ex.how = backend::job_exit::kind::lost;
      ex.reason = "its exit status was reaped elsewhere";
    } else if (WIFSIGNALED(status)) {
      ex.how = backend::job_exit::kind::signalled;
      ex.code = WTERMSIG(status);
    } else {
      ex.code = WEXITSTATUS(status);
    }
    jobs_.finish(id, std::move(ex), delivery::call);
  }

  struct record : job_record {
    std::shared_ptr<child_watch> watch;
  };

public:
  std::map<std::string, unsigned> job_states() const override {
    return jobs_.states([](const record&) { return "running"; });
  }

private:

  asio::any_io_executor ex_;
  job_table<record> jobs_; // by pid
};

} // namespace detail
} // namespace fiber
