# SPDX-License-Identifier: BSL-1.0
# The fake's own control API under /fake/ (admin bearer token): API-call counts,
# tokens, client certificates, fault knobs (image pull failure, node capacity,
# eviction, OOM kill, node lost, watch expiry/drop/black hole/raw lines, compaction, RBAC
# denials, errors, held answers, outages).
import collections
import json
import threading


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.requests = collections.Counter()
            self.by_user = collections.defaultdict(collections.Counter)
            self.by_code = collections.Counter()
            self.open_watches = getattr(self, "open_watches", 0)  # open streams survive a reset

    def count(self, key, code, user):
        with self.lock:
            self.requests[key] += 1
            self.by_user[user][key] += 1
            self.by_code[str(code)] += 1

    def watch_open(self, d):
        with self.lock:
            self.open_watches += d

    def snapshot(self):
        with self.lock:
            return {"total": sum(self.requests.values()), "requests": dict(self.requests),
                    "by_user": {u: dict(c) for u, c in self.by_user.items()}, "by_code": dict(self.by_code),
                    "open_watches": self.open_watches}


# Injected errors: kube-apiserver's reason and message for each code.
ERROR_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by the fake API server"),
    502: ("InternalError", "bad gateway: injected as a load balancer in front of kube-apiserver answers it"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be "
                     "processing the request"),
}


def injected_error(cluster, verb, resource):
    """An ApiError if an /fake/errors rule matches this request (and count it down), else None."""
    from .errors import ApiError
    with cluster.inject_lock:
        for rule in cluster.inject:
            if rule["count"] > 0 and rule["verb"] in ("*", verb) and rule["resource"] in ("*", resource):
                rule["count"] -= 1
                reason, msg = ERROR_REASONS[rule["code"]]
                details = {"retryAfterSeconds": rule["retry_after_s"]} if rule["code"] in (429, 503, 504) else None
                if rule["code"] == 429:
                    details["causes"] = [{"reason": "UnexpectedServerResponse",
                                          "message": "the request was throttled by API Priority and Fairness"}]
                return ApiError(rule["code"], reason, msg, details,
                                rule["retry_after_s"] if rule["code"] in (429, 503) else None)
    return None


class Holds:
    """/fake/hold: a matching request is carried out, and its answer waits until released
    (or 120 s): an API server slow to answer what it has already done."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.held = 0
        self.release_event = threading.Event()

    def add(self, verb, resource, count):
        with self.lock:
            self.rules.append({"verb": verb, "resource": resource, "count": count})

    def take(self, verb, resource):
        """The event to wait for before answering this request, or None (a rule matching it is counted down)."""
        with self.lock:
            for rule in self.rules:
                if rule["count"] > 0 and rule["verb"] in ("*", verb) and rule["resource"] in ("*", resource):
                    rule["count"] -= 1
                    return self.release_event
        return None

    def wait(self, event):
        with self.lock:
            self.held += 1
        event.wait(120)
        with self.lock:
            self.held -= 1

    def release(self):
        """Answer every held request now; forget the rules. Returns how many were held."""
        with self.lock:
            self.rules.clear()
            n, event, self.release_event = self.held, self.release_event, threading.Event()
        event.set()
        return n


class ControlError(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class Control:
    def __init__(self, cluster):
        self.c = cluster

    def handle(self, h, method, path, qs, body):
        h.stat = None
        authz = h.headers.get("Authorization", "")
        if authz != f"Bearer {self.c.admin_token}":
            h.send_json(401, {"error": "the /fake/ API needs the admin token (ready line: admin_token)"})
            return
        try:
            args = json.loads(body) if body.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            h.send_json(400, {"error": f"bad JSON body: {e}"})
            return
        parts = path.strip("/").split("/")[1:]
        try:
            out = self.route(method, parts, args, h.connection)
            h.send_json(200, dict({"ok": True}, **(out or {})))
        except ControlError as e:
            h.send_json(e.code, {"error": str(e)})

    def route(self, method, parts, a, conn=None):
        c = self.c
        k = c.kubelet
        key = "/".join(parts)
        if key == "stats" and method == "GET":
            return c.stats.snapshot()
        if key == "stats/reset" and method == "POST":
            c.stats.reset()
            return None
        if key == "info" and method == "GET":
            return c.ready_info
        if key == "tokens" and method == "POST":
            tok = c.auth.add_token(a.get("token"), a.get("user", "fake-user"), a.get("groups"), a.get("expires_in_s"))
            return {"token": tok}
        if key == "tokens/expire" and method == "POST":
            if not c.auth.expire(a.get("token", "")):
                raise ControlError(404, "no such token")
            return None
        if key == "tokens/rotate-sa" and method == "POST":
            return {"token": c.rotate_sa_token(a.get("expire_old_after_s", 0))}
        if key == "certs" and method == "POST":
            crt, key_ = c.issue_client_cert(a["user"], a.get("groups") or [], a.get("days", 365))
            return {"cert": crt, "key": key_}
        if key == "certs/revoke" and method == "POST":
            c.auth.revoked_cns.add(a["user"])
            return None
        if key == "images" and method == "POST":
            k.set_image_failure(a["image"], a.get("fail", True), a.get("message"))
            return None
        if key == "node" and method in ("PATCH", "POST"):
            return c.patch_node(a)
        if key == "node/lost" and method == "POST":
            if k.node_lost:
                raise ControlError(409, "the node is already lost")
            c.nodes.node_lost(a.get("not_ready_after_s", 0), a.get("evict_after_s"), a.get("pod_gc_after_s"))
            return None
        if key == "node/recover" and method == "POST":
            if not c.nodes.recover():
                raise ControlError(409, "the node is not lost")
            return None
        if len(parts) == 4 and parts[0] == "pods" and method == "POST" and parts[3] in ("evict", "oom"):
            args = {}
            if parts[3] == "evict":
                if "message" in a:
                    args["message"] = a["message"]
                args["grace_seconds"] = a.get("grace_seconds", 0)
            else:
                args["container"] = a.get("container")
            r = k.inject(parts[1], parts[2], parts[3], **args)
            if r == "notfound":
                raise ControlError(404, f"pod {parts[1]}/{parts[2]} not found")
            if r == "notrunning":
                raise ControlError(409, f"pod {parts[1]}/{parts[2]} is not on the node or has finished")
            return None
        if key == "watch/expire" and method == "POST":
            from .errors import expired
            if a.get("scope", "all") == "next":
                with c.store.lock:
                    c.store.expire_next_watch += int(a.get("count", 1))
                return None
            n = c.store.broadcast(("error", expired(f"too old resource version: {c.store.rv} ({c.store.rv + 1})").status()))
            return {"watches": n}
        if key == "watch/drop" and method == "POST":
            return {"watches": c.store.broadcast(("drop",))}
        if key == "watch/blackhole" and method == "POST":
            return {"watches": c.store.broadcast(("blackhole",))}
        if key == "watch/raw" and method == "POST":
            line = a.get("line")
            if not isinstance(line, str) or "\n" in line:
                raise ControlError(400, "line must be a string without a newline")
            return {"watches": c.store.broadcast(("raw", line))}
        if key == "outage" and method == "POST":
            seconds = float(a.get("seconds", 0))
            if not 0 < seconds <= 600:
                raise ControlError(400, "seconds must be in (0, 600]")
            return {"connections": c.start_outage(seconds, keep=conn)}
        if key == "compact" and method == "POST":
            c.store.compact()
            return {"resourceVersion": str(c.store.rv)}
        if key == "forbid" and method == "POST":
            c.auth.deny.append((a.get("user", "*"), a.get("verb", "*"), a.get("resource", "*"), a.get("namespace", "*")))
            return None
        if key == "forbid" and method == "DELETE":
            c.auth.deny.clear()
            return None
        if key == "errors" and method == "POST":
            code = int(a.get("code", 500))
            if code not in ERROR_REASONS:
                raise ControlError(400, f"code must be one of {sorted(ERROR_REASONS)}")
            with c.inject_lock:
                c.inject.append({"verb": a.get("verb", "*"), "resource": a.get("resource", "*"),
                                 "code": code, "count": int(a.get("count", 1)),
                                 "retry_after_s": int(a.get("retry_after_s", 1))})
            return None
        if key == "errors" and method == "DELETE":
            with c.inject_lock:
                c.inject.clear()
            return None
        if key == "hold" and method == "POST":
            c.holds.add(a.get("verb", "*"), a.get("resource", "*"), int(a.get("count", 1)))
            return None
        if key == "hold" and method == "GET":
            with c.holds.lock:
                return {"held": c.holds.held}
        if key == "hold" and method == "DELETE":
            return {"released": c.holds.release()}
        if key == "processes" and method == "GET":
            return {"processes": k.processes()}
        raise ControlError(404, f"no such control endpoint: {method} /fake/{key}")
