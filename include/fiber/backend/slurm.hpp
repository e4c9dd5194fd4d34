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
/// ## Submission never blocks
/// launch() returns at once; the specs launched in one turn of the executor
/// are submitted together by asynchronous `sbatch` commands (at most 8 at
/// once). Job ids are fiber's ("slurm-<n>"); slurm_id() gives Slurm's once
/// sbatch answered. A failed submission ends its jobs as lost with
/// job_exit::start_failed and Slurm's message.
///
/// ## Reaper
/// The first submission starts a watchdog (`awk`, backend/detail/reaper.hpp)
/// told each job id and each end; when the master dies without cleaning up
/// (SIGKILL), it scancels the jobs still live (docs/backends/slurm.md).
///
/// ## The secret never reaches argv or the batch script
/// The spec's environment (it carries fiber's secret) goes into the
/// *environment* of sbatch/srun (posix_spawn envp) with `--export=ALL`; never
/// into `--export=NAME=value`, `--wrap` or the script. The batch script is
/// fed to sbatch on stdin from an anonymous memfd (no file, no path). Checked
/// on Slurm 22.05: neither `scontrol show job -dd`, `squeue -o %all`,
/// `scontrol write batch_script` nor `ps` shows an exported value.
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
/// (4) 127.0.0.1 (a one-host cluster). The lookup (DNS, `scontrol`) runs
/// once, in prepare(), off the runtime thread.
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
/// only (prepare(): any thread); destroy it there or after the executor
/// stopped. Destruction cancels (scancel) every job it submitted that has
/// not ended and does not call their exit handlers.

#include <fiber/backend/launcher.hpp>
#include <fiber/backend/slurm/launcher.hpp>
#include <fiber/backend/slurm/options.hpp>

#include <memory>
#include <string_view>

namespace fiber::backend {

/// Policy: job-backed processes are Slurm jobs (see backend/slurm.hpp).
struct slurm {
  static constexpr std::string_view name = "slurm"; ///< the backend's name, as FIBER_BACKEND spells it
  /// Reads the configuration table now. Throws fiber::backend_error for a
  /// malformed slurm.* value (fiber::config_error for an unknown key).
  static std::shared_ptr<launcher> make(const launch_context& ctx) {
    return std::make_shared<detail::slurm_launcher>(ctx.executor, detail::slurm_options::from_config());
  }
};

} // namespace fiber::backend
