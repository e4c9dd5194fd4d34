# SPDX-License-Identifier: BSL-1.0
# Known fields of the kinds served, for fieldValidation (Strict: 400 "strict
# decoding error: unknown field ...", Warn (the default): Warning headers), and
# the minimal OpenAPI v3 document kubectl reads to learn the server validates.
import json

ANY = None  # a subtree not checked here (volumes, probes, affinity, status ...)


def obj(*names, **sub):
    d = {n: ANY for n in names}
    d.update(sub)
    return d


def lst(s):
    return ("list", s)


def mp(s=ANY):
    return ("map", s)


OWNER_REF = obj("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
META = obj("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
           "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
           "finalizers", "managedFields", ownerReferences=lst(OWNER_REF))
KEY_SEL = obj("name", "key", "optional")
ENV = obj("name", "value", valueFrom=obj(fieldRef=obj("apiVersion", "fieldPath"),
                                         resourceFieldRef=obj("containerName", "resource", "divisor"),
                                         configMapKeyRef=KEY_SEL, secretKeyRef=KEY_SEL))
ENV_FROM = obj("prefix", configMapRef=obj("name", "optional"), secretRef=obj("name", "optional"))
RESOURCES = obj("limits", "requests", "claims")
CONTAINER = obj("name", "image", "command", "args", "workingDir", "ports", "resizePolicy", "restartPolicy",
                "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
                "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
                "stdin", "stdinOnce", "tty", env=lst(ENV), envFrom=lst(ENV_FROM), resources=RESOURCES)
TOLERATION = obj("key", "operator", "value", "effect", "tolerationSeconds")
POD_SPEC = obj("volumes", "ephemeralContainers", "restartPolicy", "terminationGracePeriodSeconds",
               "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName", "serviceAccount",
               "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
               "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity",
               "schedulerName", "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates",
               "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
               "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
               "resourceClaims", "resources", containers=lst(CONTAINER), initContainers=lst(CONTAINER),
               tolerations=lst(TOLERATION))
TYPE = ("apiVersion", "kind")
KINDS = {
    "Pod": obj(*TYPE, "status", metadata=META, spec=POD_SPEC),
    "Secret": obj(*TYPE, "data", "stringData", "type", "immutable", metadata=META),
    "Namespace": obj(*TYPE, "status", metadata=META, spec=obj("finalizers")),
    "Event": obj(*TYPE, "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp",
                 "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
                 "reportingInstance", metadata=META),
    "Eviction": obj(*TYPE, "deleteOptions", metadata=META),
}


def unknown_fields(kind, doc):
    """Paths ("spec.containers[0].imagee") of fields the kind does not have."""
    out = []

    def walk(schema, v, path):
        if schema is ANY or v is None:
            return
        if isinstance(schema, tuple):
            tag, sub = schema
            if tag == "list" and isinstance(v, list):
                for i, x in enumerate(v):
                    walk(sub, x, f"{path}[{i}]")
            elif tag == "map" and isinstance(v, dict):
                for k, x in v.items():
                    walk(sub, x, f"{path}[{k}]")
            return
        if not isinstance(v, dict):
            return
        for k, x in v.items():
            p = f"{path}.{k}" if path else k
            if k not in schema:
                out.append(p)
            else:
                walk(schema[k], x, p)
    walk(KINDS.get(kind, ANY), doc, "")
    return out


def duplicate_fields(raw):
    """Paths of keys that appear twice in one JSON object (strict decoding rejects them)."""
    dups = []

    def hook(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                dups.append(k)
            seen.add(k)
        return dict(pairs)
    try:
        json.loads(raw or b"{}", object_pairs_hook=hook)
    except ValueError:
        pass
    return dups


def openapi_root(hash_):
    return {"paths": {"api/v1": {"serverRelativeURL": f"/openapi/v3/api/v1?hash={hash_}"},
                      "api": {"serverRelativeURL": f"/openapi/v3/api?hash={hash_}"}}}


def _params():
    return [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for n in
            ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")]


def openapi_v1():
    """A minimal OpenAPI v3 document of /api/v1: the operations, with the fieldValidation query parameter
    kubectl looks for on each kind's PATCH (schemas are left out: kubectl needs none for create/get/delete)."""
    paths = {}
    for plural, kind, namespaced in (("pods", "Pod", True), ("secrets", "Secret", True),
                                     ("events", "Event", True), ("namespaces", "Namespace", False),
                                     ("nodes", "Node", False)):
        base = f"/api/v1/namespaces/{{namespace}}/{plural}" if namespaced else f"/api/v1/{plural}"
        gvk = {"group": "", "version": "v1", "kind": kind}
        ext = lambda action: {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
        paths[base] = {"get": dict({"operationId": f"list{kind}", "responses": {}}, **ext("list")),
                       "post": dict({"operationId": f"create{kind}", "parameters": _params(), "responses": {}},
                                    **ext("post"))}
        paths[base + "/{name}"] = {
            "get": dict({"operationId": f"read{kind}", "responses": {}}, **ext("get")),
            "put": dict({"operationId": f"replace{kind}", "parameters": _params(), "responses": {}}, **ext("put")),
            "patch": dict({"operationId": f"patch{kind}", "parameters": _params(), "responses": {}}, **ext("patch")),
            "delete": dict({"operationId": f"delete{kind}", "responses": {}}, **ext("delete"))}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.4"}, "paths": paths,
            "components": {"schemas": {}}}
