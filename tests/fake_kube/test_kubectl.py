#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
# Cross-check of fake_kube.py against the real client: drives kubectl (token,
# client-certificate and exec-plugin credentials) and asserts its output, so the
# fake answers what kube-apiserver answers wherever kubectl depends on it.
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Fake  # noqa: E402

KUBECTL = os.environ.get("KUBECTL", shutil.which("kubectl") or "/usr/bin/kubectl")
PY = "/usr/bin/python3"

PLUGIN = r'''#!/usr/bin/python3
# An exec credential plugin, as EKS/GKE use: prints an ExecCredential with a token and its expiry.
import datetime, json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "plugin.calls"), "a") as f:
    f.write(os.environ.get("KUBERNETES_EXEC_INFO", "") + "\n")
with open(os.path.join(here, "plugin.token")) as f:
    token = f.read().strip()
exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=10)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token, "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
'''

TERM_EXITS = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\nprint('up', flush=True)\ntime.sleep(300)\n"
TERM_IGNORED = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(300)\n"


def pod_json(name, code, labels=None, **extra):
    c = {"name": "main", "image": "python:3.11-slim", "command": [PY, "-c", code]}
    c.update(extra.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": dict({"restartPolicy": "Never", "containers": [c]}, **extra)}


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not found")
class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fake-kube-kubectl-")
        cls.fake = Fake("--min-grace-seconds", "2", state_dir=os.path.join(cls.tmp, "state"))
        info = cls.fake.info
        cls.exec_token = cls.fake.ctl("POST", "tokens", {"user": "exec-user", "groups": ["eks:users"]})["token"]
        cls.expired_token = cls.fake.ctl("POST", "tokens", {"user": "late-user"})["token"]
        cls.fake.ctl("POST", "tokens/expire", {"token": cls.expired_token})
        plugin = os.path.join(cls.tmp, "plugin.py")
        with open(plugin, "w") as f:
            f.write(PLUGIN)
        os.chmod(plugin, 0o755)
        cls.set_plugin_token(cls.exec_token)
        cluster = {"server": info["url"], "certificate-authority": info["ca"]}
        users = {"token": {"token": info["token"]},
                 "cert": {"client-certificate": info["client_cert"], "client-key": info["client_key"]},
                 "exec": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": plugin,
                                   "interactiveMode": "Never", "provideClusterInfo": False}},
                 "expired": {"token": cls.expired_token}}
        kc = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "fake", "cluster": cluster}],
              "users": [{"name": n, "user": u} for n, u in users.items()],
              "contexts": [{"name": n, "context": {"cluster": "fake", "user": n, "namespace": "default"}}
                           for n in users],
              "current-context": "token"}
        cls.kubeconfig = os.path.join(cls.tmp, "kubeconfig")
        with open(cls.kubeconfig, "w") as f:
            json.dump(kc, f)
        cls.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": cls.tmp, "KUBECONFIG": cls.kubeconfig,
                   "KUBECACHEDIR": os.path.join(cls.tmp, "cache")}

    @classmethod
    def tearDownClass(cls):
        rc = cls.fake.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"fake_kube exited {rc}"

    @classmethod
    def set_plugin_token(cls, token):
        with open(os.path.join(cls.tmp, "plugin.token"), "w") as f:
            f.write(token)

    def kubectl(self, *args, context="token", ok=True, input=None, timeout=60):
        r = subprocess.run([KUBECTL, "--context", context, *args], env=self.env, input=input, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        if ok and r.returncode != 0:
            self.fail(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def create(self, obj):
        path = os.path.join(self.tmp, obj["metadata"]["name"] + ".json")
        with open(path, "w") as f:
            json.dump(obj, f)
        r = self.kubectl("create", "-f", path)
        return path, r

    # ---------------------------------------------------------------- discovery
    def test_version_and_namespaces(self):
        v = json.loads(self.kubectl("version", "-o", "json").stdout)
        self.assertEqual(v["serverVersion"]["gitVersion"], "v1.32.4")
        self.assertEqual((v["serverVersion"]["major"], v["serverVersion"]["minor"]), ("1", "32"))
        names = self.kubectl("get", "ns", "-o", "name").stdout.split()
        self.assertIn("namespace/default", names)
        self.assertIn("namespace/fiber", names)
        table = self.kubectl("get", "ns", "default").stdout.splitlines()
        self.assertEqual(table[0].split(), ["NAME", "STATUS", "AGE"])
        self.assertEqual(table[1].split()[:2], ["default", "Active"])
        out = self.kubectl("get", "ns", "default", "-o", "jsonpath={.status.phase}").stdout
        self.assertEqual(out, "Active")

    def test_api_resources(self):
        rows = [l.split() for l in self.kubectl("api-resources", "--api-group=").stdout.splitlines()[1:]]
        by = {r[0]: r for r in rows}
        self.assertEqual(by["pods"][1:], ["po", "v1", "true", "Pod"])
        self.assertEqual(by["namespaces"][1:], ["ns", "v1", "false", "Namespace"])
        self.assertEqual(by["secrets"][1:], ["v1", "true", "Secret"])
        self.assertIn("events", by)

    # ---------------------------------------------------------------- pods
    def test_pod_create_get_logs_delete(self):
        path, r = self.create(pod_json("kc-life", TERM_EXITS, {"app": "kc-life"}))
        self.assertEqual(r.stdout.strip(), "pod/kc-life created")
        r = self.kubectl("wait", "--for=condition=Ready", "pod/kc-life", "--timeout=30s")
        self.assertEqual(r.stdout.strip(), "pod/kc-life condition met")
        lst = json.loads(self.kubectl("get", "pods", "-l", "app=kc-life", "-o", "json").stdout)
        self.assertEqual(lst["kind"], "List")
        self.assertEqual(len(lst["items"]), 1)
        p = lst["items"][0]
        self.assertEqual((p["kind"], p["apiVersion"]), ("Pod", "v1"))
        md, st = p["metadata"], p["status"]
        self.assertEqual((md["name"], md["namespace"], md["labels"]), ("kc-life", "default", {"app": "kc-life"}))
        self.assertTrue(md["uid"] and md["resourceVersion"].isdigit() and md["creationTimestamp"])
        self.assertEqual(p["spec"]["nodeName"], "fake-node")
        self.assertEqual((st["phase"], st["podIP"], st["hostIP"], st["qosClass"]),
                         ("Running", "127.0.0.1", "127.0.0.1", "BestEffort"))
        cs = st["containerStatuses"][0]
        self.assertEqual((cs["name"], cs["ready"], cs["restartCount"]), ("main", True, 0))
        self.assertIn("startedAt", cs["state"]["running"])
        phase = self.kubectl("get", "pod", "kc-life", "-o", "jsonpath={.status.phase} {.status.podIP}").stdout
        self.assertEqual(phase, "Running 127.0.0.1")
        table = self.kubectl("get", "pods", "-l", "app=kc-life").stdout.splitlines()
        self.assertEqual(table[0].split(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"])
        self.assertEqual(table[1].split()[:4], ["kc-life", "1/1", "Running", "0"])
        wide = self.kubectl("get", "pods", "-l", "app=kc-life", "-o", "wide").stdout.splitlines()
        self.assertEqual(wide[1].split()[5:7], ["127.0.0.1", "fake-node"])
        self.assertEqual(self.kubectl("logs", "kc-life").stdout, "up\n")
        self.assertIn("default/kc-life", self.kubectl("get", "pods", "-A", "-o", "name").stdout.replace("pod/", "default/"))
        r = self.kubectl("delete", "pod", "kc-life", "--grace-period=5", "--wait")
        self.assertEqual(r.stdout.strip(), 'pod "kc-life" deleted')
        r = self.kubectl("get", "pod", "kc-life", ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), 'Error from server (NotFound): pods "kc-life" not found')

    def test_delete_waits_for_the_grace_period(self):
        self.create(pod_json("kc-stubborn", TERM_IGNORED))
        self.kubectl("wait", "--for=condition=Ready", "pod/kc-stubborn", "--timeout=30s")
        t0 = time.time()
        r = self.kubectl("delete", "pod", "kc-stubborn", "--grace-period=3", "--wait")
        took = time.time() - t0
        self.assertEqual(r.stdout.strip(), 'pod "kc-stubborn" deleted')
        self.assertGreaterEqual(took, 2.5)  # SIGTERM ignored: gone only after the SIGKILL at the grace period
        self.assertLess(took, 20)
        self.assertEqual(self.kubectl("get", "pod", "kc-stubborn", ok=False).returncode, 1)

    def test_force_delete(self):
        self.create(pod_json("kc-force", TERM_IGNORED))
        r = self.kubectl("delete", "pod", "kc-force", "--grace-period=0", "--force")
        self.assertEqual(r.stdout.strip(), 'pod "kc-force" force deleted')
        self.assertIn("Immediate deletion does not wait for confirmation", r.stderr)
        self.assertEqual(self.kubectl("get", "pod", "kc-force", ok=False).returncode, 1)

    def test_run_label_annotate_events(self):
        r = self.kubectl("run", "kc-run", "--image=busybox", "--restart=Never", "--labels=app=kc-run",
                         "--command", "--", "/bin/echo", "hello from a pod")
        self.assertEqual(r.stdout.strip(), "pod/kc-run created")
        self.kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/kc-run", "--timeout=30s")
        self.assertEqual(self.kubectl("logs", "kc-run").stdout, "hello from a pod\n")
        table = self.kubectl("get", "pod", "kc-run").stdout.splitlines()
        self.assertEqual(table[1].split()[:3], ["kc-run", "0/1", "Completed"])
        self.assertEqual(self.kubectl("label", "pod", "kc-run", "tier=x").stdout.strip(), "pod/kc-run labeled")
        self.assertEqual(self.kubectl("annotate", "pod", "kc-run", "note=hi").stdout.strip(), "pod/kc-run annotated")
        self.kubectl("patch", "pod", "kc-run", "-p", '{"metadata":{"labels":{"patched":"yes"}}}')
        got = self.kubectl("get", "pod", "kc-run", "-o", "jsonpath={.metadata.labels.tier} {.metadata.labels.patched} "
                                                          "{.metadata.annotations.note}").stdout
        self.assertEqual(got, "x yes hi")
        ev = self.kubectl("get", "events", "--field-selector", "involvedObject.name=kc-run").stdout
        for reason in ("Scheduled", "Pulled", "Created", "Started"):
            self.assertIn(reason, ev)
        self.assertIn("Successfully assigned default/kc-run to fake-node", ev)
        self.kubectl("delete", "pod", "kc-run")

    def test_watch_prints_events(self):
        """`kubectl get pods --watch` sees ADDED ... MODIFIED (deletionTimestamp) ... DELETED."""
        before = self.fake.ctl("GET", "stats")["open_watches"]
        proc = subprocess.Popen([KUBECTL, "--context", "token", "get", "pods", "-l", "app=kc-watch", "--watch",
                                 "-o", "json", "--output-watch-events"], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        events = []
        done = threading.Event()

        def reader():
            dec, buf = json.JSONDecoder(), ""
            for line in proc.stdout:
                buf += line
                while True:
                    s = buf.lstrip()
                    try:
                        obj, end = dec.raw_decode(s)
                    except ValueError:
                        break
                    events.append(obj)
                    buf = s[end:]
                    if obj.get("type") == "DELETED":
                        done.set()
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        try:
            self.fake.wait_until(lambda: self.fake.ctl("GET", "stats")["open_watches"] > before, 30, "kubectl's watch")
            self.create(pod_json("kc-watch", TERM_EXITS, {"app": "kc-watch"}))
            self.kubectl("wait", "--for=condition=Ready", "pod/kc-watch", "--timeout=30s")
            self.kubectl("delete", "pod", "kc-watch", "--grace-period=5", "--wait")
            self.assertTrue(done.wait(30), f"no DELETED event; got {[e.get('type') for e in events]}")
        finally:
            proc.terminate()
            proc.wait(10)
            t.join(5)
            proc.stdout.close()
            proc.stderr.close()
        types = [e["type"] for e in events]
        self.assertEqual(types[0], "ADDED")
        self.assertEqual(types[-1], "DELETED")
        self.assertTrue(set(types[1:-1]) <= {"MODIFIED"}, types)
        phases = [e["object"]["status"].get("phase") for e in events]
        self.assertIn("Running", phases)
        first_del = next(i for i, e in enumerate(events) if e["object"]["metadata"].get("deletionTimestamp"))
        self.assertEqual(events[first_del]["type"], "MODIFIED")
        self.assertEqual(events[first_del]["object"]["metadata"]["deletionGracePeriodSeconds"], 5)
        self.assertEqual(phases[-1], "Succeeded")  # exited 0 on SIGTERM, before the final removal
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        self.assertEqual(rvs, sorted(rvs))

    # ---------------------------------------------------------------- errors
    def test_error_messages(self):
        path, _ = self.create(pod_json("kc-dup", TERM_EXITS))
        r = self.kubectl("create", "-f", path, ok=False)
        self.assertEqual(r.stderr.strip(),
                         f'Error from server (AlreadyExists): error when creating "{path}": pods "kc-dup" already exists')
        bad = pod_json("kc-bad", "pass")
        del bad["spec"]["containers"][0]["image"]
        path = os.path.join(self.tmp, "kc-bad.json")
        with open(path, "w") as f:
            json.dump(bad, f)
        r = self.kubectl("create", "-f", path, ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), 'The Pod "kc-bad" is invalid: spec.containers[0].image: Required value')
        typo = pod_json("kc-typo", "pass", container={"imagePullPolicyy": "Never"})
        path = os.path.join(self.tmp, "kc-typo.json")
        with open(path, "w") as f:
            json.dump(typo, f)
        r = self.kubectl("create", "-f", path, ok=False)
        self.assertEqual(r.stderr.strip(),
                         f'Error from server (BadRequest): error when creating "{path}": Pod in version "v1" cannot '
                         f'be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagePullPolicyy"')
        r = self.kubectl("get", "secret", "kc-nosuch", ok=False)
        self.assertEqual(r.stderr.strip(), 'Error from server (NotFound): secrets "kc-nosuch" not found')
        r = self.kubectl("get", "pods", "-n", "kc-nosuch-ns", ok=False)
        self.assertEqual((r.returncode, r.stderr.strip()), (0, "No resources found in kc-nosuch-ns namespace."))
        self.kubectl("delete", "pod", "kc-dup", "--grace-period=0", "--force")

    # ---------------------------------------------------------------- secrets
    def test_secret_generic(self):
        r = self.kubectl("create", "secret", "generic", "kc-secret", "--from-literal=key=value",
                         "--from-literal=run=fiber")
        self.assertEqual(r.stdout.strip(), "secret/kc-secret created")
        s = json.loads(self.kubectl("get", "secret", "kc-secret", "-o", "json").stdout)
        self.assertEqual((s["kind"], s["type"]), ("Secret", "Opaque"))
        self.assertEqual({k: base64.b64decode(v).decode() for k, v in s["data"].items()},
                         {"key": "value", "run": "fiber"})
        table = self.kubectl("get", "secrets", "kc-secret").stdout.splitlines()
        self.assertEqual(table[0].split(), ["NAME", "TYPE", "DATA", "AGE"])
        self.assertEqual(table[1].split()[:3], ["kc-secret", "Opaque", "2"])
        r = self.kubectl("delete", "secret", "kc-secret")
        self.assertEqual(r.stdout.strip(), 'secret "kc-secret" deleted')
        r = self.kubectl("get", "secret", "kc-secret", ok=False)
        self.assertEqual(r.stderr.strip(), 'Error from server (NotFound): secrets "kc-secret" not found')

    def test_secret_reaches_pod_env(self):
        self.kubectl("create", "secret", "generic", "kc-run-secret", "--from-literal=token=t0p")
        env = [{"name": "RUN_SECRET", "valueFrom": {"secretKeyRef": {"name": "kc-run-secret", "key": "token"}}}]
        self.create(pod_json("kc-env", "import os; print(os.environ['RUN_SECRET'])", container={"env": env}))
        self.kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/kc-env", "--timeout=30s")
        self.assertEqual(self.kubectl("logs", "kc-env").stdout, "t0p\n")
        self.kubectl("delete", "pod", "kc-env")
        self.kubectl("delete", "secret", "kc-run-secret")

    # ---------------------------------------------------------------- credentials
    def whoami(self, context):
        return json.loads(self.kubectl("auth", "whoami", "-o", "json", context=context).stdout)["status"]["userInfo"]

    def test_each_credential_type(self):
        self.assertEqual(self.whoami("token")["username"], self.fake.info["user"])
        u = self.whoami("cert")
        self.assertEqual(u["username"], self.fake.info["client_cert_user"])
        self.assertIn("fake:cert-users", u["groups"])
        calls = os.path.join(self.tmp, "plugin.calls")
        if os.path.exists(calls):
            os.unlink(calls)
        u = self.whoami("exec")
        self.assertEqual(u["username"], "exec-user")
        self.assertIn("eks:users", u["groups"])
        with open(calls) as f:
            info = json.loads(f.readline())
        self.assertEqual((info["kind"], info["apiVersion"]), ("ExecCredential", "client.authentication.k8s.io/v1"))
        for ctx in ("token", "cert", "exec"):
            self.assertEqual(self.kubectl("get", "pods", "-o", "name", "-l", "none=here", context=ctx).returncode, 0)

    def test_expired_credentials(self):
        r = self.kubectl("get", "pods", context="expired", ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("error: You must be logged in to the server (Unauthorized)", r.stderr)
        tok = self.fake.ctl("POST", "tokens", {"user": "exec-user-2"})["token"]
        self.set_plugin_token(tok)
        try:
            self.assertEqual(self.whoami("exec")["username"], "exec-user-2")
            self.fake.ctl("POST", "tokens/expire", {"token": tok})  # the cloud revoked it
            r = self.kubectl("get", "pods", context="exec", ok=False)
            self.assertIn("error: You must be logged in to the server (Unauthorized)", r.stderr)
        finally:
            self.set_plugin_token(self.exec_token)


if __name__ == "__main__":
    unittest.main(verbosity=2)
