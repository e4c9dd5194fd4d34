# SPDX-License-Identifier: BSL-1.0
# The kubelet: starts a pod worker for each new pod, binds pods with the
# scheduler's fit check, records Events, and holds the fault state (failing
# images, node lost) and the container runtime (process or docker).
import os
import signal
import threading
import time

from . import node as N
from . import runtime
from .podstatus import TERMINAL, normalize_image, set_cond
from .podworker import PodWorker
from .store import now_rfc3339


class Kubelet:
    def __init__(self, cluster):
        self.c = cluster
        self.store = cluster.store
        self.cfg = cluster.cfg
        self.pods_dir = os.path.join(cluster.state_dir, "pods")
        os.makedirs(self.pods_dir, exist_ok=True)
        self.workers = {}
        self.lock = threading.RLock()
        self.sched_lock = threading.Lock()
        self.runtime = runtime.make(cluster)
        self.failing = {}  # normalized image -> message (None: default message)
        for img in self.cfg.fail_image or []:
            self.failing[normalize_image(img)] = None
        self.stopping = False
        self.node_lost = False
        self.node_generation = 0

    # -- store hook (called under the store lock: only enqueue) --
    def hook(self, etype, resource, obj, prev):
        if resource == "pods":
            uid = obj["metadata"]["uid"]
            if etype == "ADDED":
                if obj.get("status", {}).get("phase") in TERMINAL:
                    return
                w = PodWorker(self, obj)
                with self.lock:
                    if self.stopping:
                        return
                    self.workers[uid] = w
                w.thread.start()
            else:
                w = self.workers.get(uid)
                if w:
                    w.poke()
                if etype == "DELETED":
                    self.reschedule()
        elif resource == "secrets":
            for w in list(self.workers.values()):
                w.poke()
        elif resource == "nodes":
            self.reschedule()

    def worker_done(self, w):
        with self.lock:
            self.workers.pop(w.uid, None)

    def reschedule(self):
        for w in list(self.workers.values()):
            p = w.pod()
            if p is not None and not p["spec"].get("nodeName"):
                w.poke()

    def try_bind(self, w, pod):
        with self.sched_lock:
            pod = w.pod()
            if pod is None or pod["spec"].get("nodeName"):
                return pod is not None
            node = self.store.get("nodes", "", self.cfg.node_name)
            items, _ = self.store.list("pods")
            bound = [p for p in items if p["spec"].get("nodeName") == self.cfg.node_name
                     and p.get("status", {}).get("phase") not in TERMINAL and p["metadata"]["uid"] != w.uid]
            err = N.fit_error(node, pod, bound)
            if err is None:
                def bind(o):
                    o["spec"]["nodeName"] = self.cfg.node_name
                    set_cond(o.setdefault("status", {}), "PodScheduled", "True")
                if w.update(bind) is not None:
                    self.event(pod, "Normal", "Scheduled",
                               f"Successfully assigned {w.ns}/{w.name} to {self.cfg.node_name}", "default-scheduler")
                return True
            cur = next((c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)
            if not cur or cur.get("message") != err:
                def unsched(o):
                    set_cond(o.setdefault("status", {}), "PodScheduled", "False", "Unschedulable", err)
                w.update(unsched)
                self.event(pod, "Warning", "FailedScheduling", err, "default-scheduler")
            return False

    def event(self, pod, etype, reason, message, component, field_path=None):
        if not self.cfg.events:
            return
        md = pod["metadata"]
        now = now_rfc3339()
        ev = {"kind": "Event", "apiVersion": "v1",
              "metadata": {"name": f"{md['name']}.{time.time_ns():x}", "namespace": md.get("namespace", "default")},
              "involvedObject": {"kind": pod.get("kind", "Pod"), "namespace": md.get("namespace", ""),
                                 "name": md["name"], "uid": md["uid"], "apiVersion": "v1",
                                 "resourceVersion": md.get("resourceVersion", "")},
              "reason": reason, "message": message, "source": {"component": component},
              "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": etype, "eventTime": None,
              "reportingComponent": component, "reportingInstance": ""}
        if component == "kubelet":
            ev["source"]["host"] = self.cfg.node_name
            ev["reportingInstance"] = self.cfg.node_name
        if field_path:
            ev["involvedObject"]["fieldPath"] = field_path
        from .objects import new_meta
        ns = ev["metadata"]["namespace"]
        new_meta(ev, ns, "Event")
        if self.store.get("namespaces", "", ns) is not None:
            self.store.create("events", ev)

    # -- faults --
    def image_failure(self, image):
        n = normalize_image(image)
        if n not in self.failing:
            return None
        msg = self.failing[n]
        if msg:
            return msg
        return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{n}": failed to resolve '
                f'reference "{n}": {n}: not found')

    def set_image_failure(self, image, fail, message=None):
        n = normalize_image(image)
        if fail:
            self.failing[n] = message
        else:
            self.failing.pop(n, None)
        for w in list(self.workers.values()):
            w.poke()

    def worker_for(self, ns, name):
        p = self.store.get("pods", ns, name)
        if p is None:
            return None, None
        return p, self.workers.get(p["metadata"]["uid"])

    def inject(self, ns, name, kind, **args):
        p, w = self.worker_for(ns, name)
        if p is None:
            return "notfound"
        if w is None or p.get("status", {}).get("phase") in TERMINAL or not p["spec"].get("nodeName"):
            return "notrunning"
        if kind == "evict":
            args.setdefault("message", self.default_evict_message(p))
        w.fault = (kind, args)
        w.poke()
        return "ok"

    def default_evict_message(self, p):
        c = p["spec"]["containers"][0]
        req = ((c.get("resources") or {}).get("requests") or {}).get("memory", "0")
        return ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
                f"Container {c['name']} was using 1048576Ki, request is {req}, has larger consumption of memory. ")

    def lose_node(self):
        self.node_lost = True
        self.node_generation += 1
        for w in list(self.workers.values()):
            w.lost = True
            w.poke()

    def mark_unknown_terminated(self, p):
        md = p["metadata"]

        def fn(o):
            st = o["status"]
            st["phase"] = "Failed"
            for cs in st.get("containerStatuses") or []:
                if "running" in cs.get("state", {}) or "waiting" in cs.get("state", {}):
                    started = cs["state"].get("running", {}).get("startedAt")
                    cs["state"] = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                                  "message": "The container could not be located when the pod was terminated",
                                                  "startedAt": started, "finishedAt": None}}
                    cs["ready"], cs["started"] = False, False
            for cnd in st.get("conditions") or []:
                if cnd["type"] in ("Ready", "ContainersReady"):
                    cnd["status"], cnd["reason"] = "False", "PodFailed"
                    cnd.pop("message", None)
        self.store.mutate("pods", md["namespace"], md["name"], fn, md["uid"])

    def processes(self):
        out = []
        for w in list(self.workers.values()):
            for c in w.ctrs:
                d = self.runtime.describe(c.handle) if c.handle is not None else None
                if d:
                    out.append(dict({"namespace": w.ns, "pod": w.name, "uid": w.uid, "container": c.name}, **d))
        return out

    def stop(self):
        with self.lock:
            self.stopping = True
            ws = list(self.workers.values())
        for w in ws:
            w.poke()
        for w in ws:
            for c in w.ctrs:
                w.signal(c, signal.SIGKILL)
        for w in ws:
            w.thread.join(10)
        self.runtime.shutdown()  # after the workers reaped their processes: the guardian has nothing left to kill
