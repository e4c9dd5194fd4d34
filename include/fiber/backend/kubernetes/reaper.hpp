// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/reaper.hpp
/// The kubernetes backend's watchdog for a master outside the cluster: a
/// small `sh` + `kubectl` process that deletes the run's pods and Secret
/// when the master dies without doing it itself (SIGKILL, a crash).
///
/// Pods are not removed by anyone when their master vanishes (no AutoRemove,
/// and a Job's TTL does not apply to bare pods); a master in a pod gives its
/// workers an ownerReference instead, and the cluster's garbage collector
/// removes them. Outside the cluster, the launcher starts this child: it
/// blocks reading a socket whose other end only the master holds; when the master
/// ends the read returns — "done" if the launcher cleaned up itself, EOF if
/// the master died — and on EOF it runs `kubectl delete pods,secrets -l
/// fiber.run=<run>` with the master's kubeconfig and context (or, for
/// `k8s.api_server`, that URL with an empty kubeconfig). It runs in a
/// process group of its own (a terminal's Ctrl-C to the master does not
/// stop it) and exits after that one command (bounded by kubectl's
/// --request-timeout).

#include <fiber/backend/kubernetes/access.hpp>
#include <fiber/backend/detail/reaper.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

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
class reaper : public detail::reaper {
public:
  /// Starts `kubectl CONNECTION... -n NS delete pods,secrets -l SELECTOR`
  /// to run when this process dies; `connection`: how kubectl reaches the
  /// API server (`--context=C`; `--kubeconfig=/dev/null --server=URL`).
  /// Returns false (nothing started) when sh cannot be started; a missing
  /// kubectl shows only when it would run.
  bool arm(const std::string& kubectl, const std::vector<std::string>& connection, const std::string& ns,
           const std::string& selector) {
    std::vector<std::string> argv{"/bin/sh", "-c", "read -r line; [ \"$line\" = done ] && exit 0; exec \"$@\"",
                                  "fiber-kube-reaper", kubectl};
    argv.insert(argv.end(), connection.begin(), connection.end());
    for (const char* a :
         {"--request-timeout=20s", "delete", "pods,secrets", "--ignore-not-found", "--wait=false", "--grace-period=1"})
      argv.emplace_back(a);
    argv.push_back("--namespace=" + ns);
    argv.push_back("--selector=" + selector);
    return detail::reaper::arm(std::move(argv));
  }
};

} // namespace fiber::detail::kube
