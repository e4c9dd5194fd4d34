#pragma once
/// @file backend/slurm.hpp
/// The Slurm backend: each job-backed process is one Slurm batch job, one task
/// of a job array, or one job step of the allocation the master runs in.
///
/// ## Why the command-line tools, not libslurm
/// fiber runs `sbatch`, `srun`, `squeue`, `scontrol` and `scancel` with
/// posix_spawn (no shell: arguments are a vector, so no quoting bugs; a
/// clean signal mask; output captured through pipes). libslurm
/// (`libslurm-dev`) has no stable API or ABI: `slurm_submit_batch_job` and
/// the job_desc/job_info structs change between major releases, and
/// `slurm.h` must match the controller's version, so a binary linked against
/// one release breaks on the next. The CLI is the interface Slurm keeps
/// stable, it is what every user's cluster exposes (site wrappers, lua
/// job_submit plugins, `SLURM_CONF`, configless setups all apply), it adds no
/// build dependency to a header-only library, and its cost (~10 ms per
/// call) is nothing beside Slurm's ~1 s scheduling pass. Needs Slurm >= 20.11
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
/// Measured on the rig (Slurm 22.05, batch_sched_delay=0, 2 real cores),
/// bench/bench_slurm_startup.cpp, 8 one-CPU jobs, submission -> all 8
/// processes started, median of 9 [min..max]: srun steps 0.19 s
/// [0.15..0.26]; per-job sbatch 0.82 s [0.27..0.86]; array 0.82 s
/// [0.77..0.88] (1 node and 3 netns nodes alike). Batch jobs and arrays
/// both start on the controller's next scheduling pass (~1 s period), so an
/// array only saves submission calls (1 instead of n, ~10 ms each) here;
/// steps skip the scheduler and are ~4x faster.
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
/// `listen_url()` is `tcp://<addr>:0`, addr = (1) the `listen_address` key;
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

#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/sched.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace fiber {
namespace detail {
namespace slurm_impl {

// ---------------------------------------------------------------------------
// Small utilities (all pure; unit-tested without a cluster)
// ---------------------------------------------------------------------------

/// Owning file descriptor.
class unique_fd {
public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  explicit operator bool() const noexcept { return fd_ >= 0; }

private:
  int fd_ = -1;
};

/// Quote `s` for POSIX sh: 'it'\''s'.
inline std::string sh_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  out += '\'';
  return out;
}

/// Split `s` the way sh splits words: blanks separate; '...' is literal;
/// "..." allows \" \\ \$ \` escapes; a backslash outside quotes escapes the
/// next character. No expansion of any kind. Throws fiber::backend_error on
/// an unterminated quote.
inline std::vector<std::string> shell_split(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(std::exchange(cur, {}));
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      auto end = s.find('\'', i + 1);
      if (end == std::string_view::npos) throw backend_error("slurm: unterminated ' in slurm.extra_args");
      cur.append(s.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != '"'; ++j) {
        if (s[j] == '\\' && j + 1 < s.size() && std::string_view("\"\\$`").find(s[j + 1]) != std::string_view::npos)
          ++j;
        cur += s[j];
      }
      if (j >= s.size()) throw backend_error("slurm: unterminated \" in slurm.extra_args");
      i = j;
    } else if (c == '\\' && i + 1 < s.size()) {
      cur += s[++i];
    } else {
      cur += c;
    }
  }
  if (in_word) out.push_back(std::move(cur));
  return out;
}

/// A name sh can export: [A-Za-z_][A-Za-z0-9_]*.
inline bool is_shell_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

inline std::string trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

inline std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

/// The current environment with `overrides` applied ("K=V" strings).
inline std::vector<std::string> merged_environment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  std::set<std::string_view> replaced;
  for (auto& [k, v] : overrides) replaced.insert(k);
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!replaced.count(kv.substr(0, kv.find('=')))) out.emplace_back(kv);
  }
  for (auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

enum class stdio { null, pipe, inherit };

/// What to run. `argv[0]` is looked up on PATH (posix_spawnp).
struct spawn_request {
  std::vector<std::string> argv;
  std::optional<std::vector<std::string>> env; ///< full "K=V" environment; nullopt: inherit
  int stdin_fd = -1;                           ///< dup'ed to the child's stdin; -1: /dev/null
  stdio out = stdio::pipe, err = stdio::pipe;
  bool new_process_group = false;
};

struct spawned {
  pid_t pid = -1;
  unique_fd out, err; ///< read ends when stdio::pipe
};

/// Start a child. The child gets an empty signal mask and default
/// dispositions (the runtime may block or ignore signals in its threads).
/// Throws std::system_error (errno of the failed exec, e.g. ENOENT).
inline spawned spawn(const spawn_request& r) {
  if (r.argv.empty()) throw std::invalid_argument("slurm: empty argv");
  std::vector<char*> argv;
  for (auto& a : r.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (r.env) {
    for (auto& e : *r.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  struct cleanup {
    posix_spawn_file_actions_t* fa;
    posix_spawnattr_t* at;
    ~cleanup() {
      posix_spawn_file_actions_destroy(fa);
      posix_spawnattr_destroy(at);
    }
  } cleanup_{&fa, &at};

  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (r.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&at, 0);
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  detail::set_spawn_policy(at, flags);
  posix_spawnattr_setflags(&at, flags);

  if (r.stdin_fd >= 0) posix_spawn_file_actions_adddup2(&fa, r.stdin_fd, 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);

  spawned s;
  unique_fd child_ends[2];
  auto wire = [&](stdio mode, int target, unique_fd& parent_end, unique_fd& child_end) {
    if (mode == stdio::null) {
      posix_spawn_file_actions_addopen(&fa, target, "/dev/null", O_WRONLY, 0);
    } else if (mode == stdio::pipe) {
      int p[2];
      // O_CLOEXEC: no other child (spawned by any thread) inherits our ends,
      // which would keep the pipe open and hide EOF.
      if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
      parent_end = unique_fd(p[0]);
      child_end = unique_fd(p[1]);
      posix_spawn_file_actions_adddup2(&fa, p[1], target); // dup2 clears CLOEXEC on the target
    }
  };
  wire(r.out, 1, s.out, child_ends[0]);
  wire(r.err, 2, s.err, child_ends[1]);

  int rc = ::posix_spawnp(&s.pid, argv[0], &fa, &at, argv.data(), r.env ? envp.data() : environ);
  if (rc != 0) throw std::system_error(rc, std::generic_category(), r.argv[0]);
  return s;
}

/// Outcome of a finished command.
struct command_result {
  int status = -1;          ///< waitpid status; -1 when unknown
  std::string out, err;     ///< captured stdout / stderr
  bool timed_out = false;   ///< killed after the deadline
  bool ok() const noexcept { return !timed_out && status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  /// "exit 1", "signal 9", "timed out"
  std::string describe() const {
    if (timed_out) return "timed out";
    if (status < 0) return "status unknown";
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
  /// stderr (else stdout) trimmed: Slurm's own words.
  std::string message() const {
    auto m = trim(err);
    return m.empty() ? trim(out) : m;
  }
};

/// An anonymous, unlinked file holding `data`, positioned at 0 (a child's
/// stdin: no deadlock on large input, no SIGPIPE, no path on disk).
inline unique_fd memory_file(std::string_view data) {
  int fd = ::memfd_create("fiber-slurm", MFD_CLOEXEC);
  if (fd < 0) {
    std::FILE* f = std::tmpfile(); // old kernels: an unlinked file in /tmp
    if (!f) throw std::system_error(errno, std::generic_category(), "memfd_create");
    fd = ::fcntl(::fileno(f), F_DUPFD_CLOEXEC, 0);
    std::fclose(f);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "tmpfile");
  }
  unique_fd u(fd);
  for (std::size_t off = 0; off < data.size();) {
    auto n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "write");
    off += std::size_t(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return u;
}

/// Run a command to completion, blocking the caller at most about `timeout`
/// (then the child is SIGKILLed). For sbatch/scancel/scontrol: ~10 ms each
/// when the controller answers. Throws std::system_error if it cannot start.
inline command_result run(const spawn_request& r, std::chrono::milliseconds timeout) {
  auto c = spawn(r);
  command_result res;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  while (c.out || c.err) {
    pollfd fds[2];
    unique_fd* owners[2];
    std::string* bufs[2];
    nfds_t n = 0;
    for (auto [fd, buf] : {std::pair{&c.out, &res.out}, std::pair{&c.err, &res.err}}) {
      if (!*fd) continue;
      fds[n] = pollfd{fd->get(), POLLIN, 0};
      owners[n] = fd;
      bufs[n++] = buf;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (killed) break; // a grandchild still holds the pipe: stop reading
      ::kill(c.pid, SIGKILL);
      killed = res.timed_out = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      continue;
    }
    int pr = ::poll(fds, n, int(std::min<long long>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) break;
    for (nfds_t i = 0; pr > 0 && i < n; ++i) {
      if (!fds[i].revents) continue;
      char buf[4096];
      auto got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) bufs[i]->append(buf, std::size_t(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN)) owners[i]->reset();
    }
  }
  c.out.reset();
  c.err.reset();
  int st = 0;
  pid_t w;
  do w = ::waitpid(c.pid, &st, 0);
  while (w < 0 && errno == EINTR);
  res.status = w == c.pid ? st : -1;
  return res;
}

/// Watches one child process and calls `on_exit(status)` once, on the
/// executor, when it has been reaped (status -1 when someone else reaped it).
/// Uses a pidfd (Linux >= 5.3) plus a slow backup timer (an exit that
/// happened before the pidfd was registered is never missed); where pidfd_open
/// is missing, a timer polls waitpid(WNOHANG) (1 ms doubling to 100 ms).
class child_watch : public std::enable_shared_from_this<child_watch> {
public:
  using handler = std::function<void(int status)>;

  static std::shared_ptr<child_watch> start(const asio::any_io_executor& ex, pid_t pid, handler h) {
    auto w = std::shared_ptr<child_watch>(new child_watch(ex, pid, std::move(h)));
    w->arm();
    return w;
  }

  pid_t pid() const noexcept { return pid_; }
  bool done() const noexcept { return reaped_; }

  /// Signal the child if it has not been reaped (so the pid is still ours).
  void kill(int sig) noexcept {
    if (!reaped_) ::kill(pid_, sig);
  }

  /// Stop watching without calling the handler; if the child is still
  /// running, wait up to `grace` for it, then SIGKILL and reap it (bounded:
  /// used by destructors so no zombie or orphan is left).
  void detach_and_reap(std::chrono::milliseconds grace) noexcept {
    handler_ = nullptr;
    close();
    if (reaped_) return;
    auto deadline = std::chrono::steady_clock::now() + grace;
    int st = 0;
    for (auto step = std::chrono::milliseconds(1);; step = std::min(step * 2, std::chrono::milliseconds(50))) {
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
        break;
      }
      std::this_thread::sleep_for(step);
    }
    reaped_ = true;
  }

  /// Stop watching (the handler is never called) and reap the child if it
  /// has exited; true when it is gone. Never blocks.
  bool reap_silently() noexcept {
    handler_ = nullptr;
    close();
    if (reaped_) return true;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) reaped_ = true;
    return reaped_;
  }

  /// Try to reap now; true (and the handler called) when the child is gone.
  bool check() {
    if (reaped_) return true;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) return false;
    reaped_ = true;
    close();
    if (auto h = std::exchange(handler_, nullptr)) h(r == pid_ ? st : -1);
    return true;
  }

private:
  child_watch(const asio::any_io_executor& ex, pid_t pid, handler h)
      : pid_(pid), handler_(std::move(h)), timer_(ex), ex_(ex) {}

  void arm() {
#ifdef SYS_pidfd_open
    int fd = int(::syscall(SYS_pidfd_open, pid_, 0));
    if (fd >= 0) {
      pidfd_.emplace(ex_, fd);
      pidfd_->async_wait(asio::posix::stream_descriptor::wait_read,
                         [self = shared_from_this()](std::error_code ec) {
                           if (!ec) self->check();
                         });
      backup_cap_ = std::chrono::milliseconds(1000);
    }
#endif
    poll_later();
  }

  void poll_later() {
    timer_.expires_after(step_);
    step_ = std::min(step_ * 2, backup_cap_);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->reaped_ || !self->handler_) return;
      if (!self->check()) self->poll_later();
    });
  }

  void close() noexcept {
    std::error_code ignored;
    timer_.cancel();
    if (pidfd_) pidfd_->close(ignored);
  }

  pid_t pid_;
  bool reaped_ = false;
  handler handler_;
  asio::steady_timer timer_;
  asio::any_io_executor ex_;
  std::optional<asio::posix::stream_descriptor> pidfd_;
  std::chrono::milliseconds step_{1};
  std::chrono::milliseconds backup_cap_{100};
};

/// Runs a command without blocking the executor: its stdout/stderr are read
/// through Asio, its exit is observed by a child_watch, and `done` runs once
/// on the executor. After `timeout` the child is SIGKILLed (squeue against a
/// dead controller retries for ~18 s).
class async_command : public std::enable_shared_from_this<async_command> {
public:
  using handler = std::function<void(command_result)>;

  /// Throws std::system_error when the command cannot be started.
  static std::shared_ptr<async_command> start(const asio::any_io_executor& ex, const spawn_request& r,
                                              std::chrono::milliseconds timeout, handler done) {
    auto c = spawn(r);
    auto self = std::shared_ptr<async_command>(new async_command(ex, std::move(done)));
    self->pid_ = c.pid;
    if (c.out) self->out_.emplace(ex, c.out.release());
    if (c.err) self->err_.emplace(ex, c.err.release());
    self->open_ = int(bool(self->out_)) + int(bool(self->err_));
    self->watch_ = child_watch::start(ex, c.pid, [w = std::weak_ptr<async_command>(self)](int st) {
      if (auto s = w.lock()) {
        s->res_.status = st;
        s->exited_ = true;
        s->maybe_finish();
      }
    });
    if (self->out_) self->read(*self->out_, self->res_.out);
    if (self->err_) self->read(*self->err_, self->res_.err);
    self->deadline_.expires_after(timeout);
    self->deadline_.async_wait([w = std::weak_ptr<async_command>(self)](std::error_code ec) {
      if (auto s = w.lock(); s && !ec && !s->finished_) {
        s->res_.timed_out = true;
        s->watch_->kill(SIGKILL);
      }
    });
    return self;
  }

  /// Kill and reap the child now; `done` is never called. Noexcept, bounded.
  void abort() noexcept {
    done_ = nullptr;
    finished_ = true;
    std::error_code ignored;
    deadline_.cancel();
    if (out_) out_->close(ignored);
    if (err_) err_->close(ignored);
    if (watch_) {
      watch_->kill(SIGKILL);
      watch_->detach_and_reap(std::chrono::milliseconds(100));
    }
  }

  bool finished() const noexcept { return finished_; }

private:
  async_command(const asio::any_io_executor& ex, handler done) : deadline_(ex), done_(std::move(done)) {}

  void read(asio::posix::stream_descriptor& d, std::string& buf) {
    d.async_read_some(asio::buffer(chunk_for(&d)),
                      [self = shared_from_this(), &d, &buf](std::error_code ec, std::size_t n) {
                        if (self->finished_) return;
                        buf.append(self->chunk_for(&d).data(), n);
                        if (ec) {
                          std::error_code ignored;
                          d.close(ignored);
                          --self->open_;
                          return self->maybe_finish();
                        }
                        self->read(d, buf);
                      });
  }

  std::array<char, 4096>& chunk_for(const asio::posix::stream_descriptor* d) {
    return out_ && d == &*out_ ? out_chunk_ : err_chunk_;
  }

  void maybe_finish() {
    if (finished_ || open_ > 0 || !exited_) return;
    finished_ = true;
    deadline_.cancel();
    if (auto h = std::exchange(done_, nullptr)) h(std::move(res_));
  }

  pid_t pid_ = -1;
  std::optional<asio::posix::stream_descriptor> out_, err_;
  std::array<char, 4096> out_chunk_{}, err_chunk_{};
  int open_ = 0;
  bool exited_ = false, finished_ = false;
  asio::steady_timer deadline_;
  std::shared_ptr<child_watch> watch_;
  command_result res_;
  handler done_;
};

// ---------------------------------------------------------------------------
// Command construction (pure)
// ---------------------------------------------------------------------------

/// One sbatch submission: the script fed on stdin, the variables added to
/// sbatch's environment, and the output paths.
struct batch_plan {
  std::string name;                                         ///< --job-name
  std::string script;                                       ///< #!/bin/sh ... exec argv
  std::vector<std::pair<std::string, std::string>> env;     ///< added to sbatch's environment
  std::string output = "/dev/null", error = "/dev/null";    ///< --output / --error
  std::size_t array_size = 0;                               ///< 0: plain job; n: --array=0-(n-1)
};

/// The longest common prefix of the specs' names without trailing
/// separators ("pool-1-w0","pool-1-w1" -> "pool-1"); "fiber" if empty.
inline std::string common_name(const std::vector<const backend::job_spec*>& specs) {
  std::string p = specs.front()->name;
  for (auto* s : specs) {
    std::size_t i = 0;
    while (i < p.size() && i < s->name.size() && p[i] == s->name[i]) ++i;
    p.resize(i);
  }
  if (specs.size() > 1) {
    while (!p.empty() && std::string_view("-_.:/ ").find(p.back()) == std::string_view::npos) p.pop_back();
    while (!p.empty() && std::string_view("-_.:/ ").find(p.back()) != std::string_view::npos) p.pop_back();
    if (p.empty()) p = specs.front()->name;
  }
  return p.empty() ? "fiber" : p;
}

inline std::string exec_line(const std::vector<std::string>& argv) {
  std::string s = "exec";
  for (auto& a : argv) s += " " + sh_quote(a);
  return s + "\n";
}

/// Plan the submission of `specs` (all with the same argv): one plain job
/// when there is one spec, else one array. Environment values never enter
/// the script (see the file comment); paths and argv do (they are not secret).
inline batch_plan plan_batch(const std::vector<const backend::job_spec*>& specs) {
  batch_plan p;
  p.name = common_name(specs);
  const auto& argv = specs.front()->argv;
  std::string sh = "#!/bin/sh\n# fiber (slurm backend): one worker";
  if (specs.size() == 1) {
    const auto& s = *specs.front();
    p.env = s.env;
    if (s.stdout_path) p.output = *s.stdout_path;
    if (s.stderr_path) p.error = *s.stderr_path;
    p.script = sh + "\n" + exec_line(argv);
    return p;
  }
  p.array_size = specs.size();

  // Variables equal in every spec are exported as they are.
  std::map<std::string, std::vector<const std::string*>> by_key; // key -> value per spec (nullptr: absent)
  for (std::size_t i = 0; i < specs.size(); ++i)
    for (auto& [k, v] : specs[i]->env) {
      auto& vals = by_key[k];
      vals.resize(specs.size(), nullptr);
      vals[i] = &v;
    }
  std::vector<std::string> varying;
  for (auto& entry : by_key) {
    auto& vals = entry.second;
    vals.resize(specs.size(), nullptr);
    const std::string* first = vals[0];
    bool same = std::all_of(vals.begin(), vals.end(), [first](const std::string* v) { return v && first && *v == *first; });
    if (same) p.env.emplace_back(entry.first, *first);
    else varying.push_back(entry.first);
  }
  auto path_of = [](const std::optional<std::string>& o) { return o.value_or("/dev/null"); };
  bool same_out = true, same_err = true;
  for (auto* s : specs) {
    same_out &= path_of(s->stdout_path) == path_of(specs.front()->stdout_path);
    same_err &= path_of(s->stderr_path) == path_of(specs.front()->stderr_path);
  }
  if (same_out) p.output = path_of(specs.front()->stdout_path);
  if (same_err) p.error = path_of(specs.front()->stderr_path);

  sh += " per array task; task i takes spec i's variables from __FIBER_SLURM_<i>_<k>\n";
  sh += "case \"${SLURM_ARRAY_TASK_ID:-}\" in\n";
  std::string unset_line = "unset";
  for (std::size_t i = 0; i < specs.size(); ++i) {
    sh += std::to_string(i) + ")";
    for (std::size_t k = 0; k < varying.size(); ++k) {
      const std::string* v = by_key[varying[k]][i];
      const std::string& key = varying[k];
      if (v) {
        std::string carrier = "__FIBER_SLURM_" + std::to_string(i) + "_" + std::to_string(k);
        p.env.emplace_back(carrier, *v);
        unset_line += " " + carrier;
        sh += " " + key + "=\"$" + carrier + "\"; export " + key + ";";
      } else {
        sh += " unset " + key + ";";
      }
    }
    if (!same_out) sh += " exec >" + sh_quote(path_of(specs[i]->stdout_path)) + ";";
    if (!same_err) sh += " exec 2>" + sh_quote(path_of(specs[i]->stderr_path)) + ";";
    sh += " ;;\n";
  }
  sh += "*) echo \"fiber: unexpected SLURM_ARRAY_TASK_ID='${SLURM_ARRAY_TASK_ID:-}'\" >&2; exit 70 ;;\nesac\n";
  if (unset_line != "unset") sh += unset_line + "\n";
  p.script = sh + exec_line(argv);
  return p;
}

/// Whether specs of one group can share an array (their differing variables
/// must be exportable by sh).
inline bool arrayable(const std::vector<const backend::job_spec*>& specs) {
  for (auto* s : specs)
    for (auto& [k, v] : s->env)
      if (!is_shell_identifier(k)) return false;
  return true;
}

} // namespace slurm_impl

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/// Everything the Slurm launcher is configured with. from_config() reads the
/// configuration table; tests and code may build one directly.
struct slurm_options {
  enum class mode { automatic, sbatch, array, srun };

  std::optional<std::string> partition;   ///< --partition (slurm.partition)
  std::optional<std::string> account;     ///< --account (slurm.account)
  std::optional<std::string> time_limit;  ///< --time (slurm.time_limit)
  std::vector<std::string> extra_args;    ///< extra sbatch arguments (slurm.extra_args, shell-split)
  mode launch_mode = mode::automatic;     ///< slurm.launch_mode
  std::chrono::milliseconds poll_interval{500};     ///< slurm.poll_interval_ms
  std::optional<std::string> listen_address;        ///< listen_address
  /// The allocation the master runs in (SLURM_JOB_ID); srun steps go there.
  std::optional<std::string> allocation;
  /// The master itself runs as a job step (SLURM_STEP_ID numeric, e.g. under
  /// `srun ./app`): that step holds the allocation's CPUs, so worker steps
  /// need `--overlap` (with `--exact` alone they would wait forever).
  bool overlap = false;
  /// Directory holding sbatch, squeue, ...; empty: PATH.
  std::string bin_dir;
  /// Bound on one blocking Slurm command (sbatch, scancel, scontrol).
  std::chrono::milliseconds command_timeout{60000};
  /// Warnings (a failed poll, a failed scancel). Default: fiber's log.
  std::function<void(const std::string&)> warn;

  /// Read the configuration table (code > FIBER_* environment > fiber.toml).
  /// Throws fiber::backend_error for a malformed value.
  static slurm_options from_config() {
    slurm_options o;
    auto get = [](std::string_view k) -> std::optional<std::string> {
      auto v = config_get(k);
      if (v && v->empty()) return std::nullopt;
      return v;
    };
    o.partition = get("slurm.partition");
    o.account = get("slurm.account");
    o.time_limit = get("slurm.time_limit");
    if (auto x = get("slurm.extra_args")) o.extra_args = slurm_impl::shell_split(*x);
    o.launch_mode = parse_mode(get("slurm.launch_mode").value_or("auto"));
    if (auto ms = get("slurm.poll_interval_ms")) {
      char* end = nullptr;
      long v = std::strtol(ms->c_str(), &end, 10);
      if (*end || v < 10) throw backend_error("slurm: slurm.poll_interval_ms must be an integer >= 10, got '" + *ms + "'");
      o.poll_interval = std::chrono::milliseconds(v);
    }
    o.listen_address = get("listen_address");
    if (const char* j = std::getenv("SLURM_JOB_ID"); j && *j) o.allocation = j;
    if (const char* st = std::getenv("SLURM_STEP_ID"); st && *st)
      o.overlap = std::all_of(st, st + std::strlen(st), [](char c) { return c >= '0' && c <= '9'; });
    return o;
  }

  static mode parse_mode(std::string_view s) {
    if (s == "auto") return mode::automatic;
    if (s == "sbatch") return mode::sbatch;
    if (s == "array") return mode::array;
    if (s == "srun") return mode::srun;
    throw backend_error("slurm: slurm.launch_mode must be auto|sbatch|array|srun, got '" + std::string(s) + "'");
  }

  /// Path of Slurm tool `tool`.
  std::string bin(std::string_view tool) const {
    return bin_dir.empty() ? std::string(tool) : bin_dir + "/" + std::string(tool);
  }
};

namespace slurm_impl {

inline void add_resource_args(std::vector<std::string>& a, const fiber::resources& r) {
  if (r.cpu > 0) a.push_back("--cpus-per-task=" + std::to_string(r.cpu));
  if (r.memory_mb > 0) a.push_back("--mem=" + std::to_string(r.memory_mb) + "M");
  if (r.gpu > 0) a.push_back("--gres=gpu:" + std::to_string(r.gpu));
}

/// sbatch's argv for `plan` (the script comes on stdin). User extra args go
/// after fiber's defaults (so they can override them) and before the
/// options fiber depends on (--parsable, --export=ALL, --no-requeue, --array).
inline std::vector<std::string> sbatch_argv(const slurm_options& o, const batch_plan& p, const fiber::resources& r) {
  std::vector<std::string> a{o.bin("sbatch"), "--job-name=" + p.name, "--output=" + p.output, "--error=" + p.error,
                             "--ntasks=1", "--nodes=1"};
  add_resource_args(a, r);
  if (o.partition) a.push_back("--partition=" + *o.partition);
  if (o.account) a.push_back("--account=" + *o.account);
  if (o.time_limit) a.push_back("--time=" + *o.time_limit);
  a.insert(a.end(), o.extra_args.begin(), o.extra_args.end());
  a.insert(a.end(), {"--parsable", "--export=ALL", "--no-requeue"});
  if (p.array_size > 0) a.push_back("--array=0-" + std::to_string(p.array_size - 1));
  return a;
}

/// srun's argv for one step of allocation `allocation` running `spec`.
inline std::vector<std::string> srun_argv(const slurm_options& o, const std::string& allocation,
                                          const backend::job_spec& spec) {
  std::vector<std::string> a{o.bin("srun"), "--jobid=" + allocation, "--ntasks=1", "--nodes=1", "--exact",
                             "--quiet", "--input=none", "--export=ALL", "--job-name=" + (spec.name.empty() ? "fiber" : spec.name)};
  if (o.overlap) a.push_back("--overlap");
  add_resource_args(a, spec.resources);
  if (spec.stdout_path) a.push_back("--output=" + *spec.stdout_path);
  if (spec.stderr_path) a.push_back("--error=" + *spec.stderr_path);
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  return a;
}

/// Parse `sbatch --parsable` output: "1234" or "1234;cluster".
inline std::optional<std::string> parse_job_id(std::string_view out) {
  auto line = trim(out.substr(0, out.find('\n')));
  line = line.substr(0, line.find(';'));
  if (line.empty() || !std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return line;
}

/// One line of our squeue format.
struct queue_entry {
  std::string id, state, nodes, reason;
  int status = 0; ///< wait status (exit_code field): code << 8 | signal
};

/// Parse `squeue -h -O JobArrayID:0|,State:0|,exit_code:0|,NodeList:0|,Reason:0`.
inline std::map<std::string, queue_entry> parse_queue(std::string_view out) {
  std::map<std::string, queue_entry> m;
  while (!out.empty()) {
    auto nl = out.find('\n');
    std::string_view line = out.substr(0, nl);
    out = nl == std::string_view::npos ? std::string_view{} : out.substr(nl + 1);
    std::vector<std::string> f;
    for (int i = 0; i < 4; ++i) {
      auto bar = line.find('|');
      if (bar == std::string_view::npos) break;
      f.push_back(trim(line.substr(0, bar)));
      line = line.substr(bar + 1);
    }
    if (f.size() != 4) continue;
    queue_entry e{f[0], f[1], f[3], trim(line), std::atoi(f[2].c_str())};
    m[e.id] = std::move(e);
  }
  return m;
}

/// Whether a job in `state` has ended for good. Unknown states count as live
/// (a job stuck in one is the runtime's start/heartbeat timeouts' business).
inline bool is_terminal(std::string_view state) {
  static constexpr std::string_view ended[] = {"BOOT_FAIL", "CANCELLED",     "COMPLETED", "DEADLINE",
                                               "FAILED",    "NODE_FAIL",     "OUT_OF_MEMORY", "PREEMPTED",
                                               "TIMEOUT",   "REVOKED",       "SPECIAL_EXIT"};
  return std::find(std::begin(ended), std::end(ended), state) != std::end(ended);
}

/// Map a terminal squeue entry to a job_exit; `asked` = the signal fiber
/// asked for with cancel() (0: none).
inline backend::job_exit to_exit(const queue_entry& e, int asked) {
  using kind = backend::job_exit::kind;
  backend::job_exit x;
  int sig = e.status & 0x7f, code = (e.status >> 8) & 0xff;
  auto where = e.nodes.empty() || e.nodes == "(null)" ? std::string() : " on " + e.nodes;
  auto why = e.reason.empty() || e.reason == "None" ? std::string() : " (" + e.reason + ")";
  if (e.state == "COMPLETED") {
    x = {kind::exited, code, e.state};
  } else if (e.state == "CANCELLED") {
    x = {kind::signalled, asked ? asked : sig ? sig : 15,
         asked ? std::string("CANCELLED") : "CANCELLED (not by fiber)" + why};
  } else if (e.state == "FAILED") {
    if (asked && sig) x = {kind::signalled, asked, "FAILED" + why};
    else if (sig) x = {kind::signalled, sig, "FAILED" + why + where};
    else if (code) x = {kind::exited, code, "FAILED" + why};
    else x = {kind::lost, 0, "FAILED" + why + where};
  } else {
    // TIMEOUT, NODE_FAIL, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY, PREEMPTED, ...
    x = {kind::lost, 0, e.state + why + where};
  }
  return x;
}

/// Map srun's exit status (it reports 128+n when the task died of signal n).
inline backend::job_exit srun_exit(int status, int asked) {
  using kind = backend::job_exit::kind;
  if (status < 0) return {kind::lost, 0, "srun's exit status was reaped elsewhere"};
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    if (asked) return {kind::signalled, asked, "srun"};
    return {kind::lost, 0, "srun killed by signal " + std::to_string(s)};
  }
  int code = WEXITSTATUS(status);
  if (asked) return {kind::signalled, asked, "step cancelled"};
  if (code > 128 && code <= 128 + 64) return {kind::signalled, code - 128, "step"};
  return {kind::exited, code, "step"};
}

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

inline bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    auto& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return true;
}

inline std::string numeric(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return sa->sa_family == AF_INET6 ? "[" + std::string(host) + "]" : host;
}

/// Non-loopback addresses of `host` (IPv4 first), numeric, IPv6 in brackets.
inline std::vector<std::string> resolve(const std::string& host) {
  std::vector<std::string> v4, v6;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  for (auto* p = res; p; p = p->ai_next) {
    if (is_loopback(p->ai_addr)) continue;
    auto s = numeric(p->ai_addr, p->ai_addrlen);
    auto& v = p->ai_family == AF_INET ? v4 : v6;
    if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  }
  ::freeaddrinfo(res);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

/// The local address the kernel would use to reach `host` (UDP connect +
/// getsockname: no packet is sent). Empty if unroutable.
inline std::string route_source(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "6817", &hints, &res) != 0) return {};
  std::string out;
  for (auto* p = res; p && out.empty(); p = p->ai_next) {
    unique_fd s(::socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s || ::connect(s.get(), p->ai_addr, p->ai_addrlen) != 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0)
      out = numeric(reinterpret_cast<sockaddr*>(&ss), len);
  }
  ::freeaddrinfo(res);
  return out;
}

/// Controller hosts/addresses from `scontrol show config` output:
/// "SlurmctldHost[0] = vm(127.0.0.1)" -> "127.0.0.1"; "SlurmctldAddr = x".
inline std::vector<std::string> controller_hosts(std::string_view config) {
  std::vector<std::string> out;
  while (!config.empty()) {
    auto nl = config.find('\n');
    auto line = config.substr(0, nl);
    config = nl == std::string_view::npos ? std::string_view{} : config.substr(nl + 1);
    if (!line.starts_with("SlurmctldHost") && !line.starts_with("SlurmctldAddr") && !line.starts_with("ControlAddr"))
      continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    auto v = trim(line.substr(eq + 1));
    if (auto lp = v.find('('); lp != std::string::npos && v.back() == ')') v = v.substr(lp + 1, v.size() - lp - 2);
    if (!v.empty() && v != "(null)") out.push_back(v);
  }
  return out;
}

} // namespace slurm_impl

// ---------------------------------------------------------------------------
// The launcher
// ---------------------------------------------------------------------------

/// fiber's Slurm launcher (see the file comment). Create with
/// std::make_shared (it hands weak references to its asynchronous work).
class slurm_launcher final : public backend::launcher, public std::enable_shared_from_this<slurm_launcher> {
public:
  slurm_launcher(asio::any_io_executor ex, slurm_options opts)
      : ex_(std::move(ex)), opts_(std::move(opts)), timer_(ex_) {
    if (!opts_.warn)
      opts_.warn = [](const std::string& m) { detail::log(log_level::warning, m); };
  }

  /// Cancels every job not yet seen ending (one `scancel` for the batch
  /// jobs; steps are cancelled and their srun reaped, at most ~5 s). Exit
  /// handlers of those jobs are not called.
  ~slurm_launcher() override {
    timer_.cancel();
    for (auto& c : inflight_) c->abort();
    std::vector<std::string> batch_ids;
    std::vector<slurm_impl::child_watch*> sruns;
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
    if (!listen_url_) listen_url_ = "tcp://" + listen_address() + ":0";
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
    int asked = 0;                                   // signal asked with cancel()
    std::string state, reason, nodes;                // last poll
    int missing = 0;                                 // polls in a row not listing it
    std::shared_ptr<slurm_impl::child_watch> watch;  // srun steps only
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
      return opts_.allocation ? slurm_options::mode::srun : n > 1 ? slurm_options::mode::array : slurm_options::mode::sbatch;
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
    slurm_impl::spawn_request req;
    req.argv = slurm_impl::sbatch_argv(opts_, plan, members.front()->resources);
    req.env = slurm_impl::merged_environment(plan.env);
    auto script = slurm_impl::memory_file(plan.script);
    req.stdin_fd = script.get();
    auto res = run_blocking(req, "submit '" + plan.name + "'");
    if (!res.ok())
      throw backend_error("slurm: sbatch failed to submit '" + plan.name + "' (" + res.describe() + "): " + res.message());
    auto id = slurm_impl::parse_job_id(res.out);
    if (!id) throw backend_error("slurm: sbatch printed no job id for '" + plan.name + "': " + res.message());
    return *id;
  }

  slurm_impl::command_result run_blocking(const slurm_impl::spawn_request& req, const std::string& what) {
    try {
      return slurm_impl::run(req, opts_.command_timeout);
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
      slurm_impl::spawn_request req;
      req.argv = slurm_impl::srun_argv(opts_, *opts_.allocation, specs[i]);
      req.env = slurm_impl::merged_environment(specs[i].env);
      req.out = req.err = slurm_impl::stdio::inherit; // task output -> the master's
      req.new_process_group = true;                   // the terminal's ^C is not srun's
      slurm_impl::spawned child;
      try {
        child = slurm_impl::spawn(req);
      } catch (const std::system_error& e) {
        for (auto& id : started) { // started in this call: stop, and forget their handlers
          jobs_[id].on_exit = nullptr;
          jobs_[id].asked = SIGTERM;
          jobs_[id].watch->kill(SIGTERM);
        }
        throw backend_error("slurm: cannot run " + req.argv[0] + " for '" + specs[i].name +
                            "': " + e.code().message() + (e.code().value() == ENOENT ? " (is Slurm on PATH?)" : ""));
      }
      std::string id = "srun-" + std::to_string(child.pid);
      auto& r = jobs_[id];
      r.on_exit = std::move(on_exit[i]);
      r.watch = slurm_impl::child_watch::start(ex_, child.pid, [self = weak_from_this(), id](int status) {
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
    start_async({opts_.bin("scontrol"), "show", "step", *opts_.allocation},
                [self, id, signal, attempt](slurm_impl::command_result res) {
                  auto s = self.lock();
                  if (!s) return;
                  auto it = s->jobs_.find(id);
                  if (it == s->jobs_.end() || it->second.watch->done()) return;
                  if (attempt >= 25) return it->second.watch->kill(SIGKILL);
                  auto steps = parse_steps(res.out);
                  auto st = steps.find(it->second.watch->pid());
                  if (st != steps.end()) s->async_scancel({st->second}, signal);
                  else it->second.watch->kill(signal == 9 ? SIGTERM : signal);
                  auto t = std::make_shared<asio::steady_timer>(
                      s->ex_, std::chrono::milliseconds(st != steps.end() ? 1000 : 200));
                  t->async_wait([self, id, signal, attempt, t](std::error_code ec) {
                    if (auto s2 = self.lock(); s2 && !ec) s2->cancel_step(id, signal, attempt + 1);
                  });
                });
  }

  /// Destructor: scancel the steps of live sruns and SIGTERM them; repeat
  /// each second (a cancel can be lost while a step is launching) with
  /// SIGKILL for the steps; after ~5 s SIGKILL srun. Reaps every srun.
  void stop_steps(std::vector<slurm_impl::child_watch*> sruns) noexcept {
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

  /// srun pid -> "jobid.stepid" from `scontrol show step` ("SrunHost:Pid=vm:6300").
  static std::map<pid_t, std::string> parse_steps(std::string_view out) {
    std::map<pid_t, std::string> m;
    std::string step;
    for (std::size_t pos = 0; pos < out.size();) {
      auto end = out.find_first_of(" \n", pos);
      if (end == std::string_view::npos) end = out.size();
      auto tok = out.substr(pos, end - pos);
      pos = end + 1;
      if (tok.starts_with("StepId=")) step = std::string(tok.substr(7));
      else if (tok.starts_with("SrunHost:Pid=") && !step.empty()) {
        auto colon = tok.rfind(':');
        pid_t pid = pid_t(std::atol(std::string(tok.substr(colon + 1)).c_str()));
        if (pid > 0) m[pid] = step;
      }
    }
    return m;
  }

  std::map<pid_t, std::string> step_ids_blocking() {
    slurm_impl::spawn_request req;
    req.argv = {opts_.bin("scontrol"), "show", "step", *opts_.allocation};
    return parse_steps(run_blocking(req, "list steps").out);
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
    slurm_impl::spawn_request req;
    req.argv = scancel_argv(ids, signal);
    auto res = run_blocking(req, "cancel jobs");
    if (!res.ok() && !benign_scancel_error(res.message()))
      warn("slurm: scancel " + slurm_impl::join(ids, " ") + " (" + res.describe() + "): " + res.message());
  }

  static bool benign_scancel_error(const std::string& m) {
    return m.find("already completing or completed") != std::string::npos ||
           m.find("Invalid job id") != std::string::npos;
  }

  void async_scancel(const std::vector<std::string>& ids, int signal) {
    auto self = weak_from_this();
    start_async(scancel_argv(ids, signal), [self, ids](slurm_impl::command_result res) {
      auto s = self.lock();
      if (s && !res.ok() && !benign_scancel_error(res.message()))
        s->warn("slurm: scancel " + slurm_impl::join(ids, " ") + " (" + res.describe() + "): " + res.message());
    });
  }

  void start_async(std::vector<std::string> argv, std::function<void(slurm_impl::command_result)> done) {
    slurm_impl::spawn_request req;
    req.argv = std::move(argv);
    std::erase_if(inflight_, [](auto& c) { return c->finished(); });
    try {
      inflight_.push_back(slurm_impl::async_command::start(ex_, req, opts_.command_timeout, std::move(done)));
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
    slurm_impl::spawn_request req;
    req.argv = {opts_.bin("squeue"), "-h", "-r", "-t", "all", "-j", slurm_impl::join(ids, ","),
                "-O", "JobArrayID:0|,State:0|,exit_code:0|,NodeList:0|,Reason:0"};
    try {
      inflight_.push_back(slurm_impl::async_command::start(
          ex_, req, opts_.command_timeout, [self, ids](slurm_impl::command_result res) {
            if (auto s = self.lock()) s->on_poll(ids, res);
          }));
    } catch (const std::system_error& e) {
      warn("slurm: cannot run squeue: " + e.code().message());
      schedule_poll();
    }
  }

  void on_poll(const std::vector<std::string>& ids, const slurm_impl::command_result& res) {
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
        warn("slurm: squeue failed (" + res.describe() + ", " + std::to_string(failed_polls_) +
             " in a row): " + m + "; jobs are still watched by heartbeats");
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
          if (++it->second.missing >= 2) end_job(id, {backend::job_exit::kind::lost, 0, "job no longer known to Slurm"});
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
      if (auto a = slurm_impl::resolve(host); !a.empty()) return a.front();
    try {
      slurm_impl::spawn_request req;
      req.argv = {opts_.bin("scontrol"), "show", "config"};
      auto res = slurm_impl::run(req, std::chrono::seconds(15));
      for (auto& h : slurm_impl::controller_hosts(res.out)) {
        auto src = slurm_impl::route_source(h);
        if (src.empty()) continue;
        addrinfo hints{};
        hints.ai_flags = AI_NUMERICHOST;
        addrinfo* ai = nullptr;
        auto bare = src.front() == '[' ? src.substr(1, src.size() - 2) : src;
        bool loop = true;
        if (::getaddrinfo(bare.c_str(), nullptr, &hints, &ai) == 0) {
          loop = slurm_impl::is_loopback(ai->ai_addr);
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
  std::vector<std::shared_ptr<slurm_impl::async_command>> inflight_;
  std::optional<std::string> listen_url_;
};

} // namespace detail

namespace backend {

/// Policy: job-backed processes are Slurm jobs (see backend/slurm.hpp).
struct slurm {
  static constexpr std::string_view name = "slurm";
  /// Reads the configuration table now. Throws fiber::backend_error for a
  /// malformed slurm.* value (fiber::config_error for an unknown key).
  static std::shared_ptr<launcher> make(asio::any_io_executor ex) {
    return std::make_shared<detail::slurm_launcher>(std::move(ex), detail::slurm_options::from_config());
  }
};

static_assert(policy<slurm>);

} // namespace backend
} // namespace fiber
