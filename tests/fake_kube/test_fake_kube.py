#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
# Unit tests of fake_kube.py's REST semantics that kubectl does not exercise:
# watch framing and 410s, selectors, GC, grace periods, the kubelet's statuses,
# secretKeyRef, fault knobs, and a clean exit that leaves no process behind.
import base64
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Fake, docker_available, ensure_test_image, pod, pid_alive, summary  # noqa: E402

NS = "/api/v1/namespaces/default"
FAST = ["--image-pull-backoff", "0.5", "--restart-backoff", "0.3", "--config-retry-seconds", "0.2",
        "--bookmark-interval", "0.5", "--reschedule-seconds", "0.5", "--min-grace-seconds", "0"]
PY = "/usr/bin/python3"


def sleeper(secs=60):
    return [PY, "-c", f"import time; time.sleep({secs})"]


def term_logger(secs=60, exit_on_term=False):
    """A process that logs SIGTERM (and exits 0 on it if asked, else ignores it)."""
    code = ("import signal, sys, time\n"
            "def h(*_):\n"
            "    print('got SIGTERM', flush=True)\n"
            + ("    sys.exit(0)\n" if exit_on_term else "") +
            "signal.signal(signal.SIGTERM, h)\n"
            "print('ready', flush=True)\n"
            f"time.sleep({secs})\n"
            f"time.sleep({secs})\n")
    return [PY, "-c", code]


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def phase_of(ev):
    return (ev.get("object") or {}).get("status", {}).get("phase")


def cstate(obj, i=0):
    cs = obj.get("status", {}).get("containerStatuses") or [{}]
    return cs[i].get("state", {})


class FakeTest(unittest.TestCase):
    """One fake per test class (they start in a fraction of a second)."""
    args = FAST

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fake-kube-test-")
        cls.fake = Fake(*cls.args, state_dir=os.path.join(cls.tmp, "state"))

    @classmethod
    def tearDownClass(cls):
        rc = cls.fake.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"fake_kube exited {rc}"

    def create_pod(self, body, ns="default"):
        return self.fake.ok("POST", f"/api/v1/namespaces/{ns}/pods", body)

    def get_pod(self, name, ns="default"):
        st, _, o = self.fake.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        return o if st == 200 else None

    def wait_phase(self, name, phases, timeout=20):
        return self.fake.wait_until(lambda: (lambda p: p if p and p["status"].get("phase") in phases else None)(
            self.get_pod(name)), timeout, f"pod {name} in {phases}")

    def pids(self, name):
        return [p["pid"] for p in self.fake.ctl("GET", "processes")["processes"] if p["pod"] == name]

    def assertStatus(self, out, code, reason):
        self.assertEqual(out.get("kind"), "Status", out)
        self.assertEqual(out.get("apiVersion"), "v1", out)
        self.assertEqual(out.get("status"), "Failure", out)
        self.assertEqual(out.get("code"), code, out)
        self.assertEqual(out.get("reason"), reason, out)


class TestStartAndAuth(FakeTest):
    def test_ready_line(self):
        info = self.fake.info
        for k in ("url", "ca", "token", "admin_token", "client_cert", "client_key", "kubeconfig", "sa_dir",
                  "state_dir", "pid", "namespaces"):
            self.assertIn(k, info)
        self.assertTrue(info["url"].startswith("https://127.0.0.1:"))
        self.assertIn("default", info["namespaces"])
        self.assertGreaterEqual(len(info["namespaces"]), 2)
        for f in ("token", "ca.crt", "namespace"):
            self.assertTrue(os.path.exists(os.path.join(info["sa_dir"], f)), f)

    def test_token_and_unknown_token(self):
        self.assertEqual(self.fake.ok("GET", "/version")["gitVersion"], "v1.32.4")
        st, _, out = self.fake.request("GET", NS + "/pods", token="not-a-token")
        self.assertEqual(st, 401)
        self.assertStatus(out, 401, "Unauthorized")
        self.assertEqual(out["message"], "Unauthorized")

    def test_anonymous_is_forbidden_outside_public_paths(self):
        st, _, out = self.fake.request("GET", "/version", token=None)
        self.assertEqual(st, 200)
        st, _, out = self.fake.request("GET", "/healthz", token=None)
        self.assertEqual((st, out), (200, "ok"))
        st, _, out = self.fake.request("GET", "/api", token=None)
        self.assertEqual(st, 403)
        self.assertStatus(out, 403, "Forbidden")
        self.assertEqual(out["message"], 'forbidden: User "system:anonymous" cannot get path "/api"')
        st, _, out = self.fake.request("GET", NS + "/pods", token=None)
        self.assertEqual(st, 403)
        self.assertEqual(out["message"], 'pods is forbidden: User "system:anonymous" cannot list resource "pods" '
                                         'in API group "" in the namespace "default"')

    def test_token_expiry(self):
        tok = self.fake.ctl("POST", "tokens", {"user": "alice"})["token"]
        self.assertEqual(self.fake.request("GET", NS + "/pods", token=tok)[0], 200)
        self.fake.ctl("POST", "tokens/expire", {"token": tok})
        st, _, out = self.fake.request("GET", NS + "/pods", token=tok)
        self.assertEqual(st, 401)
        self.assertStatus(out, 401, "Unauthorized")
        short = self.fake.ctl("POST", "tokens", {"user": "bob", "expires_in_s": 0.3})["token"]
        self.assertEqual(self.fake.request("GET", "/api", token=short)[0], 200)
        self.fake.wait_until(lambda: self.fake.request("GET", "/api", token=short)[0] == 401, 5, "expiry")

    def test_client_certificate(self):
        cert = (self.fake.info["client_cert"], self.fake.info["client_key"])
        out = self.fake.ok("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                           token=None, cert=cert)
        self.assertEqual(out["status"]["userInfo"]["username"], self.fake.info["client_cert_user"])
        self.assertIn("system:authenticated", out["status"]["userInfo"]["groups"])
        c = self.fake.ctl("POST", "certs", {"user": "carol", "groups": ["team"]})
        out = self.fake.ok("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=None,
                           cert=(c["cert"], c["key"]))
        self.assertEqual(out["status"]["userInfo"]["username"], "carol")
        self.assertIn("team", out["status"]["userInfo"]["groups"])
        self.fake.ctl("POST", "certs/revoke", {"user": "carol"})
        st, _, out = self.fake.request("GET", "/api", token=None, cert=(c["cert"], c["key"]))
        self.assertEqual(st, 401)

    def test_service_account_token_file(self):
        sa = self.fake.info["sa_dir"]
        tok = read(os.path.join(sa, "token"))
        out = self.fake.ok("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=tok)
        self.assertEqual(out["status"]["userInfo"]["username"], "system:serviceaccount:default:default")
        new = self.fake.ctl("POST", "tokens/rotate-sa", {"expire_old_after_s": 0})["token"]
        self.assertEqual(read(os.path.join(sa, "token")), new)
        self.assertEqual(self.fake.request("GET", "/api", token=tok)[0], 401)
        self.assertEqual(self.fake.request("GET", "/api", token=new)[0], 200)

    def test_forbid_knob(self):
        tok = self.fake.ctl("POST", "tokens", {"user": "dave"})["token"]
        self.fake.ctl("POST", "forbid", {"user": "dave", "verb": "create", "resource": "secrets"})
        try:
            st, _, out = self.fake.request("POST", NS + "/secrets", {"metadata": {"name": "x"}}, token=tok)
            self.assertEqual(st, 403)
            self.assertEqual(out["message"], 'secrets is forbidden: User "dave" cannot create resource "secrets" '
                                             'in API group "" in the namespace "default"')
        finally:
            self.fake.ctl("DELETE", "forbid")


class TestDiscovery(FakeTest):
    def test_api_and_resources(self):
        self.assertEqual(self.fake.ok("GET", "/api")["versions"], ["v1"])
        rl = self.fake.ok("GET", "/api/v1")
        self.assertEqual(rl["kind"], "APIResourceList")
        by = {r["name"]: r for r in rl["resources"]}
        for name in ("pods", "pods/status", "pods/log", "secrets", "namespaces", "events"):
            self.assertIn(name, by)
        self.assertEqual(sorted(by["pods"]["verbs"]), sorted(["create", "delete", "deletecollection", "get",
                                                              "list", "patch", "update", "watch"]))
        self.assertTrue(by["pods"]["namespaced"])
        self.assertFalse(by["namespaces"]["namespaced"])
        self.assertEqual(by["pods"]["kind"], "Pod")
        self.assertEqual(self.fake.ok("GET", "/apis")["kind"], "APIGroupList")
        self.assertEqual(self.fake.request("GET", "/readyz")[2], "ok")
        st, _, out = self.fake.request("GET", "/apis/apps/v1")
        self.assertEqual(st, 404)
        self.assertStatus(out, 404, "NotFound")
        self.assertEqual(self.fake.request("GET", "/openapi/v2")[0], 404)

    def test_namespaces(self):
        out = self.fake.ok("GET", "/api/v1/namespaces/default")
        self.assertEqual(out["status"]["phase"], "Active")
        names = [n["metadata"]["name"] for n in self.fake.ok("GET", "/api/v1/namespaces")["items"]]
        self.assertIn("fiber", names)
        st, _, out = self.fake.request("POST", "/api/v1/namespaces/nosuch/pods", pod("x", ["true"]))
        self.assertEqual(st, 404)
        self.assertEqual(out["message"], 'namespaces "nosuch" not found')
        self.assertEqual(out["details"], {"name": "nosuch", "kind": "namespaces"})


class TestPodCrud(FakeTest):
    def test_create_fields_and_errors(self):
        a = self.create_pod(pod("crud-a", sleeper(), labels={"t": "crud"}))
        md = a["metadata"]
        for k in ("uid", "resourceVersion", "creationTimestamp"):
            self.assertTrue(md.get(k), k)
        self.assertEqual(md["namespace"], "default")
        self.assertEqual(a["kind"], "Pod")
        self.assertEqual(a["status"]["phase"], "Pending")
        self.assertEqual(a["spec"]["terminationGracePeriodSeconds"], 30)
        self.assertEqual(a["spec"]["containers"][0]["terminationMessagePath"], "/dev/termination-log")
        s = self.fake.ok("POST", NS + "/secrets", {"metadata": {"name": "crud-s"}, "stringData": {"k": "v"}})
        self.assertGreater(int(s["metadata"]["resourceVersion"]), int(md["resourceVersion"]))  # one counter
        st, _, out = self.fake.request("POST", NS + "/pods", pod("crud-a", sleeper()))
        self.assertEqual(st, 409)
        self.assertStatus(out, 409, "AlreadyExists")
        self.assertEqual(out["message"], 'pods "crud-a" already exists')
        self.assertEqual(out["details"], {"name": "crud-a", "kind": "pods"})
        g = self.create_pod({"metadata": {"generateName": "crud-gen-"}, "spec": pod("x", sleeper())["spec"]})
        self.assertRegex(g["metadata"]["name"], r"^crud-gen-[bcdfghjklmnpqrstvwxz2456789]{5}$")
        st, _, out = self.fake.request("GET", NS + "/pods/nosuch")
        self.assertEqual(st, 404)
        self.assertStatus(out, 404, "NotFound")
        self.assertEqual(out["message"], 'pods "nosuch" not found')
        self.assertEqual(out["details"], {"name": "nosuch", "kind": "pods"})
        for name in ("crud-a", g["metadata"]["name"]):
            self.fake.ok("DELETE", NS + f"/pods/{name}?gracePeriodSeconds=0")

    def test_validation(self):
        st, _, out = self.fake.request("POST", NS + "/pods", {"metadata": {"name": "bad"}, "spec": {}})
        self.assertEqual(st, 422)
        self.assertStatus(out, 422, "Invalid")
        self.assertEqual(out["message"], 'Pod "bad" is invalid: spec.containers: Required value')
        self.assertEqual(out["details"]["causes"], [{"reason": "FieldValueRequired", "message": "Required value",
                                                     "field": "spec.containers"}])
        st, _, out = self.fake.request("POST", NS + "/pods", {"metadata": {"name": "bad"},
                                                             "spec": {"containers": [{"name": "c"}]}})
        self.assertEqual(st, 422)
        self.assertEqual(out["details"]["causes"][0]["field"], "spec.containers[0].image")
        st, _, out = self.fake.request("POST", NS + "/pods", {"spec": pod("x", ["true"])["spec"]})
        self.assertEqual(st, 422)
        self.assertEqual(out["details"]["causes"][0]["field"], "metadata.name")
        self.assertIn("name or generateName is required", out["message"])
        st, _, out = self.fake.request("POST", NS + "/pods", pod("Bad_Name", ["true"]))
        self.assertEqual(st, 422)
        self.assertIn("a lowercase RFC 1123 subdomain", out["message"])
        st, _, out = self.fake.request("POST", NS + "/pods?fieldValidation=Strict",
                                       pod("x", ["true"], container={"imagee": "y"}))
        self.assertEqual(st, 400)
        self.assertIn('strict decoding error: unknown field "spec.containers[0].imagee"', out["message"])
        st, hdrs, out = self.fake.request("POST", NS + "/pods?dryRun=All", pod("warned", ["true"], bogus=1))
        self.assertEqual(st, 201)
        self.assertIn('unknown field \\"spec.bogus\\"', hdrs.get("Warning", ""))
        self.assertIsNone(self.get_pod("warned"))  # dry run stored nothing

    def test_update_patch_and_conflict(self):
        created = self.create_pod(pod("upd", sleeper(), labels={"a": "1"}))
        for _ in range(20):  # read-modify-write, retried on a conflict with the kubelet's status updates
            p = self.get_pod("upd")
            p["metadata"]["labels"] = {"a": "2"}
            st, _, out = self.fake.request("PUT", NS + "/pods/upd", p)
            if st != 409:
                break
        self.assertEqual(st, 200, out)
        self.assertEqual(out["metadata"]["labels"], {"a": "2"})
        self.assertGreater(int(out["metadata"]["resourceVersion"]), int(p["metadata"]["resourceVersion"]))
        stale = dict(created, metadata=dict(created["metadata"], labels={"a": "3"}))
        st, _, out = self.fake.request("PUT", NS + "/pods/upd", stale)  # stale resourceVersion
        self.assertEqual(st, 409)
        self.assertStatus(out, 409, "Conflict")
        self.assertIn("the object has been modified", out["message"])
        out = self.fake.ok("PATCH", NS + "/pods/upd", json.dumps({"metadata": {"labels": {"b": "x"}}}),
                           headers={"Content-Type": "application/merge-patch+json"})
        self.assertEqual(out["metadata"]["labels"], {"a": "2", "b": "x"})
        out = self.fake.ok("PATCH", NS + "/pods/upd", json.dumps([{"op": "remove", "path": "/metadata/labels/a"}]),
                           headers={"Content-Type": "application/json-patch+json"})
        self.assertEqual(out["metadata"]["labels"], {"b": "x"})
        st, _, out = self.fake.request("PATCH", NS + "/pods/upd",
                                       json.dumps({"spec": {"restartPolicy": "Always"}}),
                                       headers={"Content-Type": "application/strategic-merge-patch+json"})
        self.assertEqual(st, 422)
        self.assertIn("pod updates may not change fields", out["message"])
        self.fake.ok("DELETE", NS + "/pods/upd?gracePeriodSeconds=0")

    def test_list_all_namespaces_and_paging(self):
        for i in range(5):
            self.create_pod(pod(f"page-{i}", sleeper(), labels={"page": "yes"}))
        self.create_pod(pod("page-other", sleeper(), labels={"page": "yes"}), ns="fiber")
        allp = self.fake.ok("GET", "/api/v1/pods?labelSelector=page%3Dyes")
        self.assertEqual(allp["kind"], "PodList")
        self.assertEqual({(p["metadata"]["namespace"], p["metadata"]["name"]) for p in allp["items"]},
                         {("default", f"page-{i}") for i in range(5)} | {("fiber", "page-other")})
        self.assertNotIn("kind", allp["items"][0])  # list items carry no TypeMeta, as etcd-backed lists
        names, cont = [], ""
        while True:
            out = self.fake.ok("GET", NS + f"/pods?labelSelector=page%3Dyes&limit=2{cont}")
            names += [p["metadata"]["name"] for p in out["items"]]
            if not out["metadata"].get("continue"):
                break
            self.assertLessEqual(len(out["items"]), 2)
            cont = "&continue=" + out["metadata"]["continue"]
        self.assertEqual(names, [f"page-{i}" for i in range(5)])
        out = self.fake.ok("DELETE", NS + "/pods?labelSelector=page%3Dyes&gracePeriodSeconds=0")
        self.assertEqual(out["kind"], "PodList")
        self.assertEqual(len(out["items"]), 5)
        self.assertEqual(self.fake.ok("GET", NS + "/pods?labelSelector=page%3Dyes")["items"], [])
        self.assertEqual(len(self.fake.ok("GET", "/api/v1/namespaces/fiber/pods?labelSelector=page%3Dyes")["items"]), 1)
        self.fake.ok("DELETE", "/api/v1/namespaces/fiber/pods/page-other?gracePeriodSeconds=0")


class TestSelectors(FakeTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        labels = {"s1": {"app": "x", "tier": "a"}, "s2": {"app": "x", "tier": "b"}, "s3": {"app": "y"},
                  "s4": {"other": "1"}}
        for name, l in labels.items():
            cls.fake.ok("POST", NS + "/pods", pod(name, sleeper(), labels=l))

    def names(self, q):
        from urllib.parse import quote
        out = self.fake.ok("GET", NS + "/pods?" + "&".join(f"{k}={quote(v)}" for k, v in q.items()))
        return sorted(p["metadata"]["name"] for p in out["items"] if p["metadata"]["name"].startswith("s"))

    def test_label_selectors(self):
        L = lambda s: self.names({"labelSelector": s})
        self.assertEqual(L("app=x"), ["s1", "s2"])
        self.assertEqual(L("app==x"), ["s1", "s2"])
        self.assertEqual(L("app!=x"), ["s3", "s4"])  # != also matches objects without the label
        self.assertEqual(L("app in (x,y)"), ["s1", "s2", "s3"])
        self.assertEqual(L("app notin (x)"), ["s3", "s4"])
        self.assertEqual(L("tier"), ["s1", "s2"])
        self.assertEqual(L("!tier"), ["s3", "s4"])
        self.assertEqual(L("app=x,tier=b"), ["s2"])
        self.assertEqual(L("app=x,!tier"), [])
        st, _, out = self.fake.request("GET", NS + "/pods?labelSelector=app%3D%3D%3Dx%2C")
        self.assertEqual(st, 400)
        self.assertStatus(out, 400, "BadRequest")
        self.assertIn("unable to parse requirement", out["message"])

    def test_field_selectors(self):
        F = lambda s: self.names({"fieldSelector": s})
        self.assertEqual(F("metadata.name=s3"), ["s3"])
        self.assertEqual(F("metadata.name!=s3"), ["s1", "s2", "s4"])
        self.fake.wait_until(lambda: F("status.phase=Running") == ["s1", "s2", "s3", "s4"], 20, "all Running")
        self.assertEqual(F("status.phase=Pending"), [])
        self.assertEqual(F("spec.nodeName=fake-node,metadata.name=s1"), ["s1"])
        st, _, out = self.fake.request("GET", NS + "/pods?fieldSelector=spec.foo%3Dbar")
        self.assertEqual(st, 400)
        self.assertEqual(out["message"], "field label not supported: spec.foo")


class TestWatch(FakeTest):
    def test_chunked_framing_and_lifecycle(self):
        w = self.fake.watch(NS + "/pods?watch=1&labelSelector=w%3Dlife")
        try:
            self.assertEqual(w.status, 200)
            self.assertEqual(w.headers.get("transfer-encoding"), "chunked")
            self.assertEqual(w.headers.get("content-type"), "application/json")
            self.create_pod(pod("life", [PY, "-c", "print('hi')"], labels={"w": "life"}))
            ev, _ = w.expect(lambda e: e["type"] == "ADDED")
            self.assertEqual(ev["object"]["kind"], "Pod")
            self.assertEqual(ev["object"]["apiVersion"], "v1")
            ev, seen = w.expect(lambda e: phase_of(e) == "Succeeded", what="Succeeded")
            types = [e["type"] for e in seen] + [ev["type"]]
            self.assertTrue(all(t == "MODIFIED" for t in types), types)
            phases = [phase_of(e) for e in seen]
            self.assertIn("Pending", phases)
            self.assertEqual(ev["object"]["spec"]["nodeName"], "fake-node")
            term = cstate(ev["object"])["terminated"]
            self.assertEqual((term["exitCode"], term["reason"]), (0, "Completed"))
            rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in seen + [ev]]
            self.assertEqual(rvs, sorted(rvs))
            self.assertEqual(len(set(rvs)), len(rvs))
            self.fake.ok("DELETE", NS + "/pods/life")  # finished: deleted at once, whatever the grace
            ev, _ = w.expect(lambda e: e["type"] == "DELETED")
            self.assertEqual(ev["object"]["metadata"]["name"], "life")
            for c in w.chunks:  # each chunk: whole JSON events, one per line
                for line in c.decode().strip().split("\n"):
                    self.assertIn(json.loads(line)["type"], ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"))
        finally:
            w.close()

    def test_resume_from_resource_version(self):
        a = self.create_pod(pod("rv-a", sleeper(), labels={"w": "rv"}))
        rv = a["metadata"]["resourceVersion"]
        self.create_pod(pod("rv-b", sleeper(), labels={"w": "rv"}))
        w = self.fake.watch(NS + f"/pods?watch=true&labelSelector=w%3Drv&resourceVersion={rv}")
        try:
            ev, seen = w.expect(lambda e: e["type"] == "ADDED")
            self.assertEqual(ev["object"]["metadata"]["name"], "rv-b")  # rv-a is older than the start
            self.assertTrue(all(e["object"]["metadata"]["name"] == "rv-a" for e in seen), [summary(e) for e in seen])
        finally:
            w.close()
        w = self.fake.watch(NS + "/pods?watch=true&labelSelector=w%3Drv")  # no rv: current state as ADDED
        try:
            got = {w.expect(lambda e: e["type"] == "ADDED")[0]["object"]["metadata"]["name"] for _ in range(2)}
            self.assertEqual(got, {"rv-a", "rv-b"})
        finally:
            w.close()
        self.fake.ok("DELETE", NS + "/pods?labelSelector=w%3Drv&gracePeriodSeconds=0")

    def test_too_old_resource_version_is_410(self):
        a = self.create_pod(pod("old-a", sleeper()))
        old_rv = a["metadata"]["resourceVersion"]
        self.fake.ok("POST", NS + "/secrets", {"metadata": {"name": "old-s"}})
        self.fake.ctl("POST", "compact")
        w = self.fake.watch(NS + f"/pods?watch=1&resourceVersion={old_rv}")
        try:
            self.assertEqual(w.status, 200)
            ev = w.next()
            self.assertEqual(ev["type"], "ERROR")
            self.assertStatus(ev["object"], 410, "Expired")
            self.assertTrue(ev["object"]["message"].startswith(f"too old resource version: {old_rv} ("),
                            ev["object"]["message"])
            self.assertEqual(w.next(), "END")  # then the stream ends, properly terminated
        finally:
            w.close()
        self.fake.ok("DELETE", NS + "/pods/old-a?gracePeriodSeconds=0")

    def test_label_change_shows_as_deleted_and_added(self):
        self.create_pod(pod("relabel", sleeper(), labels={"w": "in"}))
        w = self.fake.watch(NS + "/pods?watch=1&labelSelector=w%3Din")
        try:
            w.expect(lambda e: e["type"] == "ADDED")
            self.fake.ok("PATCH", NS + "/pods/relabel", json.dumps({"metadata": {"labels": {"w": "out"}}}),
                         headers={"Content-Type": "application/merge-patch+json"})
            ev, _ = w.expect(lambda e: e["type"] == "DELETED")
            self.assertEqual(ev["object"]["metadata"]["labels"], {"w": "out"})
            self.fake.ok("PATCH", NS + "/pods/relabel", json.dumps({"metadata": {"labels": {"w": "in"}}}),
                         headers={"Content-Type": "application/merge-patch+json"})
            w.expect(lambda e: e["type"] == "ADDED")
        finally:
            w.close()
        self.fake.ok("DELETE", NS + "/pods/relabel?gracePeriodSeconds=0")

    def test_bookmarks_and_timeout(self):
        pods = self.fake.ok("GET", NS + "/pods")
        w = self.fake.watch(NS + f"/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=2"
                                 f"&resourceVersion={pods['metadata']['resourceVersion']}")
        try:
            ev = w.next(10)
            self.assertEqual(ev["type"], "BOOKMARK")
            self.assertEqual(ev["object"]["kind"], "Pod")
            self.assertTrue(int(ev["object"]["metadata"]["resourceVersion"]) >=
                            int(pods["metadata"]["resourceVersion"]))
            deadline = time.time() + 10
            while True:  # the server ends the stream at timeoutSeconds
                ev = w.next(max(0.1, deadline - time.time()))
                if ev == "END":
                    break
                self.assertEqual(ev["type"], "BOOKMARK")
        finally:
            w.close()

    def test_watch_knobs(self):
        self.fake.ctl("POST", "watch/expire", {"scope": "next"})
        w = self.fake.watch(NS + "/pods?watch=1")
        try:
            ev = w.next()
            self.assertEqual((ev["type"], ev["object"]["code"], ev["object"]["reason"]), ("ERROR", 410, "Expired"))
            self.assertEqual(w.next(), "END")
        finally:
            w.close()
        w1 = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0")
        w2 = self.fake.watch(NS + "/secrets?watch=1")
        try:
            self.fake.wait_until(lambda: self.fake.ctl("GET", "stats")["open_watches"] >= 2, 5, "watches open")
            self.assertGreaterEqual(self.fake.ctl("POST", "watch/expire", {"scope": "all"})["watches"], 2)
            for w in (w1, w2):
                ev, _ = w.expect(lambda e: e["type"] == "ERROR")
                self.assertEqual(ev["object"]["code"], 410)
                self.assertEqual(w.next(), "END")
        finally:
            w1.close()
            w2.close()
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0")
        try:
            self.fake.wait_until(lambda: self.fake.ctl("GET", "stats")["open_watches"] >= 1, 5, "watch open")
            self.fake.ctl("POST", "watch/drop")
            deadline = time.time() + 10
            while True:
                ev = w.next(max(0.1, deadline - time.time()))
                if isinstance(ev, str):
                    break
            self.assertEqual(ev, "ABORT")  # no terminating chunk: an abrupt end
        finally:
            w.close()
        # Black-holed: the stream stays open and says nothing, not even the
        # events of objects created after.
        w = self.fake.watch(NS + "/pods?watch=1&allowWatchBookmarks=true")
        try:
            self.fake.wait_until(lambda: self.fake.ctl("GET", "stats")["open_watches"] >= 1, 5, "watch open")
            self.assertGreaterEqual(self.fake.ctl("POST", "watch/blackhole")["watches"], 1)
            self.create_pod(pod("silent", [PY, "-c", "pass"]))
            self.wait_phase("silent", ("Succeeded",))
            with self.assertRaises(AssertionError):
                w.next(1.0)
        finally:
            w.close()


class TestKubelet(FakeTest):
    def test_exit_codes_and_signals(self):
        self.create_pod(pod("ex3", [PY, "-c", "import sys; sys.exit(3)"]))
        self.create_pod(pod("sig", [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGUSR1)"]))
        p = self.wait_phase("ex3", ("Failed",))
        t = cstate(p)["terminated"]
        self.assertEqual((t["exitCode"], t["reason"]), (3, "Error"))
        self.assertTrue(t["containerID"].startswith("containerd://"))
        ready = [c for c in p["status"]["conditions"] if c["type"] == "Ready"][0]
        self.assertEqual((ready["status"], ready["reason"]), ("False", "PodFailed"))
        p = self.wait_phase("sig", ("Failed",))
        self.assertEqual(cstate(p)["terminated"]["exitCode"], 128 + signal.SIGUSR1)

    def test_status_progression_env_and_logs(self):
        code = "import os; print(os.environ['A'], os.environ['B'], os.environ['POD'], os.environ['KUBERNETES_SERVICE_HOST'], os.getcwd())"
        body = pod("envp", [PY, "-c", code], container={
            "env": [{"name": "A", "value": "x"}, {"name": "B", "value": "$(A)-y"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "workingDir": self.tmp})
        w = self.fake.watch(NS + "/pods?watch=1&fieldSelector=metadata.name%3Denvp")
        try:
            self.create_pod(body)
            w.expect(lambda e: e["type"] == "ADDED")
            ev, _ = w.expect(lambda e: "waiting" in cstate(e["object"]), what="ContainerCreating")
            self.assertEqual(cstate(ev["object"])["waiting"]["reason"], "ContainerCreating")
            conds = {c["type"]: c for c in ev["object"]["status"]["conditions"]}
            self.assertEqual(conds["PodScheduled"]["status"], "True")
            self.assertEqual(conds["Ready"]["reason"], "ContainersNotReady")
            ev, _ = w.expect(lambda e: phase_of(e) == "Succeeded")
        finally:
            w.close()
        st, _, log = self.fake.request("GET", NS + "/pods/envp/log")
        self.assertEqual(st, 200)
        self.assertEqual(log.strip(), f"x x-y envp 127.0.0.1 {self.tmp}")

    def test_running_fields_and_log_follow(self):
        self.create_pod(pod("runner", [PY, "-u", "-c", "import time\nfor i in range(3): print(i); time.sleep(0.2)"]))
        p = self.wait_phase("runner", ("Running", "Succeeded"))
        if p["status"]["phase"] == "Running":
            self.assertEqual(p["status"]["podIP"], "127.0.0.1")
            self.assertIn("startedAt", cstate(p)["running"])
        st, _, log = self.fake.request("GET", NS + "/pods/runner/log?follow=true")
        self.assertEqual((st, log), (200, "0\n1\n2\n"))
        st, _, log = self.fake.request("GET", NS + "/pods/runner/log?tailLines=1")
        self.assertEqual(log, "2\n")

    def test_start_error(self):
        self.create_pod(pod("noexec", ["/no/such/binary"]))
        p = self.wait_phase("noexec", ("Failed",))
        t = cstate(p)["terminated"]
        self.assertEqual((t["exitCode"], t["reason"]), (128, "StartError"))
        self.assertIn('exec: "/no/such/binary"', t["message"])

    def test_restart_policy_always_restarts(self):
        self.create_pod(pod("crash", [PY, "-c", "import sys; sys.exit(1)"], restart="Always"))
        p = self.fake.wait_until(lambda: (lambda p: p if p and p["status"].get("containerStatuses") and
                                          p["status"]["containerStatuses"][0]["restartCount"] >= 2 else None)(
            self.get_pod("crash")), 20, "two restarts")
        self.assertEqual(p["status"]["phase"], "Running")
        self.assertEqual(p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 1)
        st, _, log = self.fake.request("GET", NS + "/pods/crash/log?previous=true")
        self.assertEqual(st, 200)
        self.fake.ok("DELETE", NS + "/pods/crash?gracePeriodSeconds=0")


class TestDeletion(FakeTest):
    args = FAST[:-2] + ["--min-grace-seconds", "2"]  # the real kubelet's minimum

    def test_grace_period_sigterm_then_sigkill(self):
        self.create_pod(pod("stubborn", term_logger()))
        self.wait_phase("stubborn", ("Running",))
        self.fake.wait_until(lambda: "ready" in self.fake.request("GET", NS + "/pods/stubborn/log")[2], 10, "ready")
        pid = self.pids("stubborn")[0]
        w = self.fake.watch(NS + "/pods?watch=1&fieldSelector=metadata.name%3Dstubborn&resourceVersion=0")
        try:
            w.expect(lambda e: e["type"] == "ADDED")
            t0 = time.time()
            out = self.fake.ok("DELETE", NS + "/pods/stubborn", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                                 "gracePeriodSeconds": 3})
            self.assertEqual(out["metadata"]["deletionGracePeriodSeconds"], 3)
            self.assertIn("deletionTimestamp", out["metadata"])
            ev, _ = w.expect(lambda e: e["type"] == "MODIFIED" and "deletionTimestamp" in e["object"]["metadata"])
            self.assertEqual(ev["object"]["metadata"]["deletionGracePeriodSeconds"], 3)
            self.fake.wait_until(lambda: "got SIGTERM" in self.fake.request("GET", NS + "/pods/stubborn/log")[2],
                                 5, "SIGTERM logged")
            self.assertTrue(pid_alive(pid))  # ignored SIGTERM: still running inside the grace period
            ev, _ = w.expect(lambda e: phase_of(e) == "Failed", timeout=15)
            t = cstate(ev["object"])["terminated"]
            self.assertEqual((t["exitCode"], t["reason"]), (137, "Error"))  # SIGKILL after the grace period
            ev, _ = w.expect(lambda e: e["type"] == "DELETED")
            took = time.time() - t0
            self.assertGreaterEqual(took, 2.9)
            self.assertLess(took, 8)
            self.assertFalse(pid_alive(pid))
        finally:
            w.close()

    def test_sigterm_respected_and_default_action(self):
        self.create_pod(pod("polite", term_logger(exit_on_term=True)))
        self.create_pod(pod("plain", sleeper()))
        self.wait_phase("polite", ("Running",))
        self.wait_phase("plain", ("Running",))
        self.fake.wait_until(lambda: "ready" in self.fake.request("GET", NS + "/pods/polite/log")[2], 10, "ready")
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dpolite")
        w2 = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dplain")
        try:
            self.fake.ok("DELETE", NS + "/pods/polite?gracePeriodSeconds=30")
            self.fake.ok("DELETE", NS + "/pods/plain?gracePeriodSeconds=30")
            ev, _ = w.expect(lambda e: phase_of(e) in ("Succeeded", "Failed"), timeout=10)
            self.assertEqual(phase_of(ev), "Succeeded")  # exited 0 on SIGTERM: terminal phase Succeeded
            self.assertEqual(cstate(ev["object"])["terminated"]["reason"], "Completed")
            w.expect(lambda e: e["type"] == "DELETED", timeout=5)
            ev, _ = w2.expect(lambda e: phase_of(e) in ("Succeeded", "Failed"), timeout=10)
            self.assertEqual(cstate(ev["object"])["terminated"]["exitCode"], 143)  # 128 + SIGTERM
            w2.expect(lambda e: e["type"] == "DELETED", timeout=5)
        finally:
            w.close()
            w2.close()

    def test_grace_zero_is_immediate(self):
        self.create_pod(pod("forced", term_logger()))
        self.wait_phase("forced", ("Running",))
        pid = self.pids("forced")[0]
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dforced")
        try:
            w.expect(lambda e: e["type"] == "ADDED")
            self.fake.ok("DELETE", NS + "/pods/forced?gracePeriodSeconds=0")
            ev = w.next()
            self.assertEqual(ev["type"], "DELETED")  # removed from the API at once ...
            self.fake.wait_until(lambda: not pid_alive(pid), 5, "process killed")  # ... and SIGKILLed
        finally:
            w.close()

    def test_unscheduled_pod_is_deleted_at_once(self):
        self.create_pod(pod("huge", sleeper(), container={"resources": {"requests": {"cpu": "100"}}}))
        self.fake.wait_until(lambda: any(c["type"] == "PodScheduled" and c["status"] == "False"
                                         for c in self.get_pod("huge")["status"].get("conditions", [])), 10, "unsched")
        out = self.fake.ok("DELETE", NS + "/pods/huge")
        self.assertNotIn("deletionGracePeriodSeconds", out["metadata"])
        self.assertIsNone(self.get_pod("huge"))


class TestSecretsAndEnv(FakeTest):
    def test_secret_data(self):
        s = self.fake.ok("POST", NS + "/secrets", {"metadata": {"name": "sd"}, "data": {"a": base64.b64encode(b"1").decode()},
                                                  "stringData": {"b": "two"}})
        self.assertEqual(s["type"], "Opaque")
        self.assertNotIn("stringData", s)
        self.assertEqual({k: base64.b64decode(v) for k, v in s["data"].items()}, {"a": b"1", "b": b"two"})
        st, _, out = self.fake.request("POST", NS + "/secrets", {"metadata": {"name": "bad64"}, "data": {"a": "!!"}})
        self.assertEqual(st, 400)
        self.assertIn("illegal base64 data", out["message"])
        st, _, out = self.fake.request("POST", NS + "/secrets", {"metadata": {"name": "badkey"}, "stringData": {"a b": "x"}})
        self.assertEqual(st, 422)
        self.assertIn("a valid config key", out["message"])
        out = self.fake.ok("DELETE", NS + "/secrets/sd")
        self.assertEqual((out["kind"], out["status"], out["details"]["name"], out["details"]["kind"]),
                         ("Status", "Success", "sd", "secrets"))
        st, _, out = self.fake.request("DELETE", NS + "/secrets/sd")
        self.assertEqual((st, out["message"]), (404, 'secrets "sd" not found'))

    def test_secret_key_ref(self):
        env = [{"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
        self.create_pod(pod("needs-secret", [PY, "-c", "import os; print(os.environ['TOK'])"],
                            container={"env": env}))
        p = self.fake.wait_until(lambda: (lambda p: p if "waiting" in cstate(p) and cstate(p)["waiting"]["reason"]
                                          == "CreateContainerConfigError" else None)(self.get_pod("needs-secret")),
                                 10, "CreateContainerConfigError")
        self.assertEqual(cstate(p)["waiting"]["message"], 'secret "later" not found')
        self.assertEqual(p["status"]["phase"], "Pending")
        self.fake.ok("POST", NS + "/secrets", {"metadata": {"name": "later"}, "stringData": {"other": "x"}})
        self.fake.wait_until(lambda: cstate(self.get_pod("needs-secret")).get("waiting", {}).get("message")
                             == "couldn't find key token in Secret default/later", 10, "missing key message")
        self.fake.ok("PATCH", NS + "/secrets/later", json.dumps({"stringData": {"token": "s3cret"}}),
                     headers={"Content-Type": "application/merge-patch+json"})
        self.wait_phase("needs-secret", ("Succeeded",))
        self.assertEqual(self.fake.request("GET", NS + "/pods/needs-secret/log")[2], "s3cret\n")


class TestGarbageCollection(FakeTest):
    def owned(self, name, owner, kind="Pod", **kw):
        ref = {"apiVersion": "v1", "kind": kind, "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
        ref.update(kw)
        b = pod(name, sleeper())
        b["metadata"]["ownerReferences"] = [ref]
        return b

    def test_background_deletes_dependents(self):
        owner = self.create_pod(pod("gc-owner", sleeper()))
        self.create_pod(self.owned("gc-dep", owner))
        sec = {"metadata": {"name": "gc-sec", "ownerReferences": self.owned("x", owner)["metadata"]["ownerReferences"]}}
        self.fake.ok("POST", NS + "/secrets", sec)
        self.wait_phase("gc-dep", ("Running",))
        self.fake.ok("DELETE", NS + "/pods/gc-owner?gracePeriodSeconds=0")
        self.fake.wait_until(lambda: self.get_pod("gc-dep") is None, 15, "dependent pod gone")
        self.fake.wait_until(lambda: self.fake.request("GET", NS + "/secrets/gc-sec")[0] == 404, 5, "secret gone")

    def test_dangling_owner(self):
        fake_owner = {"metadata": {"name": "never", "uid": "00000000-0000-0000-0000-000000000000"}}
        self.create_pod(self.owned("gc-orphan", fake_owner))
        self.fake.wait_until(lambda: self.get_pod("gc-orphan") is None, 15, "dependent of a missing owner gone")

    def test_orphan_policy(self):
        owner = self.create_pod(pod("gc-owner2", sleeper()))
        self.create_pod(self.owned("gc-kept", owner))
        self.fake.ok("DELETE", NS + "/pods/gc-owner2", {"propagationPolicy": "Orphan", "gracePeriodSeconds": 0})
        self.fake.wait_until(lambda: self.get_pod("gc-owner2") is None, 10, "owner gone")
        p = self.get_pod("gc-kept")
        self.assertIsNotNone(p)
        self.assertNotIn("ownerReferences", {k: v for k, v in p["metadata"].items() if v})
        self.fake.ok("DELETE", NS + "/pods/gc-kept?gracePeriodSeconds=0")

    def test_foreground_policy(self):
        owner = self.create_pod(pod("gc-owner3", sleeper()))
        self.create_pod(self.owned("gc-blocker", owner, blockOwnerDeletion=True))
        self.wait_phase("gc-blocker", ("Running",))
        self.wait_phase("gc-owner3", ("Running",))
        out = self.fake.ok("DELETE", NS + "/pods/gc-owner3", {"propagationPolicy": "Foreground", "gracePeriodSeconds": 1})
        self.assertIn("foregroundDeletion", out["metadata"]["finalizers"])
        self.fake.wait_until(lambda: self.get_pod("gc-blocker") is None, 20, "dependent gone")
        self.fake.wait_until(lambda: self.get_pod("gc-owner3") is None, 20, "owner gone after its dependents")


class TestFaults(FakeTest):
    args = FAST + ["--node-cpu", "2"]

    def test_image_pull_failure(self):
        self.fake.ctl("POST", "images", {"image": "example.com/nosuch:1", "fail": True})
        self.create_pod(pod("pull", sleeper(), image="example.com/nosuch:1"))
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dpull")
        try:
            ev, _ = w.expect(lambda e: cstate(e["object"]).get("waiting", {}).get("reason") == "ErrImagePull")
            self.assertIn('failed to pull and unpack image "example.com/nosuch:1"',
                          cstate(ev["object"])["waiting"]["message"])
            ev, _ = w.expect(lambda e: cstate(e["object"]).get("waiting", {}).get("reason") == "ImagePullBackOff")
            self.assertEqual(cstate(ev["object"])["waiting"]["message"], 'Back-off pulling image "example.com/nosuch:1"')
            self.assertEqual(phase_of(ev), "Pending")
            self.fake.ctl("POST", "images", {"image": "example.com/nosuch:1", "fail": False})
            w.expect(lambda e: phase_of(e) == "Running")
        finally:
            w.close()
        st, _, out = self.fake.request("GET", NS + "/pods/pull/log")
        self.assertEqual(st, 200)

    def test_unschedulable_until_capacity(self):
        self.create_pod(pod("big", sleeper(), container={"resources": {"requests": {"cpu": "3"}}}))
        p = self.fake.wait_until(lambda: (lambda p: p if any(c["type"] == "PodScheduled" and c["status"] == "False"
                                                             for c in p["status"].get("conditions", [])) else None)(
            self.get_pod("big")), 10, "Unschedulable")
        c = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"][0]
        self.assertEqual(c["reason"], "Unschedulable")
        self.assertTrue(c["message"].startswith("0/1 nodes are available: 1 Insufficient cpu."), c["message"])
        self.assertEqual(p["status"]["phase"], "Pending")
        self.fake.ctl("PATCH", "node", {"cpu": "4"})
        self.wait_phase("big", ("Running",))
        self.fake.ok("DELETE", NS + "/pods/big?gracePeriodSeconds=0")
        self.fake.ctl("PATCH", "node", {"cpu": "2"})

    def test_evict(self):
        self.create_pod(pod("evictee", sleeper()))
        self.wait_phase("evictee", ("Running",))
        pid = self.pids("evictee")[0]
        self.fake.ctl("POST", "pods/default/evictee/evict", {"message": "The node was low on resource: memory. "})
        p = self.wait_phase("evictee", ("Failed",))
        self.assertEqual(p["status"]["reason"], "Evicted")
        self.assertEqual(p["status"]["message"], "The node was low on resource: memory. ")
        dt = [c for c in p["status"]["conditions"] if c["type"] == "DisruptionTarget"][0]
        self.assertEqual((dt["status"], dt["reason"]), ("True", "TerminationByKubelet"))
        self.assertFalse(pid_alive(pid))
        self.assertIsNotNone(self.get_pod("evictee"))  # an evicted pod stays, Failed, until deleted

    def test_oom(self):
        self.create_pod(pod("hog", sleeper()))
        self.wait_phase("hog", ("Running",))
        self.fake.ctl("POST", "pods/default/hog/oom", {})
        p = self.wait_phase("hog", ("Failed",))
        t = cstate(p)["terminated"]
        self.assertEqual((t["reason"], t["exitCode"]), ("OOMKilled", 137))

    def test_api_eviction(self):
        self.create_pod(pod("api-evicted", sleeper()))
        self.wait_phase("api-evicted", ("Running",))
        out = self.fake.ok("POST", NS + "/pods/api-evicted/eviction",
                           {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "api-evicted"},
                            "deleteOptions": {"gracePeriodSeconds": 0}})
        self.assertEqual(out["status"], "Success")
        self.fake.wait_until(lambda: self.get_pod("api-evicted") is None, 10, "evicted pod deleted")

    def test_injected_errors(self):
        self.fake.ctl("POST", "errors", {"verb": "create", "resource": "pods", "code": 429, "count": 2,
                                         "retry_after_s": 3})
        for _ in range(2):
            st, hdrs, out = self.fake.request("POST", NS + "/pods", pod("throttled", sleeper()))
            self.assertEqual(st, 429)
            self.assertStatus(out, 429, "TooManyRequests")
            self.assertEqual(hdrs.get("Retry-After"), "3")
            self.assertEqual(out["details"]["retryAfterSeconds"], 3)
        self.assertEqual(self.fake.request("GET", NS + "/pods")[0], 200)  # other verbs unaffected
        self.create_pod(pod("throttled", sleeper()))  # the rule is used up
        self.fake.ctl("POST", "errors", {"resource": "pods", "code": 503})
        st, _, out = self.fake.request("GET", NS + "/pods/throttled")
        self.assertEqual(st, 503)
        self.assertStatus(out, 503, "ServiceUnavailable")
        self.fake.ok("DELETE", NS + "/pods/throttled?gracePeriodSeconds=0")

    def test_held_answer(self):
        """/fake/hold: the create is carried out at once (the watch sees the pod run), its answer waits."""
        import threading
        self.fake.ctl("POST", "hold", {"verb": "create", "resource": "pods", "count": 1})
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0")
        answer = {}
        t = threading.Thread(target=lambda: answer.update(
            zip(("status", "headers", "body"), self.fake.request("POST", NS + "/pods", pod("held", sleeper())))))
        t.start()
        try:
            w.expect(lambda e: e["object"]["metadata"]["name"] == "held" and phase_of(e) == "Running")
            self.fake.wait_until(lambda: self.fake.ctl("GET", "hold")["held"] == 1, 10, "the answer held")
            self.assertEqual(answer, {})
            self.assertEqual(self.fake.request("GET", NS + "/pods/held")[0], 200)  # others are answered
            self.assertEqual(self.fake.ctl("DELETE", "hold")["released"], 1)
            t.join(10)
            self.assertFalse(t.is_alive())
            self.assertEqual(answer["status"], 201)
            self.assertEqual(answer["body"]["status"]["phase"], "Pending")  # as it was when created
            self.assertEqual(self.fake.ctl("GET", "hold")["held"], 0)
        finally:
            w.close()
            self.fake.ctl("DELETE", "hold")
            t.join(130)
        self.fake.ok("DELETE", NS + "/pods/held?gracePeriodSeconds=0")

    def test_bad_gateway_outage_and_raw_watch_lines(self):
        self.fake.ctl("POST", "errors", {"verb": "create", "resource": "pods", "code": 502})
        st, _, out = self.fake.request("POST", NS + "/pods", pod("gw", sleeper()))
        self.assertEqual(st, 502)
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0")
        # However this ends, the next test finds the API up again.
        self.addCleanup(self.fake.wait_until, self._up, 10, "the outage to end")
        try:
            self.fake.ctl("POST", "watch/raw", {"line": '{"type":"MODIFIED","object":"odd"}'})
            w.expect(lambda e: e.get("object") == "odd")
            out = self.fake.ctl("POST", "outage", {"seconds": 1.5})
            self.assertGreaterEqual(out["connections"], 1)  # the watch's
            end = w.next(timeout=5)
            while not isinstance(end, str):
                end = w.next(timeout=5)
            self.assertEqual(end, "ABORT")
        finally:
            w.close()
        with self.assertRaises(OSError):  # reset before the TLS handshake
            self.fake.request("GET", NS + "/pods")
        self.fake.wait_until(self._up, 10, "the outage to end")

    def _up(self):
        try:
            self.fake.request("GET", "/version")
            return True
        except OSError:
            return False

    def test_stats(self):
        self.fake.ctl("POST", "stats/reset")
        self.create_pod(pod("counted", sleeper()))
        self.fake.ok("GET", NS + "/pods?labelSelector=x%3Dy")
        self.fake.request("GET", NS + "/pods/nosuch")
        s = self.fake.ctl("GET", "stats")
        self.assertEqual(s["requests"].get("create pods"), 1)
        self.assertEqual(s["requests"].get("list pods"), 1)
        self.assertEqual(s["requests"].get("get pods"), 1)
        self.assertEqual(s["by_user"][self.fake.info["user"]]["create pods"], 1)
        self.fake.ok("DELETE", NS + "/pods/counted?gracePeriodSeconds=0")


class TestNodeLost(FakeTest):
    def test_node_lost_then_pod_gc(self):
        self.create_pod(pod("lost", sleeper()))
        self.wait_phase("lost", ("Running",))
        pid = self.pids("lost")[0]
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dlost")
        try:
            w.expect(lambda e: e["type"] == "ADDED")
            self.fake.ctl("POST", "node/lost", {"not_ready_after_s": 0.2, "evict_after_s": 0.5, "pod_gc_after_s": 1.5})
            self.fake.wait_until(lambda: not pid_alive(pid), 5, "processes gone with the node")
            ev, _ = w.expect(lambda e: any(c["type"] == "Ready" and c["status"] == "False"
                                           for c in e["object"]["status"]["conditions"]))
            self.assertEqual(phase_of(ev), "Running")  # the API still says Running: nobody reports otherwise
            ev, _ = w.expect(lambda e: "deletionTimestamp" in e["object"]["metadata"])
            dt = [c for c in ev["object"]["status"]["conditions"] if c["type"] == "DisruptionTarget"][0]
            self.assertEqual(dt["reason"], "DeletionByTaintManager")
            ev, _ = w.expect(lambda e: e["type"] == "DELETED", timeout=10)
            self.assertEqual(phase_of(ev), "Failed")
            node = self.fake.request("GET", "/api/v1/nodes/fake-node")
            self.assertEqual(node[0], 404)
        finally:
            w.close()
        self.fake.ctl("POST", "node/recover")
        self.create_pod(pod("after", [PY, "-c", "pass"]))
        self.wait_phase("after", ("Succeeded",))


@unittest.skipUnless(docker_available(), "no Docker daemon")
class TestDockerKubelet(FakeTest):
    """--kubelet docker: each container is a Docker container (image ENTRYPOINT/CMD, limits, SA mount)."""
    args = FAST[:-2] + ["--min-grace-seconds", "2", "--kubelet", "docker"]

    @classmethod
    def setUpClass(cls):
        cls.image = ensure_test_image()
        super().setUpClass()

    def dpod(self, name, script, **kw):
        return pod(name, ["/bin/sh", "-c", script], image=self.image, **kw)

    def test_env_service_account_and_logs(self):
        script = 'echo "$A $HOSTNAME $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; ' \
                 'cat /var/run/secrets/kubernetes.io/serviceaccount/token'
        self.create_pod(self.dpod("d-env", script, container={"env": [{"name": "A", "value": "x"}]}))
        p = self.wait_phase("d-env", ("Succeeded", "Failed"), timeout=60)
        log = self.fake.request("GET", NS + "/pods/d-env/log")[2]
        self.assertEqual(p["status"]["phase"], "Succeeded", (p["status"], log))
        self.assertTrue(cstate(p)["terminated"]["containerID"].startswith("docker://"))
        sa_token = read(os.path.join(self.fake.info["sa_dir"], "token"))
        self.assertEqual(log, f"x d-env 127.0.0.1:{self.fake.port}\n{sa_token}", p["status"])

    def test_args_replace_cmd(self):
        # No command: the image's ENTRYPOINT (none) + args in place of its CMD, so "-c" is exec'd: StartError.
        body = pod("d-args", None, image=self.image)
        del body["spec"]["containers"][0]["command"]
        body["spec"]["containers"][0]["args"] = ["-c", "exit 0"]
        self.create_pod(body)
        p = self.wait_phase("d-args", ("Failed",), timeout=60)
        t = cstate(p)["terminated"]
        self.assertEqual((t["exitCode"], t["reason"]), (128, "StartError"))
        self.assertIn('exec: "-c"', t["message"])

    def test_grace_period_and_oom(self):
        self.create_pod(self.dpod("d-stubborn", "trap '' TERM; echo up; sleep 60 & wait; sleep 60"))
        self.create_pod(self.dpod("d-oom", "x=a; while true; do x=$x$x$x; done",
                                  container={"resources": {"limits": {"memory": "20Mi"}}}))
        self.wait_phase("d-stubborn", ("Running",), timeout=60)
        self.fake.wait_until(lambda: "up" in self.fake.request("GET", NS + "/pods/d-stubborn/log")[2], 20, "up")
        t0 = time.time()
        w = self.fake.watch(NS + "/pods?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dd-stubborn")
        try:
            self.fake.ok("DELETE", NS + "/pods/d-stubborn?gracePeriodSeconds=3")
            ev, _ = w.expect(lambda e: phase_of(e) == "Failed", timeout=30)
            self.assertEqual(cstate(ev["object"])["terminated"]["exitCode"], 137)
            self.assertGreaterEqual(time.time() - t0, 2.9)
            w.expect(lambda e: e["type"] == "DELETED", timeout=10)
        finally:
            w.close()
        p = self.wait_phase("d-oom", ("Failed",), timeout=60)
        t = cstate(p)["terminated"]
        self.assertEqual((t["reason"], t["exitCode"]), ("OOMKilled", 137))

    def test_pull_failure_is_the_daemons(self):
        self.create_pod(pod("d-pull", ["/bin/true"], image="nosuch.invalid/fake-kube/none:1"))
        p = self.fake.wait_until(lambda: (lambda p: p if cstate(p).get("waiting", {}).get("reason") in
                                          ("ErrImagePull", "ImagePullBackOff") else None)(self.get_pod("d-pull")),
                                 60, "pull failure")
        self.assertEqual(p["status"]["phase"], "Pending")
        self.fake.ok("DELETE", NS + "/pods/d-pull")

    def test_stop_removes_containers(self):
        with Fake("--kubelet", "docker") as fake:
            fake.ok("POST", NS + "/pods", pod("d-left", ["/bin/sh", "-c", "sleep 300"], image=self.image))
            fake.wait_until(lambda: fake.ctl("GET", "processes")["processes"], 60, "container up")
        import subprocess
        left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=fake-kube.pod=default/d-left"],
                              stdout=subprocess.PIPE, text=True).stdout.split()
        self.assertEqual(left, [])


class TestShutdown(unittest.TestCase):
    def test_sigterm_leaves_no_process(self):
        tmp = tempfile.mkdtemp(prefix="fake-kube-test-")
        try:
            escapee_pidfile = os.path.join(tmp, "escapee.pid")
            fake = Fake(*FAST, state_dir=os.path.join(tmp, "state"))
            try:
                fake.ok("POST", NS + "/pods", pod("bg", sleeper()))
                # A pod that leaves a daemon behind in its own session (it escapes the process group).
                code = (f"import os, subprocess, time\n"
                        f"p = subprocess.Popen(['{PY}', '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
                        f"open('{escapee_pidfile}', 'w').write(str(p.pid))\n"
                        f"time.sleep(120)\n")
                fake.ok("POST", NS + "/pods", pod("daemonizer", [PY, "-c", code]))
                fake.wait_until(lambda: len(fake.ctl("GET", "processes")["processes"]) == 2, 15, "2 processes")
                fake.wait_until(lambda: read(escapee_pidfile), 10, "pidfile")
                pids = [p["pid"] for p in fake.ctl("GET", "processes")["processes"]]
                pids.append(int(read(escapee_pidfile)))
                self.assertTrue(all(pid_alive(p) for p in pids))
            finally:
                rc = fake.stop()
            self.assertEqual(rc, 0)
            for p in pids:
                self.assertFalse(pid_alive(p), f"process {p} outlived the fake")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_sigkill_leaves_no_process(self):
        """Even a SIGKILLed fake takes its pods' processes along (children of children included)."""
        tmp = tempfile.mkdtemp(prefix="fake-kube-test-")
        try:
            pidfile = os.path.join(tmp, "child.pid")
            code = (f"import subprocess, time\n"
                    f"p = subprocess.Popen(['{PY}', '-c', 'import time; time.sleep(120)'])\n"
                    f"open('{pidfile}', 'w').write(str(p.pid))\n"
                    f"time.sleep(120)\n")
            fake = Fake(*FAST, state_dir=os.path.join(tmp, "state"))
            try:
                fake.ok("POST", NS + "/pods", pod("parent", [PY, "-c", code]))
                fake.wait_until(lambda: read(pidfile), 15, "child pid")
                pids = [p["pid"] for p in fake.ctl("GET", "processes")["processes"]] + [int(read(pidfile))]
                self.assertEqual(len(pids), 2)
                self.assertTrue(all(pid_alive(p) for p in pids))
                fake.proc.kill()
                fake.proc.wait(10)
                fake.wait_until(lambda: not any(pid_alive(p) for p in pids), 10, "pod processes gone")
            finally:
                fake.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_anonymous_auth_false(self):
        with Fake("--anonymous-auth", "false") as fake:
            st, _, out = fake.request("GET", "/version", token=None)
            self.assertEqual(st, 401)
            self.assertEqual(out["reason"], "Unauthorized")


if __name__ == "__main__":
    unittest.main(verbosity=2)
