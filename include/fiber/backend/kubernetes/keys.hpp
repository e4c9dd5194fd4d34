// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/keys.hpp
/// The kubernetes backend's configuration keys (k8s.*), registered with
/// fiber's configuration table wherever this header is included; from_env
/// includes it, so they exist even where the launcher is not compiled in.

#include <fiber/backend/detail/named_backends.hpp>

#include <string_view>

namespace fiber::detail {

/// The k8s.* keys, in config_keys_text's form (docs/reference/config.md).
inline constexpr std::string_view kube_config_keys = R"(
k8s.namespace [] namespace of the kubernetes backend's pods (default: the kubeconfig context's, the master pod's,
    or default)
k8s.image [] image of the worker pods (default: the master pod's own image)
k8s.image_pull_policy [] Always | IfNotPresent | Never (default: the cluster's)
k8s.service_account [] service account of the worker pods (default: the namespace's)
k8s.automount_token [false] mount the service account token into worker pods
k8s.gpu_resource [nvidia.com/gpu] extended resource that resources.gpu requests
k8s.labels [] more pod labels, comma-separated key=value
k8s.pod_patch [] JSON merge patch (RFC 7386) applied to each worker pod, or @file: node selector, tolerations,
    ...
k8s.container_patch [] JSON merge patch applied to the worker container, or @file
k8s.credentials [auto] auto (in-cluster, then kubeconfig, then k8s.api_server) | in-cluster | kubeconfig |
    api-server
k8s.context [] kubeconfig context (default: its current context)
k8s.api_server [] API server URL used as is, e.g. http://127.0.0.1:8001 (kubectl proxy)
k8s.service_account_dir [/var/run/secrets/kubernetes.io/serviceaccount] in-cluster credentials: token, ca.crt,
    namespace
k8s.kubectl [kubectl] kubectl, to resolve a kubeconfig and clean up after a killed master
k8s.tls [true] workers dial tls+tcp:// and pin the master's certificate (an ephemeral self-signed one when tls_cert
    is not set)
k8s.watch_silence_s [90] {1..3600} a pod watch that carries no event or bookmark this long is cancelled and the pods
    listed again (the API server bookmarks every minute)
)";

/// Registers them, and the name "kubernetes", during static initialization.
inline const bool kube_keys_registered = register_backend_keys("kubernetes", "fiber/backend/kubernetes.hpp",
                                                               kube_config_keys);

} // namespace fiber::detail
