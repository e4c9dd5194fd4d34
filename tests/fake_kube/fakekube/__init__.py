# SPDX-License-Identifier: BSL-1.0
# fakekube: the modules behind tests/fake_kube/fake_kube.py, a fake Kubernetes
# API server (HTTPS, discovery, pods/secrets/namespaces/events/nodes, watch,
# garbage collection) with an in-process kubelet that runs pods as processes.
