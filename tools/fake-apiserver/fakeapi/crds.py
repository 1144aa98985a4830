"""CustomResourceDefinitions: creating one through the API serves its resource, as
kube-apiserver's apiextensions server does.

POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions checks the definition (422 as the
real server for a malformed one), stores it with the status the real server writes once the
names are accepted (conditions NamesAccepted and Established), and from then on serves every
served version of the resource, with its scope, names, short names, categories and status
subresource, in discovery (legacy and aggregated) and on its paths. Limits: updating or
deleting the definition changes nothing that is served (the real server would), and the
versions are stored separately (no conversion), as every multi-version type here.
--resource types are served from the start without a definition object.
"""

import re

from .objects import invalid
from .resources import ResourceType

GROUP = "apiextensions.k8s.io"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def is_crd(rt):
    return rt.group == GROUP and rt.plural == "customresourcedefinitions"


def _types(d):
    """The ResourceTypes a definition serves -> (types, [(field, message)] errors)."""
    spec = d.get("spec") if isinstance(d.get("spec"), dict) else {}
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    scope = spec.get("scope")
    errors = []
    if not isinstance(group, str) or "." not in group:
        errors.append(("spec.group", "Invalid value: %r: should be a domain with at least one "
                       "dot" % (group,)))
    if not isinstance(plural, str) or not _DNS_LABEL.match(plural):
        errors.append(("spec.names.plural", "Invalid value: %r: a lowercase RFC 1123 label "
                       "is required" % (plural,)))
    if not isinstance(kind, str) or not kind:
        errors.append(("spec.names.kind", "Required value"))
    if scope not in ("Namespaced", "Cluster"):
        errors.append(("spec.scope", 'Unsupported value: %r: supported values: "Cluster", '
                       '"Namespaced"' % (scope,)))
    name = (d.get("metadata") or {}).get("name")
    if not errors and name != "%s.%s" % (plural, group):
        errors.append(("metadata.name", 'Invalid value: %r: must be spec.names.plural+"."+'
                       "spec.group" % (name,)))
    versions = spec.get("versions") if isinstance(spec.get("versions"), list) else []
    served = [v for v in versions if isinstance(v, dict) and v.get("served")]
    if not versions:
        errors.append(("spec.versions", "Invalid value: null: must have exactly one version "
                       "marked as storage version"))
    for i, v in enumerate(versions):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or not v["name"]:
            errors.append(("spec.versions[%d].name" % i, "Required value"))
    if errors:
        return [], errors
    out = []
    for v in served:
        sub = v.get("subresources") if isinstance(v.get("subresources"), dict) else {}
        scale = sub.get("scale") if isinstance(sub.get("scale"), dict) else None
        if scale is not None:
            scale = {"specReplicasPath": scale.get("specReplicasPath") or ".spec.replicas",
                     "statusReplicasPath": scale.get("statusReplicasPath") or ".status.replicas",
                     "labelSelectorPath": scale.get("labelSelectorPath")}
        out.append(ResourceType(
            group, str(v.get("name")), plural, kind, namespaced=scope == "Namespaced",
            short_names=names.get("shortNames") or (), categories=names.get("categories") or (),
            singular=names.get("singular") or None, status_subresource="status" in sub,
            scale=scale))
        out[-1].custom = True
    return out, []


def admit(rt, d):
    """Before a create: checks a definition (422 when malformed) and adds the status the real
    server writes. Other resources pass unchanged."""
    if not is_crd(rt) or not isinstance(d, dict):
        return d
    _, errors = _types(d)
    if errors:
        name = (d.get("metadata") or {}).get("name") or ""
        raise invalid("CustomResourceDefinition", name, errors, GROUP)
    names = d["spec"]["names"]
    accepted = dict(names)
    accepted.setdefault("singular", names["kind"].lower())
    accepted.setdefault("listKind", names["kind"] + "List")
    conditions = [{"type": t, "status": "True", "reason": r, "message": m}
                  for t, r, m in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                                  ("Established", "InitialNamesAccepted",
                                   "the initial names have been accepted"))]
    d["status"] = {"acceptedNames": accepted, "conditions": conditions,
                   "storedVersions": [v.get("name") for v in d["spec"]["versions"]
                                      if isinstance(v, dict) and v.get("storage")]}
    return d


def created(app, rt, obj, dry_run):
    """After a create (obj: the stored Obj): serves the definition's resource (nothing for a
    dry run or another resource). Versions already served stay as they are."""
    if dry_run or not is_crd(rt):
        return
    serve(app.store, obj.to_dict())


def serve(store, d):
    types, _ = _types(d)
    for t in types:
        if store.registry.get(t.group, t.version, t.plural) is None:
            store.add_type(t)


def install(store, d):
    """Create a definition at start-up (--crd, --widget-crd) as a POST would."""
    rt = store.registry.get(GROUP, "v1", "customresourcedefinitions")
    obj = store.create(rt, None, admit(rt, d))
    serve(store, obj.to_dict())
    return obj


def widget_crd():
    """widgets.example.com: namespaced, v1, status and scale subresources, short name wd
    (the CRD of examples/widget-operator.lua)."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                               "listKind": "WidgetList", "shortNames": ["wd"]},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema},
                                   "subresources": {
                                       "status": {},
                                       "scale": {"specReplicasPath": ".spec.replicas",
                                                 "statusReplicasPath": ".status.replicas",
                                                 "labelSelectorPath": ".status.selector"}}}]}}
