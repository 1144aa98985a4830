-- Resource names through the server's discovery (lua/kinformer/discovery.lua, client-go's
-- RESTMapper) against the fake API server: kubectl's name forms, preferred versions, scope, a
-- CRD installed after the client started, near matches for unknown names, the built-in table
-- when discovery is unreachable, legacy discovery, caching; and kubectl on the fake server's
-- aggregated and legacy discovery.
local kinformer = require "kinformer"
local clock = require "kinformer.clock"
local core = require "kinformer.core"
local discovery = require "kinformer.discovery"
local fake = require "support.fake_apiserver"
local socket = require "socket"

local AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
local CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
local CUSTOM = { "--resource", "example.com/v1/widgets/Widget",
                 "--resource", "example.com/v1/clusterwidgets/ClusterWidget/cluster" }

-- GETs of discovery documents in the server's request log (paths, in order).
local function discovery_gets(srv)
  local out = {}
  for _, q in ipairs(srv:requests()) do
    local p = q.path
    if q.method == "GET" and (p == "/api" or p == "/apis" or p:match("^/api/v%d+$")
        or p:match("^/apis/[^/]+$") or p:match("^/apis/[^/]+/[^/]+$")) then
      out[#out + 1] = p
    end
  end
  return out
end

-- -> output, exit status (the status printed last: LuaJIT's popen close does not give it).
local function run(cmd)
  local p = assert(io.popen("{ " .. cmd .. "; }; echo \"rc=$?\"", "r"))
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)rc=(%d+)\n$")
  return body or out, tonumber(rc)
end

local function gizmo_crd(name, plural, scope, short)
  return { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
           metadata = { name = name },
           spec = { group = "example.com", scope = scope,
                    names = { plural = plural, singular = plural:sub(1, -2),
                              kind = plural:sub(1, 1):upper() .. plural:sub(2, -2),
                              shortNames = short },
                    versions = { { name = "v1", served = true, storage = true } } } }
end

describe("resource names from discovery", function()
  local srv, legacy

  setup(function()
    srv = fake.start{ args = CUSTOM, quiet = true }
  end)
  teardown(function()
    srv:stop()
    if legacy then legacy:stop() end
  end)
  before_each(function()
    srv:clear_requests()
    srv:clear_faults()
  end)
  after_each(function()
    clock.now = core.now
    kinformer.set_logger(nil)
  end)

  it("resolves every name form kubectl takes, from one cached aggregated discovery", function()
    local client = assert(kinformer.client{ server = srv.url })
    local namespaced = {
      ["/api/v1/namespaces/ns1/pods"] = { "pods", "pod", "po", "Pod", "PODS" },
      ["/apis/apps/v1/namespaces/ns1/deployments"] = { "deploy", "deployment", "deployments",
        "Deployment", "deployment.apps", "deploy.apps", "deployments.apps",
        "deployments.v1.apps", "Deployment.v1.apps" },
      ["/apis/autoscaling/v2/namespaces/ns1/horizontalpodautoscalers"] = { "hpa",
        "horizontalpodautoscalers.autoscaling", "HorizontalPodAutoscaler", "hpa.autoscal" },
      ["/apis/autoscaling/v1/namespaces/ns1/horizontalpodautoscalers"] = { "hpa.v1.autoscaling",
        "horizontalpodautoscalers.v1.autoscaling" },
      ["/apis/example.com/v1/namespaces/ns1/widgets"] = { "widgets", "widget", "Widget",
        "widgets.example.com", "widgets.v1.example.com" },
      ["/api/v1/namespaces/ns1/services"] = { "svc" },
      ["/api/v1/namespaces/ns1/configmaps"] = { "cm" },
      ["/apis/apps/v1/namespaces/ns1/replicasets"] = { "rs" },
      ["/apis/discovery.k8s.io/v1/namespaces/ns1/endpointslices"] = {
        "endpointslices.discovery.k8s.io", "endpointslice" },
    }
    for path, names in pairs(namespaced) do
      for _, name in ipairs(names) do
        local res, err = client:resolve(name, { namespace = "ns1" })
        assert(res, err)
        assert.equal(path, res.path, name)
        assert.is_true(res.namespaced, name)
      end
    end
    local cluster = {
      ["/api/v1/namespaces"] = { "ns", "namespace", "Namespace" },
      ["/api/v1/nodes"] = { "no", "nodes" },
      ["/apis/example.com/v1/clusterwidgets"] = { "clusterwidgets.v1.example.com",
        "clusterwidget", "ClusterWidget.example.com" },
      ["/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"] = {
        "flowschemas.flowcontrol.apiserver.k8s.io", "flowschema" },
      ["/apis/apiextensions.k8s.io/v1/customresourcedefinitions"] = { "crd", "crds" },
    }
    for path, names in pairs(cluster) do
      for _, name in ipairs(names) do
        local res, err = client:resolve(name)
        assert(res, err)
        assert.equal(path, res.path, name)
        assert.is_false(res.namespaced, name)
      end
    end
    local d = assert(client:resolve("deploy"))
    assert.same({ group = "apps", version = "v1", resource = "deployments", kind = "Deployment",
                  namespaced = true, path = "/apis/apps/v1/deployments" }, d)
    -- One aggregated discovery for all of that: two requests, no per-group-version document.
    assert.same({ "/api", "/apis" }, discovery_gets(srv))
    -- A cluster-scoped resource takes no namespace (a wrong argument, as before).
    assert.has_error(function()
      client:resolve("clusterwidgets.example.com", { namespace = "x" })
    end,
      "bad argument #1 to 'resolve' (clusterwidgets is cluster-scoped: it takes no namespace)")
  end)

  it("REST calls and informers use the resolved path, scope and version", function()
    local client = assert(kinformer.client{ server = srv.url, namespace = "ns1" })
    -- A cluster-scoped custom resource named by string: no namespace in its path.
    assert(client:create("clusterwidgets.v1.example.com", { apiVersion = "example.com/v1",
      kind = "ClusterWidget", metadata = { name = "c1" } }))
    local c1 = assert(client:get("clusterwidgets.v1.example.com", "c1"))
    assert.equal("c1", c1.metadata.name)
    assert.equal(200, (srv:request("GET", "/apis/example.com/v1/clusterwidgets/c1")))
    -- Short names and kinds in every verb.
    assert(client:create("deploy", { apiVersion = "apps/v1", kind = "Deployment",
      metadata = { name = "web" }, spec = { replicas = 1 } }))
    assert.equal(1, assert(client:get("Deployment", "web")).spec.replicas)
    assert(client:patch("deployment.apps", "ns1/web", { spec = { replicas = 3 } }))
    assert.equal(1, #assert(client:list("deploy", { namespace = "ns1" })).items)
    assert(client:create("hpa", { apiVersion = "autoscaling/v2", kind = "HorizontalPodAutoscaler",
      metadata = { name = "web" }, spec = { maxReplicas = 3 } }))
    assert.equal(200, (srv:request("GET",
      "/apis/autoscaling/v2/namespaces/ns1/horizontalpodautoscalers/web")))
    -- Informers: "Pod" and "pods" are one shared informer; a cluster-scoped CRD syncs.
    local a = assert(client:informer{ resource = "Pod" })
    assert.equal(a, assert(client:informer{ resource = "pods" }))
    assert.equal("pods", a.resource)
    local cw = assert(client:informer{ resource = "clusterwidgets.example.com" })
    finally(function() cw:stop() end)
    assert(cw:start())
    assert(cw:wait_for_sync(5))
    assert.truthy(cw:store():get_by_key("c1"))
    local r = assert(client:reflector{ resource = "deploy", namespace = "ns1",
                                       fifo = kinformer.delta_fifo{} })
    r:stop()
    assert(client:delete("deploy", "ns1/web"))
    assert.equal(2, #discovery_gets(srv)) -- still the one discovery of this client
  end)

  it("a CRD created after the client started resolves after one refresh", function()
    local t = 1000
    clock.now = function() return t end
    local client = assert(kinformer.client{ server = srv.url })
    assert(client:resolve("pods"))
    assert.equal(2, #discovery_gets(srv))
    local code, body = srv:request("POST", CRDS,
      gizmo_crd("gizmos.example.com", "gizmos", "Namespaced", { "gz" }))
    assert.equal(201, code, body)
    assert.equal("True", body.status.conditions[2].status) -- Established
    local g = assert(client:resolve("gz", { namespace = "ns1" }))
    assert.equal("/apis/example.com/v1/namespaces/ns1/gizmos", g.path)
    assert.equal("Gizmo", g.kind)
    assert.equal(4, #discovery_gets(srv)) -- one refresh
    assert(client:create("gz", { apiVersion = "example.com/v1", kind = "Gizmo",
      metadata = { name = "g1", namespace = "ns1" } }))
    assert.equal("g1", assert(client:get("gizmo", "ns1/g1")).metadata.name)
    -- Unknown names refresh at most once per MIN_REFRESH seconds.
    t = t + 1
    assert.is_nil(client:resolve("nosuch"))
    assert.equal(4, #discovery_gets(srv))
    t = t + discovery.MIN_REFRESH
    code = srv:request("POST", CRDS,
      gizmo_crd("doohickeys.example.com", "doohickeys", "Cluster", nil))
    assert.equal(201, code)
    local dh = assert(client:resolve("doohickeys.example.com"))
    assert.is_false(dh.namespaced)
    assert.equal(6, #discovery_gets(srv))
    -- A malformed definition is refused as kube-apiserver refuses it, and serves nothing.
    local bad = gizmo_crd("wrong.example.com", "things", "Namespaced", nil)
    code, body = srv:request("POST", CRDS, bad)
    assert.equal(422, code)
    assert.matches('must be spec.names.plural+"."+spec.group', body.message, 1, true)
    assert.equal(404, (srv:request("GET", "/apis/example.com/v1/things")))
  end)

  it("an unknown name is an error listing near matches", function()
    local client = assert(kinformer.client{ server = srv.url })
    local res, err, code = client:resolve("deploymnt")
    assert.is_nil(res)
    assert.equal("ENOTFOUND", code)
    assert.equal('unknown resource "deploymnt": did you mean deployments.apps?', err)
    assert.matches("did you mean widgets.example.com", select(2, client:resolve("widgetz")), 1,
      true)
    assert.matches("did you mean clusterwidgets.example.com",
      select(2, client:resolve("clusterwid")), 1, true)
    -- The right name in a group that does not serve it.
    assert.matches("did you mean deployments.apps",
      select(2, client:resolve("deployments.app")), 1, true)
    assert.equal('unknown resource "xyzzy": the server has no resource, short name or kind of '
      .. 'that name', select(2, client:resolve("xyzzy")))
    -- REST calls return it as an error value, informers and reflectors as nil, err, code.
    local r, rerr = client:get("deploymnt", "x")
    assert.is_nil(r)
    assert.is_true(kinformer.is_api_error(rerr))
    assert.equal(0, rerr.code)
    assert.equal("UnknownResource", rerr.reason)
    assert.matches("did you mean deployments.apps", tostring(rerr), 1, true)
    local inf, ierr, icode = client:informer{ resource = "deploymnt" }
    assert.is_nil(inf)
    assert.equal("ENOTFOUND", icode)
    assert.matches("did you mean deployments.apps", ierr, 1, true)
    assert.equal("ENOTFOUND", select(3, client:reflector{ resource = "podz",
                                                          fifo = kinformer.delta_fifo{} }))
  end)

  it("tables and api_version with a built-in resource make no discovery request", function()
    local client = assert(kinformer.client{ server = srv.url })
    local d = assert(client:resolve({ group = "apps", version = "v1", resource = "deployments" },
                                    { namespace = "ns1" }))
    assert.equal("/apis/apps/v1/namespaces/ns1/deployments", d.path)
    assert.equal("/apis/apps/v1/deployments",
      assert(client:resolve("deployments", { api_version = "apps/v1" })).path)
    assert.equal("/api/v1/nodes", assert(client:resolve("nodes", { api_version = "v1" })).path)
    assert(client:list({ group = "", version = "v1", resource = "pods" }, { namespace = "x" }))
    assert.same({}, discovery_gets(srv))
    -- api_version with a name the built-in table does not know asks discovery for its scope.
    local cw = assert(client:resolve("clusterwidgets", { api_version = "example.com/v1" }))
    assert.is_false(cw.namespaced)
    assert.equal("/apis/autoscaling/v1/horizontalpodautoscalers",
      assert(client:resolve("hpa", { api_version = "autoscaling/v1" })).path)
    assert.equal(2, #discovery_gets(srv))
  end)

  it("falls back to the built-in table while discovery is unreachable, and says so once",
    function()
    local t = 1000
    clock.now = function() return t end
    local warnings = {}
    kinformer.set_logger(function(level, msg)
      if level == "warn" then warnings[#warnings + 1] = msg end
    end)
    -- Nothing listens on this port.
    local s = assert(socket.bind("127.0.0.1", 0))
    local _, port = s:getsockname()
    s:close()
    local dead = assert(kinformer.client{ server = "http://127.0.0.1:" .. port })
    assert.equal("/apis/apps/v1/namespaces/a/deployments",
      assert(dead:resolve("deployments.apps", { namespace = "a" })).path)
    assert.equal("/api/v1/pods", assert(dead:resolve("pods")).path)
    assert(dead:informer{ resource = "configmaps" })
    local res, err, code = dead:resolve("deploy")
    assert.is_nil(res)
    assert.equal("ENOTFOUND", code)
    assert.matches("discovery unavailable", err, 1, true)
    assert.equal(1, #warnings)
    assert.matches("^discovery unavailable %(GET /api: .*%): resource names resolve from the "
      .. "built%-in table$", warnings[1])

    -- A server whose discovery fails (503 on /apis): the same, then discovery once it works.
    srv:fault{ path = "^/apis$", times = -1, action = { status = 503 } }
    local client = assert(kinformer.client{ server = srv.url })
    assert.equal("/api/v1/pods", assert(client:resolve("pods")).path)
    assert.is_nil(client:resolve("deploy"))
    assert.equal(2, #warnings)
    assert.matches("GET /apis: HTTP 503", warnings[2], 1, true)
    assert.same({ "/api", "/apis" }, discovery_gets(srv)) -- no retry within MIN_REFRESH
    srv:clear_faults()
    t = t + discovery.MIN_REFRESH
    assert.equal("/apis/apps/v1/deployments", assert(client:resolve("deploy")).path)
    assert.equal(2, #warnings)
  end)

  it("reads the legacy discovery documents from a server without aggregated discovery",
    function()
    local args = { "--no-aggregated-discovery" }
    for _, a in ipairs(CUSTOM) do args[#args + 1] = a end
    legacy = fake.start{ args = args, quiet = true }
    -- What each server answers to the aggregated Accept.
    local code, doc, headers = srv:request("GET", "/apis", nil, { Accept = AGGREGATED
      .. ",application/json" })
    assert.equal(200, code)
    assert.equal(AGGREGATED, headers["content-type"])
    assert.equal("APIGroupDiscoveryList", doc.kind)
    code, doc, headers = legacy:request("GET", "/apis", nil, { Accept = AGGREGATED
      .. ",application/json" })
    assert.equal(200, code)
    assert.equal("application/json", headers["content-type"])
    assert.equal("APIGroupList", doc.kind)

    legacy:clear_requests()
    local client = assert(kinformer.client{ server = legacy.url })
    assert.equal("/apis/apps/v1/namespaces/n/deployments",
      assert(client:resolve("deploy", { namespace = "n" })).path)
    assert.equal("/apis/autoscaling/v2/horizontalpodautoscalers",
      assert(client:resolve("hpa")).path)
    assert.equal("/apis/autoscaling/v1/horizontalpodautoscalers",
      assert(client:resolve("hpa.v1.autoscaling")).path)
    local cw = assert(client:resolve("ClusterWidget"))
    assert.equal("/apis/example.com/v1/clusterwidgets", cw.path)
    assert.is_false(cw.namespaced)
    assert.equal("/api/v1/namespaces", assert(client:resolve("ns")).path)
    local gets = discovery_gets(legacy)
    assert.equal("/api", gets[1])
    assert.equal("/api/v1", gets[2])
    assert.equal("/apis", gets[3])
    -- Then one APIResourceList per group version, the preferred version of a group first.
    local seen = {}
    for i = 4, #gets do seen[gets[i]] = i end
    assert.truthy(seen["/apis/apps/v1"])
    assert.truthy(seen["/apis/example.com/v1"])
    assert.is_true(seen["/apis/autoscaling/v2"] < seen["/apis/autoscaling/v1"])
    local n = #gets
    assert(client:resolve("widget"))
    assert(client:resolve("rs"))
    assert.equal(n, #discovery_gets(legacy)) -- cached
  end)

  describe("kubectl", function()
    local cache = os.tmpname()
    teardown(function()
      os.remove(cache)
      run("rm -rf '" .. cache .. ".d'")
    end)

    local function kubectl(server, args)
      local kc = fake.kubeconfig(server, { namespace = "kc", path = cache .. "-" .. server.port })
      return run("KUBECACHEDIR='" .. cache .. ".d' kubectl --kubeconfig '" .. kc .. "' " .. args
        .. " 2>&1")
    end

    local function check(server)
      local client = assert(kinformer.client{ server = server.url, namespace = "kc" })
      assert(client:create("deploy", { apiVersion = "apps/v1", kind = "Deployment",
        metadata = { name = "web" }, spec = { replicas = 2 } }))
      assert(client:create("po", { apiVersion = "v1", kind = "Pod", metadata = { name = "p1" },
        spec = { containers = { { name = "c", image = "nginx" } } } }))
      local out, rc = kubectl(server, "get deploy -o name")
      assert.equal(0, rc, out)
      assert.equal("deployment.apps/web\n", out)
      out, rc = kubectl(server, "get po")
      assert.equal(0, rc, out)
      assert.matches("\np1%s+0/1%s+Pending", out)
      out, rc = kubectl(server, "api-resources")
      assert.equal(0, rc, out)
      assert.matches("\ndeployments%s+deploy%s+apps/v1%s+true%s+Deployment\n", out)
      assert.matches("\nhorizontalpodautoscalers%s+hpa%s+autoscaling/v2%s+true%s+"
        .. "HorizontalPodAutoscaler\n", out)
      assert.matches("\nclusterwidgets%s+example.com/v1%s+false%s+ClusterWidget\n", out)
      assert.matches("\nflowschemas%s+flowcontrol.apiserver.k8s.io/v1%s+false%s+FlowSchema\n", out)
      assert.matches("\npods%s+po%s+v1%s+true%s+Pod\n", out)
    end

    it("works on aggregated discovery (get deploy, get po, api-resources)", function()
      check(srv)
      -- kubectl took the aggregated documents: no per-group-version request.
      for _, p in ipairs(discovery_gets(srv)) do
        assert.is_truthy(p == "/api" or p == "/apis", p)
      end
    end)

    it("works on legacy discovery", function()
      if not legacy then
        local args = { "--no-aggregated-discovery" }
        for _, a in ipairs(CUSTOM) do args[#args + 1] = a end
        legacy = fake.start{ args = args, quiet = true }
      end
      legacy:clear_requests()
      check(legacy)
      local per_gv = 0
      for _, p in ipairs(discovery_gets(legacy)) do
        if p:match("^/apis/[^/]+/[^/]+$") then per_gv = per_gv + 1 end
      end
      assert.is_true(per_gv > 0)
    end)
  end)
end)
