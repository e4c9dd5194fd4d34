// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes.hpp
/// The kubernetes backend: each job-backed process is one pod, created,
/// watched and deleted through the API server's REST API. Chosen with
/// `FIBER_BACKEND=kubernetes ./app`, or `fiber::Pool<&f, fiber::backend::kubernetes>`.
/// FIBER_BACKEND=kubernetes needs this header in one source file of the
/// program (fiber/fiber.hpp includes it); backend::from_env finds it by name.
/// docs/kubernetes/README.md has the configuration table, RBAC and a walk-through.
///
/// ## Talking to the API server
/// HTTPS through libcurl's multi interface on the runtime's executor (the
/// runtime thread never waits for the API server), JSON through
/// nlohmann-json. Why libcurl and not nng's HTTP client (already linked):
/// nng's client reads whole bodies, so a watch — an endless chunked
/// response, one JSON event a line — is out of its reach but through private
/// API; it cannot present a client certificate or a CA given as PEM in
/// memory (a kubeconfig's `*-data`), go through an HTTP(S) proxy (`proxy-url`,
/// `HTTPS_PROXY`), or share kept-alive connections among concurrent calls.
/// libcurl does all of this, and is what the docker backend uses already
/// (backend/detail/http_client.hpp: loaded with dlopen by a master that
/// uses it, never by workers).
///
/// Credentials, in the order `k8s.credentials` (auto) tries them:
/// 1. in-cluster: `KUBERNETES_SERVICE_HOST`/`PORT` and the service account's
///    `token`, `ca.crt`, `namespace` under `k8s.service_account_dir`
///    (`/var/run/secrets/kubernetes.io/serviceaccount`); the token is
///    re-read (it rotates) at most every second, and at once after a 401;
/// 2. a kubeconfig (`KUBECONFIG`, else `~/.kube/config`), resolved once by
///    `kubectl config view --raw --minify --flatten -o json` (merging, YAML
///    and relative paths are kubectl's business; without kubectl a JSON file
///    is read as is): server, CA, `insecure-skip-tls-verify`, `proxy-url`,
///    token, `tokenFile`, client certificate and key, and exec credential
///    plugins (client.authentication.k8s.io v1/v1beta1, as EKS, GKE and AKS
///    use: run on the executor when no credential is held, when it expired
///    and after a 401), `k8s.context` picks the context;
/// 3. `k8s.api_server`, used as is (e.g. `kubectl proxy`'s http://127.0.0.1:8001).
/// An API server that cannot be reached, or refuses a call, gives a
/// fiber::backend_error starting with "kubernetes: " that carries its Status
/// message; 429/5xx answers are retried (Retry-After), a 401 once with a
/// fresh credential. Once the API server has answered, a pod or Secret create
/// that gets no answer (refused, reset, timed out) or a 429/5xx is retried
/// after 0.2 s doubling to 5 s (jittered) until start_timeout_s.
///
/// ## The pods
/// One per job, `fiber-<run id>-<job name>` in `k8s.namespace` (default: the
/// credentials' namespace, else `default`), `restartPolicy: Never`, image
/// `k8s.image` (default: the master pod's own, when the master runs in a
/// pod; its imagePullSecrets come along), container `worker` running the
/// master's executable at its own path with the job's argv and only the
/// job's environment. The run's secret is never in the pod spec: a Secret
/// `fiber-<run id>` holds it (and the TLS files below) and the pods read it
/// through `valueFrom.secretKeyRef`. Labels `app.kubernetes.io/managed-by=
/// fiber`, `fiber.run=<run id>`, `fiber.worker=<job name>`, `k8s.labels`.
/// Requests = limits: cpu = resources.cpu, memory = resources.memory_mb Mi,
/// `k8s.gpu_resource` (nvidia.com/gpu) = resources.gpu.
/// `automountServiceAccountToken: false` (`k8s.automount_token`),
/// `k8s.service_account`, `k8s.image_pull_policy`; anything else (node
/// selector, tolerations, affinity, security context) through the JSON
/// merge patches `k8s.pod_patch` and `k8s.container_patch`. When the master
/// runs in a pod, the Secret and the workers carry an ownerReference to it:
/// deleting the master's pod (or its Job) deletes them.
///
/// ## Where workers dial
/// `listen_url()`: `tls+tcp://<addr>:0`, addr = `listen_address`, else the
/// local address on the route to the API server (in a pod: its pod IP).
/// TLS is on by default (`k8s.tls`): without `tls_cert`/`tls_key` the
/// launcher makes an ephemeral self-signed ECDSA certificate named
/// `fiber-<run>` (CN and subjectAltName) when it starts (mbedTLS). The
/// listener serves with it from memory: the key never touches the disk; the
/// certificate is written (0600) to the run's 0700 directory. Workers
/// pin it: it is their `tls_ca` and `fiber-<run>` their `tls_server_name`,
/// so a relay with any other certificate fails their handshake. With your
/// own `tls_cert` and no `tls_ca` they pin that certificate (it must be
/// self-signed) under `tls_server_name`, else the address they dial. With
/// `tls_ca` (mutual TLS) they verify the master against that CA and present
/// the same certificate. The Secret, mounted read-only (mode 0400) at the
/// master's paths, holds the certificate, and the private key only in the
/// mutual case. A worker's own services serve over TLS with an ephemeral
/// certificate of its own, which only its master accepts unverified.
///
/// ## Exits
/// One label-selected list, then a watch from its resourceVersion (re-listed
/// after `410 Gone`, a dropped stream or an error, or `k8s.watch_silence_s`
/// (90 s) without an event or bookmark; resumed after the server's timeout;
/// never polled). A pod is lost only once a fresh list lacks it. An event fiber cannot read is
/// logged and skipped. A pod's container terminated with code n: exited
/// (n), or signalled(n-128) for 128 < n <= 192; after cancel(j, s)
/// signalled(s) (as on every backend: terminate -15, kill -9). Lost, with Kubernetes' words
/// as the reason: OOMKilled, Evicted, deleted by someone else, disrupted
/// (node lost: the taint manager's deletion; PodGC). A start failure — the
/// container waiting in ErrImagePull/ImagePullBackOff, InvalidImageName,
/// CreateContainerConfigError, ..., a StartError, or a refused create — ends
/// the job at once as lost with start_failed (Process::join and the Pool
/// raise it as backend_error), not after start_timeout_s. An Unschedulable
/// pod stays pending; its reason is logged (warning). After 30 s without an
/// answer from the API server, live jobs are lost; a 401/403/404 on the list
/// ends them at once.
///
/// ## Nothing left behind
/// * A job's pod is deleted as soon as its end is reported.
/// * Destroying the launcher (when the runtime stops) deletes the run's pods
///   (deletecollection by label, grace 0; one by one without that right) and
///   its Secret, blocking up to ~10 s; exit handlers of live jobs are not called.
/// * A master in a pod: the workers' ownerReference (the garbage collector);
///   at start it deletes what earlier runs in its pod left (a restarted
///   container). A master outside (kubeconfig credentials, or
///   `k8s.api_server`): a watchdog child (`sh` +
///   `kubectl delete pods,secrets -l fiber.run=<run>`, kubernetes/reaper.hpp) runs
///   when the master dies without cleaning up (SIGKILL).
/// * Workers whose master vanished exit within heartbeat_timeout_ms.
///
/// Thread-safety: as every launcher, call it from the runtime thread only
/// (make() may be called anywhere); destroy it there or after the executor stopped.

#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/kubernetes/keys.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>

#include <memory>
#include <string_view>
#include <utility>

#if defined(FIBER_HAS_CURL) && defined(FIBER_HAS_JSON)
#include <fiber/backend/kubernetes/access.hpp>
#include <fiber/backend/kubernetes/launcher.hpp>
#define FIBER_HAS_KUBERNETES_BACKEND 1
#endif

namespace fiber::backend {

/// Policy: job-backed processes are Kubernetes pods (see this file's comment).
struct kubernetes {
  /// The FIBER_BACKEND value that selects it.
  static constexpr std::string_view name = "kubernetes";
  /// Reads the configuration table (k8s.*) and finds the API server and its
  /// credentials now (blocking while kubectl reads a kubeconfig: ~0.1 s);
  /// contacts the API server in the background. Throws fiber::backend_error
  /// for a malformed value, when no credentials are found (saying where it
  /// looked), when fiber was built without libcurl's and nlohmann-json's
  /// headers, or libcurl cannot be loaded.
  static std::shared_ptr<launcher> make(const launch_context& ctx) {
#if defined(FIBER_HAS_KUBERNETES_BACKEND)
    auto opts = detail::kube_options::from_config();
    opts.state_dir = ctx.run_dir;
    auto where = detail::kube::resolve(opts, detail::kube::environment::from_process());
    if (auto w = detail::http::exposure(where.server, where.tls); !w.empty())
      detail::log(log_level::warning, "kubernetes: ", where.source, ": ", w,
                  "; the run's Secret and the credentials go through it");
    return detail::make_started<detail::kube_launcher>(ctx.executor, std::move(opts), std::move(where));
#else
    detail::throw_built_without_http(name); // the headers were missing when fiber was configured
    (void)ctx;
#endif
  }
};

} // namespace fiber::backend

namespace fiber::detail {
#if !defined(FIBER_SEPARATE_COMPILATION)
/// FIBER_BACKEND=kubernetes reaches backend::kubernetes through this
/// registration (backend::from_env does not include this header: see named_backends.hpp);
/// under FIBER_SEPARATE_COMPILATION, fiber/impl/src.hpp registers it instead.
inline const bool kubernetes_backend_registered = register_backend(backend::kubernetes::name,
                                                                   &backend::kubernetes::make);
#endif
static_assert(backend::policy<backend::kubernetes>);
} // namespace fiber::detail
