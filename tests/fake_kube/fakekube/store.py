# SPDX-License-Identifier: BSL-1.0
# The object store: one global resourceVersion counter (as etcd's revision), a
# bounded event history (the watch cache window: older resourceVersions get 410
# Expired), and watchers that see ADDED/MODIFIED/DELETED filtered by selectors.
import collections
import copy
import queue
import threading
import time

from .errors import ApiError, expired


def now_rfc3339(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


class Watcher:
    """One open watch: a queue of ("event", type, obj) / ("error", status) / ("end",) / ("drop",)."""

    def __init__(self, resource, namespace, lsel, fsel, bookmarks):
        self.resource, self.namespace = resource, namespace
        self.lsel, self.fsel = lsel, fsel
        self.bookmarks = bookmarks
        self.q = queue.Queue()
        self.last_rv = 0

    def _matches(self, obj):
        if obj is None:
            return False
        md = obj.get("metadata", {})
        if self.namespace and md.get("namespace") != self.namespace:
            return False
        return self.lsel.matches(md.get("labels")) and self.fsel.matches(obj)

    def offer(self, etype, resource, obj, prev):
        """Translate a store event into what this watch shows (the cacher's filtering)."""
        if resource != self.resource:
            return
        now_m = self._matches(obj)
        if etype == "ADDED":
            out = "ADDED" if now_m else None
        elif etype == "DELETED":
            out = "DELETED" if now_m else None
        else:
            was_m = self._matches(prev)
            out = ("MODIFIED" if was_m else "ADDED") if now_m else ("DELETED" if was_m else None)
        if out:
            self.q.put(("event", out, obj))

    def send(self, item):
        self.q.put(item)


class Store:
    def __init__(self, start_rv=1000, history=1000):
        self.lock = threading.RLock()
        self.rv = start_rv
        self.data = collections.defaultdict(dict)  # resource -> {(ns, name): obj}
        self.history = collections.deque()  # (rv, type, resource, obj, prev)
        self.history_size = history
        self.oldest_rv = start_rv  # a watch may start at any rv >= this
        self.watchers = set()
        self.hooks = []  # fn(type, resource, obj, prev), called under the lock after each commit
        self.expire_next_watch = 0

    # -- reads (objects returned are shared: copy before changing) --
    def get(self, resource, ns, name):
        with self.lock:
            return self.data[resource].get((ns or "", name))

    def list(self, resource, ns=None):
        with self.lock:
            items = [o for (n, _), o in self.data[resource].items() if ns is None or n == ns]
            rv = self.rv
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return items, rv

    def find_uid(self, uid):
        with self.lock:
            for resource, objs in self.data.items():
                for o in objs.values():
                    if o["metadata"].get("uid") == uid:
                        return resource, o
        return None, None

    # -- writes --
    def _commit(self, etype, resource, obj, prev):
        self.history.append((self.rv, etype, resource, obj, prev))
        while len(self.history) > self.history_size:
            dropped = self.history.popleft()
            self.oldest_rv = dropped[0]
        for w in list(self.watchers):
            w.offer(etype, resource, obj, prev)
        for hook in self.hooks:
            hook(etype, resource, obj, prev)

    def _bump(self, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, resource, obj):
        with self.lock:
            md = obj["metadata"]
            key = (md.get("namespace", ""), md["name"])
            if key in self.data[resource]:
                return None
            self._bump(obj)
            self.data[resource][key] = obj
            self._commit("ADDED", resource, obj, None)
            return obj

    def replace(self, resource, obj, expect_rv=None):
        """Store `obj` (a fresh dict) over the current object; None if gone, ApiError on an rv mismatch."""
        with self.lock:
            md = obj["metadata"]
            key = (md.get("namespace", ""), md["name"])
            prev = self.data[resource].get(key)
            if prev is None:
                return None
            if expect_rv and expect_rv != prev["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "", None)
            obj["metadata"]["uid"] = prev["metadata"]["uid"]
            self._bump(obj)
            self.data[resource][key] = obj
            self._commit("MODIFIED", resource, obj, prev)
            return obj

    def mutate(self, resource, ns, name, fn, uid=None):
        """Apply fn to a copy of the object; fn returns False to leave it unchanged. Returns the result."""
        with self.lock:
            cur = self.data[resource].get((ns or "", name))
            if cur is None or (uid and cur["metadata"].get("uid") != uid):
                return None
            new = copy.deepcopy(cur)
            if fn(new) is False:
                return cur
            return self.replace(resource, new)

    def remove(self, resource, ns, name, uid=None):
        with self.lock:
            key = (ns or "", name)
            cur = self.data[resource].get(key)
            if cur is None or (uid and cur["metadata"].get("uid") != uid):
                return None
            del self.data[resource][key]
            gone = copy.deepcopy(cur)
            self._bump(gone)  # the DELETED event carries the deletion's revision
            self._commit("DELETED", resource, gone, cur)
            return gone

    def compact(self):
        """Forget the history, as an etcd compaction does: any older resourceVersion is now too old."""
        with self.lock:
            self.history.clear()
            self.oldest_rv = self.rv

    # -- watches --
    def watch(self, resource, ns, lsel, fsel, rv_param, bookmarks=False, send_initial=None):
        """Open a watch. Returns (watcher, error_status): on error the watch only carries that ERROR."""
        w = Watcher(resource, ns, lsel, fsel, bookmarks)
        with self.lock:
            if self.expire_next_watch > 0:
                self.expire_next_watch -= 1
                start = int(rv_param) if rv_param and rv_param.isdigit() and rv_param != "0" else self.rv
                return w, expired(f"too old resource version: {start} ({self.rv + 1})").status()
            if rv_param in (None, "", "0") or send_initial:
                for (n, _), o in sorted(self.data[resource].items()):
                    w.offer("ADDED", resource, o, None)
                if send_initial:
                    w.q.put(("initial-end", self.rv))
            else:
                try:
                    start = int(rv_param)
                except ValueError:
                    from .errors import bad_request
                    raise bad_request(f'invalid resource version: strconv.ParseUint: parsing "{rv_param}": invalid syntax')
                if start < self.oldest_rv:
                    return w, expired(f"too old resource version: {start} ({self.oldest_rv})").status()
                if start > self.rv:
                    st = ApiError(504, "Timeout", f"Too large resource version: {start}, current: {self.rv}",
                                  {"causes": [{"reason": "ResourceVersionTooLarge",
                                               "message": "Too large resource version"}],
                                   "retryAfterSeconds": 1}).status()
                    return w, st
                for rv, etype, res, obj, prev in self.history:
                    if rv > start:
                        w.offer(etype, res, obj, prev)
            w.last_rv = self.rv
            self.watchers.add(w)
        return w, None

    def unwatch(self, w):
        with self.lock:
            self.watchers.discard(w)

    def broadcast(self, item):
        """Send an item (e.g. an expiry error or a drop) to every open watch."""
        with self.lock:
            ws = list(self.watchers)
        for w in ws:
            w.send(item)
        return len(ws)
