# SPDX-License-Identifier: BSL-1.0
# What the fake serves (kinds, verbs, discovery entries) and what the API server
# does to an object on create/update: defaulting, admission defaults, validation
# (422 Invalid with field causes), Secret data handling and a pod's QoS class.
import base64
import binascii
import copy
import json
import random
import re
import uuid

from . import errors as E
from . import quantity
from .selectors import label_key_error, label_value_error
from .store import now_rfc3339

VERBS_RW = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

# resource -> discovery entry (as /api/v1 lists it) plus the list kind.
KINDS = {
    "pods": {"singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": VERBS_RW,
             "shortNames": ["po"], "categories": ["all"], "listKind": "PodList"},
    "secrets": {"singularName": "secret", "namespaced": True, "kind": "Secret", "verbs": VERBS_RW,
                "listKind": "SecretList"},
    "namespaces": {"singularName": "namespace", "namespaced": False, "kind": "Namespace",
                   "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                   "shortNames": ["ns"], "listKind": "NamespaceList"},
    "events": {"singularName": "event", "namespaced": True, "kind": "Event", "verbs": VERBS_RW,
               "shortNames": ["ev"], "listKind": "EventList"},
    "nodes": {"singularName": "node", "namespaced": False, "kind": "Node",
              "verbs": ["get", "list", "watch"], "shortNames": ["no"], "listKind": "NodeList"},
}
SUBRESOURCES = {
    "pods/status": {"namespaced": True, "kind": "Pod", "verbs": ["get", "patch", "update"]},
    "pods/log": {"namespaced": True, "kind": "Pod", "verbs": ["get"]},
    "pods/eviction": {"namespaced": True, "group": "policy", "version": "v1", "kind": "Eviction",
                      "verbs": ["create"]},
    "namespaces/status": {"namespaced": False, "kind": "Namespace", "verbs": ["get", "patch", "update"]},
    "nodes/status": {"namespaced": False, "kind": "Node", "verbs": ["get"]},
}
KIND_TO_RESOURCE = {v["kind"]: r for r, v in KINDS.items()}


def api_resource_list():
    res = []
    names = sorted(list(KINDS) + list(SUBRESOURCES))
    for name in names:
        src = KINDS.get(name) or SUBRESOURCES[name]
        e = {"name": name, "singularName": src.get("singularName", ""), "namespaced": src["namespaced"]}
        for k in ("group", "version"):
            if k in src:
                e[k] = src[k]
        e["kind"] = src["kind"]
        e["verbs"] = src["verbs"]
        for k in ("shortNames", "categories"):
            if k in src:
                e[k] = src[k]
        res.append(e)
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": res}


_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apiserver/pkg/storage/names: no vowels, no 0/1/3


def random_suffix(n=5):
    return "".join(random.choice(_SUFFIX) for _ in range(n))


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENVNAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_CFGKEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                 "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                 "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
MSG_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
MSG_ENV = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', "
           "and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex "
           "used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')")
MSG_CFGKEY = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
              "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")


def name_errors(field, name, label=False):
    limit = 63 if label else 253
    out = []
    if len(name) > limit:
        out.append(E.invalid_value(field, name, f"must be no more than {limit} characters"))
    if not (_LABEL if label else _SUBDOMAIN).match(name):
        out.append(E.invalid_value(field, name, MSG_LABEL if label else MSG_SUBDOMAIN))
    return out


def validate_meta(md, label_name=False, namespaced=True):
    causes = []
    if not md.get("name"):
        causes.append(E.required("metadata.name", "name or generateName is required"))
    else:
        causes += name_errors("metadata.name", md["name"], label_name)
    for k, v in (md.get("labels") or {}).items():
        err = label_key_error(k)
        if err:
            causes.append(E.invalid_value("metadata.labels", k, err))
        if not isinstance(v, str):
            continue
        err = label_value_error(v)
        if err:
            causes.append(E.invalid_value("metadata.labels", v, err))
    for k in (md.get("annotations") or {}):
        err = label_key_error(k.lower())
        if err:
            causes.append(E.invalid_value("metadata.annotations", k, err))
    for i, ref in enumerate(md.get("ownerReferences") or []):
        f = f"metadata.ownerReferences[{i}]"
        for req in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(req):
                causes.append(E.required(f"{f}.{req}" if req != "uid" else f"{f}.uid", ""))
    return causes


def new_meta(obj, ns, kind):
    """Server-set metadata on create: name from generateName, uid, creationTimestamp, namespace."""
    md = obj.setdefault("metadata", {})
    if not md.get("name") and md.get("generateName"):
        md["name"] = md["generateName"] + random_suffix()
    if ns is not None:
        md["namespace"] = ns
    else:
        md.pop("namespace", None)
    md["uid"] = str(uuid.uuid4())
    md["creationTimestamp"] = now_rfc3339()
    for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
              "managedFields"):
        md.pop(k, None)
    obj["kind"] = kind
    obj["apiVersion"] = "v1"
    return md


# ---------------------------------------------------------------------------------------------- pods

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def default_pod(pod, automount_default=True):
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa
    spec["serviceAccount"] = sa
    # DefaultTolerationSeconds admission.
    tols = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    for t in tols:
        t.setdefault("operator", "Equal")
    # ServiceAccount admission: the projected token volume, mounted in every container.
    vol = None
    if spec.get("automountServiceAccountToken", automount_default) is not False and \
            not any(m.get("mountPath") == SA_MOUNT for c in spec.get("containers") or []
                    for m in c.get("volumeMounts") or []):
        vol = "kube-api-access-" + random_suffix()
        spec.setdefault("volumes", []).append({"name": vol, "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}})
    for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        if not isinstance(c, dict):
            continue
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        img = c.get("image") or ""
        tagged = ":" in img.rsplit("/", 1)[-1] or "@" in img
        latest = (not tagged) or img.endswith(":latest")
        c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        res = c.setdefault("resources", {})
        if res.get("limits"):
            req = res.setdefault("requests", {})
            for k, v in res["limits"].items():
                req.setdefault(k, v)
        for p in c.get("ports") or []:
            p.setdefault("protocol", "TCP")
        for e in c.get("env") or []:
            fr = (e.get("valueFrom") or {}).get("fieldRef")
            if fr is not None:
                fr.setdefault("apiVersion", "v1")
        if vol:
            c.setdefault("volumeMounts", []).append({"name": vol, "readOnly": True, "mountPath": SA_MOUNT})
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def qos_class(spec):
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or (r in req and quantity.parse(req[r]) != quantity.parse(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_requests(pod):
    """Sum of the containers' requests (max with each init container), as the scheduler counts them."""
    total = {}
    for c in pod["spec"].get("containers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = total.get(k, 0) + quantity.parse(v)
    for c in pod["spec"].get("initContainers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = max(total.get(k, 0), quantity.parse(v))
    return total


def validate_pod(pod):
    causes = validate_meta(pod["metadata"])
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return causes + [E.required("spec.containers", "")]
    rp = spec.get("restartPolicy")
    if rp not in ("Always", "OnFailure", "Never"):
        causes.append(E.not_supported("spec.restartPolicy", rp, ["Always", "OnFailure", "Never"]))
    containers = spec.get("containers")
    if not containers:
        causes.append(E.required("spec.containers", ""))
    seen = set()
    for kind, lst in (("initContainers", spec.get("initContainers") or []), ("containers", containers or [])):
        for i, c in enumerate(lst):
            f = f"spec.{kind}[{i}]"
            if not isinstance(c, dict):
                causes.append(E.required(f, ""))
                continue
            name = c.get("name")
            if not name:
                causes.append(E.required(f"{f}.name", ""))
            else:
                causes += name_errors(f"{f}.name", name, label=True)
                if name in seen:
                    causes.append(E.duplicate(f"{f}.name", name))
                seen.add(name)
            if not c.get("image"):
                causes.append(E.required(f"{f}.image", ""))
            for j, e in enumerate(c.get("env") or []):
                fe = f"{f}.env[{j}]"
                if not e.get("name"):
                    causes.append(E.required(f"{fe}.name", ""))
                elif not _ENVNAME.match(e["name"]):
                    causes.append(E.invalid_value(f"{fe}.name", e["name"], MSG_ENV))
                vf = e.get("valueFrom")
                if vf is not None:
                    if e.get("value"):
                        causes.append(E.invalid_value(f"{fe}.valueFrom", "",
                                                      "may not be specified when `value` is not empty"))
                    srcs = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if vf.get(k)]
                    if len(srcs) != 1:
                        causes.append(E.invalid_value(f"{fe}.valueFrom", "",
                                                      "may not have more than one field specified at a time"
                                                      if srcs else "must specify one of: `fieldRef`, "
                                                      "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
                    for ref in ("secretKeyRef", "configMapKeyRef"):
                        if vf.get(ref) is not None:
                            if not vf[ref].get("key"):
                                causes.append(E.required(f"{fe}.valueFrom.{ref}.key", ""))
                            if not vf[ref].get("name"):
                                causes.append(E.required(f"{fe}.valueFrom.{ref}.name", ""))
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for k in req:
                if k in lim and quantity.parse(req[k]) > quantity.parse(lim[k]):
                    causes.append(E.invalid_value(f"{f}.resources.requests", req[k],
                                                  f"must be less than or equal to {k} limit of {lim[k]}"))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and ads <= 0:
        causes.append(E.invalid_value("spec.activeDeadlineSeconds", ads, "must be between 1 and 2147483647, inclusive"))
    return causes


def pod_update_causes(old, new):
    """Pod spec is immutable except images, activeDeadlineSeconds, added tolerations, and a few more."""
    def masked(spec):
        s = copy.deepcopy(spec)
        for k in ("containers", "initContainers"):
            for c in s.get(k) or []:
                c.pop("image", None)
        s.pop("activeDeadlineSeconds", None)
        s.pop("tolerations", None)
        s.pop("terminationGracePeriodSeconds", None)
        return s
    if masked(old.get("spec", {})) != masked(new.get("spec", {})):
        return [E.forbidden_field("spec", "pod updates may not change fields other than `spec.containers[*].image`,"
                                  "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                                  "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                                  "(allow it to be set to 1 if it was previously negative)")]
    return []


# ------------------------------------------------------------------------------------------- secrets

SECRET_MAX = 1024 * 1024


def prepare_secret(sec):
    """Decode-check data (base64, as the JSON decoder of []byte does), fold stringData into data."""
    sec.setdefault("type", "Opaque")
    data = sec.get("data") or {}
    if not isinstance(data, dict):
        raise E.bad_request('Secret in version "v1" cannot be handled as a Secret: json: cannot unmarshal '
                            'into Go struct field Secret.data of type map[string][]uint8')
    for k, v in data.items():
        try:
            base64.b64decode(v or "", validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise E.bad_request(f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte {_b64_bad_at(v)}')
    for k, v in (sec.pop("stringData", None) or {}).items():
        data[k] = base64.b64encode(str(v).encode()).decode()
    if data:
        sec["data"] = data
    elif "data" in sec:
        del sec["data"]


def _b64_bad_at(v):
    if not isinstance(v, str):
        return 0
    for i, ch in enumerate(v):
        if not (ch.isalnum() or ch in "+/="):
            return i
    return len(v)


def validate_secret(sec):
    causes = validate_meta(sec["metadata"])
    total = 0
    for k, v in (sec.get("data") or {}).items():
        if not _CFGKEY.match(k):
            causes.append(E.invalid_value(f"data[{k}]", k, MSG_CFGKEY))
        total += len(base64.b64decode(v or ""))
    if total > SECRET_MAX:
        causes.append(E.too_long("data", SECRET_MAX))
    if sec.get("type") == "kubernetes.io/tls":
        for k in ("tls.crt", "tls.key"):
            if k not in (sec.get("data") or {}):
                causes.append(E.required(f"data[{k}]", ""))
    return causes


def secret_update_causes(old, new):
    causes = []
    if old.get("type") != new.get("type"):
        causes.append(E.invalid_value("type", new.get("type"), "field is immutable"))
    if old.get("immutable") and (old.get("data") != new.get("data") or not new.get("immutable")):
        causes.append(E.forbidden_field("data", "field is immutable when `immutable` is set"))
    return causes


# ---------------------------------------------------------------------------------------- namespaces

def default_namespace(ns):
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = ns["metadata"]["name"]


def validate_namespace(ns):
    return validate_meta(ns["metadata"], label_name=True, namespaced=False)


def parse_body(raw, kind):
    try:
        obj = json.loads(raw or b"{}")
    except ValueError as e:
        raise E.bad_request(f"couldn't get version/kind; json parse error: {e}")
    if not isinstance(obj, dict):
        raise E.bad_request("couldn't get version/kind; json parse error: expected an object")
    k, av = obj.get("kind"), obj.get("apiVersion")
    if k and kind and k != kind:
        raise E.bad_request(f"the object provided is unrecognized (must be of type {kind}): "
                            f"couldn't get version/kind; json parse error")
    if av and kind and av != ("policy/v1" if kind == "Eviction" else "v1") and \
            not (kind == "Eviction" and av == "policy/v1beta1"):
        raise E.bad_request(f'{kind} in version "{av}" cannot be handled as a {kind}: no kind "{kind}" is '
                            f'registered for version "{av}" in scheme "k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"')
    return obj
