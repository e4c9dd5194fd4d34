# SPDX-License-Identifier: BSL-1.0
# How the kubelet reports a pod: image names as the runtime prints them, pod
# conditions in their usual order, and each container's status (waiting /
# running / terminated) from the Ctr record the pod worker keeps.
import hashlib
import os

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
