# SPDX-License-Identifier: BSL-1.0
# Test helpers: start fake_kube.py and wait for its ready line, talk to it over
# HTTPS (REST calls, the /fake/ control API), and read watch streams at the
# chunked-encoding level so tests can check the framing too.
import json
import os
import queue
import select
import signal
import socket
import ssl
import subprocess
import threading
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_kube.py")
PYTHON = "/usr/bin/python3"


class Fake:
    """A running fake API server (a context manager: stops it and checks it exited cleanly)."""

    def __init__(self, *args, state_dir=None, ready_timeout=20.0):
        cmd = [PYTHON, FAKE, *args]
        if state_dir:
            cmd += ["--state-dir", state_dir]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + ready_timeout
        line = ""
        while time.time() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.time()))
            if r:
                line = self.proc.stdout.readline()
                break
        if not line:
            self.proc.kill()
            err = self.proc.stderr.read()
            self.proc.wait()
            raise RuntimeError(f"fake_kube did not become ready: {err}")
        self.info = json.loads(line)
        self.url, self.host, self.port = self.info["url"], self.info["host"], self.info["port"]
        self.token, self.admin = self.info["token"], self.info["admin_token"]
        self.ctx = ssl.create_default_context(cafile=self.info["ca"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("fake_kube did not exit within %ss of SIGTERM" % timeout)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode

    # -- HTTP --
    def conn(self, cert=None):
        ctx = self.ctx
        if cert:
            ctx = ssl.create_default_context(cafile=self.info["ca"])
            ctx.load_cert_chain(*cert)
        return http.client.HTTPSConnection(self.host, self.port, context=ctx, timeout=30)

    def request(self, method, path, body=None, token="default", headers=None, cert=None, raw=False):
        """(status, headers, decoded JSON or text)."""
        h = {"Accept": "application/json"}
        if token == "default":
            token = self.token
        if token:
            h["Authorization"] = f"Bearer {token}"
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        c = self.conn(cert)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            hdrs = r.headers
        finally:
            c.close()
        if raw:
            return r.status, hdrs, data
        if hdrs.get("Content-Type", "").startswith("application/json"):
            return r.status, hdrs, json.loads(data)
        return r.status, hdrs, data.decode(errors="replace")

    def ok(self, method, path, body=None, **kw):
        st, _, out = self.request(method, path, body, **kw)
        if st >= 300:
            raise AssertionError(f"{method} {path} -> {st}: {out}")
        return out

    def ctl(self, method, path, body=None):
        st, _, out = self.request(method, "/fake/" + path.lstrip("/"), body, token=self.admin)
        if st != 200:
            raise AssertionError(f"/fake/{path} -> {st}: {out}")
        return out

    def watch(self, path, token="default", headers=None):
        return Watch(self, path, self.token if token == "default" else token, headers)

    def wait_until(self, fn, timeout=20.0, what="condition", period=0.05):
        """Poll fn() until it returns a true value, with a deadline (a poll, not a sleep-as-sync)."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = fn()
            if last:
                return last
            time.sleep(period)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Watch:
    """A watch stream read chunk by chunk: .chunks holds each chunk's payload, events go to a queue;
    the stream ends with "END" (terminating chunk seen) or "ABORT" (connection closed without it)."""

    def __init__(self, fake, path, token, headers=None):
        raw = socket.create_connection((fake.host, fake.port), timeout=60)
        self.sock = fake.ctx.wrap_socket(raw, server_hostname=fake.host)
        req = f"GET {path} HTTP/1.1\r\nHost: {fake.host}:{fake.port}\r\nAccept: application/json\r\n"
        if token:
            req += f"Authorization: Bearer {token}\r\n"
        for k, v in (headers or {}).items():
            req += f"{k}: {v}\r\n"
        self.sock.sendall((req + "\r\n").encode())
        self.f = self.sock.makefile("rb")
        status = self.f.readline().decode()
        self.status = int(status.split()[1])
        self.headers = {}
        while True:
            line = self.f.readline().decode()
            if line in ("\r\n", ""):
                break
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunks = []
        self.q = queue.Queue()
        self.ended = None
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            if self.headers.get("transfer-encoding") != "chunked":
                body = self.f.read(int(self.headers.get("content-length", "0")))
                self.q.put(("body", body))
                return
            buf = b""
            while True:
                size_line = self.f.readline()
                if not size_line:
                    self.ended = "ABORT"
                    break
                size = int(size_line.strip().split(b";")[0], 16)
                if size == 0:
                    self.f.readline()
                    self.ended = "END"
                    break
                data = self.f.read(size)
                if len(data) < size or self.f.read(2) != b"\r\n":
                    self.ended = "ABORT"
                    break
                self.chunks.append(data)
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self.q.put(("event", json.loads(line)))
        except (OSError, ValueError, ssl.SSLError):
            self.ended = "ABORT"
        finally:
            self.q.put(("end", self.ended))

    def next(self, timeout=20.0):
        """The next event dict, or the string "END"/"ABORT"; raises on timeout."""
        try:
            kind, v = self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no watch event within {timeout}s")
        if kind == "end":
            self.q.put((kind, v))  # stay ended
            return v
        if kind == "body":
            return json.loads(v)
        return v

    def expect(self, pred, timeout=20.0, what="event"):
        """Consume events until pred(event) is true; returns that event and the ones seen before it."""
        deadline = time.time() + timeout
        seen = []
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; saw {[summary(e) for e in seen]}")
            ev = self.next(left)
            if isinstance(ev, str):
                raise AssertionError(f"stream ended ({ev}) before {what}; saw {[summary(e) for e in seen]}")
            if pred(ev):
                return ev, seen
            seen.append(ev)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.t.join(5)


def summary(ev):
    if not isinstance(ev, dict):
        return ev
    o = ev.get("object") or {}
    md = o.get("metadata") or {}
    st = o.get("status") or {}
    return (ev.get("type"), md.get("name"), st.get("phase") if isinstance(st, dict) else None, md.get("resourceVersion"))


def pod(name, cmd, labels=None, restart="Never", image="busybox:1.36", grace=None, **spec_extra):
    c = {"name": "main", "image": image, "command": cmd}
    c.update(spec_extra.pop("container", {}))
    spec = {"restartPolicy": restart, "containers": [c]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    spec.update(spec_extra)
    md = {"name": name}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


TEST_IMAGE = "fake-kube-test/sh:1"


def docker_available():
    import shutil
    if not shutil.which("docker"):
        return False
    try:
        r = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def ensure_test_image():
    """A ~3 MB image (dash as /bin/sh, sleep, cat, and their libraries from this machine) made with
    `docker import`: no registry is needed. Returns its name."""
    import io
    import re
    import tarfile
    if subprocess.run(["docker", "image", "inspect", TEST_IMAGE], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return TEST_IMAGE
    files = set()
    for b in ("/bin/dash", "/bin/sleep", "/bin/cat"):
        files.add((b, "bin/" + os.path.basename(b)))
        ldd = subprocess.run(["ldd", b], stdout=subprocess.PIPE, text=True).stdout
        for lib in re.findall(r"(/\S+)", ldd):
            files.add((os.path.realpath(lib), lib.lstrip("/")))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src, dst in sorted(files, key=lambda x: x[1]):
            tar.add(src, arcname=dst)
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "dash"
        tar.addfile(link)
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
    r = subprocess.run(["docker", "import", "-c", "ENV PATH=/bin", "-c", 'CMD ["/bin/sh"]', "-", TEST_IMAGE],
                       input=buf.getvalue(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError(f"docker import failed: {r.stderr.decode(errors='replace')}")
    return TEST_IMAGE
