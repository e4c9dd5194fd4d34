# SPDX-License-Identifier: BSL-1.0
# The garbage collector and namespace controller: dependents whose
# ownerReferences point at a deleted (or never existing) owner are deleted in the
# background; orphan/foregroundDeletion finalizers; a deleted namespace's content.
import queue
import threading
import traceback

from . import objects as O
from .errors import ApiError


class GarbageCollector:
    def __init__(self, cluster):
        self.c = cluster
        self.store = cluster.store
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._run, name="gc", daemon=True)

    def start(self):
        self.t.start()

    def stop(self):
        self.q.put(None)

    def hook(self, etype, resource, obj, prev):
        md = obj["metadata"]
        if etype == "DELETED":
            self.q.put(("owner-gone", md["uid"]))
        if md.get("ownerReferences") and etype == "ADDED":
            self.q.put(("check-owners", resource, md.get("namespace", ""), md["name"], md["uid"]))
        fins = md.get("finalizers") or []
        if md.get("deletionTimestamp") and ("orphan" in fins or "foregroundDeletion" in fins):
            self.q.put(("finalize", resource, md.get("namespace", ""), md["name"], md["uid"]))
        if etype == "DELETED" or (etype == "MODIFIED" and md.get("deletionTimestamp")):
            # A dependent going may let a foreground-deleting owner go.
            for ref in md.get("ownerReferences") or []:
                self.q.put(("owner-check-foreground", ref.get("uid")))
            if resource != "namespaces" and md.get("namespace"):
                self.q.put(("namespace", md["namespace"]))

    def enqueue_namespace(self, name):
        self.q.put(("namespace", name))

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            try:
                getattr(self, "_" + item[0].replace("-", "_"))(*item[1:])
            except Exception:
                self.c.log_error("gc: " + traceback.format_exc())

    def _dependents(self, uid):
        out = []
        with self.store.lock:
            for resource, objs in self.store.data.items():
                for o in objs.values():
                    if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                        out.append((resource, o))
        return out

    def _owner_exists(self, ns, ref):
        resource = O.KIND_TO_RESOURCE.get(ref.get("kind"))
        if resource is None or ref.get("apiVersion") not in ("v1",):
            return None  # a kind this fake does not serve: cannot tell (the real GC would ask discovery)
        key_ns = ns if O.KINDS[resource]["namespaced"] else ""
        o = self.store.get(resource, key_ns, ref.get("name", ""))
        return o is not None and o["metadata"]["uid"] == ref.get("uid")

    def _owner_gone(self, uid):
        for resource, dep in self._dependents(uid):
            self._reconcile_dependent(resource, dep)

    def _check_owners(self, resource, ns, name, uid):
        dep = self.store.get(resource, ns, name)
        if dep is not None and dep["metadata"]["uid"] == uid:
            self._reconcile_dependent(resource, dep)

    def _reconcile_dependent(self, resource, dep):
        md = dep["metadata"]
        ns = md.get("namespace", "")
        refs = md.get("ownerReferences") or []
        states = [(r, self._owner_exists(ns, r)) for r in refs]
        if any(s is None for _, s in states):
            return
        if any(states_ok for _, states_ok in states):
            dangling = {r["uid"] for r, ok in states if not ok}
            if dangling:  # other owners remain: drop only the references to the missing ones
                self.store.mutate(resource, ns, md["name"], lambda o: o["metadata"].__setitem__(
                    "ownerReferences", [r for r in o["metadata"]["ownerReferences"] if r["uid"] not in dangling]),
                    md["uid"])
            return
        if md.get("deletionTimestamp"):
            return
        try:
            self.c.registry.delete(resource, ns, md["name"], {"propagationPolicy": "Background",
                                                             "preconditions": {"uid": md["uid"]}})
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    def _finalize(self, resource, ns, name, uid):
        owner = self.store.get(resource, ns, name)
        if owner is None or owner["metadata"]["uid"] != uid:
            return
        fins = owner["metadata"].get("finalizers") or []
        if "orphan" in fins:
            for dres, dep in self._dependents(uid):
                dmd = dep["metadata"]
                self.store.mutate(dres, dmd.get("namespace", ""), dmd["name"], lambda o: o["metadata"].__setitem__(
                    "ownerReferences", [r for r in o["metadata"]["ownerReferences"] if r.get("uid") != uid]),
                    dmd["uid"])
            self._drop_finalizer(resource, ns, name, uid, "orphan")
        if "foregroundDeletion" in fins:
            blocking = False
            for dres, dep in self._dependents(uid):
                dmd = dep["metadata"]
                if not dmd.get("deletionTimestamp"):
                    try:
                        self.c.registry.delete(dres, dmd.get("namespace", ""), dmd["name"],
                                               {"propagationPolicy": "Background",
                                                "preconditions": {"uid": dmd["uid"]}})
                    except ApiError as e:
                        if e.code not in (404, 409):
                            raise
                if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in dmd.get("ownerReferences") or []):
                    blocking = True
            if not blocking:
                self._drop_finalizer(resource, ns, name, uid, "foregroundDeletion")

    def _owner_check_foreground(self, uid):
        resource, owner = self.store.find_uid(uid)
        if owner is not None and "foregroundDeletion" in (owner["metadata"].get("finalizers") or []):
            md = owner["metadata"]
            self._finalize(resource, md.get("namespace", ""), md["name"], uid)

    def _drop_finalizer(self, resource, ns, name, uid, fin):
        def fn(o):
            left = [f for f in o["metadata"].get("finalizers") or [] if f != fin]
            if left:
                o["metadata"]["finalizers"] = left
            else:
                o["metadata"].pop("finalizers", None)
        with self.store.lock:
            out = self.store.mutate(resource, ns, name, fn, uid)
            self.c.registry._maybe_finalize(resource, out)

    def _namespace(self, name):
        nso = self.store.get("namespaces", "", name)
        if nso is None or not nso["metadata"].get("deletionTimestamp"):
            return
        left = 0
        for resource, info in O.KINDS.items():
            if not info["namespaced"]:
                continue
            items, _ = self.store.list(resource, name)
            for o in items:
                left += 1
                if not o["metadata"].get("deletionTimestamp"):
                    try:
                        self.c.registry.delete(resource, name, o["metadata"]["name"], {})
                    except ApiError as e:
                        if e.code not in (404, 409):
                            raise
        if left == 0:
            self.store.remove("namespaces", "", name, nso["metadata"]["uid"])
