# SPDX-License-Identifier: BSL-1.0
# The kubelet: binds each new pod (via the scheduler's fit check), then runs its
# containers as local process groups and reports status as a real kubelet does
# (ContainerCreating -> Running -> Succeeded/Failed), with image-pull, config and
# start errors, grace-period termination, restarts, and fault injection.
import hashlib
import os
import re
import signal
import threading
import time
import traceback

from . import node as N
from . import runtime
from .runtime import PullFailure, StartFailure
from .errors import ApiError
from .registry import decode_secret_value
from .store import now_rfc3339

TERMINAL = ("Succeeded", "Failed")
COND_ORDER = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
def normalize_image(img):
    name, digest = (img.split("@", 1) + [""])[:2] if "@" in img else (img, "")
    tag = ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    parts = name.split("/")
    if len(parts) == 1:
        name = "docker.io/library/" + name
    elif not ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        name = "docker.io/" + name
    return name + ("@" + digest if digest else ":" + (tag or "latest"))


def image_with_tag(img):
    """applyDefaultImageTag: what the kubelet's pull messages quote."""
    last = img.rsplit("/", 1)[-1]
    return img if (":" in last or "@" in img) else img + ":latest"


def _hex(*parts, n=64):
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


class ConfigError(Exception):
    pass


def set_cond(st, ctype, status, reason=None, message=None, now=None):
    now = now or now_rfc3339()
    conds = st.setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            if c["status"] != status:
                c["lastTransitionTime"] = now
            c["status"] = status
            break
    else:
        c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
        conds.append(c)
    for k, v in (("reason", reason), ("message", message)):
        if v:
            c[k] = v
        else:
            c.pop(k, None)
    conds.sort(key=lambda x: COND_ORDER.index(x["type"]) if x["type"] in COND_ORDER else len(COND_ORDER))


_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(s, env):
    """$(VAR) expansion as in k8s.io/kubernetes/third_party/forked/golang/expansion: $$ escapes."""
    def rep(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(rep, s)


class Ctr:
    """One container of a pod: its process, state, and what its status reports."""

    def __init__(self, spec, sandbox):
        self.spec = spec
        self.name = spec["name"]
        self.sandbox = sandbox
        self.state = "waiting"
        self.waiting = ("ContainerCreating", None)
        self.handle = None
        self.started_at = None
        self.exit = None  # (code, reason, message, finished_at)
        self.oom = False
        self.restarts = 0
        self.last_state = {}
        self.container_id = None
        self.image_id = None
        self.ever_ran = False
        self.restart_at = None
        self.waiter = None

    def log_path(self, restart=None):
        r = self.restarts if restart is None else restart
        return os.path.join(self.sandbox, f"{self.name}.{r}.log")

    def status(self):
        s = {"name": self.name, "state": {}, "lastState": self.last_state, "ready": self.state == "running",
             "restartCount": self.restarts,
             "image": normalize_image(self.spec["image"]) if self.image_id else self.spec["image"],
             "imageID": self.image_id or "", "started": self.state == "running"}
        if self.container_id:
            s["containerID"] = self.container_id
        if self.state == "running":
            s["state"] = {"running": {"startedAt": now_rfc3339(self.started_at)}}
        elif self.state == "terminated":
            code, reason, msg, fin = self.exit
            t = {"exitCode": code, "reason": reason, "startedAt": now_rfc3339(self.started_at or fin),
                 "finishedAt": now_rfc3339(fin)}
            if msg:
                t["message"] = msg
            if self.container_id:
                t["containerID"] = self.container_id
            s["state"] = {"terminated": t}
        else:
            w = {"reason": self.waiting[0]}
            if self.waiting[1]:
                w["message"] = self.waiting[1]
            s["state"] = {"waiting": w}
        return s


class PodWorker:
    def __init__(self, kubelet, pod):
        self.k = kubelet
        self.c = kubelet.c
        md = pod["metadata"]
        self.ns, self.name, self.uid = md["namespace"], md["name"], md["uid"]
        self.cv = threading.Condition()
        self.poked = False
        self.plock = threading.Lock()
        self.fault = None
        self.lost = False
        self.sandbox = os.path.join(kubelet.pods_dir, f"{self.ns}_{self.name}_{self.uid}")
        self.ctrs = [Ctr(c, self.sandbox) for c in pod["spec"].get("containers") or []]
        self.thread = threading.Thread(target=self.run, name=f"pod-{self.name}", daemon=True)
        self.started = None
        self.pod_ip_set = False

    # -- plumbing --
    def poke(self):
        with self.cv:
            self.poked = True
            self.cv.notify_all()

    def wait(self, timeout):
        with self.cv:
            if not self.poked and not self.k.stopping:
                self.cv.wait(timeout)
            self.poked = False

    def pod(self):
        p = self.c.store.get("pods", self.ns, self.name)
        return p if p is not None and p["metadata"]["uid"] == self.uid else None

    def update(self, fn):
        return self.c.store.mutate("pods", self.ns, self.name, fn, self.uid)

    def event(self, etype, reason, message, component="kubelet", ctr=None):
        p = self.pod()
        if p is not None:
            self.k.event(p, etype, reason, message, component,
                         f"spec.containers{{{ctr.name}}}" if ctr else None)

    def interrupted(self):
        if self.k.stopping:
            return "stop"
        if self.lost:
            return "lost"
        p = self.pod()
        if p is None:
            return "gone"
        if p["metadata"].get("deletionTimestamp"):
            return "deleting"
        if self.fault:
            return "fault"
        return None

    # -- main --
    def run(self):
        try:
            if self.schedule():
                self.sync()
        except Exception:
            self.c.log_error(f"kubelet {self.ns}/{self.name}: " + traceback.format_exc())
        finally:
            self.kill_all(0)
            self.k.worker_done(self)

    def schedule(self):
        if self.c.cfg.schedule_delay:
            self.wait(self.c.cfg.schedule_delay)
        while True:
            intr = self.interrupted()
            if intr in ("stop", "gone", "lost"):
                return False
            p = self.pod()
            node = p["spec"].get("nodeName")
            if node:
                if node == self.c.cfg.node_name and not self.k.node_lost:
                    return True
                self.wait(5)  # bound to a node with no kubelet here: stays Pending, as on a real cluster
                continue
            if intr == "deleting":  # unscheduled pod held by a finalizer
                self.wait(5)
                continue
            if self.k.try_bind(self, p):
                return True
            self.wait(self.c.cfg.reschedule_seconds)

    def set_status(self, phase=None, reason=None, message=None, extra=None):
        now = now_rfc3339()
        ready = all(c.state == "running" for c in self.ctrs) and bool(self.ctrs)
        unready = [c.name for c in self.ctrs if c.state != "running"]

        def fn(o):
            st = o.setdefault("status", {})
            ph = phase or st.get("phase", "Pending")
            st["phase"] = ph
            if reason:
                st["reason"], st["message"] = reason, message
            st["hostIP"] = "127.0.0.1"
            st["hostIPs"] = [{"ip": "127.0.0.1"}]
            if self.pod_ip_set:
                st["podIP"] = "127.0.0.1"
                st["podIPs"] = [{"ip": "127.0.0.1"}]
            st["startTime"] = now_rfc3339(self.started)
            set_cond(st, "PodReadyToStartContainers", "True" if self.pod_ip_set and ph not in TERMINAL else "False", now=now)
            set_cond(st, "Initialized", "True", now=now)
            if ph == "Succeeded":
                rs, rr, rm = "False", "PodCompleted", None
            elif ph == "Failed":
                rs, rr, rm = "False", "PodFailed", None
            elif ready:
                rs, rr, rm = "True", None, None
            else:
                rs, rr, rm = "False", "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
            set_cond(st, "Ready", rs, rr, rm, now)
            set_cond(st, "ContainersReady", rs, rr, rm, now)
            if extra:
                extra(st)
            st["containerStatuses"] = [c.status() for c in self.ctrs]
        self.update(fn)

    def sync(self):
        self.started = time.time()
        os.makedirs(self.sandbox, exist_ok=True)
        self.set_status("Pending")
        if self.c.cfg.start_delay:
            self.wait(self.c.cfg.start_delay)
        self.pod_ip_set = True
        for ctr in self.ctrs:
            if not self.prepare(ctr):
                return
            self.start(ctr)
        self.set_status(self.phase())
        self.monitor()

    # -- container preparation --
    def prepare(self, ctr):
        """Pull the image (or fail as configured) and resolve the environment. False if interrupted."""
        backoff = self.c.cfg.image_pull_backoff
        img = ctr.spec["image"]
        pulled_msg = None
        while True:
            if self.handle(self.interrupted()):
                return False
            err = self.k.image_failure(img)
            if err is None:
                try:
                    self.k.runtime.pull(img, ctr.spec.get("imagePullPolicy", "IfNotPresent"))
                    break
                except PullFailure as e:
                    if e.reason == "ErrImageNeverPull":
                        self.event("Warning", "ErrImageNeverPull", str(e), ctr=ctr)
                        ctr.waiting = ("ErrImageNeverPull", str(e))
                        self.set_status("Pending")
                        self.wait(backoff)
                        continue
                    err = str(e)
            self.event("Normal", "Pulling", f'Pulling image "{image_with_tag(img)}"', ctr=ctr)
            self.event("Warning", "Failed", f'Failed to pull image "{image_with_tag(img)}": {err}', ctr=ctr)
            self.event("Warning", "Failed", "Error: ErrImagePull", ctr=ctr)
            ctr.waiting = ("ErrImagePull", err)
            self.set_status("Pending")
            self.wait(min(backoff, 1.0))
            if self.handle(self.interrupted()):
                return False
            if self.k.image_failure(img) is None and self.k.runtime.name == "process":
                continue
            msg = f'Back-off pulling image "{image_with_tag(img)}"'
            self.event("Normal", "BackOff", msg, ctr=ctr)
            self.event("Warning", "Failed", "Error: ImagePullBackOff", ctr=ctr)
            ctr.waiting = ("ImagePullBackOff", msg)
            self.set_status("Pending")
            deadline = time.time() + backoff
            while time.time() < deadline and (self.k.image_failure(img) is not None or self.k.runtime.name != "process"):
                if self.interrupted():
                    break
                self.wait(deadline - time.time())
            backoff = min(backoff * 2, 300)
        if ctr.spec.get("imagePullPolicy") == "Always":
            self.event("Normal", "Pulling", f'Pulling image "{image_with_tag(img)}"', ctr=ctr)
            pulled_msg = (f'Successfully pulled image "{image_with_tag(img)}" in 1ms (1ms including waiting). '
                          f'Image size: 0 bytes.')
        else:
            pulled_msg = f'Container image "{img}" already present on machine'
        self.event("Normal", "Pulled", pulled_msg, ctr=ctr)
        last_err = None
        while True:
            if self.handle(self.interrupted()):
                return False
            try:
                ctr.env = self.build_env(ctr)
                break
            except ConfigError as e:
                if str(e) != last_err:
                    self.event("Warning", "Failed", f"Error: {e}", ctr=ctr)
                    last_err = str(e)
                    ctr.waiting = ("CreateContainerConfigError", str(e))
                    self.set_status("Pending")
                self.wait(self.c.cfg.config_retry_seconds)
        return True

    def build_env(self, ctr):
        cfg = self.c.cfg
        p = self.pod()
        base = self.k.runtime.base_env()
        base["HOSTNAME"] = self.name
        port = str(self.c.port)
        svc = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port,
               "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
               f"KUBERNETES_PORT_{port}_TCP": f"tcp://127.0.0.1:{port}", f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
               f"KUBERNETES_PORT_{port}_TCP_PORT": port, f"KUBERNETES_PORT_{port}_TCP_ADDR": "127.0.0.1"}
        if cfg.sa_dir_env:
            svc[cfg.sa_dir_env] = self.c.sa_dir
        env = {}
        for src in ctr.spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if src.get("secretRef"):
                ref = src["secretRef"]
                sec = self.c.store.get("secrets", self.ns, ref.get("name", ""))
                if sec is None:
                    if ref.get("optional"):
                        continue
                    raise ConfigError(f'secret "{ref.get("name", "")}" not found')
                for k in (sec.get("data") or {}):
                    env[prefix + k] = decode_secret_value(sec, k).decode(errors="replace")
            elif src.get("configMapRef"):
                ref = src["configMapRef"]
                if not ref.get("optional"):
                    raise ConfigError(f'configmap "{ref.get("name", "")}" not found')
        lookup = dict(svc)
        lookup.update(env)
        for e in ctr.spec.get("env") or []:
            name, vf = e["name"], e.get("valueFrom")
            if vf is None:
                val = expand(e.get("value", ""), lookup)
            elif vf.get("secretKeyRef"):
                ref = vf["secretKeyRef"]
                sec = self.c.store.get("secrets", self.ns, ref.get("name", ""))
                if sec is None:
                    if ref.get("optional"):
                        continue
                    raise ConfigError(f'secret "{ref.get("name", "")}" not found')
                if ref["key"] not in (sec.get("data") or {}):
                    if ref.get("optional"):
                        continue
                    raise ConfigError(f"couldn't find key {ref['key']} in Secret {self.ns}/{ref['name']}")
                val = decode_secret_value(sec, ref["key"]).decode(errors="replace")
            elif vf.get("configMapKeyRef"):
                ref = vf["configMapKeyRef"]
                if ref.get("optional"):
                    continue
                raise ConfigError(f'configmap "{ref.get("name", "")}" not found')
            elif vf.get("fieldRef"):
                val = self.field_ref(p, vf["fieldRef"].get("fieldPath", ""))
            elif vf.get("resourceFieldRef"):
                val = self.resource_ref(ctr, vf["resourceFieldRef"])
            else:
                val = ""
            env[name] = val
            lookup[name] = val
        out = dict(base)
        out.update(svc)
        out.update(env)
        return out

    def field_ref(self, p, path):
        md = p["metadata"]
        m = re.match(r"^metadata\.(labels|annotations)\['(.*)'\]$", path)
        if m:
            return (md.get(m.group(1)) or {}).get(m.group(2), "")
        simple = {"metadata.name": md["name"], "metadata.namespace": md["namespace"], "metadata.uid": md["uid"],
                  "spec.nodeName": p["spec"].get("nodeName", ""),
                  "spec.serviceAccountName": p["spec"].get("serviceAccountName", ""),
                  "status.hostIP": "127.0.0.1", "status.hostIPs": "127.0.0.1",
                  "status.podIP": "127.0.0.1", "status.podIPs": "127.0.0.1"}
        if path in simple:
            return simple[path]
        if path in ("metadata.labels", "metadata.annotations"):
            d = md.get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
        raise ConfigError(f"unsupported fieldPath: {path}")

    def resource_ref(self, ctr, ref):
        from . import quantity
        import math
        res = ref.get("resource", "")
        kind, _, rname = res.partition(".")
        vals = (ctr.spec.get("resources") or {}).get(kind) or {}
        if rname in vals:
            q = quantity.parse(vals[rname])
        else:
            node = self.c.store.get("nodes", "", self.c.cfg.node_name)
            alloc = node["status"]["allocatable"] if node else {}
            q = quantity.parse(alloc.get(rname, "0"))
        div = quantity.parse(ref.get("divisor", "1") or "1")
        return str(math.ceil(q / div))

    # -- processes --
    def start(self, ctr):
        env = ctr.env
        cmd = [expand(a, env) for a in ctr.spec.get("command") or []]
        args = [expand(a, env) for a in ctr.spec.get("args") or []]
        rt = self.k.runtime
        ctr.container_id = rt.id_prefix + _hex(self.uid, ctr.name, str(ctr.restarts))
        ctr.image_id = normalize_image(ctr.spec["image"]).rsplit(":", 1)[0] + "@sha256:" + _hex(ctr.spec["image"])
        err = None
        try:
            with self.plock:
                ctr.handle = rt.start(self, ctr, cmd, args, env, ctr.log_path())
        except StartFailure as e:
            err = str(e)
        self.event("Normal", "Created", f"Created container {ctr.name}", ctr=ctr)
        now = time.time()
        ctr.started_at = now
        ctr.ever_ran = True
        if err:
            ctr.state = "terminated"
            ctr.exit = (128, "StartError", err, now)
            self.event("Warning", "Failed", f"Error: {err}", ctr=ctr)
            return
        ctr.state = "running"
        self.event("Normal", "Started", f"Started container {ctr.name}", ctr=ctr)
        ctr.waiter = threading.Thread(target=self._wait, args=(ctr, ctr.handle), daemon=True,
                                      name=f"wait-{self.name}-{ctr.name}")
        ctr.waiter.start()

    def _wait(self, ctr, handle):
        code, oom = self.k.runtime.wait(handle)
        fin = time.time()
        if ctr.oom or oom:
            reason, code = "OOMKilled", 137
        else:
            reason = "Completed" if code == 0 else "Error"
        ctr.exit = (code, reason, None, fin)
        ctr.state = "terminated"
        self.poke()

    def signal(self, ctr, sig):
        if ctr.handle is not None and ctr.state == "running":
            self.k.runtime.signal(ctr.handle, sig)

    def running(self):
        return [c for c in self.ctrs if c.state == "running"]

    def kill_all(self, grace, events=True):
        """SIGTERM, then SIGKILL after max(grace, kubelet minimum); grace 0 kills at once."""
        run = self.running()
        if not run:
            return
        if grace > 0:
            for c in run:
                if events:
                    self.event("Normal", "Killing", f"Stopping container {c.name}", ctr=c)
                self.signal(c, signal.SIGTERM)
            grace = max(grace, self.c.cfg.min_grace_seconds)
            deadline = time.time() + grace
            while self.running() and time.time() < deadline and not self.k.stopping:
                self.wait(min(deadline - time.time(), 1.0))
                p = self.pod()
                if p is None or self.lost:
                    deadline = time.time()
                else:
                    g = p["metadata"].get("deletionGracePeriodSeconds")
                    if g is not None and g < grace:
                        grace = max(g, self.c.cfg.min_grace_seconds) if g > 0 else 0
                        deadline = min(deadline, time.time() + grace)
        for c in self.running():
            self.signal(c, signal.SIGKILL)
        for c in self.ctrs:
            if c.waiter is not None:
                c.waiter.join(10)

    # -- lifecycle after start --
    def phase(self):
        states = [c.state for c in self.ctrs]
        if any(c.restart_at for c in self.ctrs) or "running" in states:
            return "Running"
        if "waiting" in states:
            return "Pending"
        return "Succeeded" if all(c.exit[0] == 0 for c in self.ctrs) else "Failed"

    def should_restart(self, ctr):
        rp = self.pod()["spec"].get("restartPolicy", "Always")
        return rp == "Always" or (rp == "OnFailure" and ctr.exit[0] != 0)

    def monitor(self):
        reported = [c.state for c in self.ctrs]
        deadline_s = (self.pod() or {}).get("spec", {}).get("activeDeadlineSeconds")
        while True:
            if self.handle(self.interrupted()):
                return
            now = time.time()
            changed = False
            for c in self.ctrs:
                if c.state == "terminated" and reported[self.ctrs.index(c)] != "terminated" and not c.restart_at:
                    changed = True
                    if self.should_restart(c):
                        code, reason, msg, fin = c.exit
                        c.restart_at = now + min(self.c.cfg.restart_backoff * (2 ** c.restarts), 300)
                        c.last_state = c.status()["state"]
                        c.state = "waiting"
                        c.waiting = ("CrashLoopBackOff",
                                     f"back-off {int(c.restart_at - now)}s restarting failed container={c.name} "
                                     f"pod={self.name}_{self.ns}({self.uid})")
                        self.event("Warning", "BackOff",
                                   f"Back-off restarting failed container {c.name} in pod {self.name}_{self.ns}({self.uid})", ctr=c)
                if c.restart_at and now >= c.restart_at:
                    c.restart_at = None
                    c.restarts += 1
                    self.start(c)
                    changed = True
            if changed or [c.state for c in self.ctrs] != reported:
                reported = [c.state for c in self.ctrs]
                ph = self.phase()
                self.set_status(ph)
                if ph in TERMINAL:
                    self.k.reschedule()
                    return
            timeout = 5.0
            for c in self.ctrs:
                if c.restart_at:
                    timeout = min(timeout, max(0.0, c.restart_at - now))
            if deadline_s:
                left = self.started + deadline_s - now
                if left <= 0:
                    self.event("Normal", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline", "kubelet")
                    self.kill_all(self.pod()["spec"].get("terminationGracePeriodSeconds", 30))
                    self.terminal_status("Failed", "DeadlineExceeded",
                                         "Pod was active on the node longer than the specified deadline")
                    return
                timeout = min(timeout, left)
            self.wait(timeout)

    def terminal_status(self, phase=None, reason=None, message=None, extra=None):
        for c in self.ctrs:
            c.restart_at = None
            if c.state == "waiting" and c.last_state.get("terminated"):
                c.state = "terminated"
                t = c.last_state["terminated"]
                c.exit = (t["exitCode"], t["reason"], t.get("message"), time.time())
        if phase is None:
            done = [c for c in self.ctrs if c.state == "terminated"]
            phase = "Succeeded" if len(done) == len(self.ctrs) and all(c.exit[0] == 0 for c in done) else "Failed"
        self.set_status(phase, reason, message, extra)
        self.k.reschedule()

    def handle(self, intr):
        """React to an interruption; True when this worker is done."""
        if intr is None:
            return False
        if intr in ("stop", "gone", "lost"):
            self.kill_all(0, events=False)
            return True
        if intr == "deleting":
            p = self.pod()
            self.kill_all(p["metadata"].get("deletionGracePeriodSeconds", 0))
            if self.pod() is not None and not self.lost:
                self.terminal_status()
                try:  # the status manager's final delete, as the real kubelet does
                    self.c.registry.delete("pods", self.ns, self.name,
                                           {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}})
                except ApiError:
                    pass
            self.k.reschedule()
            return True
        if intr == "fault":
            kind, args = self.fault
            self.fault = None
            if kind == "oom":
                target = [c for c in self.running() if args.get("container") in (None, c.name)][:1]
                for c in target:
                    c.oom = True
                    self.signal(c, signal.SIGKILL)
                return False
            if kind == "evict":
                msg = args["message"]
                self.event("Warning", "Evicted", msg)
                self.kill_all(args.get("grace_seconds", 0))

                def extra(st):
                    set_cond(st, "DisruptionTarget", "True", "TerminationByKubelet", msg)
                    st["conditions"].sort(key=lambda x: -1 if x["type"] == "DisruptionTarget" else 0)
                self.terminal_status("Failed", "Evicted", msg, extra)
                return True
        return False


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
