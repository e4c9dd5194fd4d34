# SPDX-License-Identifier: BSL-1.0
# The one Node: its object (capacity, conditions, taints), the scheduler's fit
# check with kube-scheduler's FailedScheduling messages, and the node lifecycle
# controller's reaction to a lost node (NotReady, taint eviction, pod GC).
import threading

from . import objects as O
from . import quantity
from .store import now_rfc3339

TERMINAL = ("Succeeded", "Failed")


def node_object(cfg):
    cap = {"cpu": str(cfg.node_cpu), "memory": str(cfg.node_memory), "pods": str(cfg.node_pods),
           "ephemeral-storage": "100Gi"}
    for spec in cfg.node_resource or []:
        k, _, v = spec.partition("=")
        cap[k] = v
    t = now_rfc3339()
    conds = [
        {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t,
         "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
        {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t,
         "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure"},
        {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t,
         "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available"},
        {"type": "Ready", "status": "True", "lastHeartbeatTime": t, "lastTransitionTime": t,
         "reason": "KubeletReady", "message": "kubelet is posting ready status"},
    ]
    name = cfg.node_name
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]},
            "status": {"capacity": cap, "allocatable": dict(cap), "conditions": conds,
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                     {"type": "Hostname", "address": name}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                       "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                                    "osImage": "fake-kube process kubelet", "containerRuntimeVersion": "fake://1.0",
                                    "kubeletVersion": "v1.32.4", "kubeProxyVersion": "v1.32.4",
                                    "operatingSystem": "linux", "architecture": "amd64"}}}


def _tolerates(tols, taint):
    for t in tols or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def fit_error(node, pod, bound_pods):
    """None if `pod` fits on `node` next to `bound_pods`, else the scheduler's FailedScheduling message."""
    reasons, resources = [], False
    if node is None:
        return "no nodes available to schedule pods"
    if node["spec"].get("unschedulable"):
        reasons = ["node(s) were unschedulable"]
    if not reasons:
        for taint in node["spec"].get("taints") or []:
            if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(pod["spec"].get("tolerations"), taint):
                reasons = [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
                break
    if not reasons:
        labels = node["metadata"].get("labels") or {}
        for k, v in (pod["spec"].get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                reasons = ["node(s) didn't match Pod's node affinity/selector"]
                break
    if not reasons:
        alloc = {k: quantity.parse(v) for k, v in node["status"]["allocatable"].items()}
        used = {}
        for p in bound_pods:
            for k, v in O.pod_requests(p).items():
                used[k] = used.get(k, 0) + v
        if len(bound_pods) + 1 > alloc.get("pods", 110):
            reasons.append("Too many pods")
        for k, v in sorted(O.pod_requests(pod).items()):
            if v > 0 and v > alloc.get(k, 0) - used.get(k, 0):
                reasons.append(f"Insufficient {k}")
        resources = bool(reasons)
    if not reasons:
        return None
    pre = "No preemption victims found for incoming pod." if resources else "Preemption is not helpful for scheduling."
    return (f"0/1 nodes are available: {', '.join('1 ' + r for r in sorted(reasons))}. "
            f"preemption: 0/1 nodes are available: 1 {pre}")


class NodeController:
    """What the control plane does when the node stops reporting (a 'node lost' fault)."""

    def __init__(self, cluster):
        self.c = cluster
        self.store = cluster.store
        self.timers = []
        self.lock = threading.Lock()

    def _later(self, delay, fn, *args):
        t = threading.Timer(max(0.0, delay), self._guard, (fn, args))
        t.daemon = True
        with self.lock:
            self.timers.append(t)
        t.start()

    def _guard(self, fn, args):
        try:
            fn(*args)
        except Exception:
            import traceback
            self.c.log_error("node controller: " + traceback.format_exc())

    def stop(self):
        with self.lock:
            for t in self.timers:
                t.cancel()

    def node_lost(self, not_ready_after=0.0, evict_after=None, pod_gc_after=None):
        """The kubelet and its processes vanish at once; the control plane notices after not_ready_after
        (node-monitor-grace-period, 40-50 s on a real cluster), marks the node Unknown and tainted and its
        pods not Ready; the taint eviction controller deletes each pod after its toleration for
        node.kubernetes.io/unreachable (300 s by default) -- the pods then stay Terminating, as no kubelet
        confirms; if pod_gc_after is given the Node object is deleted then and the pod GC sets the pods
        Failed and removes them."""
        self.c.kubelet.lose_node()
        gen = self.c.kubelet.node_generation
        self._later(not_ready_after, self._mark_unknown, gen, evict_after)
        if pod_gc_after is not None:
            self._later(not_ready_after + pod_gc_after, self._pod_gc, gen)

    def _still(self, gen):
        return self.c.kubelet.node_lost and self.c.kubelet.node_generation == gen

    def _node_pods(self):
        items, _ = self.store.list("pods")
        return [p for p in items if p["spec"].get("nodeName") == self.c.cfg.node_name]

    def _mark_unknown(self, gen, evict_after):
        if not self._still(gen):
            return
        name = self.c.cfg.node_name
        t = now_rfc3339()

        def fn(n):
            for cnd in n["status"]["conditions"]:
                cnd.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                            "message": "Kubelet stopped posting node status.", "lastTransitionTime": t})
            n["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": t},
                                   {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": t}]
        self.store.mutate("nodes", "", name, fn)
        for p in self._node_pods():
            md = p["metadata"]

            def notready(o):
                changed = False
                for cnd in o.get("status", {}).get("conditions") or []:
                    if cnd["type"] == "Ready" and cnd["status"] != "False":
                        cnd["status"], cnd["lastTransitionTime"] = "False", t
                        changed = True
                return changed
            self.store.mutate("pods", md["namespace"], md["name"], notready, md["uid"])
            self.c.kubelet.event(p, "Warning", "NodeNotReady", "Node is not ready", "node-controller")
            if p["status"].get("phase") in TERMINAL:
                continue
            secs = evict_after
            if secs is None:
                secs = 300
                for tol in p["spec"].get("tolerations") or []:
                    if tol.get("key") == "node.kubernetes.io/unreachable" and tol.get("effect") == "NoExecute":
                        secs = tol.get("tolerationSeconds", float("inf"))
            if secs != float("inf"):
                self._later(secs, self._taint_evict, gen, md["namespace"], md["name"], md["uid"])

    def _taint_evict(self, gen, ns, name, uid):
        if not self._still(gen):
            return
        t = now_rfc3339()

        def fn(o):
            conds = o["status"].setdefault("conditions", [])
            conds[:] = [c for c in conds if c["type"] != "DisruptionTarget"]
            conds.append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": t, "reason": "DeletionByTaintManager",
                          "message": "Taint manager: deleting due to NoExecute taint"})
        if self.store.mutate("pods", ns, name, fn, uid) is None:
            return
        p = self.store.get("pods", ns, name)
        self.c.kubelet.event(p, "Normal", "TaintManagerEviction", f"Marking for deletion Pod {ns}/{name}",
                             "taint-eviction-controller")
        try:
            self.c.registry.delete("pods", ns, name, {"preconditions": {"uid": uid}})
        except Exception:
            pass

    def _pod_gc(self, gen):
        if not self._still(gen):
            return
        t = now_rfc3339()
        node = self.store.get("nodes", "", self.c.cfg.node_name)
        if node is not None:
            self.store.remove("nodes", "", node["metadata"]["name"])
        for p in self._node_pods():
            md = p["metadata"]

            def fn(o):
                st = o["status"]
                if st.get("phase") not in TERMINAL:
                    st["phase"] = "Failed"
                conds = st.setdefault("conditions", [])
                conds[:] = [c for c in conds if c["type"] != "DisruptionTarget"]
                conds.append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": t, "reason": "DeletionByPodGC",
                              "message": "PodGC: node no longer exists"})
            self.store.mutate("pods", md["namespace"], md["name"], fn, md["uid"])
            try:
                self.c.registry.delete("pods", md["namespace"], md["name"],
                                       {"gracePeriodSeconds": 0, "preconditions": {"uid": md["uid"]}})
            except Exception:
                pass

    def recover(self):
        """The node comes back: Ready again, untainted (re-registered if it was deleted); pods it had
        are finished: terminating ones removed, others Failed with ContainerStatusUnknown."""
        k = self.c.kubelet
        if not k.node_lost:
            return False
        k.node_generation += 1
        name = self.c.cfg.node_name
        if self.store.get("nodes", "", name) is None:
            node = node_object(self.c.cfg)
            O.new_meta(node, None, "Node")
            self.store.create("nodes", node)
        else:
            fresh = node_object(self.c.cfg)

            def fn(n):
                n["status"]["conditions"] = fresh["status"]["conditions"]
                n["spec"].pop("taints", None)
            self.store.mutate("nodes", "", name, fn)
        for p in self._node_pods():
            md = p["metadata"]
            if md.get("deletionTimestamp"):
                try:
                    self.c.registry.delete("pods", md["namespace"], md["name"],
                                           {"gracePeriodSeconds": 0, "preconditions": {"uid": md["uid"]}})
                except Exception:
                    pass
            elif p["status"].get("phase") not in TERMINAL:
                k.mark_unknown_terminated(p)
        k.node_lost = False
        k.reschedule()
        return True
