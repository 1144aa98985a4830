"""kube-apiserver's RBAC authorizer over the Roles, ClusterRoles, RoleBindings and
ClusterRoleBindings in the store (plugin/pkg/auth/authorizer/rbac/rbac.go and its rule helpers).

Contract: `Rbac(store).allows(user, groups, attrs)` answers whether some rule bound to the user
grants the request, attrs being (group, resource, namespace, name, verb) with a subresource
joined as "pods/status". It only reads the store (under its lock) and keeps no state, so any
request thread may call it; a change to a binding or role counts from the next request on.

What is modelled: ClusterRoleBindings grant their ClusterRole everywhere; RoleBindings grant a
Role of their own namespace or a ClusterRole, in their namespace only; subjects User (by name),
Group and ServiceAccount (its namespace defaults to a RoleBinding's own); rules match on
apiGroups, resources ("*", "pods/status", "*/status"), resourceNames (empty = any) and verbs
("*" = any). A binding whose role does not exist grants nothing. Not modelled: ClusterRole
aggregation (aggregationRule is ignored: only the rules stored in the object count),
nonResourceURLs (the caller never asks about non-resource requests), the escalation and bind
checks on writing roles and bindings, and the "RBAC: ... not found" reasons kube-apiserver
appends to a 403 when a bound role is missing. Objects are parsed on every request: fine for
the few dozen RBAC objects of a test, not meant for thousands.
"""

import json

GROUP = "rbac.authorization.k8s.io"
SA_PREFIX = "system:serviceaccount:"


def service_account(user):
    """(namespace, name) when user is a service account's user name, else None."""
    if not user.startswith(SA_PREFIX):
        return None
    ns, sep, name = user[len(SA_PREFIX):].partition(":")
    return (ns, name) if sep and ns and name and ":" not in name else None


def service_account_groups(user):
    """The groups kube-apiserver gives a service account: system:serviceaccounts and
    system:serviceaccounts:NS (none for other users)."""
    sa = service_account(user)
    return ["system:serviceaccounts", "system:serviceaccounts:" + sa[0]] if sa else []


def _applies(subject, user, groups, namespace):
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return bool(ns) and user == "%s%s:%s" % (SA_PREFIX, ns, subject.get("name"))
    return False


def _resource_matches(rule_resources, resource):
    sub = resource.partition("/")[2]
    for r in rule_resources:
        if r == "*" or r == resource:
            return True
        if sub and r == "*/" + sub:
            return True
    return False


def rule_allows(rule, attrs):
    group, resource, _, name, verb = attrs
    verbs = rule.get("verbs") or []
    groups = rule.get("apiGroups") or []
    names = rule.get("resourceNames") or []
    return (("*" in verbs or verb in verbs)
            and ("*" in groups or group in groups)
            and _resource_matches(rule.get("resources") or [], resource)
            and (not names or name in names))


class Rbac:
    def __init__(self, store):
        self.store = store
        reg = store.registry
        self.roles = reg.lookup("roles." + GROUP)
        self.cluster_roles = reg.lookup("clusterroles." + GROUP)
        self.bindings = reg.lookup("rolebindings." + GROUP)
        self.cluster_bindings = reg.lookup("clusterrolebindings." + GROUP)

    def _objects(self, rt, ns=None):
        """Parsed objects of rt (of namespace ns when given)."""
        with self.store.lock:
            objs = list(self.store.objects[rt].values())
        return [o.to_dict() for o in objs if ns is None or o.ns == ns]

    def _rules(self, ref, ns):
        """The rules of a binding's roleRef: a ClusterRole, or a Role in namespace ns."""
        ref = ref or {}
        if ref.get("apiGroup", GROUP) != GROUP:
            return []
        kind, name = ref.get("kind"), ref.get("name", "")
        if kind == "ClusterRole":
            rt, key = self.cluster_roles, name
        elif kind == "Role" and ns:
            rt, key = self.roles, ns + "/" + name
        else:
            return []
        with self.store.lock:
            obj = self.store.objects[rt].get(key)
        if obj is None:
            return []
        return obj.to_dict().get("rules") or []

    def allows(self, user, groups, attrs):
        ns = attrs[2]
        for b in self._objects(self.cluster_bindings):
            if any(_applies(s, user, groups, "") for s in b.get("subjects") or []):
                if any(rule_allows(r, attrs) for r in self._rules(b.get("roleRef"), "")):
                    return True
        if not ns:
            return False
        for b in self._objects(self.bindings, ns):
            if any(_applies(s, user, groups, ns) for s in b.get("subjects") or []):
                if any(rule_allows(r, attrs) for r in self._rules(b.get("roleRef"), ns)):
                    return True
        return False
