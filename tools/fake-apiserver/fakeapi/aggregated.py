"""Aggregated discovery (apidiscovery.k8s.io/v2, and v2beta1 for older clients).

A client that puts the aggregated media type in Accept gets, for GET /api and GET /apis, one
APIGroupDiscoveryList with every group, version and resource (kube-apiserver since 1.26, GA in
1.30), instead of the legacy APIVersions / APIGroupList that need one more request per group
version. The first acceptable entry of Accept wins, as in kube-apiserver's negotiation; the
response's Content-Type names what was sent, which is how clients tell the two apart.
--no-aggregated-discovery turns this off (a server older than 1.26).
"""

from .subresources import discovery_entries
from .resources import VERBS, dumps

GROUP = "apidiscovery.k8s.io"
KIND = "APIGroupDiscoveryList"
VERSIONS = ("v2", "v2beta1")


def negotiate(accept):
    """The aggregated version Accept asks for before any plain JSON ("v2", "v2beta1"), or None."""
    for entry in (accept or "").split(","):
        parts = [p.strip() for p in entry.split(";")]
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        params.pop("q", None)
        if parts[0] not in ("application/json", "*/*", "application/*"):
            continue  # protobuf and the rest: not served here
        if not params:
            return None  # plain JSON first: the legacy documents
        if (params.get("g") == GROUP and params.get("as") == KIND
                and params.get("v") in VERSIONS):
            return params["v"]
    return None


def content_type(version):
    return "application/json;g=%s;v=%s;as=%s" % (GROUP, version, KIND)


def _resource(t):
    kind = {"group": t.group, "version": t.version, "kind": t.kind}
    r = {"resource": t.plural, "responseKind": kind,
         "scope": "Namespaced" if t.namespaced else "Cluster",
         "singularResource": t.singular, "verbs": VERBS}
    if t.short_names:
        r["shortNames"] = t.short_names
    if t.categories:
        r["categories"] = t.categories
    subs = [{"subresource": sub, "responseKind": {"group": g, "version": v, "kind": k},
             "verbs": ["get", "patch", "update"]} for sub, g, v, k in discovery_entries(t)]
    if subs:
        r["subresources"] = subs
    return r


def document(registry, core, version):
    """The APIGroupDiscoveryList of GET /api (core) or GET /apis (every named group); each
    group's versions in the order of preference the legacy APIGroup gives."""
    items = []
    for group in registry.group_names():
        if (group == "") != core:
            continue
        versions = [{"version": v, "freshness": "Current",
                     "resources": [_resource(t) for t in registry.types
                                   if t.group == group and t.version == v]}
                    for v in registry.versions_of(group)]
        meta = {"creationTimestamp": None}
        if group:
            meta["name"] = group
        items.append({"metadata": meta, "versions": versions})
    return {"kind": KIND, "apiVersion": "%s/%s" % (GROUP, version), "metadata": {},
            "items": items}


def answer(app, x, path):
    """Sends the aggregated document for GET /api or /apis when the request asks for it and
    the server offers it -> whether it answered."""
    if path not in ("/api", "/apis") or getattr(app.opts, "no_aggregated_discovery", False):
        return False
    version = negotiate(x.h.headers.get("Accept"))
    if version is None:
        return False
    x.send_bytes(200, dumps(document(app.registry, path == "/api", version)),
                 content_type(version))
    return True
