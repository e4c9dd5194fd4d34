# SPDX-License-Identifier: BSL-1.0
# The long-lived answers of the HTTP handler: chunked transfer encoding, watch
# streams (events, bookmarks, timeouts, 410s, abrupt drops) and pod logs
# (whole, tailed, or followed while the container runs).
import json
import os
import queue
import random
import select
import socket
import time

from . import errors as E
from . import objects as O
from . import tables as T


def _q(qs, key, default=None):
    v = qs.get(key)
    return v[0] if v else default


def _bool(v):
    return v in ("1", "true", "True")


class StreamsMixin:
    """Methods of api.Handler that stream their answer."""

    def start_chunked(self, ctype="application/json"):
        self._headers(200, ctype, None, {"Transfer-Encoding": "chunked"})

    def chunk(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def client_gone(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            return bool(r)
        except (OSError, ValueError):
            return True

    # ---------------------------------------------------------------- dispatch

    def serve_watch(self, resource, ns, lsel, fsel, qs, table):
        cfg = self.cl.cfg
        ts = _q(qs, "timeoutSeconds")
        timeout = float(ts) if ts else cfg.min_request_timeout * (1 + random.random())
        bookmarks = _bool(_q(qs, "allowWatchBookmarks"))
        send_initial = _bool(_q(qs, "sendInitialEvents"))
        w, err = self.cl.store.watch(resource, ns, lsel, fsel, _q(qs, "resourceVersion"), bookmarks, send_initial)
        include = _q(qs, "includeObject", "Metadata")
        first = [True]

        def encode(etype, obj):
            if table and etype != "ERROR" and etype != "BOOKMARK":
                obj = T.table(resource, [obj], None, include, headers=first[0])
                first[0] = False
            return json.dumps({"type": etype, "object": obj}, separators=(",", ":")) + "\n"

        def bookmark(annotate=False):
            md = {"resourceVersion": str(self.cl.store.rv), "creationTimestamp": None}
            if annotate:
                md["annotations"] = {"k8s.io/initial-events-end": "true"}
            obj = {"kind": O.KINDS[resource]["kind"], "apiVersion": "v1", "metadata": md}
            if resource == "pods":
                obj["spec"], obj["status"] = {"containers": None}, {}
            return encode("BOOKMARK", obj)

        self.cl.stats.watch_open(+1)
        try:
            self.start_chunked()
            if err is not None:
                self.chunk(encode("ERROR", err))
                self.end_chunked()
                return
            deadline = time.time() + timeout
            next_bm = time.time() + cfg.bookmark_interval
            silent = False
            while True:
                if silent:  # black-holed: open, nothing more, not even the end
                    try:
                        w.q.get(timeout=0.5)
                    except queue.Empty:
                        pass
                    if self.client_gone() or self.cl.stopping:
                        self.close_connection = True
                        return
                    continue
                now = time.time()
                if now >= deadline:
                    break
                wait = min(deadline - now, 0.5)
                if bookmarks:
                    wait = max(0.0, min(wait, next_bm - now))
                try:
                    item = w.q.get(timeout=wait)
                except queue.Empty:
                    if self.client_gone() or self.cl.stopping:
                        self.close_connection = True
                        return
                    if bookmarks and time.time() >= next_bm:
                        self.chunk(bookmark())
                        next_bm = time.time() + cfg.bookmark_interval
                    continue
                kind = item[0]
                if kind == "event":
                    self.chunk(encode(item[1], item[2]))
                elif kind == "raw":
                    self.chunk((item[1] + "\n").encode())
                elif kind == "initial-end":
                    if bookmarks:
                        self.chunk(bookmark(True))
                elif kind == "error":
                    self.chunk(encode("ERROR", item[1]))
                    break
                elif kind == "blackhole":
                    silent = True
                elif kind == "drop":
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    self.wfile = _Null()
                    return
                else:
                    break
            self.end_chunked()
        finally:
            self.cl.store.unwatch(w)
            self.cl.stats.watch_open(-1)

    # ---------------------------------------------------------------- logs
    def serve_log(self, ns, name, qs):
        pod = self.cl.store.get("pods", ns, name)
        if pod is None:
            raise E.not_found("pods", name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        cname = _q(qs, "container")
        if not cname:
            if len(names) != 1:
                raise E.bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
            cname = names[0]
        if cname not in names:
            raise E.bad_request(f"container {cname} is not valid for pod {name}")
        if not pod["spec"].get("nodeName"):
            raise E.bad_request(f"pod {name} does not have a host assigned")
        cs = next((c for c in pod.get("status", {}).get("containerStatuses") or [] if c["name"] == cname), None)
        sandbox = os.path.join(self.cl.kubelet.pods_dir, f"{ns}_{name}_{pod['metadata']['uid']}")
        restarts = cs.get("restartCount", 0) if cs else 0
        if _bool(_q(qs, "previous")):
            if restarts == 0:
                raise E.bad_request(f'previous terminated container "{cname}" in pod "{name}" not found')
            path = os.path.join(sandbox, f"{cname}.{restarts - 1}.log")
        else:
            path = os.path.join(sandbox, f"{cname}.{restarts}.log")
            waiting = (cs or {}).get("state", {}).get("waiting")
            if not os.path.exists(path) and (cs is None or waiting):
                reason = (waiting or {}).get("reason", "ContainerCreating")
                why = {"ErrImagePull": "image can't be pulled",
                       "ImagePullBackOff": "trying and failing to pull image"}.get(reason, reason)
                raise E.bad_request(f'container "{cname}" in pod "{name}" is waiting to start: {why}')
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        tail = _q(qs, "tailLines")
        if tail is not None:
            n = int(tail)
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-n:]) if n > 0 else b""
        limit = _q(qs, "limitBytes")
        if limit is not None:
            data = data[:int(limit)]
        if not _bool(_q(qs, "follow")):
            return self.send_text(200, data)
        self.start_chunked("text/plain")
        pos = os.path.getsize(path) if os.path.exists(path) else 0
        if data:
            self.chunk(data)
        uid = pod["metadata"]["uid"]
        while not self.cl.stopping:
            p = self.cl.store.get("pods", ns, name)
            st = None
            if p is not None and p["metadata"]["uid"] == uid:
                st = next((c for c in p.get("status", {}).get("containerStatuses") or [] if c["name"] == cname), None)
            try:
                with open(path, "rb") as f:
                    f.seek(pos)
                    more = f.read()
            except FileNotFoundError:
                more = b""
            if more:
                pos += len(more)
                self.chunk(more)
                continue
            if st is None or "running" not in st.get("state", {}):
                break
            if self.client_gone():
                self.close_connection = True
                return
            time.sleep(0.05)  # polling a log file for growth, not synchronisation
        self.end_chunked()


class _Null:
    def write(self, b):
        return len(b)

    def flush(self):
        pass
