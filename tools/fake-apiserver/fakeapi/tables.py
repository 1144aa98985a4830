"""Server-side printing: meta.k8s.io/v1 Table responses, which kubectl asks for with
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Columns follow the real printers
(pkg/printers/internalversion) for the common kinds, Name + Age for everything else."""

import calendar
import time

_NAME_DESC = "Name must be unique within a namespace."
_AGE_DESC = ("CreationTimestamp is a timestamp representing the server time when this object "
             "was created.")


def _col(name, desc="", priority=0, fmt="", type_="string"):
    return {"name": name, "type": type_, "format": fmt, "description": desc,
            "priority": priority}


NAME_COL = _col("Name", _NAME_DESC, fmt="name")
AGE_COL = _col("Age", _AGE_DESC)


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm%ds" % (m, s % 60) if s % 60 else "%dm" % m
    if m < 180:
        return "%dm" % m
    h = s // 3600
    if h < 8:
        return "%dh%dm" % (h, m % 60) if m % 60 else "%dh" % h
    if h < 48:
        return "%dh" % h
    if h < 24 * 8:
        return "%dd%dh" % (h // 24, h % 24) if h % 24 else "%dd" % (h // 24)
    if h < 24 * 365 * 2:
        return "%dd" % (h // 24)
    if h < 24 * 365 * 8:
        dy = (h // 24) % 365
        return "%dy%dd" % (h // 24 // 365, dy) if dy else "%dy" % (h // 24 // 365)
    return "%dy" % (h // 24 // 365)


def age(d):
    ts = (d.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    try:
        t = calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<unknown>"
    return human_duration(time.time() - t)


def _pod(d):
    spec, status = d.get("spec") or {}, d.get("status") or {}
    total = len(spec.get("containers") or [])
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        st = c.get("state") or {}
        if st.get("waiting", {}).get("reason"):
            reason = st["waiting"]["reason"]
        elif st.get("terminated", {}).get("reason"):
            reason = st["terminated"]["reason"]
    if (d.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    ips = status.get("podIP") or "<none>"
    return [d["metadata"]["name"], "%d/%d" % (ready, total), reason, str(restarts), age(d),
            ips, spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", "<none>"]


def _service(d):
    spec = d.get("spec") or {}
    ports = ",".join("%s/%s" % (p.get("port"), p.get("protocol", "TCP"))
                     for p in spec.get("ports") or [])
    sel = ",".join("%s=%s" % kv for kv in sorted((spec.get("selector") or {}).items()))
    return [d["metadata"]["name"], spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>",
            "<none>", ports or "<none>", age(d), sel or "<none>"]


def _deployment(d):
    spec, status = d.get("spec") or {}, d.get("status") or {}
    ready = "%d/%d" % (status.get("readyReplicas", 0), spec.get("replicas", 1))
    return [d["metadata"]["name"], ready, status.get("updatedReplicas", 0),
            status.get("availableReplicas", 0), age(d)]


def _namespace(d):
    return [d["metadata"]["name"], (d.get("status") or {}).get("phase", "Active"), age(d)]


def _configmap(d):
    n = len(d.get("data") or {}) + len(d.get("binaryData") or {})
    return [d["metadata"]["name"], n, age(d)]


def _endpointslice(d):
    ports = ",".join(str(p.get("port")) for p in d.get("ports") or []) or "<unset>"
    addrs = [a for e in d.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addrs[:3]) + (" + %d more..." % (len(addrs) - 3) if len(addrs) > 3 else "")
    return [d["metadata"]["name"], d.get("addressType", ""), ports, shown or "<unset>", age(d)]


def _event(d):
    """kubectl get events (core v1 and events.k8s.io/v1): last seen, type, reason, object,
    message."""
    last = (d.get("lastTimestamp") or d.get("deprecatedLastTimestamp")
            or (d.get("series") or {}).get("lastObservedTime") or d.get("eventTime")
            or d["metadata"].get("creationTimestamp"))
    ref = d.get("involvedObject") or d.get("regarding") or {}
    seen = "<unknown>"
    try:  # RFC 3339, with or without fractional seconds (eventTime is a MicroTime)
        seen = human_duration(max(0, time.time() - calendar.timegm(
            time.strptime(last.split(".")[0].rstrip("Z") + "Z", "%Y-%m-%dT%H:%M:%SZ"))))
    except (AttributeError, ValueError):
        pass
    return [seen, d.get("type", ""), d.get("reason", ""),
            "%s/%s" % ((ref.get("kind") or "").lower(), ref.get("name", "")),
            d.get("message", d.get("note", ""))]


POD_COLUMNS = [
    NAME_COL,
    _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "The aggregate status of the containers in this pod."),
    _col("Restarts", "The number of times the containers in this pod have been restarted."),
    AGE_COL,
    _col("IP", "IP address allocated to the pod.", 1),
    _col("Node", "NodeName is a request to schedule this pod onto a specific node.", 1),
    _col("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods.", 1),
    _col("Readiness Gates", "If specified, all readiness gates will be evaluated.", 1)]

PRINTERS = {
    "Pod": (POD_COLUMNS, _pod),
    "Service": ([NAME_COL, _col("Type"), _col("Cluster-IP"), _col("External-IP"),
                 _col("Port(s)"), AGE_COL, _col("Selector", priority=1)], _service),
    "Deployment": ([NAME_COL, _col("Ready"), _col("Up-to-date", type_="integer"),
                    _col("Available", type_="integer"), AGE_COL], _deployment),
    "Namespace": ([NAME_COL, _col("Status"), AGE_COL], _namespace),
    "ConfigMap": ([NAME_COL, _col("Data", type_="integer"), AGE_COL], _configmap),
    "Event": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
              _event),
    "EndpointSlice": ([NAME_COL, _col("AddressType"), _col("Ports"), _col("Endpoints"), AGE_COL],
                      _endpointslice),
}


def _row(rt, d, include_object):
    cols, fn = PRINTERS.get(rt.kind, (None, None))
    cells = fn(d) if fn else [d["metadata"]["name"], age(d)]
    row = {"cells": cells}
    if include_object == "Object":
        row["object"] = dict({"kind": rt.kind, "apiVersion": rt.api_version}, **d)
    elif include_object != "None":
        md = {k: v for k, v in d["metadata"].items() if k != "managedFields"}
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": md}
    return row


def table(rt, dicts, list_meta, include_object="Metadata", headers=True):
    cols = PRINTERS.get(rt.kind, ([NAME_COL, AGE_COL], None))[0]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": cols if headers else None,
            "rows": [_row(rt, d, include_object) for d in dicts]}


def wants_table(accept):
    """True when the first Accept entry we can serve asks for a meta.k8s.io Table."""
    for part in (accept or "").split(","):
        params = [p.strip() for p in part.split(";")]
        if params[0] not in ("application/json", "*/*"):
            continue
        opts = dict(p.split("=", 1) for p in params[1:] if "=" in p)
        if opts.get("as") == "Table" and opts.get("g") == "meta.k8s.io":
            return True
        if "as" not in opts:
            return False
    return False
