# SPDX-License-Identifier: BSL-1.0
# Decoding of Kubernetes' protobuf request bodies ("k8s\0" + runtime.Unknown) for
# the kinds kubectl's typed commands send (Secret, Namespace; `kubectl create
# secret` posts protobuf), into the JSON form the rest of the fake works on.
import base64
import time

from .errors import ApiError

MAGIC = b"k8s\x00"


def _varint(b, i):
    out = shift = 0
    while True:
        x = b[i]
        i += 1
        out |= (x & 0x7F) << shift
        if not x & 0x80:
            return out, i
        shift += 7


def fields(b):
    """(field number, wire type, value) of each field: ints for varints, bytes for length-delimited."""
    i, out = 0, []
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        out.append((num, wt, v))
    return out


def _s(v):
    return v.decode("utf-8")


def _map(entries, val=_s):
    d = {}
    for e in entries:
        k, v = "", b""
        for num, _, x in fields(e):
            if num == 1:
                k = _s(x)
            elif num == 2:
                v = x
        d[k] = val(v)
    return d


def _time(b):
    secs = 0
    for num, _, x in fields(b):
        if num == 1:
            secs = x
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(secs))


def _owner_ref(b):
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    o = {}
    for num, _, x in fields(b):
        if num in names:
            o[names[num]] = _s(x)
        elif num == 6:
            o["controller"] = bool(x)
        elif num == 7:
            o["blockOwnerDeletion"] = bool(x)
    return o


def object_meta(b):
    strs = {1: "name", 2: "generateName", 3: "namespace", 4: "selfLink", 5: "uid", 6: "resourceVersion"}
    md, labels, annotations, refs, fins = {}, [], [], [], []
    for num, _, x in fields(b):
        if num in strs:
            md[strs[num]] = _s(x)
        elif num == 7:
            md["generation"] = x
        elif num in (8, 9):
            md["creationTimestamp" if num == 8 else "deletionTimestamp"] = _time(x)
        elif num == 10:
            md["deletionGracePeriodSeconds"] = x
        elif num == 11:
            labels.append(x)
        elif num == 12:
            annotations.append(x)
        elif num == 13:
            refs.append(_owner_ref(x))
        elif num == 14:
            fins.append(_s(x))
    md = {k: v for k, v in md.items() if v not in ("", 0)}  # gogo-proto writes zero values; JSON omits them
    if labels:
        md["labels"] = _map(labels)
    if annotations:
        md["annotations"] = _map(annotations)
    if refs:
        md["ownerReferences"] = refs
    if fins:
        md["finalizers"] = fins
    return md


def secret(b):
    o = {"apiVersion": "v1", "kind": "Secret"}
    data, sdata = [], []
    for num, _, x in fields(b):
        if num == 1:
            o["metadata"] = object_meta(x)
        elif num == 2:
            data.append(x)
        elif num == 3 and x:
            o["type"] = _s(x)
        elif num == 4:
            sdata.append(x)
        elif num == 5 and x:
            o["immutable"] = True
    if data:
        o["data"] = _map(data, lambda v: base64.b64encode(v).decode())
    if sdata:
        o["stringData"] = _map(sdata)
    return o


def namespace(b):
    o = {"apiVersion": "v1", "kind": "Namespace"}
    for num, _, x in fields(b):
        if num == 1:
            o["metadata"] = object_meta(x)
        elif num == 2:
            fins = [_s(v) for n, _, v in fields(x) if n == 1]
            o["spec"] = {"finalizers": fins} if fins else {}
    return o


DECODERS = {"Secret": secret, "Namespace": namespace}


def decode(body, expected_kind):
    """The JSON-form object of a protobuf request body; 415 for a kind this fake cannot decode."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "BadRequest", "provided data does not appear to be a protobuf message, expected prefix "
                       "[107 56 115 0]")
    type_meta, raw = {}, b""
    try:
        for num, _, x in fields(body[len(MAGIC):]):
            if num == 1:
                for n, _, v in fields(x):
                    type_meta["apiVersion" if n == 1 else "kind"] = _s(v)
            elif num == 2:
                raw = x
        kind = type_meta.get("kind") or expected_kind
        if kind not in DECODERS:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the fake API server decodes protobuf bodies only for {sorted(DECODERS)}, not {kind}; "
                           f"send application/json")
        return DECODERS[kind](raw)
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise ApiError(400, "BadRequest", f"unable to decode protobuf body: {e}")
