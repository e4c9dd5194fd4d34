// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker.hpp
/// The docker backend: each job-backed process is one Docker container,
/// created, started, watched and stopped through the Docker Engine API. Chosen with
/// `FIBER_BACKEND=docker ./app`, or `fiber::Pool<&f, fiber::backend::docker>`.
/// FIBER_BACKEND=docker needs this header in one source file of the program
/// (fiber/fiber.hpp includes it); backend::from_env finds it by name.
/// docs/backends/docker.md has the configuration table and a walk-through.
///
/// ## Talking to the daemon
/// `DOCKER_HOST` (default `unix:///var/run/docker.sock`; `tcp://host:port`,
/// with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH as the docker CLI reads them),
/// through libcurl's multi interface on the runtime's executor
/// (backend/detail/http_client.hpp says why libcurl): the runtime thread
/// never waits for the daemon. The API version is negotiated once with an
/// unversioned `GET /version`. A daemon that cannot be reached, or refuses a
/// call, gives a fiber::backend_error starting with "docker: " that carries
/// Docker's own message (e.g. "No such image: x") or says where the daemon
/// was looked for and how to start one: as soon as the daemon answers, never
/// after start_timeout_s. launch() returns before the daemon answers, so such
/// an error ends the job as lost with job_exit::start_failed: Process::join
/// throws it, a Pool throws it (as "workers keep failing to start: ...") once
/// its workers have failed to start a few times, within milliseconds.
///
/// ## The containers
/// One per job, named `fiber-<run id>-<job name>`, from the image in
/// `docker.image`, running the master's own executable at its own path with
/// the job's argv (Entrypoint argv[0], Cmd the rest) and the job's
/// environment only (fiber's worker variables; not the master's environment).
/// By default (`docker.mount_binary`) the executable's directory is
/// bind-mounted read-only at the same path, so the image needs only the
/// shared libraries it links (tests/rigs/docker-image.sh builds one from
/// `ldd`). HostConfig: `Init` (docker-init as PID 1 forwards SIGTERM to the
/// worker), `AutoRemove`, `NetworkMode` = `docker.network` (default `host`),
/// `NanoCpus` = resources.cpu x 1e9, `Memory` = `MemorySwap` =
/// resources.memory_mb MiB (no swap), GPU `DeviceRequests` (Count =
/// resources.gpu, capability "gpu"). User: the master's uid:gid (docker.user).
/// Labels: `app.kubernetes.io/managed-by=fiber`, `fiber.run=<run id>`,
/// `fiber.worker=<job name>`, and the master's host, pid, start time, boot id
/// and pid namespace (`fiber.master.*`), plus `docker.labels`.
///
/// ## Exits
/// One `GET /events` stream per launcher, filtered by the run's label, is up
/// before any container starts. `die` gives the exit: exitCode n →
/// exited(n); 128+n → signalled(n) (the container's status is docker-init's:
/// a worker that *exits* with 128+n says so on its link first, and Process
/// reports that status, as for srun); after cancel(j, s) → signalled(s)
/// (as on every backend: terminate → -15, kill → -9). An `oom` event (it may trail `die` by a
/// moment: a 137 under a memory limit waits up to 250 ms for it) → lost with
/// reason "out of memory: container ... exceeded its memory limit (N MiB)".
/// A container killed behind fiber's back (`docker kill`) is signalled(9),
/// and a Pool reruns its tasks. Should the stream drop (a daemon restart,
/// with live-restore or not), it is resumed with `since` the last event seen
/// (Docker replays what it still holds), reconnecting after 0.1 s doubling to
/// 5 s (jittered), and then reconciled with a fresh list of the run's
/// containers: those still running are kept, those that ended end with the
/// status `inspect` gives, those gone without a trace are lost. Only after
/// 30 s of failed reconnections are the run's live jobs reported lost.
/// A create or start that gets no answer from a daemon that answered before
/// (refused, reset), or a 5xx (4 times at most), is retried after 0.1 s
/// doubling to 3 s (jittered) until start_timeout_s.
///
/// ## Where workers dial
/// `listen_url()`: `tcp://127.0.0.1:0` on the host network; on any other
/// network its gateway address (`GET /networks/<name>`, once, blocking up to
/// 5 s: the interface asks for the URL synchronously; the launcher's
/// prepare() makes that call on its caller's thread); `listen_address`
/// beats both. `tls+tcp://` when `tls_cert` is set, with the TLS files
/// bind-mounted read-only into the containers. Workers get the run's secret
/// in their environment (visible to whoever may `docker inspect`, i.e. who
/// controls the daemon anyway).
///
/// ## Output
/// Each container's stdout/stderr are attached (`POST /attach` before it
/// starts) and written to the master's stdout/stderr as they come, or to
/// `<worker_output_dir>/<job>.{out,err}` when that key is set (the master
/// writes them: the directory need not be mounted). They are also in
/// `docker logs` while the container exists. A thread of the launcher's
/// writes them, from a buffer of 8 MiB: a reader that stalls (a full pipe)
/// never blocks the runtime thread; past 8 MiB output is dropped, counted
/// and logged (a warning at the first drop, the total at shutdown).
///
/// ## Nothing left behind
/// * Destroying the launcher (when the runtime stops) force-removes every
///   container of its run, blocking up to ~10 s; exit handlers of jobs still
///   running are not called.
/// * A SIGKILLed master leaves running containers whose workers lose their
///   link and exit (within heartbeat_timeout_ms; at once when the kernel
///   closes the master's sockets), and AutoRemove removes them.
/// * At start, a launcher sweeps containers labelled managed-by=fiber whose
///   master (same host and pid namespace: pid + start time; or another boot)
///   is gone, e.g. ones created but never started when their master died.
///
/// Thread-safety: as every launcher, call it from the runtime thread only
/// (make() may be called anywhere); destroy it there or after the executor
/// stopped.

#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/docker/keys.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>

#include <memory>
#include <string_view>
#include <utility>

#if defined(FIBER_HAS_CURL) && defined(FIBER_HAS_JSON)
#include <fiber/backend/docker/launcher.hpp>
#define FIBER_HAS_DOCKER_BACKEND 1
#endif

namespace fiber::backend {

/// Policy: job-backed processes are Docker containers (see this file's comment).
struct docker {
  static constexpr std::string_view name = "docker"; ///< the backend's name, as FIBER_BACKEND spells it
  /// Reads the configuration table (docker.*) and DOCKER_HOST now; contacts
  /// the daemon in the background. Throws fiber::backend_error for a
  /// malformed value or DOCKER_HOST, or when fiber was built without
  /// libcurl's and nlohmann-json's headers, or libcurl cannot be loaded.
  static std::shared_ptr<launcher> make(const launch_context& ctx) {
#if defined(FIBER_HAS_DOCKER_BACKEND)
    auto opts = detail::docker_options::from_config();
    auto where = detail::docker::endpoint_from_env();
    if (auto w = detail::http::exposure(where.base_url, where.tls); !w.empty())
      detail::log(log_level::warning, "docker: DOCKER_HOST=", where.host, ": ", w,
                  "; each container's create request carries the run's secret (set DOCKER_TLS_VERIFY=1, or reach the "
                  "daemon's socket through ssh -L)");
    return detail::make_started<detail::docker_launcher>(ctx.executor, std::move(opts), std::move(where));
#else
    (void)ctx;
    detail::throw_built_without_http(name);
#endif
  }
};

static_assert(policy<docker>);

} // namespace fiber::backend

namespace fiber::detail {
#if !defined(FIBER_SEPARATE_COMPILATION)
/// FIBER_BACKEND=docker reaches backend::docker through this registration
/// (backend::from_env does not include this header: see named_backends.hpp);
/// under FIBER_SEPARATE_COMPILATION, fiber/impl/src.hpp registers it instead.
inline const bool docker_backend_registered = register_backend(backend::docker::name, &backend::docker::make);
#endif
} // namespace fiber::detail
