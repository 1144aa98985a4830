-- The fake API server's RBAC authorizer (--rbac, tools/fake-apiserver/fakeapi/rbac.py): Roles,
-- ClusterRoles and their bindings decide what each user may do, and a denied request gets
-- kube-apiserver's 403. Off by default; POST /_fake/authz switches it at run time.
local fake = require "support.fake_apiserver"

local ADMIN, SA, DEV, OPS = "admin-token", "sa-token", "dev-token", "ops-token"
local WIDGET = "system:serviceaccount:ops:widget"
local RBAC = "/apis/rbac.authorization.k8s.io/v1"
local CM = "/api/v1/namespaces/shop/configmaps"

local function start(extra)
  local args = { "--token", ADMIN, "--user-token", WIDGET .. "=" .. SA,
                 "--user-token", "dev=" .. DEV, "--user-token", "ops-admin=" .. OPS,
                 "--rbac-admin", "ops-admin", "--impersonator", "dev" }
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  return fake.start{ quiet = true, args = args }
end

-- A request with a bearer token; PATCH bodies are merge patches.
local function as(srv, token, method, path, body, headers)
  local h = { authorization = "Bearer " .. token }
  for k, v in pairs(headers or {}) do h[k] = v end
  if method == "PATCH" then h["content-type"] = "application/merge-patch+json" end
  return srv:request(method, path, body, h)
end

-- Creates an object as the admin (the unnamed --token user is in system:masters).
local function create(srv, path, obj)
  local code, got = as(srv, ADMIN, "POST", path, obj)
  assert(code == 201, ("POST %s -> %s %s"):format(path, tostring(code), tostring(got and got.message)))
  return got
end

local function role(srv, ns, name, rules)
  local path = ns and RBAC .. "/namespaces/" .. ns .. "/roles" or RBAC .. "/clusterroles"
  create(srv, path, { metadata = { name = name }, rules = rules })
end

local function bind(srv, ns, name, ref_kind, ref_name, subjects)
  local path = ns and RBAC .. "/namespaces/" .. ns .. "/rolebindings" or RBAC .. "/clusterrolebindings"
  create(srv, path, { metadata = { name = name }, subjects = subjects,
                      roleRef = { apiGroup = "rbac.authorization.k8s.io", kind = ref_kind, name = ref_name } })
end

local SA_SUBJECT = { { kind = "ServiceAccount", name = "widget", namespace = "ops" } }

-- Namespaces shop and other, each with ConfigMaps x and y; a Pod p in shop.
local function fixtures(srv)
  for _, ns in ipairs{ "shop", "other" } do
    create(srv, "/api/v1/namespaces", { metadata = { name = ns } })
    for _, n in ipairs{ "x", "y" } do
      create(srv, "/api/v1/namespaces/" .. ns .. "/configmaps", { metadata = { name = n }, data = { k = "v" } })
    end
  end
  create(srv, "/api/v1/namespaces/shop/pods",
         { metadata = { name = "p" }, spec = { containers = { { name = "c", image = "busybox" } } } })
end

-- Asserts kube-apiserver's 403 with exactly this message.
local function forbidden(message, code, got)
  assert.equal(403, code)
  assert.equal("Forbidden", got.reason)
  assert.equal(message, got.message)
end

-- A watch that the server ends after a second.
local function watch(srv, token, path)
  return as(srv, token, "GET", path .. (path:find("?", 1, true) and "&" or "?") .. "watch=1&timeoutSeconds=1")
end

local function cannot(user, verb, what, resource, group, ns)
  return ('%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" %s'):format(
    what, user, verb, resource, group, ns and ('in the namespace "%s"'):format(ns) or "at the cluster scope")
end

describe("fake apiserver RBAC", function()
  local srv

  after_each(function()
    if srv then srv:stop() end
    srv = nil
  end)

  it("is off by default: every authenticated user may do anything", function()
    srv = fake.start{ quiet = true, args = { "--token", ADMIN, "--user-token", WIDGET .. "=" .. SA,
                                             "--user-token", "dev=" .. DEV } }
    -- GET /_fake/authz answers as it did before RBAC existed
    assert.same({ impersonators = {}, deny = {} }, srv:control("GET", "/_fake/authz"))
    fixtures(srv)
    assert.equal(200, (as(srv, SA, "GET", CM .. "/x")))
    assert.equal(200, (as(srv, SA, "DELETE", CM .. "/y")))
    assert.equal(200, (as(srv, DEV, "GET", "/api/v1/nodes")))
  end)

  it("is switched on and off at run time by POST /_fake/authz", function()
    srv = start()
    fixtures(srv)
    assert.is_true(srv:control("POST", "/_fake/authz", { rbac = true }).rbac)
    forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "shop"), as(srv, SA, "GET", CM .. "/x"))
    assert.equal(200, (as(srv, ADMIN, "GET", CM .. "/x")))
    assert.is_false(srv:control("POST", "/_fake/authz", { rbac = false }).rbac)
    assert.equal(200, (as(srv, SA, "GET", CM .. "/x")))
    local code, got = srv:request("POST", "/_fake/authz", { rbac = "yes" })
    assert.equal(400, code)
    assert.equal('"rbac" is true or false', got.message)
    -- the other settings are left alone
    assert.same({ impersonators = { "dev" }, deny = {}, rbac = false, rbac_admins = { "ops-admin" } },
                srv:control("GET", "/_fake/authz"))
  end)

  describe("with --rbac", function()
    before_each(function()
      srv = start{ "--rbac" }
      fixtures(srv)
      srv:clear_requests()
    end)

    it("serves the four RBAC kinds and reports itself on GET /_fake/authz", function()
      local st = srv:control("GET", "/_fake/authz")
      assert.is_true(st.rbac)
      assert.same({ "ops-admin" }, st.rbac_admins)
      for _, p in ipairs{ "/namespaces/shop/roles", "/namespaces/shop/rolebindings", "/clusterroles",
                          "/clusterrolebindings" } do
        assert.equal(200, (as(srv, ADMIN, "GET", RBAC .. p)))
      end
    end)

    it("lets a service account bound to a Role do what its rules allow, in that namespace only", function()
      role(srv, "shop", "cm-editor", { { apiGroups = { "" }, resources = { "configmaps" },
                                         verbs = { "get", "list", "watch", "patch" } } })
      bind(srv, "shop", "widget-cm", "Role", "cm-editor", SA_SUBJECT)

      local code, got = as(srv, SA, "GET", CM .. "/x")
      assert.equal(200, code)
      assert.equal("v", got.data.k)
      code, got = as(srv, SA, "GET", CM)
      assert.equal(200, code)
      assert.equal(2, #got.items)
      assert.equal(200, (watch(srv, SA, CM)))
      assert.equal(200, (as(srv, SA, "GET", "/api/v1/watch/namespaces/shop/configmaps?timeoutSeconds=1")))
      code, got = as(srv, SA, "PATCH", CM .. "/x", { data = { k = "w" } })
      assert.equal(200, code)
      assert.equal("w", got.data.k)

      forbidden(cannot(WIDGET, "delete", 'configmaps "x"', "configmaps", "", "shop"),
                as(srv, SA, "DELETE", CM .. "/x"))
      forbidden(cannot(WIDGET, "update", 'configmaps "x"', "configmaps", "", "shop"),
                as(srv, SA, "PUT", CM .. "/x", { metadata = { name = "x" } }))
      forbidden(cannot(WIDGET, "create", "configmaps", "configmaps", "", "shop"),
                as(srv, SA, "POST", CM, { metadata = { name = "z" } }))
      forbidden(cannot(WIDGET, "deletecollection", "configmaps", "configmaps", "", "shop"),
                as(srv, SA, "DELETE", CM))
      forbidden(cannot(WIDGET, "patch", 'configmaps "x"', "configmaps", "", "other"),
                as(srv, SA, "PATCH", "/api/v1/namespaces/other/configmaps/x", { data = { k = "w" } }))
      forbidden(cannot(WIDGET, "list", "configmaps", "configmaps", "", nil),
                as(srv, SA, "GET", "/api/v1/configmaps"))
      forbidden(cannot(WIDGET, "watch", "configmaps", "configmaps", "", "other"),
                watch(srv, SA, "/api/v1/namespaces/other/configmaps"))
      forbidden(cannot(WIDGET, "get", 'pods "p"', "pods", "", "shop"),
                as(srv, SA, "GET", "/api/v1/namespaces/shop/pods/p"))
      forbidden(cannot(WIDGET, "list", "deployments.apps", "deployments", "apps", "shop"),
                as(srv, SA, "GET", "/apis/apps/v1/namespaces/shop/deployments"))
      local _, st = as(srv, SA, "GET", "/apis/apps/v1/namespaces/shop/deployments/d")
      assert.same({ group = "apps", kind = "deployments", name = "d" }, st.details)

      -- non-resource requests need no rule
      for _, p in ipairs{ "/api", "/apis", "/api/v1", "/apis/apps/v1", "/version", "/healthz" } do
        assert.equal(200, (as(srv, SA, "GET", p)), p)
      end

      -- the request log marks the denied requests
      local denied = {}
      for _, q in ipairs(srv:requests()) do
        if q.forbidden then denied[#denied + 1] = q.method .. " " .. q.path end
      end
      assert.same({ "DELETE " .. CM .. "/x", "PUT " .. CM .. "/x", "POST " .. CM, "DELETE " .. CM,
                    "PATCH /api/v1/namespaces/other/configmaps/x", "GET /api/v1/configmaps",
                    "GET /api/v1/namespaces/other/configmaps", "GET /api/v1/namespaces/shop/pods/p",
                    "GET /apis/apps/v1/namespaces/shop/deployments",
                    "GET /apis/apps/v1/namespaces/shop/deployments/d" }, denied)
    end)

    it("counts a binding from the next request on, and a deleted one no more", function()
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "shop"), as(srv, SA, "GET", CM .. "/x"))
      role(srv, "shop", "reader", { { apiGroups = { "" }, resources = { "configmaps" }, verbs = { "get" } } })
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "shop"), as(srv, SA, "GET", CM .. "/x"))
      bind(srv, "shop", "widget-reader", "Role", "reader", SA_SUBJECT)
      assert.equal(200, (as(srv, SA, "GET", CM .. "/x")))
      assert.equal(200, (as(srv, ADMIN, "DELETE", RBAC .. "/namespaces/shop/rolebindings/widget-reader")))
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "shop"), as(srv, SA, "GET", CM .. "/x"))
    end)

    it("takes a Role only from a RoleBinding of its own namespace", function()
      role(srv, "shop", "reader", { { apiGroups = { "" }, resources = { "configmaps" }, verbs = { "get" } } })
      -- a RoleBinding in other naming shop's Role finds no Role "reader" in other
      bind(srv, "other", "widget-reader", "Role", "reader", SA_SUBJECT)
      -- a ClusterRoleBinding cannot name a Role
      bind(srv, nil, "widget-reader", "Role", "reader", SA_SUBJECT)
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "shop"), as(srv, SA, "GET", CM .. "/x"))
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "other"),
                as(srv, SA, "GET", "/api/v1/namespaces/other/configmaps/x"))
    end)

    it("grants a ClusterRole everywhere through a ClusterRoleBinding, cluster-scoped resources too", function()
      role(srv, nil, "viewer", { { apiGroups = { "" }, resources = { "configmaps", "nodes", "namespaces" },
                                   verbs = { "get", "list", "watch" } } })
      bind(srv, nil, "dev-viewer", "ClusterRole", "viewer", { { kind = "User", name = "dev",
                                                                apiGroup = "rbac.authorization.k8s.io" } })
      assert.equal(200, (as(srv, DEV, "GET", CM .. "/x")))
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/namespaces/other/configmaps/y")))
      local code, got = as(srv, DEV, "GET", "/api/v1/configmaps")
      assert.equal(200, code)
      assert.equal(4, #got.items)
      assert.equal(200, (watch(srv, DEV, "/api/v1/configmaps")))
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/nodes")))
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/namespaces/shop")))
      forbidden(cannot("dev", "create", "namespaces", "namespaces", "", nil),
                as(srv, DEV, "POST", "/api/v1/namespaces", { metadata = { name = "new" } }))
      forbidden(cannot("dev", "delete", 'namespaces "shop"', "namespaces", "", "shop"),
                as(srv, DEV, "DELETE", "/api/v1/namespaces/shop"))
      -- the binding names dev, not the service account
      forbidden(cannot(WIDGET, "list", "nodes", "nodes", "", nil), as(srv, SA, "GET", "/api/v1/nodes"))
    end)

    it("limits a ClusterRole bound by a RoleBinding to the binding's namespace", function()
      role(srv, nil, "cm-reader", { { apiGroups = { "" }, resources = { "configmaps" }, verbs = { "get", "list" } } })
      bind(srv, "shop", "widget-reader", "ClusterRole", "cm-reader", SA_SUBJECT)
      assert.equal(200, (as(srv, SA, "GET", CM .. "/x")))
      assert.equal(200, (as(srv, SA, "GET", CM)))
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "other"),
                as(srv, SA, "GET", "/api/v1/namespaces/other/configmaps/x"))
      forbidden(cannot(WIDGET, "list", "configmaps", "configmaps", "", nil), as(srv, SA, "GET", "/api/v1/configmaps"))
    end)

    it("defaults a ServiceAccount subject's namespace to its RoleBinding's", function()
      role(srv, "ops", "reader", { { apiGroups = { "" }, resources = { "configmaps" }, verbs = { "list" } } })
      bind(srv, "ops", "widget-reader", "Role", "reader", { { kind = "ServiceAccount", name = "widget" } })
      assert.equal(200, (as(srv, SA, "GET", "/api/v1/namespaces/ops/configmaps")))
      -- in a ClusterRoleBinding a subject without a namespace matches no service account
      role(srv, nil, "lister", { { apiGroups = { "" }, resources = { "configmaps" }, verbs = { "list" } } })
      bind(srv, nil, "widget-lister", "ClusterRole", "lister", { { kind = "ServiceAccount", name = "widget" } })
      forbidden(cannot(WIDGET, "list", "configmaps", "configmaps", "", "shop"), as(srv, SA, "GET", CM))
    end)

    it("matches resourceNames on get and on a list or watch of one name by field selector", function()
      role(srv, "shop", "x-only", { { apiGroups = { "" }, resources = { "configmaps" }, resourceNames = { "x" },
                                      verbs = { "get", "list", "watch", "update" } } })
      bind(srv, "shop", "widget-x", "Role", "x-only", SA_SUBJECT)
      assert.equal(200, (as(srv, SA, "GET", CM .. "/x")))
      forbidden(cannot(WIDGET, "get", 'configmaps "y"', "configmaps", "", "shop"), as(srv, SA, "GET", CM .. "/y"))
      forbidden(cannot(WIDGET, "list", "configmaps", "configmaps", "", "shop"), as(srv, SA, "GET", CM))
      local code, got = as(srv, SA, "GET", CM .. "?fieldSelector=metadata.name%3Dx")
      assert.equal(200, code)
      assert.equal(1, #got.items)
      assert.equal(200, (watch(srv, SA, CM .. "?fieldSelector=metadata.name%3Dx")))
      forbidden(cannot(WIDGET, "watch", 'configmaps "y"', "configmaps", "", "shop"),
                watch(srv, SA, CM .. "?fieldSelector=metadata.name%3Dy"))
      -- a create has no name to match
      forbidden(cannot(WIDGET, "create", "configmaps", "configmaps", "", "shop"),
                as(srv, SA, "POST", CM, { metadata = { name = "x2" } }))
    end)

    it("matches subresources as resource/subresource, and */subresource", function()
      role(srv, "shop", "status", { { apiGroups = { "" }, resources = { "pods/status" }, verbs = { "get", "patch" } } })
      bind(srv, "shop", "widget-status", "Role", "status", SA_SUBJECT)
      local P = "/api/v1/namespaces/shop/pods/p"
      assert.equal(200, (as(srv, SA, "GET", P .. "/status")))
      assert.equal(200, (as(srv, SA, "PATCH", P .. "/status", { status = { phase = "Running" } })))
      forbidden(cannot(WIDGET, "get", 'pods "p"', "pods", "", "shop"), as(srv, SA, "GET", P))
      forbidden(cannot(WIDGET, "update", 'pods "p"', "pods/status", "", "shop"),
                as(srv, SA, "PUT", P .. "/status", { metadata = { name = "p" } }))
      local _, st = as(srv, SA, "PUT", P .. "/status", { metadata = { name = "p" } })
      assert.same({ kind = "pods", name = "p" }, st.details)
      -- "pods" alone does not grant the subresource; "*/status" grants every kind's
      role(srv, nil, "any-status", { { apiGroups = { "*" }, resources = { "*/status" }, verbs = { "get" } } })
      role(srv, nil, "pods", { { apiGroups = { "" }, resources = { "pods" }, verbs = { "get" } } })
      bind(srv, "shop", "dev-pods", "ClusterRole", "pods", { { kind = "User", name = "dev" } })
      forbidden(cannot("dev", "get", 'pods "p"', "pods/status", "", "shop"), as(srv, DEV, "GET", P .. "/status"))
      bind(srv, nil, "dev-status", "ClusterRole", "any-status", { { kind = "User", name = "dev" } })
      assert.equal(200, (as(srv, DEV, "GET", P .. "/status")))
    end)

    it("treats * as any verb, resource and API group", function()
      role(srv, "shop", "all", { { apiGroups = { "*" }, resources = { "*" }, verbs = { "*" } } })
      bind(srv, "shop", "widget-all", "Role", "all", SA_SUBJECT)
      assert.equal(200, (as(srv, SA, "DELETE", CM .. "/y")))
      assert.equal(201, (as(srv, SA, "POST", CM, { metadata = { name = "z" } })))
      assert.equal(200, (as(srv, SA, "GET", "/apis/apps/v1/namespaces/shop/deployments")))
      assert.equal(200, (as(srv, SA, "GET", "/api/v1/namespaces/shop/pods/p/status")))
      forbidden(cannot(WIDGET, "get", 'configmaps "x"', "configmaps", "", "other"),
                as(srv, SA, "GET", "/api/v1/namespaces/other/configmaps/x"))
      -- a "*" in one list does not widen the others
      role(srv, nil, "get-all", { { apiGroups = { "" }, resources = { "*" }, verbs = { "get" } } })
      bind(srv, nil, "dev-get-all", "ClusterRole", "get-all", { { kind = "User", name = "dev" } })
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/namespaces/other/configmaps/x")))
      forbidden(cannot("dev", "list", "configmaps", "configmaps", "", "other"),
                as(srv, DEV, "GET", "/api/v1/namespaces/other/configmaps"))
      forbidden(cannot("dev", "get", 'deployments.apps "d"', "deployments", "apps", "shop"),
                as(srv, DEV, "GET", "/apis/apps/v1/namespaces/shop/deployments/d"))
    end)

    it("binds groups: system:authenticated, system:serviceaccounts and system:serviceaccounts:NS", function()
      role(srv, nil, "node-reader", { { apiGroups = { "" }, resources = { "nodes" }, verbs = { "list" } } })
      role(srv, nil, "cm-reader", { { apiGroups = { "" }, resources = { "configmaps" }, verbs = { "list" } } })
      role(srv, nil, "ns-reader", { { apiGroups = { "" }, resources = { "namespaces" }, verbs = { "list" } } })
      bind(srv, nil, "all-nodes", "ClusterRole", "node-reader", { { kind = "Group", name = "system:authenticated" } })
      bind(srv, nil, "sa-cms", "ClusterRole", "cm-reader", { { kind = "Group", name = "system:serviceaccounts" } })
      bind(srv, "shop", "ops-sas", "ClusterRole", "ns-reader", { { kind = "Group", name = "system:serviceaccounts:ops" } })
      assert.equal(200, (as(srv, SA, "GET", "/api/v1/nodes")))
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/nodes")))
      assert.equal(200, (as(srv, SA, "GET", "/api/v1/configmaps")))
      forbidden(cannot("dev", "list", "configmaps", "configmaps", "", nil), as(srv, DEV, "GET", "/api/v1/configmaps"))
      -- a list of namespaces is cluster-scoped: the RoleBinding in shop does not reach it
      forbidden(cannot(WIDGET, "list", "namespaces", "namespaces", "", nil), as(srv, SA, "GET", "/api/v1/namespaces"))
      -- an impersonated user's groups are the ones asked for (dev is an --impersonator)
      bind(srv, "shop", "team", "ClusterRole", "cm-reader", { { kind = "Group", name = "team" } })
      assert.equal(200, (as(srv, DEV, "GET", CM, nil, { ["Impersonate-User"] = "jane", ["Impersonate-Group"] = "team" })))
      forbidden(cannot("jane", "list", "configmaps", "configmaps", "", "shop"),
                as(srv, DEV, "GET", CM, nil, { ["Impersonate-User"] = "jane" }))
      -- an impersonated service account without groups gets its own
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/configmaps", nil, { ["Impersonate-User"] = WIDGET })))
    end)

    it("exempts system:masters: the unnamed --token user, --rbac-admin users, that group impersonated", function()
      assert.equal(200, (as(srv, ADMIN, "DELETE", CM .. "/y")))
      assert.equal(201, (as(srv, OPS, "POST", CM, { metadata = { name = "z" } })))
      assert.equal(200, (as(srv, OPS, "GET", "/api/v1/nodes")))
      forbidden(cannot("dev", "list", "nodes", "nodes", "", nil), as(srv, DEV, "GET", "/api/v1/nodes"))
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/nodes", nil,
                            { ["Impersonate-User"] = "root", ["Impersonate-Group"] = "system:masters" })))
      -- admins can be replaced at run time
      assert.same({ "dev" }, srv:control("POST", "/_fake/authz", { rbac_admins = { "dev" } }).rbac_admins)
      assert.equal(200, (as(srv, DEV, "GET", "/api/v1/nodes")))
      forbidden(cannot("ops-admin", "list", "nodes", "nodes", "", nil), as(srv, OPS, "GET", "/api/v1/nodes"))
    end)

    it("keeps deny rules on top, for admins too", function()
      role(srv, "shop", "all", { { apiGroups = { "*" }, resources = { "*" }, verbs = { "*" } } })
      bind(srv, "shop", "widget-all", "Role", "all", SA_SUBJECT)
      srv:control("POST", "/_fake/authz", { deny = { { verb = "delete", resource = "configmaps" } } })
      forbidden(cannot(WIDGET, "delete", 'configmaps "x"', "configmaps", "", "shop"), as(srv, SA, "DELETE", CM .. "/x"))
      forbidden(cannot("", "delete", 'configmaps "x"', "configmaps", "", "shop"), as(srv, ADMIN, "DELETE", CM .. "/x"))
      assert.equal(200, (as(srv, SA, "GET", CM .. "/x")))
    end)

    it("lets a kinformer informer with the service account's token sync only where a Role allows", function()
      local kinformer = require "kinformer"
      role(srv, "shop", "cm-watcher", { { apiGroups = { "" }, resources = { "configmaps" },
                                          verbs = { "list", "watch" } } })
      bind(srv, "shop", "widget-watch", "Role", "cm-watcher", SA_SUBJECT)
      local client = assert(kinformer.client{ server = srv.url, token = SA })
      local ok_inf = assert(client:informer{ resource = "configmaps", namespace = "shop",
                                             backoff_initial = 0.05, backoff_max = 0.2 })
      local denied = assert(client:informer{ resource = "configmaps", namespace = "other",
                                             backoff_initial = 0.05, backoff_max = 0.2 })
      finally(function() ok_inf:stop(); denied:stop() end)
      assert(ok_inf:start())
      assert(denied:start())
      assert(ok_inf:wait_for_sync(5))
      assert.equal(2, #ok_inf:store():list())
      local ok, err = denied:wait_for_sync(1)
      assert.is_nil(ok)
      assert.matches(cannot(WIDGET, "list", "configmaps", "configmaps", "", "other"), err, 1, true)
      assert.equal("Forbidden", denied:status().last_error_reason)
      -- the watch was authorized when it started (it may start just after the sync)
      local socket = require "socket"
      local watched, deadline = false, socket.gettime() + 5
      repeat
        for _, q in ipairs(srv:requests_to("GET", "^/api/v1/namespaces/shop/configmaps$")) do
          if q.query.watch then watched = true end
          assert.is_nil(q.forbidden)
        end
        if not watched then socket.sleep(0.05) end
      until watched or socket.gettime() > deadline
      assert.is_true(watched)
    end)

    it("never authorizes the control endpoints", function()
      assert.equal(200, (as(srv, SA, "GET", "/_fake/info")))
      assert.equal(200, (srv:request("GET", "/_fake/requests")))
    end)
  end)
end)
