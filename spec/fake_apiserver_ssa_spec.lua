-- Server-side apply and field ownership in the fake API server (tools/fake-apiserver,
-- fakeapi/ssa.py, fakeapi/services.py), pinned against what kube-apiserver documents
-- (https://kubernetes.io/docs/reference/using-api/server-side-apply/): managedFields after
-- apply and update, 409 conflicts and force, lists merged by their keys, removal of fields an
-- applier stopped setting, Service defaulting and its immutable clusterIP, and client:apply.
local kinformer = require "kinformer"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"

local APPLY = "application/apply-patch+yaml"
local DEPLOY = "/apis/apps/v1/namespaces/default/deployments/"
local PODS = "/api/v1/namespaces/default/pods/"
local SVCS = "/api/v1/namespaces/default/services/"

-- PATCH an apply body as manager; -> code, decoded answer.
local function apply(srv, path, body, manager, force)
  local q = manager and ("?fieldManager=" .. manager) or ""
  if force then q = q .. "&force=true" end
  return srv:request("PATCH", path .. q, body, { ["content-type"] = APPLY })
end

-- The managedFields entry of manager (and operation), or nil.
local function entry(obj, manager, operation)
  for _, e in ipairs(obj.metadata.managedFields or {}) do
    if e.manager == manager and (operation == nil or e.operation == operation) then return e end
  end
end

local function deployment(name, spec, labels)
  return { apiVersion = "apps/v1", kind = "Deployment",
           metadata = { name = name, labels = labels }, spec = spec }
end

local function containers(list)
  return { template = { spec = { containers = list } } }
end

describe("fake API server: server-side apply", function()
  local srv

  setup(function() srv = fake.start{ quiet = true } end)
  teardown(function() srv:stop() end)

  it("records what an apply set, in FieldsV1, under its manager", function()
    local code, obj = apply(srv, DEPLOY .. "owned", deployment("owned", {
      replicas = 2, template = { spec = { containers = {
        { name = "web", image = "nginx", ports = { { containerPort = 80 } } } } } } },
      { app = "web" }), "alice")
    assert.equal(201, code)
    assert.equal(1, #obj.metadata.managedFields)
    local e = entry(obj, "alice")
    assert.equal("Apply", e.operation)
    assert.equal("apps/v1", e.apiVersion)
    assert.equal("FieldsV1", e.fieldsType)
    assert.truthy(e.time:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"))
    local web = {
      ["."] = {}, ["f:name"] = {}, ["f:image"] = {},
      ["f:ports"] = { ['k:{"containerPort":80,"protocol":"TCP"}'] = {
        ["."] = {}, ["f:containerPort"] = {} } },
    }
    assert.same({
      ["f:metadata"] = { ["f:labels"] = { ["f:app"] = {} } },
      ["f:spec"] = {
        ["f:replicas"] = {},
        ["f:template"] = { ["f:spec"] = { ["f:containers"] = { ['k:{"name":"web"}'] = web } } },
      },
    }, e.fieldsV1)
  end)

  it("changes nothing on a repeated apply: same resourceVersion, same managedFields", function()
    local body = deployment("again", { replicas = 2 }, { app = "again" })
    local _, first = apply(srv, DEPLOY .. "again", body, "alice")
    local rv = srv:resource_version()
    require("socket").sleep(1.1) -- managedFields times have whole seconds
    local code, second = apply(srv, DEPLOY .. "again", body, "alice")
    assert.equal(200, code)
    assert.equal(first.metadata.resourceVersion, second.metadata.resourceVersion)
    assert.same(first.metadata.managedFields, second.metadata.managedFields)
    assert.equal(rv, srv:resource_version())
  end)

  it("refuses an apply without fieldManager (422, as PatchOptions validation answers)", function()
    local code, st = apply(srv, DEPLOY .. "nomanager", deployment("nomanager", { replicas = 1 }))
    assert.equal(422, code)
    assert.equal("Invalid", st.reason)
    assert.equal('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                 .. "required for apply patch", st.message)
  end)

  it("gives an update the fields it changed, named by fieldManager or the User-Agent", function()
    local _, obj = apply(srv, DEPLOY .. "upd", deployment("upd", { replicas = 1 }), "alice")
    obj.spec.replicas = 4
    obj.metadata.labels = { tier = "front" }
    local code, put = srv:request("PUT", DEPLOY .. "upd", obj,
                                  { ["user-agent"] = "kubectl/v1.31.0 (linux/amd64) kubernetes/abc" })
    assert.equal(200, code)
    assert.is_nil(entry(put, "alice")) -- its only field went to kubectl
    local e = entry(put, "kubectl", "Update")
    assert.same({ ["f:metadata"] = { ["f:labels"] = { ["."] = {}, ["f:tier"] = {} } },
                  ["f:spec"] = { ["f:replicas"] = {} } }, e.fieldsV1)

    code = srv:request("PATCH", DEPLOY .. "upd?fieldManager=scaler", { spec = { replicas = 5 } },
                       { ["content-type"] = "application/merge-patch+json" })
    assert.equal(200, code)
    local _, got = srv:request("GET", DEPLOY .. "upd")
    assert.same({ ["f:spec"] = { ["f:replicas"] = {} } }, entry(got, "scaler", "Update").fieldsV1)
    assert.same({ ["f:metadata"] = { ["f:labels"] = { ["."] = {}, ["f:tier"] = {} } } },
                entry(got, "kubectl").fieldsV1)
  end)

  it("owns an owner reference whole, and a Deployment's selector whole", function()
    local code, obj = srv:request("POST", "/apis/apps/v1/namespaces/default/replicasets?fieldManager=kcm", {
      apiVersion = "apps/v1", kind = "ReplicaSet",
      metadata = { name = "owned-rs", ownerReferences = { { apiVersion = "apps/v1",
        kind = "Deployment", name = "d", uid = "u-1", controller = true } } },
      spec = { selector = { matchLabels = { app = "d" } } } })
    assert.equal(201, code)
    assert.same({ ["f:metadata"] = { ["f:ownerReferences"] = { ["."] = {}, ['k:{"uid":"u-1"}'] = {} } },
                  ["f:spec"] = { ["f:selector"] = {} } }, entry(obj, "kcm", "Update").fieldsV1)
  end)

  it("answers 409 Conflict naming the other manager and the field, unless force", function()
    apply(srv, DEPLOY .. "fight", deployment("fight", { replicas = 1 }), "other-manager")
    -- The same value is no conflict: both own the field.
    local code, same = apply(srv, DEPLOY .. "fight", deployment("fight", { replicas = 1 }), "me")
    assert.equal(200, code)
    assert.truthy(entry(same, "me") and entry(same, "other-manager"))

    local st
    apply(srv, DEPLOY .. "fight2", deployment("fight2", { replicas = 1 }), "other-manager")
    code, st = apply(srv, DEPLOY .. "fight2", deployment("fight2", { replicas = 3 }), "me")
    assert.equal(409, code)
    assert.equal("Conflict", st.reason)
    assert.equal('Apply failed with 1 conflict: conflict with "other-manager": .spec.replicas',
                 st.message)
    assert.same({ { type = "FieldManagerConflict", message = 'conflict with "other-manager"',
                    field = ".spec.replicas" } }, st.details.causes)
    local _, got = srv:request("GET", DEPLOY .. "fight2")
    assert.equal(1, got.spec.replicas)

    local forced
    code, forced = apply(srv, DEPLOY .. "fight2", deployment("fight2", { replicas = 3 }), "me", true)
    assert.equal(200, code)
    assert.equal(3, forced.spec.replicas)
    assert.is_nil(entry(forced, "other-manager")) -- it owned nothing else
    assert.same({ ["f:spec"] = { ["f:replicas"] = {} } }, entry(forced, "me").fieldsV1)
  end)

  it("names an Update manager in a conflict with its apiVersion and time", function()
    apply(srv, DEPLOY .. "vsupd", deployment("vsupd", { replicas = 1 }), "me")
    srv:request("PATCH", DEPLOY .. "vsupd?fieldManager=hpa", { spec = { replicas = 6 } },
                { ["content-type"] = "application/merge-patch+json" })
    local code, st = apply(srv, DEPLOY .. "vsupd", deployment("vsupd", { replicas = 2 }), "me")
    assert.equal(409, code)
    assert.truthy(st.message:match('^Apply failed with 1 conflict: conflict with "hpa" using '
                                   .. 'apps/v1 at %d+%-%d+%-%d+T[%d:]+Z: %.spec%.replicas$'),
                  st.message)
  end)

  it("merges two managers' containers of one pod by name", function()
    local pod = function(c)
      return { apiVersion = "v1", kind = "Pod", metadata = { name = "two" },
               spec = { containers = { c } } }
    end
    assert.equal(201, (apply(srv, PODS .. "two", pod({ name = "app", image = "app:1" }), "app")))
    local code, obj = apply(srv, PODS .. "two",
                            pod({ name = "sidecar", image = "proxy:1" }), "injector")
    assert.equal(200, code)
    assert.equal(2, #obj.spec.containers)
    assert.equal("app", obj.spec.containers[1].name)
    assert.equal("sidecar", obj.spec.containers[2].name)
    assert.truthy(entry(obj, "app").fieldsV1["f:spec"]["f:containers"]['k:{"name":"app"}'])
    assert.truthy(entry(obj, "injector").fieldsV1["f:spec"]["f:containers"]['k:{"name":"sidecar"}'])
    -- Changing one's own container does not touch the other's.
    _, obj = apply(srv, PODS .. "two", pod({ name = "app", image = "app:2" }), "app")
    assert.equal("app:2", obj.spec.containers[1].image)
    assert.equal("proxy:1", obj.spec.containers[2].image)
  end)

  it("merges two managers' ports of one Service by port and protocol", function()
    local svc = function(p)
      return { apiVersion = "v1", kind = "Service", metadata = { name = "ports" },
               spec = { selector = { app = "x" }, ports = { p } } }
    end
    apply(srv, SVCS .. "ports", svc({ name = "http", port = 80 }), "a")
    local code, obj = apply(srv, SVCS .. "ports", svc({ name = "dns", port = 53, protocol = "UDP" }), "b")
    assert.equal(200, code)
    assert.equal(2, #obj.spec.ports)
    assert.equal(80, obj.spec.ports[1].port)
    assert.equal(53, obj.spec.ports[2].port)
    assert.truthy(entry(obj, "a").fieldsV1["f:spec"]["f:ports"]['k:{"port":80,"protocol":"TCP"}'])
    assert.truthy(entry(obj, "b").fieldsV1["f:spec"]["f:ports"]['k:{"port":53,"protocol":"UDP"}'])
  end)

  it("keeps finalizers as a set and other lists atomic", function()
    local function cm(fins, args)
      return { apiVersion = "apps/v1", kind = "Deployment",
               metadata = { name = "sets", finalizers = fins },
               spec = containers({ { name = "c", image = "i", args = args } }) }
    end
    apply(srv, DEPLOY .. "sets", cm({ "a.io/x" }, { "1", "2" }), "m1")
    local _, obj = apply(srv, DEPLOY .. "sets", cm({ "b.io/y" }), "m2")
    assert.same({ "a.io/x", "b.io/y" }, obj.metadata.finalizers)
    assert.same({ ['v:"b.io/y"'] = {} }, entry(obj, "m2").fieldsV1["f:metadata"]["f:finalizers"])
    -- args is atomic: one owner, replaced as a whole, and a different value conflicts.
    local code = apply(srv, DEPLOY .. "sets", cm(nil, { "3" }), "m2")
    assert.equal(409, code)
    -- clean up the finalizers so the object can go
    srv:request("PATCH", DEPLOY .. "sets", { metadata = { finalizers = cjson.null } },
                { ["content-type"] = "application/merge-patch+json" })
  end)

  it("removes a field its only manager stopped applying; keeps one another manager owns", function()
    apply(srv, DEPLOY .. "rm", deployment("rm", { replicas = 2, paused = true,
      template = { spec = { containers = { { name = "a", image = "a" }, { name = "b", image = "b" } } } } },
      { app = "rm", keep = "yes" }), "first")
    -- another manager also sets keep=yes and container b
    apply(srv, DEPLOY .. "rm", deployment("rm", containers({ { name = "b", image = "b" } }),
                                         { keep = "yes" }), "second")
    local code, obj = apply(srv, DEPLOY .. "rm", deployment("rm", { replicas = 2 }, { app = "rm" }),
                            "first")
    assert.equal(200, code)
    assert.is_nil(obj.spec.paused)                -- only "first" owned it: removed
    assert.equal("yes", obj.metadata.labels.keep)  -- "second" owns it too: kept
    assert.equal(1, #obj.spec.template.spec.containers) -- a went, b stays
    assert.equal("b", obj.spec.template.spec.containers[1].name)
    assert.same({ ["f:metadata"] = { ["f:labels"] = { ["f:app"] = {} } },
                  ["f:spec"] = { ["f:replicas"] = {} } }, entry(obj, "first").fieldsV1)
  end)

  it("defaults a Service and allocates its cluster IP and node ports", function()
    local code, a = srv:request("POST", "/api/v1/namespaces/default/services", {
      apiVersion = "v1", kind = "Service", metadata = { name = "np" },
      spec = { type = "NodePort", selector = { app = "x" }, ports = { { port = 80 }, { port = 443 } } } })
    assert.equal(201, code)
    local s = a.spec
    assert.truthy(s.clusterIP:match("^10%.%d+%.%d+%.%d+$"))
    assert.same({ s.clusterIP }, s.clusterIPs)
    assert.same({ "IPv4" }, s.ipFamilies)
    assert.equal("SingleStack", s.ipFamilyPolicy)
    assert.equal("None", s.sessionAffinity)
    assert.equal("Cluster", s.internalTrafficPolicy)
    assert.equal("TCP", s.ports[1].protocol)
    assert.equal(80, s.ports[1].targetPort)
    assert.truthy(s.ports[1].nodePort >= 30000 and s.ports[1].nodePort <= 32767)
    assert.is_not.equal(s.ports[1].nodePort, s.ports[2].nodePort)

    local _, b = srv:request("POST", "/api/v1/namespaces/default/services", {
      apiVersion = "v1", kind = "Service", metadata = { name = "plain" },
      spec = { ports = { { port = 8080, targetPort = "http" } } } })
    assert.equal("ClusterIP", b.spec.type)
    assert.is_not.equal(s.clusterIP, b.spec.clusterIP)
    assert.equal("http", b.spec.ports[1].targetPort)
    assert.is_nil(b.spec.ports[1].nodePort)

    local _, h = srv:request("POST", "/api/v1/namespaces/default/services", {
      apiVersion = "v1", kind = "Service", metadata = { name = "headless" },
      spec = { clusterIP = "None", ports = { { port = 80 } } } })
    assert.equal("None", h.spec.clusterIP)
    assert.same({ "None" }, h.spec.clusterIPs)
  end)

  it("refuses to change a Service's clusterIP (422 field is immutable), keeps it when left out", function()
    local _, svc = srv:request("POST", "/api/v1/namespaces/default/services", {
      apiVersion = "v1", kind = "Service", metadata = { name = "imm" },
      spec = { ports = { { port = 80 } } } })
    local ip = svc.spec.clusterIP
    svc.spec.clusterIP = "10.96.200.200"
    svc.spec.clusterIPs = nil
    local code, st = srv:request("PUT", SVCS .. "imm", svc)
    assert.equal(422, code)
    assert.equal("Invalid", st.reason)
    assert.equal('Service "imm" is invalid: spec.clusterIP: Invalid value: "10.96.200.200": '
                 .. "field is immutable", st.message)
    -- An apply that does not mention the address keeps it.
    local obj
    code, obj = apply(srv, SVCS .. "imm", { apiVersion = "v1", kind = "Service",
      metadata = { name = "imm", labels = { a = "b" } } }, "labeler")
    assert.equal(200, code)
    assert.equal(ip, obj.spec.clusterIP)
  end)

  it("records a status apply under its subresource and stores nothing on a dry run", function()
    apply(srv, DEPLOY .. "stat", deployment("stat", { replicas = 1 }), "spec-owner")
    local code, obj = apply(srv, DEPLOY .. "stat/status", { apiVersion = "apps/v1",
      kind = "Deployment", metadata = { name = "stat" }, status = { replicas = 1 } }, "status-owner")
    assert.equal(200, code)
    assert.equal(1, obj.status.replicas)
    local e = entry(obj, "status-owner")
    assert.equal("status", e.subresource)
    assert.same({ ["f:status"] = { ["f:replicas"] = {} } }, e.fieldsV1)
    assert.same({ ["f:spec"] = { ["f:replicas"] = {} } }, entry(obj, "spec-owner").fieldsV1)

    local rv = obj.metadata.resourceVersion
    code, obj = srv:request("PATCH", DEPLOY .. "stat?fieldManager=dry&dryRun=All",
                            deployment("stat", { paused = true }), { ["content-type"] = APPLY })
    assert.equal(200, code)
    assert.truthy(entry(obj, "dry"))
    local _, got = srv:request("GET", DEPLOY .. "stat")
    assert.equal(rv, got.metadata.resourceVersion)
    assert.is_nil(entry(got, "dry"))
    assert.is_nil(got.spec.paused)
  end)

  it("serves kinformer's client:apply: create, conflict as an error, force", function()
    local client = assert(kinformer.client{ server = srv.url })
    local cm = function(v)
      return { apiVersion = "v1", kind = "ConfigMap",
               metadata = { name = "via-client", namespace = "default" }, data = { k = v } }
    end
    local obj = assert(client:apply("configmaps", cm("1"), { field_manager = "ctl-a" }))
    obj = kinformer.to_table(obj)
    assert.equal("ctl-a", obj.metadata.managedFields[1].manager)
    local res, err = client:apply("configmaps", cm("2"), { field_manager = "ctl-b" })
    assert.is_nil(res)
    assert.equal(409, err.code)
    assert.equal("Conflict", err.reason)
    assert.equal('Apply failed with 1 conflict: conflict with "ctl-a": .data.k', err.message)
    obj = kinformer.to_table(assert(client:apply("configmaps", cm("2"),
                                                 { field_manager = "ctl-b", force = true })))
    assert.equal("2", obj.data.k)
    assert.equal(1, #obj.metadata.managedFields)
    assert.equal("ctl-b", obj.metadata.managedFields[1].manager)
  end)
end)
