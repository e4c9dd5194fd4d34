// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/kube_reaper.hpp
/// The kubernetes backend's watchdog for a master outside the cluster: a
/// small `sh` + `kubectl` process that deletes the run's pods and Secret
/// when the master dies without doing it itself (SIGKILL, a crash).
///
/// Pods are not removed by anyone when their master vanishes (no AutoRemove,
/// and a Job's TTL does not apply to bare pods); a master in a pod gives its
/// workers an ownerReference instead, and the cluster's garbage collector
/// removes them. Outside the cluster, the launcher starts this child: it
/// blocks reading a pipe whose only writer is the master; when the master
/// ends the read returns — "done" if the launcher cleaned up itself, EOF if
/// the master died — and on EOF it runs `kubectl delete pods,secrets -l
/// fiber.run=<run>` with the master's kubeconfig and context (or, for
/// `k8s.api_server`, that URL with an empty kubeconfig). It runs in a
/// process group of its own (a terminal's Ctrl-C to the master does not
/// stop it) and exits after that one command (bounded by kubectl's
/// --request-timeout).

#include <fiber/backend/detail/kube_config.hpp>
#include <fiber/backend/detail/spawn.hpp>
#include <fiber/backend/detail/unique_fd.hpp>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fiber::detail::kube {

/// kubectl's arguments to reach the API server as `w` does (reaper::arm's
/// `connection`): a kubeconfig's context, or `k8s.api_server` as is; none
/// when the watchdog cannot (in a pod, ownerReferences do its work; a
/// token or plugin of fiber's own kubectl would not see).
inline std::optional<std::vector<std::string>> reaper_connection(const access& w, const std::string& context) {
  if (w.in_cluster) return std::nullopt;
  if (w.source.starts_with("kubeconfig"))
    return context.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--context=" + context};
  if (w.token.empty() && w.token_file.empty() && !w.exec) // k8s.api_server: the URL as is
    return std::vector<std::string>{"--kubeconfig=/dev/null", "--server=" + w.server};
  return std::nullopt;
}

/// A running watchdog (see the file comment). Not copyable; destroying it
/// without disarm() leaves it armed: it deletes when this process ends.
class reaper {
public:
  reaper() = default;
  reaper(const reaper&) = delete;
  reaper& operator=(const reaper&) = delete;
  ~reaper() { disarm(); }

  /// Starts `kubectl CONNECTION... -n NS delete pods,secrets -l SELECTOR`
  /// to run when this process dies; `connection`: how kubectl reaches the
  /// API server (`--context=C`; `--kubeconfig=/dev/null --server=URL`).
  /// Returns false (nothing started) when sh cannot be started; a missing
  /// kubectl shows only when it would run.
  bool arm(const std::string& kubectl, const std::vector<std::string>& connection, const std::string& ns,
           const std::string& selector) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
    unique_fd rd(p[0]);
    write_end_ = unique_fd(p[1]);
    spawn_request r;
    r.argv = {"/bin/sh", "-c", "read -r line; [ \"$line\" = done ] && exit 0; exec \"$@\"", "fiber-kube-reaper",
              kubectl};
    r.argv.insert(r.argv.end(), connection.begin(), connection.end());
    for (const char* a :
         {"--request-timeout=20s", "delete", "pods,secrets", "--ignore-not-found", "--wait=false", "--grace-period=1"})
      r.argv.emplace_back(a);
    r.argv.push_back("--namespace=" + ns);
    r.argv.push_back("--selector=" + selector);
    r.stdin_fd = rd.get();
    r.out = r.err = stdio::null;
    r.new_process_group = true;
    try {
      pid_ = spawn(r).pid;
    } catch (const std::exception&) {
      write_end_.reset();
      return false;
    }
    return true;
  }

  /// The master cleaned up itself: the watchdog exits without deleting
  /// (waits up to 1 s for it, so no zombie is left). Idempotent.
  void disarm() noexcept {
    if (write_end_) {
      static constexpr char done[] = "done\n";
      (void)!::write(write_end_.get(), done, sizeof done - 1);
      write_end_.reset();
    }
    if (pid_ > 0) {
      int st = 0;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (::waitpid(pid_, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2)); // sh exits at once: a few ms
      pid_ = -1;
    }
  }

  /// Cleaning up failed: leave the watchdog armed, to delete when this
  /// process ends (its pipe's write end is kept open until then).
  void leave_armed() noexcept {
    (void)write_end_.release();
    pid_ = -1;
  }

  /// The watchdog's pid (-1: none).
  pid_t pid() const noexcept { return pid_; }

private:
  unique_fd write_end_;
  pid_t pid_ = -1;
};

} // namespace fiber::detail::kube
