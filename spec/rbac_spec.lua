-- kinformer.rbac: the rules of the examples' managers (exact), declared rules merged, misuse,
-- bin/kinformer-rbac's output, and examples/deploy/: its RBAC is the generated one, and its
-- manifests pass `kubectl apply --dry-run=server` against the fake API server.
local kinformer = require "kinformer"
local cjson = require "cjson"
local lyaml = require "lyaml"
local fake = require "support.fake_apiserver"

local ROOT = rawget(_G, "KINFORMER_ROOT") or "."

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function run(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local _, _, rc = p:close()
  return out, rc
end

-- bin/kinformer-rbac's stdout for these arguments (offline: no KINFORMER_SERVER).
local function command(args)
  local words = {}
  for i, a in ipairs(args) do words[i] = quote(a) end
  return run("cd " .. quote(ROOT) .. " && env -u KINFORMER_SERVER bin/kinformer-rbac "
             .. table.concat(words, " ") .. " 2>/dev/null")
end

-- The rules of each Role / ClusterRole in a JSON List: { ["ClusterRole"] = rules,
-- ["Role ns"] = rules }, and the bindings' subjects and roleRefs.
local function roles_of(list)
  local out = {}
  for _, o in ipairs(list.items) do
    local name = o.kind .. (o.metadata.namespace and (" " .. o.metadata.namespace) or "")
    if o.rules then out[name] = o.rules else out[name] = { o.roleRef, o.subjects } end
  end
  return out
end

local function rule(groups, resources, verbs)
  return { apiGroups = groups, resources = resources, verbs = verbs }
end
local READ = { "get", "list", "watch" }
local EVENTS = rule({ "" }, { "events" }, { "create", "patch" })
local LEASES = rule({ "coordination.k8s.io" }, { "leases" }, { "create", "get", "update" })

describe("kinformer.rbac", function()
  describe("the examples' managers (bin/kinformer-rbac, offline)", function()
    it("widget-operator: the Widgets it watches and finalizes, their status, owned ConfigMaps, "
       .. "Events, its Lease", function()
      local out, rc = command{ "--format", "json", "--name", "wop", "--service-account", "sa",
        "--namespace", "ops", "examples/widget-operator.lua", "--lease-namespace", "ops" }
      assert.equal(0, rc)
      local roles = roles_of(cjson.decode(out))
      assert.same({
        rule({ "" }, { "configmaps" }, { "create", "delete", "get", "list", "patch", "update", "watch" }),
        EVENTS,
        rule({ "example.com" }, { "widgets" }, { "get", "list", "patch", "update", "watch" }),
        rule({ "example.com" }, { "widgets/status" }, { "patch", "update" }),
      }, roles.ClusterRole)
      assert.same({ LEASES }, roles["Role ops"])
      local sa = { { kind = "ServiceAccount", name = "sa", namespace = "ops" } }
      assert.same({ { apiGroup = "rbac.authorization.k8s.io", kind = "ClusterRole", name = "wop" },
                    sa }, roles.ClusterRoleBinding)
      assert.same({ { apiGroup = "rbac.authorization.k8s.io", kind = "Role", name = "wop" }, sa },
                  roles["RoleBinding ops"])
      local n = 0
      for _ in pairs(roles) do n = n + 1 end
      assert.equal(4, n)
    end)

    it("controller.lua: ConfigMaps it writes (declared), Pods it watches; all in Roles when "
       .. "every informer is namespaced; a sharded one lists and watches Leases", function()
      local out, rc = command{ "--format", "json", "examples/controller.lua" }
      assert.equal(0, rc)
      local roles = roles_of(cjson.decode(out))
      local cms = rule({ "" }, { "configmaps" }, { "create", "delete", "get", "list", "update", "watch" })
      assert.same({ cms, EVENTS, rule({ "" }, { "pods" }, READ) }, roles.ClusterRole)
      assert.same({ LEASES }, roles["Role default"]) -- the client's namespace

      out, rc = command{ "--format", "json", "examples/controller.lua", "--namespace", "team-a",
                         "--shard-group", "ready" }
      assert.equal(0, rc)
      roles = roles_of(cjson.decode(out))
      assert.is_nil(roles.ClusterRole)
      assert.is_nil(roles.ClusterRoleBinding)
      assert.same({ cms, EVENTS, rule({ "" }, { "pods" }, READ) }, roles["Role team-a"])
      assert.same({ rule({ "coordination.k8s.io" }, { "leases" },
                         { "create", "get", "list", "update", "watch" }) }, roles["Role default"])
    end)

    it("prints YAML by default: examples/deploy/rbac.yaml is what it prints", function()
      local out, rc = command{ "--name", "widget-operator", "--namespace", "widget-system",
        "examples/widget-operator.lua", "--lease-namespace", "widget-system" }
      assert.equal(0, rc)
      local f = assert(io.open(ROOT .. "/examples/deploy/rbac.yaml"))
      local checked_in = f:read("a")
      while checked_in:match("^#") do checked_in = checked_in:gsub("^#[^\n]*\n", "", 1) end
      f:close()
      assert.equal(checked_in, out) -- regenerate with the command in the file's first line
      -- and the YAML says what the JSON says
      local json = command{ "--format", "json", "--name", "widget-operator", "--namespace",
        "widget-system", "examples/widget-operator.lua", "--lease-namespace", "widget-system" }
      assert.same(cjson.decode(json).items, lyaml.load(out, { all = true }))
    end)

    it("refuses bad arguments with status 2", function()
      local _, rc = command{ "--format", "xml", "examples/controller.lua" }
      assert.equal(2, rc)
      _, rc = command{}
      assert.equal(2, rc)
    end)
  end)

  describe("mgr:rbac", function()
    local srv, client
    setup(function()
      srv = fake.start{ quiet = true, args = { "--widget-crd" } }
      client = assert(kinformer.client{ server = srv.url })
    end)
    teardown(function() if srv then srv:stop() end end)

    it("merges declared rules with the same apiGroups and resources, scoped as declared", function()
      local mgr = kinformer.manager{ client = client, log_level = false, rbac = {
        { apiGroups = { "" }, resources = { "secrets" }, verbs = { "get" } },
        { apiGroups = { "" }, resources = { "secrets" }, verbs = { "list", "get" } },
        { apiGroups = { "apps" }, resources = { "deployments" }, verbs = { "get" }, namespace = "x" },
      } }
      mgr:controller{ name = "w", resource = "widgets.v1.example.com", namespace = "x",
        reconcile = function() end,
        rbac = { { apiGroups = { "example.com" }, resources = { "widgets/status" }, verbs = { "update" } },
                 { apiGroups = { "example.com" }, resources = { "widgets" }, verbs = { "delete" } } } }
      mgr:informer{ resource = "pods" }
      assert.same({
        { apiGroups = { "" }, resources = { "pods" }, verbs = READ },
        { apiGroups = { "" }, resources = { "secrets" }, verbs = { "get", "list" } },
        { namespace = "x", apiGroups = { "" }, resources = { "events" }, verbs = { "create", "patch" } },
        { namespace = "x", apiGroups = { "apps" }, resources = { "deployments" }, verbs = { "get" } },
        { namespace = "x", apiGroups = { "example.com" }, resources = { "widgets" },
          verbs = { "delete", "get", "list", "watch" } },
        { namespace = "x", apiGroups = { "example.com" }, resources = { "widgets/status" },
          verbs = { "update" } },
      }, mgr:rbac())
      -- the same manager, the same bytes
      assert.equal(mgr:rbac{ format = "yaml" }, mgr:rbac{ format = "yaml" })
      local objs = mgr:rbac{ format = "table", name = "n" }
      assert.same({ "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding" },
                  { objs[1].kind, objs[2].kind, objs[3].kind, objs[4].kind })
      assert.same({ { kind = "ServiceAccount", name = "n", namespace = "default" } }, objs[2].subjects)
      mgr:stop()
    end)

    it("raises for a bad rbac option or bad opts", function()
      local function mk(r) return kinformer.manager{ client = client, log_level = false, rbac = r } end
      assert.has_error(function() mk("all") end,
        "bad argument #1 to 'manager' (option 'rbac' must be a list of rules)")
      assert.has_error(function() mk{ { apiGroups = { "" }, resources = { "pods" } } } end,
        "bad argument #1 to 'manager' (rbac[1].verbs must be a non-empty list of strings)")
      assert.has_error(function() mk{ { apiGroups = { "" }, resources = { "pods" }, verbs = { "get" },
                                        resourceNames = { "a" } } } end,
        "bad argument #1 to 'manager' (rbac[1]: unknown field 'resourceNames')")
      local mgr = mk(nil)
      assert.has_error(function()
        mgr:controller{ name = "c", resource = "pods", reconcile = function() end,
                        rbac = { { apiGroups = { "" }, resources = { 1 }, verbs = { "get" } } } }
      end, "bad argument #1 to 'controller' (rbac[1].resources[1] must be a string)")
      assert.has_error(function() mgr:rbac{ format = "xml" } end,
        "bad argument #1 to 'rbac' (option 'format' must be \"yaml\", \"json\" or \"table\")")
      assert.has_error(function() mgr:rbac{ nme = "x" } end)
      mgr:stop()
    end)
  end)

  describe("examples/deploy", function()
    local DEPLOY = ROOT .. "/examples/deploy"
    local function load(name)
      local f = assert(io.open(DEPLOY .. "/" .. name))
      local docs = lyaml.load(f:read("a"), { all = true })
      f:close()
      return docs
    end

    it("runs two replicas with leader election in the Lease's namespace, probes on the "
       .. "metrics address, as the ServiceAccount the RBAC binds", function()
      local d = load("deployment.yaml")[1]
      assert.equal(2, d.spec.replicas)
      local pod = d.spec.template.spec
      local c = pod.containers[1]
      local args = table.concat(c.args, " ")
      assert.truthy(args:find("--lease-namespace widget-system", 1, true))
      local port = tonumber(args:match("%-%-metrics%-address [%d.]+:(%d+)"))
      assert.equal(port, c.ports[1].containerPort)
      assert.same({ path = "/healthz", port = c.ports[1].name }, c.livenessProbe.httpGet)
      assert.same({ path = "/readyz", port = c.ports[1].name }, c.readinessProbe.httpGet)
      local sa = load("serviceaccount.yaml")[1]
      assert.equal("ServiceAccount", sa.kind)
      assert.equal(sa.metadata.name, pod.serviceAccountName)
      assert.equal(sa.metadata.namespace, d.metadata.namespace)
      for _, o in ipairs(load("rbac.yaml")) do
        if o.subjects then
          assert.same({ { kind = "ServiceAccount", name = sa.metadata.name,
                          namespace = sa.metadata.namespace } }, o.subjects)
        end
      end
      assert.equal(d.metadata.namespace, load("namespace.yaml")[1].metadata.name)
    end)

    it("passes kubectl apply --dry-run=server against the fake API server", function()
      -- The fake server serves RBAC's kinds; a ServiceAccount is checked above while it serves
      -- none.
      local srv = fake.start{ quiet = true }
      local kubeconfig = fake.kubeconfig(srv, { namespace = "default" })
      local cache = os.tmpname()
      local code = srv:request("GET", "/api/v1/serviceaccounts")
      local files = " -f " .. quote(DEPLOY) -- the whole folder, as the README applies it
      if code ~= 200 then -- every manifest but the ServiceAccount (see above)
        files = ""
        for name in run("ls " .. quote(DEPLOY)):gmatch("[^\n]+") do
          if name:match("%.yaml$") and name ~= "serviceaccount.yaml" then
            files = files .. " -f " .. quote(DEPLOY .. "/" .. name)
          end
        end
      end
      local out, rc = run("KUBECACHEDIR=" .. quote(cache .. ".d") .. " kubectl --kubeconfig "
        .. quote(kubeconfig) .. " apply --dry-run=server" .. files .. " 2>&1")
      srv:stop()
      os.remove(kubeconfig)
      os.remove(cache)
      run("rm -rf " .. quote(cache .. ".d"))
      assert.equal(0, rc, out)
      for _, want in ipairs{ "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created",
          "namespace/widget-system created", "deployment.apps/widget-operator created",
          "serviceaccount/widget-operator created",
          "clusterrole.rbac.authorization.k8s.io/widget-operator created",
          "clusterrolebinding.rbac.authorization.k8s.io/widget-operator created",
          "role.rbac.authorization.k8s.io/widget-operator created",
          "rolebinding.rbac.authorization.k8s.io/widget-operator created" } do
        assert.truthy(out:find(want .. " (server dry run)", 1, true), out)
      end
    end)
  end)
end)
