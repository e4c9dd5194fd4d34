#pragma once
/// @file backend/local.hpp
/// The local backend: each job-backed process is this same executable
/// (/proc/self/exe) started with posix_spawn in a process group of its own,
/// so a signal reaches everything it started. Exit is observed through a
/// pidfd (Linux >= 5.3) watched by Asio — no SIGCHLD handler is installed and
/// no polling loop runs; where pidfd_open is missing, a 20 ms timer polls
/// waitpid(WNOHANG) instead. Workers dial back over ipc:// in a 0700 run
/// directory, so other users cannot reach the master.

#include <fiber/backend/launcher.hpp>
#include <fiber/detail/sched.hpp>
#include <fiber/log.hpp>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

extern char** environ;

namespace fiber {
namespace detail {

inline std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw backend_error("local backend: cannot resolve /proc/self/exe: " + std::string(std::strerror(errno)));
  return std::string(buf, std::size_t(n));
}

class local_launcher final : public backend::launcher, public std::enable_shared_from_this<local_launcher> {
public:
  explicit local_launcher(asio::any_io_executor ex) : ex_(std::move(ex)) {}
  ~local_launcher() override {
    // Jobs still running when the runtime goes away must not outlive it.
    for (auto& [pid, w] : live_) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  std::string_view name() const noexcept override { return "local"; }
  backend::launcher_traits traits() const noexcept override { return {true, true, true}; }
  std::string listen_url() override { return "ipc://"; } // the runtime picks the path in its 0700 run dir

  std::vector<backend::job> launch(const std::vector<backend::job_spec>& specs,
                                   std::vector<backend::exit_handler> on_exit) override {
    std::vector<backend::job> jobs;
    jobs.reserve(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) jobs.push_back(launch_one(specs[i], std::move(on_exit[i])));
    return jobs;
  }

  void cancel(const backend::job& j, int signal) override {
    if (j.pid <= 0 || !live_.count(pid_t(j.pid))) return;
    live_[pid_t(j.pid)]->requested_signal = signal;
    ::kill(-pid_t(j.pid), signal); // the whole process group
  }

private:
  struct watch {
    pid_t pid;
    backend::exit_handler on_exit;
    std::unique_ptr<asio::posix::stream_descriptor> pidfd;
    std::unique_ptr<asio::steady_timer> timer;
    int requested_signal = 0;
  };

  backend::job launch_one(const backend::job_spec& spec, backend::exit_handler on_exit) {
    std::vector<std::string> env_store;
    std::vector<std::string_view> overridden;
    for (auto& [k, v] : spec.env) {
      env_store.push_back(k + "=" + v);
      overridden.push_back(k);
    }
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      auto key = kv.substr(0, kv.find('='));
      bool skip = false;
      for (auto o : overridden) skip |= (o == key);
      if (!skip) env_store.emplace_back(kv);
    }
    std::vector<char*> envp, argv;
    for (auto& s : env_store) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = spec.argv;
    if (args.empty()) args.push_back(self_exe());
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (spec.stdout_path)
      posix_spawn_file_actions_addopen(&fa, 1, spec.stdout_path->c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (spec.stderr_path)
      posix_spawn_file_actions_addopen(&fa, 2, spec.stderr_path->c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    short flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    detail::set_spawn_policy(attr, flags);
    posix_spawnattr_setflags(&attr, flags);
    pid_t pid = 0;
    int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
      throw backend_error("local backend: posix_spawn " + args[0] + " failed: " + std::strerror(rc));

    auto w = std::make_unique<watch>();
    w->pid = pid;
    w->on_exit = std::move(on_exit);
    auto* raw = w.get();
    live_.emplace(pid, std::move(w));
    arm(raw);
    char host[256] = "localhost";
    ::gethostname(host, sizeof host);
    return backend::job{std::to_string(pid), pid, host};
  }

  void arm(watch* w) {
    int fd = int(::syscall(SYS_pidfd_open, w->pid, 0));
    std::weak_ptr<local_launcher> self = weak_from_this();
    pid_t pid = w->pid;
    if (fd >= 0) {
      w->pidfd = std::make_unique<asio::posix::stream_descriptor>(ex_, fd);
      w->pidfd->async_wait(asio::posix::stream_descriptor::wait_read, [self, pid](std::error_code ec) {
        if (auto s = self.lock(); s && !ec) s->reap(pid, true);
      });
    } else {
      poll(w);
    }
  }

  void poll(watch* w) {
    if (!w->timer) w->timer = std::make_unique<asio::steady_timer>(ex_);
    w->timer->expires_after(std::chrono::milliseconds(20));
    std::weak_ptr<local_launcher> self = weak_from_this();
    pid_t pid = w->pid;
    w->timer->async_wait([self, pid](std::error_code ec) {
      if (auto s = self.lock(); s && !ec) s->reap(pid, false);
    });
  }

  void reap(pid_t pid, bool blocking) {
    auto it = live_.find(pid);
    if (it == live_.end()) return;
    int status = 0;
    pid_t r = ::waitpid(pid, &status, blocking ? 0 : WNOHANG);
    if (r == 0) return poll(it->second.get());
    backend::job_exit ex;
    if (r < 0) {
      ex.how = backend::job_exit::kind::lost;
      ex.reason = std::strerror(errno);
    } else if (WIFSIGNALED(status)) {
      ex.how = backend::job_exit::kind::signalled;
      ex.code = WTERMSIG(status);
    } else {
      ex.code = WEXITSTATUS(status);
    }
    // Stragglers in the job's process group die with it.
    ::kill(-pid, SIGKILL);
    auto w = std::move(it->second);
    live_.erase(it);
    if (w->on_exit) w->on_exit(ex);
  }

  asio::any_io_executor ex_;
  std::unordered_map<pid_t, std::unique_ptr<watch>> live_;
};

} // namespace detail

namespace backend {
/// Policy: job-backed processes are child processes of the master.
struct local {
  static constexpr std::string_view name = "local";
  static std::shared_ptr<launcher> make(asio::any_io_executor ex) {
    return std::make_shared<detail::local_launcher>(std::move(ex));
  }
};
} // namespace backend
} // namespace fiber
