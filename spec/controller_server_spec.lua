-- What a controller meets on a real cluster, against the fake API server (one server for the
-- file, started with the Widget CRD): graceful deletion with finalizers, garbage collection
-- through ownerReferences, metadata.generation, the status and scale subresources, Events in
-- both API versions (and kubectl showing them), JSON patch `test` of the resourceVersion.
local kinformer = require "kinformer"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function run(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local _, _, rc = p:close()
  return out, rc
end

local WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"

local function widget(name, extra)
  local w = { apiVersion = "example.com/v1", kind = "Widget",
              metadata = { name = name, namespace = "default" }, spec = { replicas = 1, size = "s" } }
  for k, v in pairs(extra or {}) do w.metadata[k] = v end
  return w
end

local function owned_cm(name, owners, extra)
  local refs = {}
  for i, o in ipairs(owners) do
    refs[i] = { apiVersion = o.apiVersion or "example.com/v1", kind = o.kind or "Widget",
                name = o.metadata.name, uid = o.metadata.uid, controller = i == 1 or nil,
                blockOwnerDeletion = true }
  end
  local c = { apiVersion = "v1", kind = "ConfigMap",
              metadata = { name = name, namespace = "default", ownerReferences = refs },
              data = { a = "1" } }
  for k, v in pairs(extra or {}) do c.metadata[k] = v end
  return c
end

-- The watch events of a resource path after rv, read for one second: { "TYPE name", ... }
local function events_after(srv, path, rv)
  local code, _, _, raw = srv:request("GET", path .. "?watch=1&timeoutSeconds=1&resourceVersion=" .. rv)
  assert.equal(200, code)
  local out = {}
  for line in raw:gmatch("[^\n]+") do
    local ev = cjson.decode(line)
    out[#out + 1] = ev.type .. " " .. ev.object.metadata.name
  end
  return out
end

describe("fake API server for controllers", function()
  local srv, client, kubeconfig
  local cache = os.tmpname()

  setup(function()
    srv = fake.start{ quiet = true, args = { "--widget-crd" } }
    client = assert(kinformer.client{ server = srv.url })
    kubeconfig = fake.kubeconfig(srv, { namespace = "default" })
  end)
  teardown(function()
    if srv then srv:stop() end
    if kubeconfig then os.remove(kubeconfig) end
    os.remove(cache)
    run("rm -rf " .. quote(cache .. ".d"))
  end)

  local function kubectl(args)
    return run("KUBECACHEDIR=" .. quote(cache .. ".d") .. " kubectl --kubeconfig " .. quote(kubeconfig)
               .. " " .. args .. " 2>&1")
  end

  describe("graceful deletion", function()
    it("sets deletionTimestamp, moves generation, keeps the object until the last finalizer goes", function()
      local w = assert(client:create("widgets.example.com",
        widget("fin", { finalizers = { "example.com/cleanup", "other.io/keep" } })))
      assert.equal(1, w.metadata.generation)
      local rv0 = w.metadata.resourceVersion

      local d = assert(client:delete("widgets.example.com", "default/fin"))
      assert.is_string(d.metadata.deletionTimestamp)
      assert.equal(0, d.metadata.deletionGracePeriodSeconds)
      assert.equal(2, d.metadata.generation)
      local got = assert(client:get("widgets.example.com", "default/fin"))
      assert.same({ "example.com/cleanup", "other.io/keep" }, got.metadata.finalizers)

      -- A second DELETE changes nothing.
      local again = assert(client:delete("widgets.example.com", "default/fin"))
      assert.equal(got.metadata.resourceVersion, again.metadata.resourceVersion)
      assert.equal(2, again.metadata.generation)

      -- No new finalizer on a terminating object.
      local _, err = client:patch("widgets.example.com", "default/fin",
        { { op = "add", path = "/metadata/finalizers/-", value = "late.io/x" } }, { type = "json" })
      assert.equal(422, err.code)

      -- Our finalizer goes by a JSON patch guarded by the resourceVersion: the other stays.
      local stale = got.metadata.resourceVersion
      local p = assert(client:patch("widgets.example.com", "default/fin", {
        { op = "test", path = "/metadata/resourceVersion", value = got.metadata.resourceVersion },
        { op = "test", path = "/metadata/finalizers/0", value = "example.com/cleanup" },
        { op = "remove", path = "/metadata/finalizers/0" } }, { type = "json" }))
      assert.same({ "other.io/keep" }, p.metadata.finalizers)
      assert.equal(2, p.metadata.generation) -- metadata changes do not move it

      -- The same patch on the stale resourceVersion fails as kube-apiserver answers it.
      local none, terr = client:patch("widgets.example.com", "default/fin", {
        { op = "test", path = "/metadata/resourceVersion", value = stale },
        { op = "remove", path = "/metadata/finalizers/0" } }, { type = "json" })
      assert.is_nil(none)
      assert.equal(422, terr.code)
      assert.equal("Invalid", terr.reason)
      assert.equal("the server rejected our request due to an error in our request", terr.message)
      assert.equal("testing value /metadata/resourceVersion failed: test failed",
                   terr.status.details.causes[1].message)
      got = assert(client:get("widgets.example.com", "default/fin"))
      assert.same({ "other.io/keep" }, got.metadata.finalizers)

      -- The last finalizer removed: the object goes.
      assert(client:patch("widgets.example.com", "default/fin", { metadata = { finalizers = cjson.null } }))
      local gone, gerr = client:get("widgets.example.com", "default/fin")
      assert.is_nil(gone)
      assert.equal(404, gerr.code)
      assert.same({ "MODIFIED fin", "MODIFIED fin", "DELETED fin" }, events_after(srv, WIDGETS, rv0))
    end)

    it("adds a finalizer with a JSON patch guarded by the resourceVersion", function()
      local w = assert(client:create("widgets.example.com", widget("addfin")))
      local function add(obj, f)
        local ops = { { op = "test", path = "/metadata/resourceVersion", value = obj.metadata.resourceVersion } }
        if obj.metadata.finalizers then
          ops[2] = { op = "add", path = "/metadata/finalizers/-", value = f }
        else
          ops[2] = { op = "add", path = "/metadata/finalizers", value = { f } }
        end
        return client:patch("widgets.example.com", "default/" .. obj.metadata.name, ops, { type = "json" })
      end
      local w2 = assert(add(w, "example.com/cleanup"))
      assert.same({ "example.com/cleanup" }, w2.metadata.finalizers)
      local w3 = assert(add(w2, "other.io/keep"))
      assert.same({ "example.com/cleanup", "other.io/keep" }, w3.metadata.finalizers)
      local _, err = add(w2, "late.io/x") -- w2 is stale now
      assert.equal(422, err.code)
      -- A path that does not exist: 422 with kube-apiserver's cause.
      local _, perr = client:patch("widgets.example.com", "default/addfin",
        { { op = "remove", path = "/metadata/labels/nope" } }, { type = "json" })
      assert.equal(422, perr.code)
      assert.equal('remove operation does not apply: doc is missing path: "/metadata/labels/nope": missing value',
                   perr.status.details.causes[1].message)
      assert.equal(1, assert(client:get("widgets.example.com", "default/addfin")).metadata.generation)
    end)

    it("deletes an object without finalizers at once", function()
      local w = assert(client:create("widgets.example.com", widget("plain")))
      assert(client:delete("widgets.example.com", "default/plain"))
      assert.same({ "DELETED plain" }, events_after(srv, WIDGETS, w.metadata.resourceVersion))
    end)
  end)

  describe("garbage collection", function()
    it("deletes dependents in the background; one with another live owner only loses the reference", function()
      local owner = assert(client:create("widgets.example.com", widget("gc-owner")))
      local other = assert(client:create("widgets.example.com", widget("gc-other")))
      assert(client:create("configmaps", owned_cm("gc-dep", { owner })))
      assert(client:create("configmaps", owned_cm("gc-shared", { owner, other })))
      assert(client:create("configmaps", owned_cm("gc-fin", { owner }, { finalizers = { "x.io/f" } })))
      assert(client:delete("widgets.example.com", "default/gc-owner"))

      local _, err = client:get("configmaps", "default/gc-dep")
      assert.equal(404, err.code)
      local shared = assert(client:get("configmaps", "default/gc-shared"))
      assert.equal(1, #shared.metadata.ownerReferences)
      assert.equal(other.metadata.uid, shared.metadata.ownerReferences[1].uid)
      local fin = assert(client:get("configmaps", "default/gc-fin")) -- terminating, waits
      assert.is_string(fin.metadata.deletionTimestamp)
      assert(client:patch("configmaps", "default/gc-fin", { metadata = { finalizers = cjson.null } }))
      assert.equal(404, select(2, client:get("configmaps", "default/gc-fin")).code)
    end)

    it("orphans dependents with propagationPolicy Orphan", function()
      local owner = assert(client:create("widgets.example.com", widget("orph")))
      assert(client:create("configmaps", owned_cm("orph-dep", { owner })))
      assert(client:delete("widgets.example.com", "default/orph", { propagation_policy = "Orphan" }))
      local dep = assert(client:get("configmaps", "default/orph-dep"))
      assert.is_nil(dep.metadata.ownerReferences)
    end)

    it("deletes the owner after its dependents with propagationPolicy Foreground", function()
      local owner = assert(client:create("widgets.example.com", widget("fg")))
      assert(client:create("configmaps", owned_cm("fg-dep", { owner }, { finalizers = { "x.io/f" } })))
      local d = assert(client:delete("widgets.example.com", "default/fg",
                                     { propagation_policy = "Foreground" }))
      assert.same({ "foregroundDeletion" }, d.metadata.finalizers)
      assert.is_string(assert(client:get("configmaps", "default/fg-dep")).metadata.deletionTimestamp)
      assert(client:get("widgets.example.com", "default/fg"))
      assert(client:patch("configmaps", "default/fg-dep", { metadata = { finalizers = cjson.null } }))
      assert.equal(404, select(2, client:get("widgets.example.com", "default/fg")).code)
    end)
  end)

  describe("generation and the status subresource", function()
    it("moves generation on spec changes only; status goes through /status", function()
      local w = assert(client:create("widgets.example.com", widget("gen", { labels = { a = "1" } })))
      assert.equal(1, w.metadata.generation)
      w.metadata.labels.a = "2"
      w.status = { phase = "ignored" }
      w = assert(client:update("widgets.example.com", w))
      assert.equal(1, w.metadata.generation)      -- metadata change
      assert.is_nil(w.status)                     -- the main resource ignores status
      w.spec.size = "m"
      w = assert(client:update("widgets.example.com", w))
      assert.equal(2, w.metadata.generation)      -- spec change
      w.status = { observedGeneration = 2 }
      w.spec.size = "ignored"
      w = assert(client:update_status("widgets.example.com", w))
      assert.equal(2, w.metadata.generation)
      assert.equal("m", w.spec.size)              -- /status ignores the spec
      assert.same({ observedGeneration = 2 }, w.status)
      for _, t in ipairs{ "merge", "strategic" } do
        w = assert(client:patch_status("widgets.example.com", "default/gen",
                                       { status = { phase = t }, spec = { size = "x" } }, { type = t }))
        assert.equal(t, w.status.phase)
        assert.equal("m", w.spec.size)
      end
      w = assert(client:patch_status("widgets.example.com", "default/gen",
        { { op = "test", path = "/metadata/resourceVersion", value = w.metadata.resourceVersion },
          { op = "replace", path = "/status/phase", value = "json" } }, { type = "json" }))
      assert.equal("json", w.status.phase)
      w = assert(client:apply("widgets.example.com",
        { apiVersion = "example.com/v1", kind = "Widget", metadata = { name = "gen" },
          status = { phase = "applied" } },
        -- the patches above made "kinformer" (the User-Agent) own .status.phase: force takes it
        { field_manager = "spec", subresource = "status", force = true }))
      assert.equal("applied", w.status.phase)
      assert.equal(2, w.metadata.generation)
    end)

    it("serves the status and scale subresources of deployments", function()
      local dep = assert(client:create("deployments", {
        apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "web", namespace = "default" },
        spec = { replicas = 2, selector = { matchLabels = { app = "web" } },
                 template = { metadata = { labels = { app = "web" } } } } }))
      assert.equal(1, dep.metadata.generation)
      dep = assert(client:patch_status("deployments", "default/web", { status = { replicas = 2 } }))
      assert.equal(1, dep.metadata.generation)
      local s = assert(client:get_scale("deployments", "default/web"))
      assert.equal("Scale", s.kind)
      assert.equal("autoscaling/v1", s.apiVersion)
      assert.equal(2, s.spec.replicas)
      assert.same({ replicas = 2, selector = "app=web" }, s.status)
      s.spec.replicas = 4
      s = assert(client:update_scale("deployments", s))
      assert.equal(4, s.spec.replicas)
      dep = assert(client:get("deployments", "default/web"))
      assert.equal(4, dep.spec.replicas)
      assert.equal(2, dep.metadata.generation)
    end)

    it("serves the scale subresource the Widget CRD declares", function()
      local w = assert(client:create("widgets.example.com", widget("sc")))
      assert(client:patch_status("widgets.example.com", "default/sc",
                                 { status = { replicas = 1, selector = "app=sc" } }))
      local s = assert(client:get_scale("widgets.example.com", "default/sc"))
      assert.equal(1, s.spec.replicas)
      assert.same({ replicas = 1, selector = "app=sc" }, s.status)
      s = assert(client:patch_scale("widgets.example.com", "default/sc", { spec = { replicas = 3 } }))
      assert.equal(3, s.spec.replicas)
      w = assert(client:get("widgets.example.com", "default/sc"))
      assert.equal(3, w.spec.replicas)
      assert.equal(2, w.metadata.generation)
      local stale = kinformer.to_table(s)
      stale.metadata.resourceVersion = "1"
      local none, err = client:update_scale("widgets.example.com", stale)
      assert.is_nil(none)
      assert.equal(409, err.code)
      local out, rc = kubectl("scale widget sc --replicas=5")
      assert.equal(0, rc, out)
      assert.equal(5, assert(client:get_scale("widgets.example.com", "default/sc")).spec.replicas)
    end)
  end)

  describe("Events", function()
    it("keeps events.k8s.io/v1 and v1 Events as one set, listed by involvedObject and shown by kubectl", function()
      local w = assert(client:create("widgets.example.com", widget("ev")))
      local rv0 = w.metadata.resourceVersion
      local now = os.date("!%Y-%m-%dT%H:%M:%S.000000Z")
      local e = assert(client:create("events.events.k8s.io", {
        apiVersion = "events.k8s.io/v1", kind = "Event",
        metadata = { name = "ev.1", namespace = "default" }, eventTime = now,
        reportingController = "widget-operator", reportingInstance = "op-1", action = "Reconcile",
        reason = "Synced", note = "configmap written", type = "Normal",
        regarding = { apiVersion = "example.com/v1", kind = "Widget", name = "ev",
                      namespace = "default", uid = w.metadata.uid } }))
      -- The recorder aggregates repeats by patching the series.
      e = assert(client:patch("events.events.k8s.io", "default/ev.1",
                              { series = { count = 2, lastObservedTime = now } }))
      assert.equal(2, e.series.count)

      local list = assert(client:list("events", { namespace = "default", field_selector =
        "involvedObject.name=ev,involvedObject.kind=Widget,involvedObject.uid=" .. w.metadata.uid }))
      assert.equal(1, #list.items)
      local core = list.items[1]
      assert.equal("configmap written", core.message)
      assert.equal("widget-operator", core.reportingComponent)
      assert.equal(w.metadata.uid, core.involvedObject.uid)
      assert.equal(2, core.series.count)
      assert.equal(e.metadata.uid, core.metadata.uid)
      local none = assert(client:list("events", { namespace = "default",
                                                  field_selector = "involvedObject.name=other" }))
      assert.equal(0, #none.items)
      local by_regarding = assert(client:list("events.events.k8s.io", { namespace = "default",
        field_selector = "regarding.name=ev,reason=Synced" }))
      assert.equal(1, #by_regarding.items)

      -- A core v1 Event shows in events.k8s.io/v1, with the fields renamed.
      assert(client:create("events", { apiVersion = "v1", kind = "Event",
        metadata = { name = "ev.2", namespace = "default" }, reason = "Cleaned", message = "old file removed",
        type = "Warning", count = 1, firstTimestamp = now:sub(1, 19) .. "Z", lastTimestamp = now:sub(1, 19) .. "Z",
        source = { component = "widget-operator" },
        involvedObject = { apiVersion = "example.com/v1", kind = "Widget", name = "ev",
                           namespace = "default", uid = w.metadata.uid } }))
      local v2 = assert(client:get("events.events.k8s.io", "default/ev.2"))
      assert.equal("old file removed", v2.note)
      assert.equal("ev", v2.regarding.name)
      assert.equal(1, v2.deprecatedCount)

      -- Watches see both, each in its own version.
      assert.same({ "ADDED ev.1", "MODIFIED ev.1", "ADDED ev.2" },
                  events_after(srv, "/api/v1/namespaces/default/events", rv0))
      assert.same({ "ADDED ev.1", "MODIFIED ev.1", "ADDED ev.2" },
                  events_after(srv, "/apis/events.k8s.io/v1/namespaces/default/events", rv0))

      local out, rc = kubectl("describe widget ev")
      assert.equal(0, rc, out)
      assert.matches("Normal%s+Synced%s+%S+ %(x2 over %S+%)%s+widget%-operator%s+configmap written", out)
      assert.matches("Warning%s+Cleaned%s+%S+%s+widget%-operator%s+old file removed", out)
      out, rc = kubectl("get events")
      assert.equal(0, rc, out)
      assert.matches("LAST SEEN%s+TYPE%s+REASON%s+OBJECT%s+MESSAGE", out)
      assert.matches("Normal%s+Synced%s+widget/ev%s+configmap written", out)

      assert(client:delete("events.events.k8s.io", "default/ev.1"))
      assert.equal(404, select(2, client:get("events", "default/ev.1")).code)
    end)
  end)
end)
