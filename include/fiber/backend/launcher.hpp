// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/launcher.hpp
/// The one interface between fiber's runtime and a cluster manager: start a
/// job-backed process, learn when it ends, stop it. Pool, Process and
/// RemoteManager only ever talk to this; a backend *policy* (backend::local,
/// backend::slurm, backend::from_env) is a compile-time tag whose make()
/// returns a launcher, given a launch_context.

#include <fiber/error.hpp>

#include <asio/any_io_executor.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber {

/// Resources one job-backed process asks of its backend. 0 = backend default.
struct resources {
  int cpu = 1;       ///< CPUs (Slurm: --cpus-per-task)
  int memory_mb = 0; ///< MiB (Slurm: --mem); 0 = no limit requested
  int gpu = 0;       ///< GPUs (Slurm: --gres=gpu:N)
};

namespace backend {

/// What to start. The executable is always the master's own binary.
struct job_spec {
  std::string name;                                     ///< human-readable, e.g. "pool-1-w3"
  std::vector<std::string> argv;                        ///< argv[0] is the executable path
  std::vector<std::pair<std::string, std::string>> env; ///< added to the inherited environment
  fiber::resources resources;                           ///< what to ask the cluster manager for
  std::optional<std::string> stdout_path;               ///< nullopt: the master's stdout
  std::optional<std::string> stderr_path;               ///< nullopt: the master's stderr
  /// A descriptor the job inherits under the same number: its link to the
  /// master, one end of a socketpair. Set only for launchers whose traits
  /// say `inherits_link`. The master's copy closes with the last copy of
  /// the spec, after launch(). Null: none.
  std::shared_ptr<const int> link_fd = nullptr;
  /// A second descriptor inherited as link_fd is, set only with it: a
  /// manager process's reply line (the replies to calls whose caller reads
  /// them itself). Null: none.
  std::shared_ptr<const int> reply_fd = nullptr;
};

/// How a job ended; exitcode() turns it into multiprocessing's exit code.
struct job_exit {
  /// exited: it returned a status; signalled: a signal ended it; lost: the
  /// backend lost track of it (node failure, container or pod gone).
  enum class kind { exited, signalled, lost } how = kind::exited; ///< which of the three
  int code = 0;                                                   ///< exit status; signal number when signalled
  std::string reason;                                             ///< backend's words (e.g. Slurm state "NODE_FAIL")
  /// The job never started: the backend refused it (e.g. Docker: no such
  /// image); `reason` is its error, which Process::join raises as backend_error.
  bool start_failed = false;
  /// multiprocessing-style exit code: status, -N for signal N, -9 when lost.
  int exitcode() const noexcept { return how == kind::exited ? code : how == kind::signalled ? -code : -9; }
};

/// Opaque handle of one started job. `id` is the backend's own id
/// (pid for local, "1234" or "1234_5" for Slurm); `pid` is set when known.
struct job {
  std::string id;        ///< the backend's id of the job
  std::int64_t pid = -1; ///< the OS pid on its host; -1 until known
  std::string host;      ///< its host where the backend knows it at start (local: this host); may be empty
};

/// Called once, on the runtime's executor, when the job has ended.
using exit_handler = std::function<void(const job_exit&)>;

/// What a backend's jobs have in common with their master. The runtime and
/// the supervisor adapt to these, never to a backend's name. The defaults
/// suit a job on another machine.
struct launcher_traits {
  /// Jobs see the master's files and processes: they read the run's secret
  /// from the master's memfd and dial back over `local_transport` (ipc:// in the 0700 run
  /// directory by default). Otherwise the secret travels in the job's
  /// environment and workers dial the launcher's listen_url().
  bool shares_filesystem = false;
  /// Jobs are the master's child processes: the kernel ends them with it
  /// (PR_SET_PDEATHSIG), not only the heartbeat timeout.
  bool dies_with_master = false;
  /// Jobs run on the master's cores: a Pool starts about a core's worth at
  /// a time, since more would only share the cores and all connect later,
  /// and never more than max_pending_handshakes (64) at once.
  bool shares_cores = false;
  /// File descriptors the launcher holds in the master for each running
  /// job, besides the job's link: the local backend's pidfd, an srun's. The
  /// master checks RLIMIT_NOFILE against them before jobs start.
  std::size_t fds_per_job = 1;
  /// Jobs inherit job_spec::link_fd (posix_spawn on this machine): a local
  /// worker's link to the master is then a socketpair made at launch, with
  /// no dial and no accept at the master's listener.
  bool inherits_link = false;
};

/// A certificate and its private key, PEM.
struct tls_identity {
  std::string cert_pem; ///< "-----BEGIN CERTIFICATE-----..."
  std::string key_pem;  ///< "-----BEGIN ... PRIVATE KEY-----..."
};

/// What the runtime hands a policy's make(): where the launcher runs and
/// what it may need of this process, so that no backend reaches into the
/// runtime. Made from an executor alone (a test; a backend wrapping
/// another), the other members are empty. Copyable.
struct launch_context {
  /// A context with `ex` only (implicit: `B::make(executor)` still reads well).
  launch_context(asio::any_io_executor ex) : executor(std::move(ex)) {} // NOLINT(google-explicit-constructor)
  /// The runtime's executor: every launcher member but prepare() runs there.
  asio::any_io_executor executor;
  /// This process's 0700 run directory, for files the launcher writes for its
  /// run; "" when not given (the launcher then makes a private one if it needs one).
  std::string run_dir;
  /// This process's name: "master", or a worker's name when a worker starts workers of its own.
  std::string process_name;
};

/// A backend instance. Thread-safety: all member functions but prepare() are
/// called from the runtime thread only, and must not block it (heartbeats
/// depend on it). Errors: launch throws fiber::backend_error with the
/// backend's own message.
class launcher {
public:
  virtual ~launcher() = default;
  /// Backend name for messages: "local", "slurm".
  virtual std::string_view name() const noexcept = 0;
  /// What its jobs share with the master (see launcher_traits).
  virtual launcher_traits traits() const noexcept { return {}; }
  /// Do once what may block before the launcher is used on the runtime
  /// thread (DNS lookups, commands such as `scontrol show config`). Called
  /// on the thread that creates a Pool, Process or RemoteManager, before the
  /// runtime needs listen_url(); thread-safe, idempotent. Default: nothing.
  virtual void prepare() {}
  /// URL scheme/address workers must dial back to, e.g. "ipc:///tmp/x/m" or
  /// "tcp://10.0.0.5:0" (port 0: the runtime binds an ephemeral port). Must
  /// not block once prepare() returned.
  virtual std::string listen_url() = 0;
  /// Start jobs; `on_exit[i]` fires exactly once when job i ends (never
  /// before launch returns). Returns at once: a job the backend refuses
  /// later ends as lost with job_exit::start_failed. Throws
  /// fiber::backend_error when the jobs cannot be started at all (e.g. no
  /// image configured).
  virtual std::vector<job> launch(const std::vector<job_spec>& specs, std::vector<exit_handler> on_exit) = 0;
  /// Ask a job to stop: SIGTERM (15) or SIGKILL (9) locally, scancel elsewhere.
  /// Idempotent; a job that already ended is ignored.
  virtual void cancel(const job& j, int signal) = 0;
  /// The certificate and key the listener its workers dial must serve with,
  /// when the launcher made them (kubernetes: an ephemeral certificate its
  /// workers pin); nullopt (the default): the tls_cert/tls_key files. The
  /// runtime reads it once, right after make().
  virtual std::optional<tls_identity> listener_identity() const { return std::nullopt; }
  /// Its jobs whose end has not been reported yet, counted by state in the
  /// backend's own words (slurm: "PENDING", "RUNNING", ...; kubernetes: the
  /// pod's phase; docker: "creating", "starting", "running"; local:
  /// "running"), for fiber::stats(). Runtime thread. Default: none.
  virtual std::map<std::string, unsigned> job_states() const { return {}; }
};

} // namespace backend

namespace detail {
/// B::make(const backend::launch_context&) makes a launcher.
template <class B>
concept makes_with_context = requires(const backend::launch_context& ctx) {
  { B::make(ctx) } -> std::convertible_to<std::shared_ptr<backend::launcher>>;
};
/// B::make(asio::any_io_executor) makes a launcher (a policy written before launch_context).
template <class B>
concept makes_with_executor = requires(asio::any_io_executor ex) {
  { B::make(ex) } -> std::convertible_to<std::shared_ptr<backend::launcher>>;
};
} // namespace detail

namespace backend {

/// A backend policy: a tag type naming a backend, usable as the Backend
/// template argument of Pool, Process and RemoteManager. Its static make()
/// takes a launch_context (or, as before there was one, an executor).
template <class B>
concept policy = fiber::detail::makes_with_context<B> || fiber::detail::makes_with_executor<B>;

/// Policy B's launcher for `ctx`: B::make(ctx), or B::make(ctx.executor) for
/// a make() that takes an executor. What the runtime calls, once per policy.
template <policy B>
std::shared_ptr<launcher> make_launcher(const launch_context& ctx) {
  if constexpr (fiber::detail::makes_with_context<B>) return B::make(ctx);
  else return B::make(ctx.executor);
}

} // namespace backend
} // namespace fiber
