"""User impersonation (the Impersonate-* headers) and a minimal authorizer, answering as
kube-apiserver's impersonation filter and RBAC do.

- Named tokens: `--user-token USER=TOKEN` (repeatable) accepts TOKEN like `--token` and
  authenticates it as USER. Client certificates are their CN, basic auth its user; an unnamed
  `--token` is the user "" and no authentication at all is `system:anonymous`.
- Impersonation: a request with `Impersonate-User` (and optionally `Impersonate-Group`,
  repeated, `Impersonate-Uid`, `Impersonate-Extra-KEY`, KEY percent-decoded and lowercased) is
  allowed only when the authenticated user is an impersonator (`--impersonator USER`,
  repeatable, or `POST /_fake/authz`); otherwise 403
  `users "X" is forbidden: User "Y" cannot impersonate resource "users" in API group "" at
  the cluster scope`. Groups, uid or extra without a user: 500, as kube-apiserver answers.
  Allowed, the request is then authorized as the impersonated user (its groups plus
  `system:authenticated`).
- Authorization: everything is allowed except what a deny rule matches (`--deny JSON`, a rule
  or a list, or `POST /_fake/authz {"deny": [...]}`): `{"user"?: name, "group"?: name,
  "verb"?: "create", "resource"?: "configmaps", "namespace"?: ns}` (absent = any). A denied
  request gets RBAC's 403, e.g. `configmaps is forbidden: User "viewer" cannot create resource
  "configmaps" in API group "" in the namespace "default"` (forbidden() builds every such
  403). Non-resource paths (/api, /apis, /version, ...) are always allowed.
- RBAC (`--rbac`, or `POST /_fake/authz {"rbac": bool}`): a request no deny rule refused must
  also be granted by the RBAC objects in the store (rbac.py), unless its user is in
  system:masters: the unnamed `--token` user and `--rbac-admin` users (or a request
  impersonating that group). Users' groups: system:authenticated (system:unauthenticated for
  anonymous requests) and a service account's system:serviceaccounts[:NS].

The request log records the impersonation headers as `"impersonate": {"user", "groups", "uid",
"extra"}`; handler.py marks requests refused here `"forbidden": true`. Hooks in handler.py:
the tokens, the bearer user name, log_fields, authorize and the /_fake/authz control endpoint.
"""

import json
import threading
from urllib.parse import unquote

from .objects import ApiError
from .rbac import Rbac, service_account_groups

_TRUE = ("true", "1")
_EXTRA = "impersonate-extra-"


def add_args(a):
    a("--user-token", action="append", default=[], metavar="USER=TOKEN",
      help="accept bearer TOKEN as the user USER (repeatable)")
    a("--impersonator", action="append", default=[], metavar="USER",
      help="USER may impersonate users, groups, uids and extras (repeatable)")
    a("--deny", action="append", default=[], metavar="JSON",
      help='deny rule(s): {"user", "group", "verb", "resource", "namespace"} (absent = any)')
    a("--rbac", action="store_true",
      help="authorize resource requests with the RBAC objects in the store, as kube-apiserver's "
           "RBAC authorizer does (POST /_fake/authz switches it at run time)")
    a("--rbac-admin", action="append", default=[], metavar="USER",
      help="USER is in the group system:masters, which RBAC lets do anything (repeatable; the "
           "user of an unnamed --token always is)")


def _rules(v):
    rules = v if isinstance(v, list) else [v]
    for r in rules:
        if not isinstance(r, dict) or set(r) - {"user", "group", "verb", "resource", "namespace"}:
            raise ApiError(400, "BadRequest", "a deny rule is an object with user, group, verb, "
                           "resource and namespace (each optional)")
    return rules


MASTERS = "system:masters"


class Authz:
    def __init__(self, opts, store=None):
        self.token_users = {}
        for pair in getattr(opts, "user_token", None) or []:
            user, _, token = pair.partition("=")
            if not token:
                raise SystemExit("--user-token wants USER=TOKEN")
            self.token_users[token] = user
        self.lock = threading.Lock()
        self.impersonators = set(getattr(opts, "impersonator", None) or [])
        self.deny = []
        for d in getattr(opts, "deny", None) or []:
            self.deny.extend(_rules(json.loads(d)))
        self.rbac = bool(getattr(opts, "rbac", False))
        self.rbac_admins = set(getattr(opts, "rbac_admin", None) or [])
        self._rbac = Rbac(store) if store is not None else None
        # GET /_fake/authz shows the RBAC settings once they were given, so its answer stays
        # what it was for a server that does not use RBAC.
        self.rbac_shown = self.rbac or bool(self.rbac_admins)
        if self.rbac and self._rbac is None:
            raise SystemExit("--rbac needs the store")

    def tokens(self):
        return set(self.token_users)

    def token_user(self, token):
        return self.token_users.get(token, "")

    # -- requests ---------------------------------------------------------------------------

    @staticmethod
    def impersonation(x):
        """The Impersonate-* headers of x as a dict (only what was sent), or None."""
        h = x.h.headers
        out = {}
        user = h.get("Impersonate-User")
        if user is not None:
            out["user"] = user
        groups = h.get_all("Impersonate-Group") or []
        if groups:
            out["groups"] = list(groups)
        uid = h.get("Impersonate-Uid")
        if uid is not None:
            out["uid"] = uid
        extra = {}
        for name, value in h.items():
            if name.lower().startswith(_EXTRA):
                extra.setdefault(unquote(name[len(_EXTRA):].lower()), []).append(value)
        if extra:
            out["extra"] = extra
        return out or None

    def log_fields(self, x):
        imp = self.impersonation(x)
        return {"impersonate": imp} if imp else {}

    def groups(self, auth, user):
        """The groups the authenticator gives a user: system:authenticated (or
        system:unauthenticated), system:masters for the unnamed --token user and --rbac-admin
        users, a service account's two groups."""
        if auth == "anonymous":
            return ["system:unauthenticated"]
        groups = ["system:authenticated"] + service_account_groups(user)
        with self.lock:
            admin = user in self.rbac_admins
        if admin or (auth == "bearer" and user == ""):
            groups.append(MASTERS)
        return groups

    def authorize(self, x, auth, user, is_watch):
        """Raises the ApiError kube-apiserver would answer; returns the effective user name."""
        requester = "system:anonymous" if auth == "anonymous" else user
        imp = self.impersonation(x)
        groups = self.groups(auth, user)
        if imp:
            if "user" not in imp:
                raise ApiError(500, "InternalError", "Internal error occurred: requested %s "
                               "without impersonating a user" % sorted(k for k in imp))
            with self.lock:
                allowed = requester in self.impersonators
            if not allowed:
                raise ApiError(403, "Forbidden", 'users "%s" is forbidden: User "%s" cannot '
                               'impersonate resource "users" in API group "" at the cluster '
                               'scope' % (imp["user"], requester),
                               {"name": imp["user"], "kind": "users"})
            requester = imp["user"]
            # As kube-apiserver: a service account impersonated without groups gets its own.
            groups = imp.get("groups") or service_account_groups(requester)
            groups = groups + ["system:authenticated"]
        attrs = _attributes(x, is_watch)
        if attrs is None:
            return requester
        group, resource, ns, name, verb = attrs
        with self.lock:
            rules = list(self.deny)
            rbac = self.rbac
        for r in rules:
            if ("user" in r and r["user"] != requester) or \
               ("group" in r and r["group"] not in groups) or \
               ("verb" in r and r["verb"] != verb) or \
               ("resource" in r and r["resource"] != resource) or \
               ("namespace" in r and r["namespace"] != ns):
                continue
            raise forbidden(requester, attrs)
        if rbac and MASTERS not in groups and not self._rbac.allows(requester, groups, attrs):
            raise forbidden(requester, attrs)
        return requester

    def control(self, x):
        """POST (replace impersonators and/or deny rules) and GET /_fake/authz."""
        if x.method == "POST":
            body = x.json_body() or {}
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest",
                               'POST /_fake/authz wants {"impersonators": [...], "deny": [...]}')
            with self.lock:
                if "impersonators" in body:
                    self.impersonators = set(str(u) for u in body["impersonators"] or [])
                if "deny" in body:
                    self.deny = _rules(body["deny"] or [])
                if "rbac" in body:
                    if not isinstance(body["rbac"], bool) or self._rbac is None:
                        raise ApiError(400, "BadRequest", '"rbac" is true or false')
                    self.rbac = body["rbac"]
                if "rbac_admins" in body:
                    self.rbac_admins = set(str(u) for u in body["rbac_admins"] or [])
                self.rbac_shown = self.rbac_shown or "rbac" in body or "rbac_admins" in body
        elif x.method != "GET":
            raise ApiError(405, "MethodNotAllowed", "GET or POST")
        with self.lock:
            out = {"impersonators": sorted(self.impersonators), "deny": list(self.deny)}
            if self.rbac_shown:
                out["rbac"], out["rbac_admins"] = self.rbac, sorted(self.rbac_admins)
        return x.send_json(200, out)


def forbidden(user, attrs):
    """The 403 kube-apiserver answers when its authorizer says no (responsewriters.Forbidden):
    the status names the group-qualified resource without its subresource ("deployments.apps"),
    the message the resource with it ("pods/status")."""
    group, resource, ns, name, verb = attrs
    base = resource.partition("/")[0]
    qualified = "%s.%s" % (base, group) if group else base
    what = '%s "%s"' % (qualified, name) if name else qualified
    scope = 'in the namespace "%s"' % ns if ns else "at the cluster scope"
    details = {"kind": base}
    if group:
        details["group"] = group
    if name:
        details["name"] = name
    return ApiError(403, "Forbidden", '%s is forbidden: User "%s" cannot %s resource "%s" in '
                    'API group "%s" %s' % (what, user, verb, resource, group, scope), details)


def _attributes(x, is_watch):
    """(group, resource, namespace, name, verb) of a resource request, None for the others."""
    parts = [p for p in x.path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest and rest[0] == "watch":
        is_watch, rest = True, rest[1:]
    ns = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource = rest[0] + ("/" + rest[2] if len(rest) > 2 else "")
    name = rest[1] if len(rest) > 1 else ""
    if resource == "namespaces" and name:
        ns = name
    verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update",
            "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}.get(x.method,
                                                                                     "")
    if x.method == "GET" and (is_watch or x.query.get("watch") in _TRUE):
        verb = "watch"
    if verb in ("list", "watch") and not name:
        # As kube-apiserver's RequestInfo: a list or watch of one object by field selector is
        # authorized for that name (so resourceNames rules can allow it).
        for term in (x.query.get("fieldSelector") or "").split(","):
            key, _, value = term.partition("=")
            if key.strip() == "metadata.name":
                name = value[1:] if value.startswith("=") else value
    return group, resource, ns, name, verb
