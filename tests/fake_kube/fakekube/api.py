# SPDX-License-Identifier: BSL-1.0
# The HTTPS front: TLS per connection, authentication, routing of /version,
# /healthz, discovery, OpenAPI and /api/v1 REST paths to the registry, list
# paging, tables, field validation, and the Status bodies of errors.
import base64
import json
import socket
import ssl
import struct
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from . import errors as E
from . import objects as O
from . import protobuf as P
from . import schema as S
from . import tables as T
from .control import injected_error
from .selectors import FieldSelector, LabelSelector
from .streams import StreamsMixin
from .store import now_rfc3339

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.4", "gitCommit": "fake", "gitTreeState": "clean",
           "buildDate": "2025-04-22T16:00:00Z", "goVersion": "go1.23.6", "compiler": "gc",
           "platform": "linux/amd64"}
AUTHN_GROUP = {"name": "authentication.k8s.io",
               "versions": [{"groupVersion": "authentication.k8s.io/v1", "version": "v1"}],
               "preferredVersion": {"groupVersion": "authentication.k8s.io/v1", "version": "v1"}}
NOT_FOUND_PATH = E.ApiError(404, "NotFound", "the server could not find the requested resource", {})


class TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, ctx, cluster):
        self.ctx = ctx
        self.cluster = cluster
        super().__init__(addr, Handler)

    def finish_request(self, request, client_address):
        if time.time() < self.cluster.outage_until:  # /fake/outage: reset at once (SO_LINGER 0: RST)
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.close()
            return
        request.settimeout(10)
        try:
            conn = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.cluster.log_line(f"tls handshake from {client_address[0]}:{client_address[1]} failed: {e}")
            request.close()
            return
        conn.settimeout(None)
        self.cluster.conns.add(conn)
        try:
            Handler(conn, client_address, self)
        except (OSError, ssl.SSLError):
            pass
        finally:
            self.cluster.conns.discard(conn)
            try:
                conn.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        self.cluster.log_error(f"connection from {client_address}: " + traceback.format_exc())


def _q(qs, key, default=None):
    v = qs.get(key)
    return v[0] if v else default


def _bool(v):
    return v in ("1", "true", "True")


def wants_table(accept):
    for part in (accept or "").split(","):
        params = [p.strip() for p in part.split(";")]
        if "as=Table" in params and params[0] in ("application/json", "*/*"):
            return True
    return False


class Handler(StreamsMixin, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 300

    def log_message(self, fmt, *args):
        pass

    def version_string(self):
        return ""

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    # ---------------------------------------------------------------- plumbing
    @property
    def cl(self):
        return self.server.cluster

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _headers(self, code, ctype, length=None, extra=None):
        self.send_response_only(code)
        self.send_header("Date", self.date_time_string())
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", ctype)
        self.send_header("X-Kubernetes-Pf-Flowschema-Uid", "fake")
        self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid", "fake")
        for k, v in (extra or {}).items():
            for one in (v if isinstance(v, list) else [v]):
                self.send_header(k, one)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        self.code = code

    def send_json(self, code, obj, extra=None):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        if self.hold is not None:  # /fake/hold: done, but answered only when released
            hold, self.hold = self.hold, None
            self.cl.holds.wait(hold)
        self._headers(code, "application/json", len(data), extra)
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_text(self, code, text, ctype="text/plain; charset=utf-8"):
        data = text.encode() if isinstance(text, str) else text
        self._headers(code, ctype, len(data))
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error_status(self, e):
        extra = {"Retry-After": str(e.retry_after)} if e.retry_after else None
        self.send_json(e.code, e.status(), extra)

    def dispatch(self, method):
        t0 = time.time()
        self.code = 0
        self.user = None
        self.stat = None
        self.hold = None
        url = urlsplit(self.path)
        path, qs = url.path, parse_qs(url.query, keep_blank_values=True)
        try:
            body = self.read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        try:
            if path == "/fake" or path.startswith("/fake/"):
                self.cl.control.handle(self, method, path, qs, body)
                return
            try:
                self.user = self.cl.auth.authenticate(self.headers, self.connection.getpeercert())
            except E.ApiError:
                self.stat = "unauthorized"
                raise
            self.route(method, path, qs, body)
        except E.ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception:
            self.cl.log_error(f"{method} {self.path}: " + traceback.format_exc())
            try:
                self.send_error_status(E.ApiError(500, "InternalError", "an error on the server has prevented the request from succeeding"))
            except OSError:
                self.close_connection = True
        finally:
            if not (path == "/fake" or path.startswith("/fake/")):
                self.cl.stats.count(self.stat or f"{method} {path}", self.code,
                                    self.user.name if self.user else "system:anonymous")
            ct = self.headers.get("Content-Type")
            self.cl.log_line(f"{method} {self.path} {self.code} user={self.user.name if self.user else '-'} "
                             f"{(time.time() - t0) * 1000:.1f}ms" + (f" body={ct}" if ct else "") +
                             f" accept={self.headers.get('Accept', '')} ua={self.headers.get('User-Agent', '')}")

    def nonresource(self, verb, path):
        self.cl.auth.authorize(self.user, verb, None, None, None, None, path)

    def route(self, method, path, qs, body):
        verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch", "DELETE": "delete"}[method]
        if path.rstrip("/") in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/", "/readyz/")):
            self.stat = f"get {path.rstrip('/')}"
            self.nonresource(verb, path)
            if method not in ("GET", "HEAD"):
                raise E.method_not_allowed()
            if _bool(_q(qs, "verbose", "false")) or "verbose" in qs:
                self.send_text(200, "[+]ping ok\n[+]etcd ok\n[+]poststarthook/start-kube-apiserver-admission-initializer ok\n"
                               f"{path.strip('/').split('/')[0]} check passed\n")
            else:
                self.send_text(200, "ok")
            return
        if path in ("/version", "/version/"):
            self.stat = "get /version"
            self.nonresource(verb, path)
            self.send_json(200, VERSION)
            return
        if path in ("/api", "/api/"):
            self.stat = "get /api"
            self.nonresource(verb, path)
            self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.cl.port}"}]})
            return
        if path in ("/api/v1", "/api/v1/"):
            self.stat = "get /api/v1"
            self.nonresource(verb, path)
            self.send_json(200, O.api_resource_list())
            return
        if path in ("/apis", "/apis/"):
            self.stat = "get /apis"
            self.nonresource(verb, path)
            self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [AUTHN_GROUP]})
            return
        if path.rstrip("/") == "/apis/authentication.k8s.io":
            self.stat = "get /apis/authentication.k8s.io"
            self.nonresource(verb, path)
            return self.send_json(200, dict(AUTHN_GROUP, kind="APIGroup", apiVersion="v1"))
        if path.rstrip("/") == "/apis/authentication.k8s.io/v1":
            self.stat = "get /apis/authentication.k8s.io/v1"
            self.nonresource(verb, path)
            return self.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                        "groupVersion": "authentication.k8s.io/v1", "resources": [
                                            {"name": "selfsubjectreviews", "singularName": "selfsubjectreview",
                                             "namespaced": False, "kind": "SelfSubjectReview", "verbs": ["create"]}]})
        if path.rstrip("/") == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
            self.stat = "create selfsubjectreviews"
            if method != "POST":
                raise E.method_not_allowed()
            self.cl.auth.authorize(self.user, "create", "selfsubjectreviews", None, None, None, None)
            u = self.user
            return self.send_json(201, {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                                        "metadata": {"creationTimestamp": now_rfc3339()},
                                        "status": {"userInfo": {"username": u.name, "groups": u.groups}}})
        if path.startswith("/openapi/"):
            self.stat = f"get {path}"
            self.nonresource(verb, path)
            if path == "/openapi/v3":
                return self.send_json(200, S.openapi_root(self.cl.openapi_hash))
            if path == "/openapi/v3/api/v1":
                return self.send_json(200, S.openapi_v1())
            raise NOT_FOUND_PATH  # /openapi/v2 (the full swagger document) is not served
        if path.startswith("/api/v1/"):
            return self.resource(method, path[len("/api/v1/"):].strip("/").split("/"), qs, body)
        self.stat = f"get {path}"
        self.nonresource(verb, path)
        raise NOT_FOUND_PATH

    # ---------------------------------------------------------------- resources
    def resource(self, method, parts, qs, body):
        watch_path = False
        if parts and parts[0] == "watch":  # deprecated /api/v1/watch/... paths
            watch_path = True
            parts = parts[1:]
        ns = None
        if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] not in ("status", "finalize"):
            ns = parts[1]
            parts = parts[2:]
        if not parts or parts[0] not in O.KINDS:
            self.stat = f"{method} /api/v1/{'/'.join(parts)}"
            raise NOT_FOUND_PATH
        resource, name, sub = parts[0], (parts[1] if len(parts) > 1 else None), (parts[2] if len(parts) > 2 else None)
        info = O.KINDS[resource]
        if len(parts) > 3 or (ns is not None and not info["namespaced"]) or \
                (ns is None and info["namespaced"] and name is not None):
            raise NOT_FOUND_PATH
        if sub is not None and f"{resource}/{sub}" not in O.SUBRESOURCES:
            raise NOT_FOUND_PATH
        is_watch = watch_path or _bool(_q(qs, "watch"))
        if method in ("GET", "HEAD"):
            verb = ("watch" if is_watch else "list") if name is None else ("watch" if is_watch else "get")
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        else:
            verb = "delete" if name is not None else "deletecollection"
        self.stat = f"{verb} {resource}" + (f"/{sub}" if sub else "")
        self.cl.auth.authorize(self.user, verb, resource, sub, ns, name, None)
        err = injected_error(self.cl, verb, resource + (f"/{sub}" if sub else ""))
        if err is not None:
            raise err
        if verb != "watch":
            self.hold = self.cl.holds.take(verb, resource + (f"/{sub}" if sub else ""))
        if verb not in (O.SUBRESOURCES[f"{resource}/{sub}"]["verbs"] if sub else info["verbs"]):
            raise E.method_not_allowed()
        if method == "POST" and name is not None and sub != "eviction":
            raise E.method_not_allowed()
        key_ns = ns if info["namespaced"] else ""
        dry = "All" in qs.get("dryRun", [])
        table = wants_table(self.headers.get("Accept"))
        reg = self.cl.registry
        if verb in ("list", "watch"):
            lsel = LabelSelector(_q(qs, "labelSelector", ""))
            fsel = FieldSelector(resource, _q(qs, "fieldSelector", ""))
            if name is not None:  # GET .../pods/NAME?watch=1: a watch on that one object
                fsel = FieldSelector(resource, ",".join(x for x in (fsel.text, f"metadata.name={name}") if x))
            if verb == "watch":
                return self.serve_watch(resource, ns, lsel, fsel, qs, table)
            return self.serve_list(resource, ns, lsel, fsel, qs, table)
        if verb == "get":
            if sub == "log":
                return self.serve_log(ns, name, qs)
            obj = self.cl.store.get(resource, key_ns, name)
            if obj is None:
                raise E.not_found(resource, name)
            if table:
                return self.send_json(200, T.table(resource, [obj], obj["metadata"]["resourceVersion"],
                                                   _q(qs, "includeObject", "Metadata")))
            return self.send_json(200, obj)
        if verb == "create":
            if sub == "eviction":
                return self.evict(ns, name, body)
            obj = self.decode_body(body, info["kind"])
            warnings = self.field_validation(qs, info["kind"], obj, body)
            out = reg.create(resource, ns if info["namespaced"] else None, obj, dry)
            return self.send_json(201, out, warnings)
        if verb == "update":
            obj = self.decode_body(body, info["kind"])
            warnings = self.field_validation(qs, info["kind"], obj, body)
            return self.send_json(200, reg.update(resource, key_ns, name, obj, sub, dry), warnings)
        if verb == "patch":
            return self.send_json(200, reg.patch(resource, key_ns, name, self.headers.get("Content-Type"), body, sub, dry))
        opts = self.delete_options(qs, body)
        if verb == "delete":
            still, gone = reg.delete(resource, key_ns, name, opts, dry)
            if resource in ("pods", "namespaces") or still is not None:
                return self.send_json(200, still if still is not None else gone)
            md = gone["metadata"]
            return self.send_json(200, E.status_success(md["name"], resource, md["uid"]))
        # deletecollection
        lsel = LabelSelector(_q(qs, "labelSelector", ""))
        fsel = FieldSelector(resource, _q(qs, "fieldSelector", ""))
        items = reg.delete_collection(resource, ns if info["namespaced"] else None, lsel, fsel, opts, dry)
        _, rv = self.cl.store.list(resource, None)
        return self.send_json(200, {"kind": info["listKind"], "apiVersion": "v1",
                                    "metadata": {"resourceVersion": str(rv)},
                                    "items": [self.strip(o) for o in items]})

    def decode_body(self, body, kind):
        ct = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ct == "application/vnd.kubernetes.protobuf":
            return P.decode(body, kind)
        if ct not in ("application/json", "*/*", ""):
            raise E.ApiError(415, "UnsupportedMediaType",
                             'the body of the request was in an unknown format - accepted media types include: '
                             'application/json, application/yaml, application/vnd.kubernetes.protobuf')
        return O.parse_body(body, kind)

    def field_validation(self, qs, kind, obj, raw):
        """fieldValidation=Strict rejects unknown and duplicate fields; Warn (the default) warns; Ignore."""
        mode = _q(qs, "fieldValidation", "Warn") or "Warn"
        if mode not in ("Ignore", "Warn", "Strict"):
            raise E.bad_request(f"fieldValidation must be one of Ignore, Warn, Strict, got {mode}")
        if mode == "Ignore":
            return None
        if raw.startswith(P.MAGIC):
            return None  # protobuf has no unknown fields to report
        problems = [f'unknown field "{p}"' for p in S.unknown_fields(kind, obj)]
        problems += [f'duplicate field "{p}"' for p in S.duplicate_fields(raw)]
        if not problems:
            return None
        if mode == "Strict":
            raise E.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: strict decoding error: '
                                + ", ".join(problems))
        return {"Warning": [f'299 - {json.dumps(p)}' for p in problems]}

    @staticmethod
    def strip(o):
        return {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}

    def delete_options(self, qs, body):
        opts = {}
        if _q(qs, "gracePeriodSeconds") is not None:
            try:
                opts["gracePeriodSeconds"] = int(_q(qs, "gracePeriodSeconds"))
            except ValueError:
                raise E.bad_request(f'strconv.ParseInt: parsing "{_q(qs, "gracePeriodSeconds")}": invalid syntax')
        if _q(qs, "propagationPolicy"):
            opts["propagationPolicy"] = _q(qs, "propagationPolicy")
        if _q(qs, "orphanDependents") is not None:
            opts["orphanDependents"] = _bool(_q(qs, "orphanDependents"))
        if body.strip():
            try:
                b = json.loads(body)
            except ValueError as e:
                raise E.bad_request(f"couldn't get version/kind; json parse error: {e}")
            if not isinstance(b, dict):
                raise E.bad_request("couldn't get version/kind; json parse error")
            for k in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents", "preconditions", "dryRun"):
                if k in b and b[k] is not None:
                    opts[k] = b[k]
        g = opts.get("gracePeriodSeconds")
        if g is not None and not isinstance(g, int):
            raise E.bad_request("json: cannot unmarshal into Go struct field DeleteOptions.gracePeriodSeconds of type int64")
        return opts

    def evict(self, ns, name, body):
        ev = O.parse_body(body, "Eviction") if body.strip() else {}
        if ev.get("metadata", {}).get("name") not in (None, name):
            raise E.bad_request("name in URL does not match name in Eviction object")
        pod = self.cl.store.get("pods", ns, name)
        if pod is None:
            raise E.not_found("pods", name)
        if pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
            from .podstatus import set_cond

            def fn(o):
                set_cond(o["status"], "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting")
            self.cl.store.mutate("pods", ns, name, fn, pod["metadata"]["uid"])
        opts = ev.get("deleteOptions") or {}
        self.cl.registry.delete("pods", ns, name, opts)
        self.send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    # ---------------------------------------------------------------- list

    def serve_list(self, resource, ns, lsel, fsel, qs, table):
        info = O.KINDS[resource]
        with self.cl.store.lock:
            items, rv = self.cl.store.list(resource, ns)
            oldest = self.cl.store.oldest_rv
        cont = _q(qs, "continue")
        start = None
        if cont:
            try:
                tok = json.loads(base64.b64decode(cont))
                start, crv = tok["start"], int(tok["rv"])
            except Exception:
                raise E.bad_request("continue key is not valid: illegal base64 data at input byte 0")
            if crv < oldest:
                raise E.expired("The provided continue parameter is too old to display a consistent list result. "
                                "You can start a new list without the continue parameter, or use the continue "
                                "token in this response to retrieve the remainder of the results. Continuing with "
                                "the provided token results in an inconsistent list - objects that were created, "
                                "modified, or deleted between the time the first chunk was returned and now may "
                                "show up in the list.")
            rv = crv
        sel = [o for o in items if lsel.matches(o["metadata"].get("labels")) and fsel.matches(o)]
        if start is not None:
            sel = [o for o in sel if f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" > start]
        limit = int(_q(qs, "limit", "0") or 0)
        meta = {"resourceVersion": str(rv)}
        if limit > 0 and len(sel) > limit:
            last = sel[limit - 1]["metadata"]
            key = f"{last.get('namespace', '')}/{last['name']}"
            meta["continue"] = base64.b64encode(json.dumps(
                {"v": "meta.k8s.io/v1", "rv": int(rv), "start": key}, separators=(",", ":")).encode()).decode()
            if lsel.empty() and fsel.empty():
                meta["remainingItemCount"] = len(sel) - limit
            sel = sel[:limit]
        if table:
            return self.send_json(200, T.table(resource, sel, meta["resourceVersion"], _q(qs, "includeObject", "Metadata"),
                                               cont=meta.get("continue"), remaining=meta.get("remainingItemCount")))
        self.send_json(200, {"kind": info["listKind"], "apiVersion": "v1", "metadata": meta,
                             "items": [self.strip(o) for o in sel]})

    # ---------------------------------------------------------------- watch
