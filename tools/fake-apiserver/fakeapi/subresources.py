"""The `status` and `scale` subresources.

status (ResourceType.status_subresource): GET answers the object; PUT and PATCH (every patch
type) change only `.status`, and writes of the main resource keep the stored status
(store._update_locked), so status writes never move metadata.generation.

scale (ResourceType.scale: {"specReplicasPath", "statusReplicasPath", "labelSelectorPath"},
JSON paths as a CRD's spec.versions[].subresources.scale declares them, e.g. ".spec.replicas"):
GET answers an autoscaling/v1 Scale made from the object (metadata name, namespace, uid,
resourceVersion, creationTimestamp; spec.replicas; status.replicas, status.selector); PUT
takes a Scale and PATCH (merge, strategic, json, apply) changes that Scale: only the replicas
are written back, at specReplicasPath, as one write of the object (generation moves, as for any
spec change). A Scale's metadata.resourceVersion, when given, is a precondition (409 on a
stale one). Deployments and ReplicaSets have it (their selector: spec.selector as a string).
"""

from .objects import ApiError, bad_request, conflict, invalid
from .patch import apply_patch


def served(rt, sub):
    return (sub == "status" and rt.status_subresource) or (sub == "scale" and bool(rt.scale))


def discovery_entries(rt):
    """[(subresource, group, version, kind)] for discovery documents."""
    out = []
    if rt.status_subresource:
        out.append(("status", rt.group, rt.version, rt.kind))
    if rt.scale:
        out.append(("scale", "autoscaling", "v1", "Scale"))
    return out


def _parts(path):
    return [p for p in (path or "").lstrip(".").split(".") if p]


def _get(d, path):
    for p in _parts(path):
        d = d.get(p) if isinstance(d, dict) else None
    return d


def _set(d, path, value):
    parts = _parts(path)
    for p in parts[:-1]:
        if not isinstance(d.get(p), dict):
            d[p] = {}
        d = d[p]
    d[parts[-1]] = value


def selector_string(sel):
    """A LabelSelector as the string form (matchLabels, then matchExpressions)."""
    if not isinstance(sel, dict):
        return ""
    out = ["%s=%s" % (k, v) for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op, key, vals = e.get("operator"), e.get("key"), e.get("values") or []
        if op == "In":
            out.append("%s in (%s)" % (key, ",".join(vals)))
        elif op == "NotIn":
            out.append("%s notin (%s)" % (key, ",".join(vals)))
        elif op == "Exists":
            out.append(key)
        elif op == "DoesNotExist":
            out.append("!" + key)
    return ",".join(out)


def to_scale(rt, d):
    md = d.get("metadata") or {}
    meta = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion",
                               "creationTimestamp") if k in md}
    s = rt.scale
    status = {"replicas": _get(d, s["statusReplicasPath"]) or 0}
    if s.get("labelSelectorPath"):
        sel = _get(d, s["labelSelectorPath"])
        if isinstance(sel, str) and sel:
            status["selector"] = sel
    elif rt.group == "apps":
        status["selector"] = selector_string(_get(d, ".spec.selector"))
    replicas = _get(d, s["specReplicasPath"])
    return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
            "spec": {"replicas": replicas if isinstance(replicas, int) else 0},
            "status": status}


def _write_back(rt, d, scale):
    """Copy a Scale's replicas (and resourceVersion precondition) into the object dict."""
    if not isinstance(scale, dict):
        raise bad_request("the body of the request must be a Scale object")
    spec = scale.get("spec") if isinstance(scale.get("spec"), dict) else {}
    replicas = spec.get("replicas", 0)
    name = (d.get("metadata") or {}).get("name", "")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid("Scale", name, [("spec.replicas", "Invalid value: %s: must be greater "
                                       "than or equal to 0" % (replicas,))], "autoscaling")
    smd = scale.get("metadata") if isinstance(scale.get("metadata"), dict) else {}
    rv = smd.get("resourceVersion")
    if rv not in (None, "") and str(rv) != str(d["metadata"].get("resourceVersion")):
        raise conflict(rt, name)
    _set(d, rt.scale["specReplicasPath"], replicas)
    return d


def scale(app, x, rt, ns, name, dry_run):
    """GET / PUT / PATCH .../{name}/scale. dry_run(x, verb): the request's dryRun."""
    store, m = app.store, x.method
    if m == "GET":
        return x.send_json(200, to_scale(rt, store.get(rt, ns, name).to_dict()))
    if m == "PUT":
        body = x.json_body()
        fn = lambda d: _write_back(rt, d, body)
    elif m == "PATCH":
        ctype = x.h.headers.get("Content-Type") or ""
        fn = lambda d: _write_back(rt, d, apply_patch(ctype, to_scale(rt, d), x.body))
    else:
        raise ApiError(405, "MethodNotAllowed",
                       "the server does not allow this method on the requested resource")
    obj = store.modify(rt, ns, name, fn, dry_run=dry_run(x, "Update" if m == "PUT" else "Patch"))
    x.send_json(200, to_scale(rt, obj.to_dict()))
