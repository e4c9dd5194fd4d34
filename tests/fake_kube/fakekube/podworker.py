# SPDX-License-Identifier: BSL-1.0
# One pod's life on the fake node, in its own thread: scheduling, image pull and
# config errors, starting containers through the runtime, restarts, deadlines,
# grace-period termination, faults (evict, OOM, node lost), status updates.
import os
import signal
import threading
import time
import traceback

from . import podenv
from .errors import ApiError
from .podenv import ConfigError, expand
from .podstatus import TERMINAL, Ctr, _hex, image_with_tag, normalize_image, set_cond
from .runtime import PullFailure, StartFailure
from .store import now_rfc3339


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
        # As start() left them: an end since (the waiter's, or a start error)
        # is monitor()'s to see, with its restart decided.
        states = ["running"] * len(self.ctrs)
        self.set_status(self.phase(states))
        self.monitor(states)

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
        return podenv.build_env(self, ctr)

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
    def phase(self, states=None):
        if states is None:
            states = [c.state for c in self.ctrs]
        if any(c.restart_at for c in self.ctrs) or "running" in states:
            return "Running"
        if "waiting" in states:
            return "Pending"
        return "Succeeded" if all(c.exit[0] == 0 for c in self.ctrs) else "Failed"

    def should_restart(self, ctr):
        rp = self.pod()["spec"].get("restartPolicy", "Always")
        return rp == "Always" or (rp == "OnFailure" and ctr.exit[0] != 0)

    def monitor(self, reported):
        deadline_s = (self.pod() or {}).get("spec", {}).get("activeDeadlineSeconds")
        while True:
            if self.handle(self.interrupted()):
                return
            now = time.time()
            changed = False
            # One snapshot decides this round: a waiter thread may end a
            # container at any moment, and one seen ended here without its
            # restart decided would make the pod look Failed (the next round,
            # woken by the waiter's poke, sees it).
            states = [c.state for c in self.ctrs]
            for i, c in enumerate(self.ctrs):
                if states[i] == "terminated" and reported[i] != "terminated" and not c.restart_at:
                    changed = True
                    if self.should_restart(c):
                        code, reason, msg, fin = c.exit
                        c.restart_at = now + min(self.c.cfg.restart_backoff * (2 ** c.restarts), 300)
                        c.last_state = c.status()["state"]
                        c.state = states[i] = "waiting"
                        c.waiting = ("CrashLoopBackOff",
                                     f"back-off {int(c.restart_at - now)}s restarting failed container={c.name} "
                                     f"pod={self.name}_{self.ns}({self.uid})")
                        self.event("Warning", "BackOff",
                                   f"Back-off restarting failed container {c.name} in pod {self.name}_{self.ns}({self.uid})", ctr=c)
                if c.restart_at and now >= c.restart_at:
                    c.restart_at = None
                    c.restarts += 1
                    self.start(c)
                    states[i] = "running"  # an end since start() is the next round's
                    changed = True
            if changed or states != reported:
                if [c.state for c in self.ctrs] != states:
                    self.poke()  # ended since the snapshot: another round at once
                reported = states
                ph = self.phase(states)
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
