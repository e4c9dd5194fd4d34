# SPDX-License-Identifier: BSL-1.0
# A container's environment as the kubelet builds it: service variables,
# value with $(VAR) expansion, secretKeyRef / envFrom (CreateContainerConfigError
# messages when missing), fieldRef (downward API) and resourceFieldRef.
import re

from .registry import decode_secret_value


class ConfigError(Exception):
    pass


_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(s, env):
    """$(VAR) expansion as in k8s.io/kubernetes/third_party/forked/golang/expansion: $$ escapes."""
    def rep(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(rep, s)


# Functions of (pod worker, ...): the worker gives the pod, its namespace and the cluster.
def build_env(self, ctr):
    cfg = self.c.cfg
    p = self.pod()
    base = self.k.runtime.base_env()
    base["HOSTNAME"] = self.name
    port = str(self.c.port)
    svc = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port,
           "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
           f"KUBERNETES_PORT_{port}_TCP": f"tcp://127.0.0.1:{port}", f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
           f"KUBERNETES_PORT_{port}_TCP_PORT": port, f"KUBERNETES_PORT_{port}_TCP_ADDR": "127.0.0.1"}
    if cfg.sa_dir_env:
        svc[cfg.sa_dir_env] = self.c.sa_dir
    env = {}
    for src in ctr.spec.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if src.get("secretRef"):
            ref = src["secretRef"]
            sec = self.c.store.get("secrets", self.ns, ref.get("name", ""))
            if sec is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'secret "{ref.get("name", "")}" not found')
            for k in (sec.get("data") or {}):
                env[prefix + k] = decode_secret_value(sec, k).decode(errors="replace")
        elif src.get("configMapRef"):
            ref = src["configMapRef"]
            if not ref.get("optional"):
                raise ConfigError(f'configmap "{ref.get("name", "")}" not found')
    lookup = dict(svc)
    lookup.update(env)
    for e in ctr.spec.get("env") or []:
        name, vf = e["name"], e.get("valueFrom")
        if vf is None:
            val = expand(e.get("value", ""), lookup)
        elif vf.get("secretKeyRef"):
            ref = vf["secretKeyRef"]
            sec = self.c.store.get("secrets", self.ns, ref.get("name", ""))
            if sec is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'secret "{ref.get("name", "")}" not found')
            if ref["key"] not in (sec.get("data") or {}):
                if ref.get("optional"):
                    continue
                raise ConfigError(f"couldn't find key {ref['key']} in Secret {self.ns}/{ref['name']}")
            val = decode_secret_value(sec, ref["key"]).decode(errors="replace")
        elif vf.get("configMapKeyRef"):
            ref = vf["configMapKeyRef"]
            if ref.get("optional"):
                continue
            raise ConfigError(f'configmap "{ref.get("name", "")}" not found')
        elif vf.get("fieldRef"):
            val = field_ref(self, p, vf["fieldRef"].get("fieldPath", ""))
        elif vf.get("resourceFieldRef"):
            val = resource_ref(self, ctr, vf["resourceFieldRef"])
        else:
            val = ""
        env[name] = val
        lookup[name] = val
    out = dict(base)
    out.update(svc)
    out.update(env)
    return out

def field_ref(self, p, path):
    md = p["metadata"]
    m = re.match(r"^metadata\.(labels|annotations)\['(.*)'\]$", path)
    if m:
        return (md.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {"metadata.name": md["name"], "metadata.namespace": md["namespace"], "metadata.uid": md["uid"],
              "spec.nodeName": p["spec"].get("nodeName", ""),
              "spec.serviceAccountName": p["spec"].get("serviceAccountName", ""),
              "status.hostIP": "127.0.0.1", "status.hostIPs": "127.0.0.1",
              "status.podIP": "127.0.0.1", "status.podIPs": "127.0.0.1"}
    if path in simple:
        return simple[path]
    if path in ("metadata.labels", "metadata.annotations"):
        d = md.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
    raise ConfigError(f"unsupported fieldPath: {path}")

def resource_ref(self, ctr, ref):
    from . import quantity
    import math
    res = ref.get("resource", "")
    kind, _, rname = res.partition(".")
    vals = (ctr.spec.get("resources") or {}).get(kind) or {}
    if rname in vals:
        q = quantity.parse(vals[rname])
    else:
        node = self.c.store.get("nodes", "", self.c.cfg.node_name)
        alloc = node["status"]["allocatable"] if node else {}
        q = quantity.parse(alloc.get(rname, "0"))
    div = quantity.parse(ref.get("divisor", "1") or "1")
    return str(math.ceil(q / div))

# -- processes --
