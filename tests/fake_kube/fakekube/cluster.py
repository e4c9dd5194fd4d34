# SPDX-License-Identifier: BSL-1.0
# The whole fake cluster: the store and its controllers (GC, kubelet, node
# controller), credentials (certificates, tokens, kubeconfig, service-account
# files), the request log, and an orderly stop that leaves no process behind.
import ctypes
import json
import os
import secrets
import signal
import socket
import ssl
import sys
import threading
import time

from . import certs
from .api import TLSServer
from .auth import Auth
from .control import Control, Holds, Stats
from .gc import GarbageCollector
from .kubelet import Kubelet
from .node import NodeController, node_object
from .objects import default_namespace, new_meta
from .registry import Registry
from .store import Store

PR_SET_CHILD_SUBREAPER = 36


class Cluster:
    def __init__(self, cfg, state_dir):
        self.cfg = cfg
        self.state_dir = state_dir
        self.stopping = False
        self.conns = set()
        self.outage_until = 0.0  # /fake/outage: connections are reset until then
        self.loglock = threading.Lock()
        self.logf = open(cfg.log_file or os.path.join(state_dir, "requests.log"), "a", buffering=1)
        self.store = Store(start_rv=cfg.start_resource_version, history=cfg.watch_history)
        self.auth = Auth(anonymous=cfg.anonymous_auth == "true")
        self.stats = Stats()
        self.registry = Registry(self)
        self.gc = GarbageCollector(self)
        self.kubelet = Kubelet(self)
        self.nodes = NodeController(self)
        self.control = Control(self)
        self.store.hooks = [self.gc.hook, self.kubelet.hook]
        self.admin_token = cfg.admin_token or secrets.token_urlsafe(24)
        self.port = None
        self.ready_info = {}
        self.sa_dir = os.path.join(state_dir, "serviceaccount")
        self.sa_token = None
        self.openapi_hash = secrets.token_hex(32).upper()
        self.inject = []  # /fake/errors rules
        self.inject_lock = threading.Lock()
        self.holds = Holds()  # /fake/hold rules and the answers they hold

    # ------------------------------------------------------------------ logs
    def log_line(self, s):
        with self.loglock:
            try:
                self.logf.write(f"{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} {s}\n")
            except ValueError:
                pass

    def log_error(self, s):
        self.log_line("ERROR " + s)
        if self.cfg.verbose:
            print(s, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ setup
    def seed(self):
        names = ["default", "kube-system", "kube-public", "kube-node-lease"]
        for n in self.cfg.namespace or []:
            if n not in names:
                names.append(n)
        for n in names:
            ns = {"metadata": {"name": n}}
            new_meta(ns, None, "Namespace")
            default_namespace(ns)
            self.store.create("namespaces", ns)
        node = node_object(self.cfg)
        new_meta(node, None, "Node")
        self.store.create("nodes", node)
        return names

    def make_tls(self):
        d = os.path.join(self.state_dir, "pki")
        os.makedirs(d, exist_ok=True)
        self.ca, self.ca_key = certs.ensure_ca(d)
        self.server_crt, self.server_key = certs.issue(d, self.ca, self.ca_key, "apiserver", "/CN=kube-apiserver",
                                                       server=True)
        self.client_user = "fake-cert-user"
        self.client_crt, self.client_key = certs.issue(d, self.ca, self.ca_key, "client",
                                                       certs.subject_for(self.client_user, ["fake:cert-users"]))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.server_crt, self.server_key)
        ctx.load_verify_locations(self.ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is optional, and checked when given
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def issue_client_cert(self, user, groups, days=365):
        d = os.path.join(self.state_dir, "pki")
        stem = "client-" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in user)
        return certs.issue(d, self.ca, self.ca_key, stem, certs.subject_for(user, groups), days=days, force=True)

    def setup_credentials(self):
        if not self.cfg.token and not self.cfg.token_file:
            self.cfg.token = [secrets.token_urlsafe(24) + ":fake-user"]
        first = None
        for spec in self.cfg.token or []:
            tok, _, rest = spec.partition(":")
            user, _, groups = rest.partition(":")
            self.auth.add_token(tok, user or "fake-user", [g for g in groups.split(",") if g])
            first = first or (tok, user or "fake-user")
        if self.cfg.token_file:
            import csv
            with open(self.cfg.token_file) as f:
                for row in csv.reader(f):
                    if len(row) >= 3 and not row[0].startswith("#"):
                        groups = row[3].split(",") if len(row) > 3 else []
                        self.auth.add_token(row[0], row[1], groups)
                        first = first or (row[0], row[1])
        self.token, self.user = first
        os.makedirs(self.sa_dir, exist_ok=True)
        self.rotate_sa_token(None)
        with open(os.path.join(self.sa_dir, "ca.crt"), "w") as f, open(self.ca) as g:
            f.write(g.read())
        with open(os.path.join(self.sa_dir, "namespace"), "w") as f:
            f.write("default")

    def rotate_sa_token(self, expire_old_after):
        """Write a new service-account token file (atomically, as the kubelet's projected volume does)."""
        old = self.sa_token
        tok = self.auth.add_token(None, "system:serviceaccount:default:default",
                                  ["system:serviceaccounts", "system:serviceaccounts:default"])
        tmp = os.path.join(self.sa_dir, ".token.tmp")
        with open(tmp, "w") as f:
            f.write(tok)
        os.replace(tmp, os.path.join(self.sa_dir, "token"))
        self.sa_token = tok
        if old and expire_old_after is not None:
            if expire_old_after <= 0:
                self.auth.expire(old)
            else:
                t = threading.Timer(expire_old_after, self.auth.expire, (old,))
                t.daemon = True
                t.start()
        return tok

    def write_kubeconfig(self, url):
        path = os.path.join(self.state_dir, "kubeconfig")
        kc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
              "clusters": [{"name": "fake", "cluster": {"server": url, "certificate-authority": self.ca}}],
              "users": [{"name": "fake-token", "user": {"token": self.token}},
                        {"name": "fake-cert", "user": {"client-certificate": self.client_crt,
                                                       "client-key": self.client_key}}],
              "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-token",
                                                        "namespace": "default"}},
                           {"name": "fake-cert", "context": {"cluster": "fake", "user": "fake-cert",
                                                             "namespace": "default"}}],
              "current-context": "fake"}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(kc, f, indent=1)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return path

    def patch_node(self, a):
        name = self.cfg.node_name

        def fn(n):
            for k in ("cpu", "memory", "pods"):
                if k in a:
                    n["status"]["capacity"][k] = str(a[k])
                    n["status"]["allocatable"][k] = str(a[k])
            for k, v in (a.get("resources") or {}).items():
                if v is None:
                    n["status"]["capacity"].pop(k, None)
                    n["status"]["allocatable"].pop(k, None)
                else:
                    n["status"]["capacity"][k] = str(v)
                    n["status"]["allocatable"][k] = str(v)
            if "unschedulable" in a:
                if a["unschedulable"]:
                    n["spec"]["unschedulable"] = True
                else:
                    n["spec"].pop("unschedulable", None)
        out = self.store.mutate("nodes", "", name, fn)
        self.kubelet.reschedule()
        return {"node": out}

    def start_outage(self, seconds, keep=None):
        """Reset every open connection but `keep` (the control call's), and new ones for `seconds`:
        a control plane being upgraded, a load balancer with no backend. Returns how many were cut."""
        self.outage_until = time.time() + seconds
        n = 0
        # Cut first, then tell the watches: a watch told first may close and
        # leave the set before it is counted.
        for conn in list(self.conns):
            if conn is keep:
                continue
            try:
                conn.shutdown(socket.SHUT_RDWR)
                n += 1
            except OSError:
                pass
        self.store.broadcast(("drop",))
        return n

    # ------------------------------------------------------------------ run
    def start(self):
        try:
            ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except Exception:
            pass
        ctx = self.make_tls()
        namespaces = self.seed()
        self.setup_credentials()
        self.server = TLSServer((self.cfg.host, self.cfg.port), ctx, self)
        self.port = self.server.server_address[1]
        url = f"https://{self.cfg.host}:{self.port}"
        kubeconfig = self.write_kubeconfig(url)
        self.gc.start()
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                         name="http", daemon=True).start()
        self.ready_info = {
            "url": url, "host": self.cfg.host, "port": self.port, "ca": self.ca,
            "token": self.token, "user": self.user, "admin_token": self.admin_token,
            "client_cert": self.client_crt, "client_key": self.client_key, "client_cert_user": self.client_user,
            "kubeconfig": kubeconfig, "sa_dir": self.sa_dir, "state_dir": self.state_dir,
            "request_log": self.logf.name, "namespaces": namespaces, "node": self.cfg.node_name,
            "pid": os.getpid(), "version": "v1.32.4"}
        return self.ready_info

    def _children(self):
        """(pid, ppid, state) of every process on the machine, from /proc. As a child subreaper the fake
        inherits what its pods leave behind (e.g. a daemon in its own session); stop() kills those too."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            rest = s[s.rfind(")") + 2:].split()
            out.append((int(d), int(rest[1]), rest[0]))
        return out

    def stop(self):
        self.stopping = True
        self.nodes.stop()
        self.kubelet.stop()
        threading.Thread(target=self.server.shutdown, daemon=True).start()
        for conn in list(self.conns):
            try:
                conn.shutdown(2)
            except OSError:
                pass
        self.gc.stop()
        self._kill_descendants()
        try:
            self.server.server_close()
        except OSError:
            pass
        self.logf.close()

    def _kill_descendants(self):
        me = os.getpid()
        for _ in range(3):
            procs = self._children()
            kids, frontier = set(), {me}
            while frontier:
                nxt = {pid for pid, ppid, _ in procs if ppid in frontier and pid not in kids}
                kids |= nxt
                frontier = nxt
            if not kids:
                return
            for pid in kids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in kids:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
