"""Resource types the fake API server serves, and the discovery documents describing them.

A ResourceType is immutable after start-up; handlers compare them by identity. Each type
precomputes the byte prefixes used on the hot paths (list items and watch lines are built by
joining these prefixes with an object's cached JSON bytes, never by re-serializing).
"""

import json
import re

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

# Field selectors the real API server accepts per kind (pkg/registry/*/strategy.go
# GetAttrs / AddFieldLabelConversionFunc). Every kind also accepts metadata.name and
# metadata.namespace. Anything else is rejected with 400 "field label not supported".
FIELD_LABELS = {
    "Pod": ["spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
            "status.nominatedNodeName"],
    "Event": ["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion",
              "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
              "reportingComponent", "source", "type"],
    "Secret": ["type"],
    "Namespace": ["status.phase"],
    "Node": ["spec.unschedulable"],
    "ReplicaSet": ["status.replicas"],
}

# events.k8s.io/v1 Events: the field labels its conversion maps to core v1's (the same objects).
EVENTS_FIELD_LABELS = ["regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                       "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
                       "reason", "reportingController", "type"]

# The scale subresource of Deployments and ReplicaSets (their selector: spec.selector).
APPS_SCALE = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
              "labelSelectorPath": None}

# Field paths whose value is read from a different place than the label says.
_FIELD_PATH_ALIASES = {"source": "source.component"}


class ResourceType:
    """One served resource (group/version/plural) and its precomputed byte prefixes."""

    def __init__(self, group, version, plural, kind, namespaced=True, short_names=(),
                 status_subresource=False, categories=(), singular=None, scale=None):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.status_subresource = status_subresource
        self.custom = False  # served for a CustomResourceDefinition (fakeapi/crds.py)
        self.scale = scale  # None, or the scale subresource's paths (fakeapi/subresources.py)
        self.categories = list(categories)
        self.singular = singular or kind.lower()
        self.api_version = version if not group else "%s/%s" % (group, version)
        self.list_kind = kind + "List"
        # kubectl-style name: "pods", "deployments.apps"; used by the control endpoints.
        self.name = plural if not group else "%s.%s" % (plural, group)
        labels = (EVENTS_FIELD_LABELS if self.name == "events.events.k8s.io"
                  else FIELD_LABELS.get(kind, []))
        self.field_labels = ["metadata.name", "metadata.namespace"] + labels
        # '{"kind":"Pod","apiVersion":"v1",' : an object's cached bytes start after its '{'.
        self.kind_prefix = ('{"kind":"%s","apiVersion":"%s",' % (kind, self.api_version)).encode()
        self.event_prefix = {
            t: b'{"type":"' + t.encode() + b'","object":' + self.kind_prefix
            for t in ("ADDED", "MODIFIED", "DELETED")
        }
        self.list_prefix = ('{"kind":"%s","apiVersion":"%s","metadata":'
                            % (self.list_kind, self.api_version)).encode()

    def __repr__(self):
        return "<ResourceType %s>" % self.name

    def field_values(self, d):
        """The field-selector values of an object dict (strings, "" when absent)."""
        out = {}
        for label in self.field_labels:
            v = d
            for part in _FIELD_PATH_ALIASES.get(label, label).split("."):
                v = v.get(part) if isinstance(v, dict) else None
            if v is None:
                v = "false" if label in ("spec.hostNetwork", "spec.unschedulable") else ""
            elif v is True:
                v = "true"
            elif v is False:
                v = "false"
            out[label] = str(v)
        return out

    def api_resource(self):
        """This type's entries in an APIResourceList (the resource and its status subresource)."""
        r = {"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
             "kind": self.kind, "verbs": VERBS}
        if self.short_names:
            r["shortNames"] = self.short_names
        if self.categories:
            r["categories"] = self.categories
        out = [r]
        if self.status_subresource:
            out.append({"name": self.plural + "/status", "singularName": "",
                        "namespaced": self.namespaced, "kind": self.kind,
                        "verbs": ["get", "patch", "update"]})
        if self.scale:
            out.append({"name": self.plural + "/scale", "singularName": "",
                        "namespaced": self.namespaced, "group": "autoscaling", "version": "v1",
                        "kind": "Scale", "verbs": ["get", "patch", "update"]})
        return out


def builtin_types():
    T = ResourceType
    return [
        T("", "v1", "pods", "Pod", short_names=["po"], status_subresource=True,
          categories=["all"]),
        T("", "v1", "services", "Service", short_names=["svc"], status_subresource=True,
          categories=["all"]),
        T("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
        T("", "v1", "secrets", "Secret"),
        T("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
        T("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"],
          status_subresource=True),
        T("", "v1", "nodes", "Node", namespaced=False, short_names=["no"],
          status_subresource=True),
        T("", "v1", "events", "Event", short_names=["ev"]),
        T("apps", "v1", "deployments", "Deployment", short_names=["deploy"],
          status_subresource=True, categories=["all"], scale=APPS_SCALE),
        T("apps", "v1", "replicasets", "ReplicaSet", short_names=["rs"],
          status_subresource=True, categories=["all"], scale=APPS_SCALE),
        T("apps", "v1", "statefulsets", "StatefulSet", short_names=["sts"],
          status_subresource=True, categories=["all"], scale=APPS_SCALE),
        T("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
        T("coordination.k8s.io", "v1", "leases", "Lease"),
        # The same objects as v1 events, each write mirrored into the other (fakeapi/events.py).
        T("events.k8s.io", "v1", "events", "Event", short_names=["ev"]),
        # Two versions of one group (v2 preferred), each stored on its own: no conversion here.
        T("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
          short_names=["hpa"], status_subresource=True, categories=["all"]),
        T("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
          short_names=["hpa"], status_subresource=True, categories=["all"]),
        T("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "FlowSchema", namespaced=False,
          status_subresource=True),
        # Plain objects; with --rbac they also authorize requests (fakeapi/rbac.py).
        T("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        T("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        T("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        T("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
          namespaced=False),
        # Creating a CustomResourceDefinition serves its resource (fakeapi/crds.py).
        T("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
          namespaced=False, short_names=["crd", "crds"], status_subresource=True),
    ]


_VERSION_RE = re.compile(r"^v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?$")


def version_priority(version):
    """Sort key of a version, highest priority first, as Kubernetes orders them: GA before beta
    before alpha, higher numbers first, then anything else alphabetically ("v2", "v1",
    "v1beta2", "v1beta1", "v1alpha1", "foo")."""
    m = _VERSION_RE.match(version)
    if not m:
        return (3, 0, 0, version)
    major, level, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    return ({None: 0, "beta": 1, "alpha": 2}[level], -major, -minor, "")


def parse_custom(spec):
    """--resource group/version/plural/Kind[/cluster] -> ResourceType (ValueError if malformed)."""
    parts = spec.split("/")
    if (len(parts) not in (4, 5) or not all(parts[1:4])
            or (len(parts) == 5 and parts[4] != "cluster")):
        raise ValueError("--resource wants group/version/plural/Kind[/cluster], got %r" % spec)
    group, version, plural, kind = parts[:4]
    return ResourceType(group, version, plural, kind, namespaced=len(parts) == 4)


class Registry:
    """All served types, looked up by path (group, version, plural) or by apiVersion + kind."""

    def __init__(self, types):
        self.types = []
        self.by_gvr = {}
        self.by_kind = {}
        for t in types:
            self.add(t)

    def add(self, t):
        key = (t.group, t.version, t.plural)
        if key in self.by_gvr:
            raise ValueError("resource %s/%s/%s defined twice" % key)
        self.types.append(t)
        self.by_gvr[key] = t
        self.by_kind[(t.api_version, t.kind)] = t

    def get(self, group, version, plural):
        return self.by_gvr.get((group, version, plural))

    def for_object(self, d):
        return self.by_kind.get((d.get("apiVersion"), d.get("kind")))

    def lookup(self, name):
        """Resolve a control-endpoint resource name: "pods", "deployments.apps",
        "apps/v1/deployments", or a plural that is unique across groups."""
        for t in self.types:
            if name in (t.name, t.plural) or name == "%s/%s" % (t.api_version, t.plural):
                return t
        return None

    def group_names(self):
        """Group names in discovery order: as first served (core first)."""
        seen = []
        for t in self.types:
            if t.group not in seen:
                seen.append(t.group)
        return seen

    def versions_of(self, group):
        """The group's versions, preferred first (Kubernetes' version priority)."""
        return sorted({t.version for t in self.types if t.group == group}, key=version_priority)

    def group_versions(self):
        """[(group, version)] in a stable order, core first."""
        seen = []
        for t in self.types:
            gv = (t.group, t.version)
            if gv not in seen:
                seen.append(gv)
        return seen

    # -- discovery documents -------------------------------------------------------------

    def api_versions(self, server_address):
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": server_address}]}

    def _group(self, name):
        versions = [{"groupVersion": "%s/%s" % (name, v), "version": v}
                    for v in self.versions_of(name)]
        if not versions:
            return None
        return {"name": name, "versions": versions, "preferredVersion": versions[0]}

    def api_group_list(self):
        groups = []
        for g, _ in self.group_versions():
            if g and all(x["name"] != g for x in groups):
                groups.append(self._group(g))
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_group(self, name):
        g = self._group(name)
        if g is None:
            return None
        return dict({"kind": "APIGroup", "apiVersion": "v1"}, **g)

    def api_resource_list(self, group, version):
        resources = []
        for t in self.types:
            if t.group == group and t.version == version:
                resources.extend(t.api_resource())
        if not resources:
            return None
        gv = version if not group else "%s/%s" % (group, version)
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": resources}


    # -- OpenAPI v3: just enough for kubectl ------------------------------------------------
    # kubectl create/apply validate by asking the server for fieldValidation=Strict when the
    # OpenAPI v3 document shows that PATCH takes a fieldValidation parameter; without any
    # OpenAPI it refuses to create ("failed to download openapi"). So each group-version
    # document lists one PATCH operation per kind with that parameter. There are no schemas:
    # this server does not validate fields.

    @staticmethod
    def _gv_path(group, version):
        return "api/%s" % version if not group else "apis/%s/%s" % (group, version)

    def openapi_root(self):
        return {"paths": {self._gv_path(g, v): {"serverRelativeURL": "/openapi/v3/%s?hash=fake"
                                                % self._gv_path(g, v)}
                          for g, v in self.group_versions()}}

    def openapi_gv(self, path):
        paths = {}
        for t in self.types:
            if self._gv_path(t.group, t.version) != path:
                continue
            base = "/" + path + ("/namespaces/{namespace}" if t.namespaced else "")
            params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                      for n in ("dryRun", "fieldManager", "fieldValidation", "force")]
            paths["%s/%s/{name}" % (base, t.plural)] = {"patch": {
                "operationId": "patch" + t.kind, "parameters": params,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version,
                                                    "kind": t.kind}}}
        if not paths:
            return None
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes (fake)", "version": "v1.32.0"},
                "paths": paths, "components": {"schemas": {}}}


def dumps(d):
    """Compact JSON bytes, as the API server writes them (UTF-8, no spaces)."""
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()
