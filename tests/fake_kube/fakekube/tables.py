# SPDX-License-Identifier: BSL-1.0
# Server-side printing: meta.k8s.io/v1 Table answers (what `kubectl get` asks for
# with Accept: ...;as=Table), with the columns and cell logic of
# pkg/printers/internalversion for pods, secrets, namespaces, nodes and events.
import calendar
import time


def _age(ts):
    if not ts:
        return "<unknown>"
    t = calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))
    return human_duration(time.time() - t)


def human_duration(secs):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(secs)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 60 * 3:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        d = h // 24
        return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"
    return f"{h // 24 // 365}y"


def _col(name, typ="string", fmt="", desc="", prio=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": prio}


NAME_COL = _col("Name", fmt="name", desc="Name must be unique within a namespace. Is required when creating "
                "resources, although some resources may allow a client to request the generation of an "
                "appropriate name automatically. Name is primarily intended for creation idempotence and "
                "configuration definition. Cannot be updated. More info: "
                "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
AGE_COL = _col("Age", desc="CreationTimestamp is a timestamp representing the server time when this object "
               "was created. It is not guaranteed to be set in happens-before order across separate "
               "operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.")

COLUMNS = {
    "pods": [NAME_COL, _col("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
             _col("Status", desc="The aggregate status of the containers in this pod."),
             _col("Restarts", desc="The number of times the containers in this pod have been restarted and "
                  "when the last container in this pod has restarted."), AGE_COL,
             _col("IP", desc="IP address allocated to the pod. Routable at least within the cluster. Empty if "
                  "not yet allocated.", prio=1),
             _col("Node", desc="NodeName indicates in which node this pod is scheduled.", prio=1),
             _col("Nominated Node", desc="nominatedNodeName is set only when this pod preempts other pods "
                  "on the node, but it cannot be scheduled right away as preemption victims receive their "
                  "graceful termination periods.", prio=1),
             _col("Readiness Gates", desc="If specified, all readiness gates will be evaluated for pod "
                  "readiness.", prio=1)],
    "secrets": [NAME_COL, _col("Type", desc="The type of the secret"),
                _col("Data", "string", desc="The number of data items in the secret"), AGE_COL],
    "namespaces": [NAME_COL, _col("Status", desc="The status of the namespace"), AGE_COL],
    "nodes": [NAME_COL, _col("Status", desc="The status of the node"), _col("Roles", desc="The roles of the node"),
              AGE_COL, _col("Version", desc="Kubelet Version reported by the node."),
              _col("Internal-IP", desc="List of addresses reachable to the node. Queried from cloud provider, "
                   "if available.", prio=1),
              _col("External-IP", desc="List of addresses reachable to the node.", prio=1),
              _col("OS-Image", desc="OS Image reported by the node from /etc/os-release.", prio=1),
              _col("Kernel-Version", desc="Kernel Version reported by the node from 'uname -r'.", prio=1),
              _col("Container-Runtime", desc="Container runtime version reported by the node.", prio=1)],
    "events": [_col("Last Seen", desc="Time when last this event was observed."),
               _col("Type", desc="Type of this event (Normal, Warning), new types could be added in the future."),
               _col("Reason", desc="This should be a short, machine understandable string that gives the reason "
                    "for the transition into the object's current status."),
               _col("Object", desc="The object that this event is about."),
               _col("Subobject", desc="The field of the object this event is about.", prio=1),
               _col("Source", desc="The component reporting this event. Should be a short machine "
                    "understandable string.", prio=1),
               _col("Message", desc="A human-readable description of the status of this operation."),
               _col("First Seen", desc="The time at which the event was first recorded.", prio=1),
               _col("Count", desc="The number of times this event has occurred.", prio=1),
               _col("Name", fmt="name", desc="Name of the event", prio=1)],
}


def pod_cells(p):
    st = p.get("status") or {}
    spec = p.get("spec") or {}
    reason = st.get("reason") or st.get("phase", "")
    restarts = 0
    ready = 0
    total = len(spec.get("containers") or [])
    has_running = False
    for cs in reversed(st.get("containerStatuses") or []):
        restarts += cs.get("restartCount", 0)
        s = cs.get("state") or {}
        if s.get("waiting", {}).get("reason"):
            reason = s["waiting"]["reason"]
        elif s.get("terminated", {}).get("reason"):
            reason = s["terminated"]["reason"]
        elif "terminated" in s:
            t = s["terminated"]
            reason = f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode', 0)}"
        elif cs.get("ready") and "running" in s:
            has_running = True
            ready += 1
    if reason == "Completed" and has_running:
        ready_cond = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])
        reason = "Running" if ready_cond else "NotReady"
    if p["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if st.get("reason") == "NodeLost" else "Terminating"
    return [p["metadata"]["name"], f"{ready}/{total}", reason, restarts, _age(p["metadata"].get("creationTimestamp")),
            st.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            st.get("nominatedNodeName") or "<none>", "<none>"]


def node_cells(n):
    st = n.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), None)
    status = "Unknown" if ready is None or ready["status"] == "Unknown" else (
        "Ready" if ready["status"] == "True" else "NotReady")
    if n.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    ips = [a["address"] for a in st.get("addresses") or [] if a["type"] == "InternalIP"]
    info = st.get("nodeInfo") or {}
    return [n["metadata"]["name"], status, "<none>", _age(n["metadata"].get("creationTimestamp")),
            info.get("kubeletVersion", ""), ",".join(ips) or "<none>", "<none>", info.get("osImage", ""),
            info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")]


def event_cells(e):
    io = e.get("involvedObject") or {}
    src = e.get("source") or {}
    last = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp")
    first = e.get("firstTimestamp") or last
    return [_age(last) if last and len(last) == 20 else "<unknown>", e.get("type", ""), e.get("reason", ""),
            f"{io.get('kind', '').lower()}/{io.get('name', '')}", io.get("fieldPath", ""),
            ", ".join(x for x in (src.get("component"), src.get("host")) if x) or e.get("reportingComponent", ""),
            e.get("message", "").strip(), _age(first) if first and len(first) == 20 else "<unknown>",
            e.get("count", 1), e["metadata"]["name"]]


def cells(resource, o):
    if resource == "pods":
        return pod_cells(o)
    if resource == "secrets":
        return [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}),
                _age(o["metadata"].get("creationTimestamp"))]
    if resource == "namespaces":
        return [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""),
                _age(o["metadata"].get("creationTimestamp"))]
    if resource == "nodes":
        return node_cells(o)
    if resource == "events":
        return event_cells(o)
    return [o["metadata"]["name"], _age(o["metadata"].get("creationTimestamp"))]


def row_object(o, include):
    if include == "None":
        return None
    if include == "Object":
        return o
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}


def table(resource, objs, rv=None, include="Metadata", headers=True, cont=None, remaining=None):
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}}
    if rv is not None:
        t["metadata"]["resourceVersion"] = str(rv)
    if cont:
        t["metadata"]["continue"] = cont
    if remaining:
        t["metadata"]["remainingItemCount"] = remaining
    t["columnDefinitions"] = COLUMNS.get(resource, [NAME_COL, AGE_COL]) if headers else None
    rows = []
    for o in objs:
        r = {"cells": cells(resource, o)}
        ob = row_object(o, include)
        if ob is not None:
            r["object"] = ob
        rows.append(r)
    t["rows"] = rows
    return t
