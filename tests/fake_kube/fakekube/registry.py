# SPDX-License-Identifier: BSL-1.0
# Resource semantics behind the REST verbs: create (generateName, defaults,
# validation, namespace lifecycle), update/patch (optimistic concurrency,
# immutability), delete (pod grace periods, finalizers, propagation policies).
import base64
import copy
import time

from . import errors as E
from . import objects as O
from . import patch as P
from .store import now_rfc3339


class Registry:
    def __init__(self, cluster):
        self.c = cluster
        self.store = cluster.store

    # ------------------------------------------------------------------ create
    def create(self, resource, ns, obj, dry_run=False):
        info = O.KINDS[resource]
        if resource == "nodes":
            raise E.method_not_allowed()
        md = obj.get("metadata") or {}
        if not isinstance(md, dict):
            raise E.bad_request("metadata must be an object")
        body_ns = md.get("namespace")
        if info["namespaced"]:
            if body_ns and body_ns != ns:
                raise E.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            nso = self.store.get("namespaces", "", ns)
            if nso is None:
                raise E.not_found("namespaces", ns)
            if nso["metadata"].get("deletionTimestamp"):
                raise E.ApiError(403, "Forbidden",
                                 f'{resource} "{md.get("name") or md.get("generateName", "")}" is forbidden: unable to '
                                 f'create new content in namespace {ns} because it is being terminated',
                                 {"name": md.get("name", ""), "kind": resource,
                                  "causes": [{"reason": "NamespaceTerminating",
                                              "message": f"namespace {ns} is being terminated",
                                              "field": "metadata.namespace"}]})
        obj = copy.deepcopy(obj)
        md = O.new_meta(obj, ns if info["namespaced"] else None, info["kind"])
        if resource == "pods":
            O.default_pod(obj)
            causes = O.validate_pod(obj)
        elif resource == "secrets":
            O.prepare_secret(obj)
            causes = O.validate_secret(obj)
        elif resource == "namespaces":
            O.default_namespace(obj)
            causes = O.validate_namespace(obj)
        else:
            causes = O.validate_meta(md)
        if causes:
            raise E.invalid(info["kind"], md.get("name", ""), causes)
        if dry_run:
            return obj
        out = self.store.create(resource, obj)
        if out is None:
            raise E.already_exists(resource, md["name"])
        return out

    # ------------------------------------------------------------------ update
    def update(self, resource, ns, name, new, subresource=None, dry_run=False):
        info = O.KINDS[resource]
        new = copy.deepcopy(new)
        md = new.setdefault("metadata", {})
        if md.get("name") and md["name"] != name:
            raise E.bad_request(f"the name of the object ({md['name']}) does not match the name on the URL ({name})")
        if info["namespaced"] and md.get("namespace") and md["namespace"] != ns:
            raise E.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self.store.lock:
            cur = self.store.get(resource, ns if info["namespaced"] else "", name)
            if cur is None:
                raise E.not_found(resource, name)
            rv = md.get("resourceVersion")
            if rv and rv != cur["metadata"]["resourceVersion"]:
                raise E.conflict(resource, name)
            out = self._merge_update(resource, cur, new, subresource)
            if dry_run:
                return out
            res = self.store.replace(resource, out)
            self._maybe_finalize(resource, res)
            return res

    def _merge_update(self, resource, cur, new, subresource):
        info = O.KINDS[resource]
        out = copy.deepcopy(cur)
        if subresource == "status":
            out["status"] = new.get("status", {})
        else:
            # Server-owned metadata stays; status is ignored on the main resource (pods, namespaces, nodes).
            md = new.get("metadata", {})
            for k in ("labels", "annotations", "ownerReferences", "finalizers"):
                if k in md:
                    out["metadata"][k] = md[k]
                else:
                    out["metadata"].pop(k, None)
            if cur["metadata"].get("deletionTimestamp"):
                added = set(md.get("finalizers") or []) - set(cur["metadata"].get("finalizers") or [])
                if added:
                    raise E.invalid(info["kind"], cur["metadata"]["name"], [E.forbidden_field(
                        "metadata.finalizers", "no new finalizers can be added if the object is being deleted")])
            for k, v in new.items():
                if k not in ("metadata", "status", "kind", "apiVersion"):
                    out[k] = v
            for k in list(out):
                if k not in new and k not in ("metadata", "status", "kind", "apiVersion"):
                    del out[k]
        causes = O.validate_meta(out["metadata"])
        if resource == "pods":
            if subresource != "status":
                causes += O.pod_update_causes(cur, out)
        elif resource == "secrets":
            O.prepare_secret(out)
            causes += O.validate_secret(out) + O.secret_update_causes(cur, out)
        if causes:
            raise E.invalid(info["kind"], cur["metadata"]["name"], causes)
        out["kind"], out["apiVersion"] = info["kind"], "v1"
        return out

    def patch(self, resource, ns, name, content_type, raw, subresource=None, dry_run=False):
        info = O.KINDS[resource]
        key_ns = ns if info["namespaced"] else ""
        with self.store.lock:
            cur = self.store.get(resource, key_ns, name)
            if cur is None:
                raise E.not_found(resource, name)
            patched = P.apply(content_type, cur, raw)
            if not isinstance(patched, dict):
                raise E.bad_request("the patch did not produce an object")
            md = patched.setdefault("metadata", {})
            if md.get("resourceVersion") and md["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                raise E.conflict(resource, name)
            if md.get("uid") and md["uid"] != cur["metadata"]["uid"]:
                raise E.conflict(resource, name, f"Precondition failed: UID in precondition: {md['uid']}, "
                                                 f"UID in object meta: {cur['metadata']['uid']}")
            if subresource == "status":
                patched = dict(cur, status=patched.get("status", {}))
            out = self._merge_update(resource, cur, patched, subresource)
            if dry_run:
                return out
            res = self.store.replace(resource, out)
            self._maybe_finalize(resource, res)
            return res

    def _maybe_finalize(self, resource, obj):
        """An object being deleted goes once its last finalizer is removed (and, for a pod, once it may)."""
        md = obj["metadata"] if obj else None
        if not md or not md.get("deletionTimestamp") or md.get("finalizers"):
            return
        if resource == "pods" and md.get("deletionGracePeriodSeconds", 0) > 0:
            return  # still terminating: the kubelet removes it
        self.store.remove(resource, md.get("namespace", ""), md["name"], md["uid"])

    # ------------------------------------------------------------------ delete
    def delete(self, resource, ns, name, opts, dry_run=False):
        """Returns (obj_or_None_if_removed_now, last_state)."""
        info = O.KINDS[resource]
        if resource == "nodes":
            raise E.method_not_allowed()
        key_ns = ns if info["namespaced"] else ""
        with self.store.lock:
            cur = self.store.get(resource, key_ns, name)
            if cur is None:
                raise E.not_found(resource, name)
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
                raise E.conflict(resource, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                                 f"UID in object meta: {cur['metadata']['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                raise E.conflict(resource, name, f"Precondition failed: ResourceVersion in precondition: "
                                                 f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                                 f"{cur['metadata']['resourceVersion']}")
            if dry_run:
                return cur, cur
            policy = opts.get("propagationPolicy")
            if policy is None and opts.get("orphanDependents") is not None:
                policy = "Orphan" if opts["orphanDependents"] else "Background"
            if policy not in (None, "Orphan", "Background", "Foreground"):
                raise E.invalid("DeleteOptions", "", [E.not_supported("propagationPolicy", policy,
                                                                      ["Foreground", "Background", "Orphan", "nil"])])
            if resource == "namespaces":
                return self._delete_namespace(cur)
            grace = 0
            if resource == "pods":
                grace = self._pod_grace(cur, opts)
            md = cur["metadata"]
            finalizers = list(md.get("finalizers") or [])
            if policy == "Orphan" and "orphan" not in finalizers:
                finalizers.append("orphan")
            if policy == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if md.get("deletionTimestamp"):
                # Already being deleted: only a shorter grace period changes anything.
                old = md.get("deletionGracePeriodSeconds", 0)
                if grace == 0 and not finalizers:
                    return None, self.store.remove(resource, key_ns, name, md["uid"])
                if resource == "pods" and grace < old:
                    return self._mark_deleting(resource, cur, grace, finalizers), None
                return cur, None
            if grace > 0 or finalizers:
                obj = self._mark_deleting(resource, cur, grace, finalizers)
                return obj, None
            return None, self.store.remove(resource, key_ns, name, md["uid"])

    def _pod_grace(self, pod, opts):
        if not pod["spec"].get("nodeName"):
            return 0  # never scheduled: nothing to stop
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        g = opts.get("gracePeriodSeconds")
        if g is None:
            g = pod["spec"].get("terminationGracePeriodSeconds", 30)
        if g is None or g < 0:
            g = 1
        return int(g)

    def _mark_deleting(self, resource, cur, grace, finalizers):
        def fn(o):
            md = o["metadata"]
            md["deletionTimestamp"] = now_rfc3339(time.time() + grace)
            md["deletionGracePeriodSeconds"] = grace
            if finalizers:
                md["finalizers"] = finalizers
        md = cur["metadata"]
        return self.store.mutate(resource, md.get("namespace", ""), md["name"], fn, md["uid"])

    def _delete_namespace(self, ns):
        md = ns["metadata"]
        if md.get("deletionTimestamp"):
            return ns, None

        def fn(o):
            o["metadata"]["deletionTimestamp"] = now_rfc3339()
            o["metadata"]["deletionGracePeriodSeconds"] = 0
            o["status"] = {"phase": "Terminating"}
        out = self.store.mutate("namespaces", "", md["name"], fn, md["uid"])
        self.c.gc.enqueue_namespace(md["name"])
        return out, None

    def delete_collection(self, resource, ns, lsel, fsel, opts, dry_run=False):
        items, _ = self.store.list(resource, ns)
        out = []
        for o in items:
            if lsel.matches(o["metadata"].get("labels")) and fsel.matches(o):
                try:
                    self.delete(resource, o["metadata"].get("namespace", ""), o["metadata"]["name"],
                                opts, dry_run)
                except E.ApiError as e:
                    if e.code != 404:
                        raise
                out.append(o)
        return out


def decode_secret_value(sec, key):
    return base64.b64decode((sec.get("data") or {}).get(key, ""))
