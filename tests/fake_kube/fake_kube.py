#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
# A fake Kubernetes API server for fiber's tests: HTTPS, discovery, pods (with an
# in-process kubelet that runs each pod as a local process), secrets, watch, GC and
# fault knobs. Prints one JSON "ready" line (see README.md); exits on SIGTERM.
import argparse
import ctypes
import json
import os
import shutil
import signal
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakekube.cluster import Cluster  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__ or "fake Kubernetes API server")
    a = p.add_argument
    a("--state-dir", help="certificates, logs, kubeconfig, pod logs (default: a temporary directory removed at exit)")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=0, help="0 = any free port (see the ready line)")
    a("--ready-file", help="also write the ready JSON to this file (atomically)")
    a("--token", action="append", metavar="TOKEN[:USER[:GROUP,...]]", help="a valid bearer token (repeatable)")
    a("--token-file", help="kube-apiserver static token CSV: token,user,uid,\"group1,group2\"")
    a("--admin-token", help="bearer token of the /fake/ control API (default: random)")
    a("--anonymous-auth", choices=["true", "false"], default="true",
      help="true (kube-apiserver's default): no credentials = system:anonymous, 403 outside /version, /healthz...; "
           "false: 401")
    a("--namespace", action="append", default=None,
      help="extra namespaces besides default, kube-system, kube-public, kube-node-lease (default: fiber)")
    a("--node-name", default="fake-node")
    a("--node-cpu", default="4")
    a("--node-memory", default="8Gi")
    a("--node-pods", default="110")
    a("--node-resource", action="append", metavar="NAME=QTY", help="extended resource, e.g. nvidia.com/gpu=1")
    a("--fail-image", action="append", metavar="IMAGE", help="pulls of this image fail (ErrImagePull)")
    a("--image-pull-backoff", type=float, default=10.0, help="first image pull back-off, seconds (real: 10)")
    a("--restart-backoff", type=float, default=10.0, help="first container restart back-off, seconds (real: 10)")
    a("--config-retry-seconds", type=float, default=1.0,
      help="retry period of a CreateContainerConfigError (also retried when a Secret changes)")
    a("--min-grace-seconds", type=float, default=2.0, help="the kubelet's minimum termination grace (real: 2)")
    a("--schedule-delay", type=float, default=0.0, help="seconds before the scheduler binds a new pod")
    a("--start-delay", type=float, default=0.0, help="seconds a pod spends in ContainerCreating")
    a("--reschedule-seconds", type=float, default=10.0, help="retry period for unschedulable pods")
    a("--watch-history", type=int, default=1000, help="events kept for watches (older resourceVersions: 410)")
    a("--bookmark-interval", type=float, default=60.0, help="seconds between BOOKMARK events (when allowed)")
    a("--min-request-timeout", type=float, default=1800.0, help="watch timeout without timeoutSeconds: x(1..2)")
    a("--start-resource-version", type=int, default=1000)
    a("--pass-env", action="append", metavar="PATTERN",
      help="environment variables (fnmatch pattern) of the fake passed to every container, as an image's ENV")
    a("--workdir", help="default working directory of containers (default: the pod's sandbox directory)")
    a("--sa-dir-env", metavar="NAME", help="also set NAME=<service-account dir> in every container")
    a("--kubelet", choices=["process", "docker"], default="process",
      help="process: each container is a local process group (fast; the image is ignored); docker: a Docker "
           "container (--network host) when a daemon is available")
    a("--no-events", dest="events", action="store_false", help="do not record core/v1 Events")
    a("--die-with-parent", action="store_true", help="exit (SIGTERM) when the parent process dies")
    a("--log-file", help="request log (default: STATE/requests.log)")
    a("--verbose", action="store_true", help="errors to stderr too")
    cfg = p.parse_args(argv)
    if cfg.namespace is None:
        cfg.namespace = ["fiber"]
    return cfg


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    if cfg.die_with_parent:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: stop.set())
    temp = cfg.state_dir is None
    state_dir = tempfile.mkdtemp(prefix="fake-kube-") if temp else os.path.abspath(cfg.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    cluster = Cluster(cfg, state_dir)
    info = cluster.start()
    line = json.dumps(info, separators=(",", ":"))
    if cfg.ready_file:
        tmp = cfg.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, cfg.ready_file)
    print(line, flush=True)
    if cfg.die_with_parent and os.getppid() == 1:
        stop.set()
    while not stop.wait(1.0):
        pass
    cluster.stop()
    if temp:
        shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
