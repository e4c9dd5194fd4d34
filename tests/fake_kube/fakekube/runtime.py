# SPDX-License-Identifier: BSL-1.0
# Container runtimes behind the kubelet: "process" runs a container as a local
# process group (fast; the image is ignored), "docker" as a Docker container
# (docker CLI, --network host; image, ENTRYPOINT/CMD, env, limits, SA mount).
import ctypes
import fnmatch
import os
import secrets
import signal
import subprocess
import sys
import threading

from . import quantity

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_kubelet():
    # In the child (after fork, before exec): SIGKILL when the pod worker thread that forked it ends.
    _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class StartFailure(Exception):
    """The container could not start: the kubelet reports terminated, reason StartError, exit code 128."""


class PullFailure(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class Guardian:
    """The guardian process (guardian.py): told which process groups exist, kills them if the fake dies."""

    def __init__(self, docker_label=""):
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.join(here, "guardian.py"), docker_label],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
                                     text=True)
        self.lock = threading.Lock()

    def tell(self, line):
        with self.lock:
            try:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass

    def close(self):
        with self.lock:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ProcHandle:
    def __init__(self, proc):
        self.proc = proc
        self.lock = threading.Lock()
        self.reaped = False


class ProcessRuntime:
    name = "process"
    id_prefix = "containerd://"

    def __init__(self, cluster):
        self.c = cluster
        self.guardian = Guardian()

    def base_env(self):
        cfg = self.c.cfg
        env = {}
        for pat in cfg.pass_env or []:
            for k, v in os.environ.items():
                if fnmatch.fnmatchcase(k, pat):
                    env[k] = v
        env.setdefault("PATH", os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"))
        if "HOME" in os.environ:
            env.setdefault("HOME", os.environ["HOME"])
        return env

    def pull(self, image, policy):
        return None  # no images in process mode (the /fake/images knob still makes pulls fail)

    def start(self, w, ctr, cmd, args, env, log_path):
        if not cmd:
            raise StartFailure("failed to create containerd task: failed to create shim task: OCI runtime create "
                               "failed: runc create failed: unable to start container process: the fake kubelet "
                               "(process mode) has no image entrypoint: set the container's command: unknown")
        argv = cmd + args
        cwd = ctr.spec.get("workingDir") or self.c.cfg.workdir or w.sandbox
        try:
            os.makedirs(cwd, exist_ok=True)  # runc creates a missing working directory too
        except OSError:
            pass
        with open(log_path, "ab", buffering=0) as log:
            try:
                proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=_die_with_kubelet, close_fds=True)
            except OSError as e:
                if isinstance(e, FileNotFoundError):
                    why = ("executable file not found in $PATH" if "/" not in argv[0]
                           else f"stat {argv[0]}: no such file or directory")
                else:
                    why = "permission denied" if isinstance(e, PermissionError) else e.strerror
                raise StartFailure(f"failed to create containerd task: failed to create shim task: OCI runtime "
                                   f"create failed: runc create failed: unable to start container process: exec: "
                                   f"\"{argv[0]}\": {why}: unknown")
        self.guardian.tell(f"+{proc.pid}")
        return ProcHandle(proc)

    def wait(self, h):
        """Block until the container's first process exits; kill the rest of its group; (exit code, oom)."""
        pid = h.proc.pid
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # a zombie keeps the pid (and group) reserved
        except ChildProcessError:
            pass
        try:
            os.killpg(pid, signal.SIGKILL)  # the container's other processes die with its PID 1
        except (ProcessLookupError, PermissionError):
            pass
        with h.lock:
            rc = h.proc.wait()
            h.reaped = True
        self.guardian.tell(f"-{pid}")
        return (128 - rc if rc < 0 else rc), False

    def signal(self, h, sig):
        with h.lock:
            if h.reaped:
                return
            try:
                if sig == signal.SIGKILL:
                    os.killpg(h.proc.pid, sig)
                else:
                    os.kill(h.proc.pid, sig)  # SIGTERM reaches the container's PID 1 only
            except (ProcessLookupError, PermissionError):
                pass

    def describe(self, h):
        return {"pid": h.proc.pid} if not h.reaped else None

    def shutdown(self):
        self.guardian.close()


class DockerHandle:
    def __init__(self, name, cid, logs):
        self.name, self.cid, self.logs = name, cid, logs
        self.done = False


class DockerRuntime:
    name = "docker"
    id_prefix = "docker://"

    def __init__(self, cluster):
        self.c = cluster
        self.instance = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.guardian = Guardian(f"fake-kube.instance={self.instance}")

    def _docker(self, *args, timeout=120):
        return subprocess.run(["docker", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def base_env(self):
        return {}  # the image's ENV applies

    def pull(self, image, policy):
        present = self._docker("image", "inspect", image).returncode == 0
        if policy == "Never":
            if not present:
                raise PullFailure("ErrImageNeverPull",
                                  f'Container image "{image}" is not present with pull policy of Never')
            return
        if policy == "IfNotPresent" and present:
            return
        r = self._docker("pull", "--quiet", image, timeout=600)
        if r.returncode != 0:
            raise PullFailure("ErrImagePull", (r.stderr.strip().splitlines() or ["pull failed"])[-1])

    def start(self, w, ctr, cmd, args, env, log_path):
        name = f"fake-kube-{w.uid[:8]}-{ctr.name}-{ctr.restarts}"
        a = ["create", "--name", name, "--network", "host", "--label", f"fake-kube.instance={self.instance}",
             "--label", f"fake-kube.pod={w.ns}/{w.name}"]
        for k, v in env.items():
            a += ["-e", f"{k}={v}"]
        if ctr.spec.get("workingDir"):
            a += ["-w", ctr.spec["workingDir"]]
        if any(m.get("mountPath") == SA_MOUNT for m in ctr.spec.get("volumeMounts") or []):
            a += ["-v", f"{self.c.sa_dir}:{SA_MOUNT}:ro"]
        lim = (ctr.spec.get("resources") or {}).get("limits") or {}
        if "memory" in lim:
            a += ["--memory", str(int(quantity.parse(lim["memory"])))]
        if "cpu" in lim:
            a += ["--cpus", str(float(quantity.parse(lim["cpu"])))]
        rest = args
        if cmd:
            a += ["--entrypoint", cmd[0]]  # command replaces ENTRYPOINT, args replace CMD, as in Kubernetes
            rest = cmd[1:] + args
        r = self._docker(*a, ctr.spec["image"], *rest)
        if r.returncode != 0:
            raise StartFailure(r.stderr.strip())
        cid = r.stdout.strip()
        r = self._docker("start", name)
        if r.returncode != 0:
            self._docker("rm", "-f", name)
            raise StartFailure(r.stderr.strip())
        log = open(log_path, "ab", buffering=0)
        logs = subprocess.Popen(["docker", "logs", "-f", name], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
        log.close()
        ctr.container_id = self.id_prefix + cid
        h = DockerHandle(name, cid, logs)
        h.log_path = log_path
        return h

    def wait(self, h):
        r = self._docker("wait", h.name, timeout=None)
        try:
            code = int(r.stdout.strip())
        except ValueError:
            code = 137  # removed under us (shutdown)
        oom = self._docker("inspect", "-f", "{{.State.OOMKilled}}", h.name).stdout.strip() == "true"
        try:
            h.logs.wait(10)
        except subprocess.TimeoutExpired:
            h.logs.kill()
            h.logs.wait()
        # `docker logs -f` can end before a quickly exiting container's last lines arrive: once it has
        # exited, the whole log (of which the followed part is a prefix) replaces the file.
        full = subprocess.run(["docker", "logs", h.name], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60)
        if full.returncode == 0:
            tmp = h.log_path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(full.stdout)
            os.replace(tmp, h.log_path)
        self._docker("rm", "-f", h.name)
        h.done = True
        return code, oom

    def signal(self, h, sig):
        if not h.done:
            self._docker("kill", "--signal", "KILL" if sig == signal.SIGKILL else "TERM", h.name)

    def describe(self, h):
        return {"container": h.name} if not h.done else None

    def shutdown(self):
        ids = self._docker("ps", "-aq", "--filter", f"label=fake-kube.instance={self.instance}").stdout.split()
        if ids:
            self._docker("rm", "-f", *ids)
        self.guardian.close()


def make(cluster):
    if cluster.cfg.kubelet == "docker":
        r = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        if r.returncode != 0:
            raise SystemExit(f"fake_kube: --kubelet docker needs a Docker daemon: {r.stderr.strip()}")
        return DockerRuntime(cluster)
    return ProcessRuntime(cluster)
