# SPDX-License-Identifier: BSL-1.0
# PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the part of
# strategic merge patch kubectl sends (lists merged by their patchMergeKey, $patch: delete).
import copy
import json

from .errors import ApiError, bad_request

# Lists that strategic merge patch merges by key (field name -> merge key), as in k8s.io/api's tags.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "env": "name", "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
              "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
              "containerStatuses": "name", "initContainerStatuses": "name", "hostAliases": "ip",
              "tolerations": None, "finalizers": "$set"}


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target, patch, field=None):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        p = {k: v for k, v in patch.items() if k != "$patch"}
        return copy.deepcopy(p)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$retainKeys", "$patch"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            out[name] = [x for x in out.get(name) or [] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and k in MERGE_KEYS and MERGE_KEYS[k] and isinstance(out.get(k), list):
            key = MERGE_KEYS[k]
            if key == "$set":
                cur = list(out[k])
                for x in v:
                    if x not in cur:
                        cur.append(x)
                out[k] = cur
                continue
            cur = [copy.deepcopy(x) for x in out[k]]
            for item in v:
                if not isinstance(item, dict):
                    continue
                idx = next((i for i, x in enumerate(cur) if isinstance(x, dict) and x.get(key) == item.get(key)), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        cur.pop(idx)
                elif idx is None:
                    cur.append({a: b for a, b in item.items() if a != "$patch"})
                else:
                    cur[idx] = strategic_merge_patch(cur[idx], item, k)
            out[k] = cur
        else:
            out[k] = strategic_merge_patch(out.get(k), v, k)
    return out


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request("the server rejected our request due to an error in our request")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, list):
            cur = cur[int(p)]
        else:
            cur = cur[p]
    return cur


def json_patch(doc, ops):
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    for op in ops:
        kind, parts = op.get("op"), _ptr(op.get("path", ""))
        try:
            if kind == "test":
                if _resolve(doc, parts) != op.get("value"):
                    raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request")
                continue
            if kind in ("move", "copy"):
                val = copy.deepcopy(_resolve(doc, _ptr(op["from"])))
                if kind == "move":
                    fparts = _ptr(op["from"])
                    parent = _resolve(doc, fparts[:-1])
                    if isinstance(parent, list):
                        parent.pop(int(fparts[-1]))
                    else:
                        del parent[fparts[-1]]
                kind, op = "add", {"value": val}
            parent = _resolve(doc, parts[:-1])
            last = parts[-1]
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
                else:
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op["value"])
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op["value"])
            else:
                raise bad_request(f"Unexpected kind: {kind}")
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request")
    return doc


def apply(content_type, doc, raw):
    ct = (content_type or "").split(";")[0].strip()
    try:
        body = json.loads(raw or b"null")
    except ValueError as e:
        raise bad_request(f"error decoding patch: {e}")
    if ct == "application/json-patch+json":
        return json_patch(doc, body)
    if ct == "application/merge-patch+json":
        return merge_patch(doc, body)
    if ct == "application/strategic-merge-patch+json":
        return strategic_merge_patch(doc, body)
    raise ApiError(415, "UnsupportedMediaType",
                   'the body of the request was in an unknown format - accepted media types include: '
                   'application/json-patch+json, application/merge-patch+json, '
                   'application/strategic-merge-patch+json')
