-- kinformer.manager and its controllers against one shared fake API server: sources (owns,
-- watches, deletes), predicates, results and backoff (a fake clock), finalizers, Events,
-- misuse; then replicas as child processes (leader election, SIGTERM during a reconcile).
local kinformer = require "kinformer"
local clock = require "kinformer.clock"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"
local proc = require "support.proc"
local socket = require "socket"

local srv, client
local ns_seq = 0

-- A fresh namespace name per test: tests share the server, never their objects.
local function new_ns()
  ns_seq = ns_seq + 1
  return "mgr-" .. ns_seq
end

local function cm(ns, name, fields)
  local o = { apiVersion = "v1", kind = "ConfigMap",
              metadata = { namespace = ns, name = name }, data = { v = "1" } }
  for k, v in pairs(fields or {}) do o.metadata[k] = v end
  return o
end

-- Steps mgr until cond() is true or seconds passed -> whether cond became true.
local function drive(mgr, seconds, cond)
  local deadline = core.now() + seconds
  while true do
    if cond and cond() then return true end
    local w = assert(mgr:step())
    if core.now() >= deadline then return cond == nil end
    core.wait(mgr:fds(), math.min(w, 0.02))
  end
end

-- A manager with one controller over configmaps of ns, synced; returns mgr, the calls seen.
local function manager_for(ns, spec, mopts)
  local mgr = kinformer.manager(mopts or { client = client })
  local calls = {}
  spec.name = spec.name or "cms"
  spec.resource = spec.resource or "configmaps"
  spec.namespace = ns
  local user = spec.reconcile
  spec.reconcile = function(req, ctx)
    calls[#calls + 1] = req.key
    if user then return user(req, ctx) end
  end
  local c = mgr:controller(spec)
  assert.truthy(drive(mgr, 10, function() return mgr:synced() end))
  return mgr, calls, c
end

local function count(list, v)
  local n = 0
  for _, x in ipairs(list) do if x == v then n = n + 1 end end
  return n
end

describe("kinformer.manager", function()
  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
  end)
  teardown(function() if srv then srv:stop() end end)

  it("reconciles each primary, and an owned object's change reconciles its owner", function()
    local ns = new_ns()
    local parent = assert(client:create("configmaps", cm(ns, "parent")))
    assert(client:create("configmaps", cm(ns, "other")))
    local mgr, calls = manager_for(ns, { owns = { "secrets" } })
    finally(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return #calls >= 2 end))
    drive(mgr, 0.2)
    assert.equals(1, count(calls, ns .. "/parent"))
    assert.equals(1, count(calls, ns .. "/other"))
    -- A Secret whose controller ownerReference names the ConfigMap: its changes reconcile it.
    local secret = assert(client:create("secrets", { apiVersion = "v1", kind = "Secret",
      metadata = { namespace = ns, name = "child", ownerReferences = { {
        apiVersion = "v1", kind = "ConfigMap", name = "parent", uid = parent.metadata.uid,
        controller = true } } }, data = {} }))
    assert.truthy(drive(mgr, 5, function() return count(calls, ns .. "/parent") >= 2 end))
    -- Not a controller reference: ignored.
    assert(client:create("secrets", { apiVersion = "v1", kind = "Secret",
      metadata = { namespace = ns, name = "loose", ownerReferences = { {
        apiVersion = "v1", kind = "ConfigMap", name = "other", uid = "x" } } }, data = {} }))
    secret.data = { k = "dg==" }
    assert(client:update("secrets", secret))
    assert.truthy(drive(mgr, 5, function() return count(calls, ns .. "/parent") >= 3 end))
    assert(client:delete("secrets", ns .. "/child"))
    assert.truthy(drive(mgr, 5, function() return count(calls, ns .. "/parent") >= 4 end))
    drive(mgr, 0.3)
    assert.equals(1, count(calls, ns .. "/other"))
    assert.equals(4, count(calls, ns .. "/parent"))
  end)

  it("maps watched objects through the user's function; a deleted primary still reconciles",
    function()
    local ns = new_ns()
    assert(client:create("configmaps", cm(ns, "target")))
    local seen = {}
    local mgr, calls = manager_for(ns, {
      watches = { { resource = "secrets", namespace = ns, map = function(obj)
        return { ns .. "/" .. (obj.metadata.labels or {}).target }
      end } },
      reconcile = function(req, ctx) seen[#seen + 1] = ctx:get() ~= nil end,
    })
    finally(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return #calls >= 1 end))
    assert(client:create("secrets", { apiVersion = "v1", kind = "Secret",
      metadata = { namespace = ns, name = "s", labels = { target = "target" } } }))
    assert.truthy(drive(mgr, 5, function() return #calls >= 2 end))
    assert.equals(ns .. "/target", calls[2])
    assert(client:delete("configmaps", ns .. "/target"))
    assert.truthy(drive(mgr, 5, function() return #calls >= 3 end))
    assert.same({ true, true, false }, seen)
  end)

  it("filters events with predicates, per controller and per source", function()
    local ns = new_ns()
    local obj = assert(client:create("configmaps", cm(ns, "a", { labels = { x = "1" } })))
    local mgr, calls = manager_for(ns, { predicates = { kinformer.predicates.labels_changed } })
    finally(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return #calls >= 1 end))
    obj.metadata.annotations = { note = "n" }
    obj = assert(client:update("configmaps", obj))
    obj.data = { v = "2" }
    obj = assert(client:update("configmaps", obj))
    drive(mgr, 0.5)
    assert.equals(1, #calls) -- neither changed a label
    obj.metadata.labels.x = "2"
    assert(client:update("configmaps", obj))
    assert.truthy(drive(mgr, 5, function() return #calls >= 2 end))
    assert.is_true(mgr:status().controllers.cms.filtered >= 2)

    -- The default: any new resourceVersion (a resync or relist without change is dropped).
    local ev = { type = "update", object = { metadata = { resourceVersion = "5" } },
                 old = { metadata = { resourceVersion = "5" } } }
    assert.is_false(kinformer.predicates.resource_version_changed(ev))
    ev.object.metadata.generation, ev.old.metadata.generation = 2, 2
    assert.is_false(kinformer.predicates.generation_changed(ev))
    ev.object.metadata.generation = 3
    assert.is_true(kinformer.predicates.generation_changed(ev))
    assert.is_true(kinformer.predicates.any(kinformer.predicates.labels_changed,
      kinformer.predicates.generation_changed)(ev))
    assert.is_false(kinformer.predicates.negate(kinformer.predicates.generation_changed)(ev))
  end)

  it("retries failures with the work queue's backoff (fake clock), forgets on success",
    function()
    local ns = new_ns()
    assert(client:create("configmaps", cm(ns, "flaky")))
    local t = 1000
    local real_now = clock.now
    clock.now = function() return t end
    finally(function() clock.now = real_now end)
    local times, fail_n = {}, 4
    local mgr, calls = manager_for(ns, { reconcile = function()
      times[#times + 1] = t
      if #times <= fail_n then
        if #times % 2 == 0 then error("boom " .. #times) end
        return nil, "failed " .. #times
      end
      if #times == fail_n + 1 then return 2.5 end -- requeue after 2.5 s
    end })
    finally(function() mgr:stop() end)
    local function advance_until(n, limit)
      local start = t
      while #calls < n and t - start < limit do
        mgr:step()
        t = t + 0.001
      end
    end
    advance_until(1, 1)
    assert.equals(1, #calls)
    advance_until(5, 10)
    assert.equals(5, #calls)
    -- 5 ms, 10 ms, 20 ms, 40 ms between the attempts (within the fake clock's 1 ms steps)
    for i, want in ipairs{ 0.005, 0.010, 0.020, 0.040 } do
      assert.near(want, times[i + 1] - times[i], 0.0015)
    end
    advance_until(6, 10)
    assert.near(2.5, times[6] - times[5], 0.0015)
    local st = mgr:status().controllers.cms
    assert.equals(4, st.errors)
    assert.equals(0, st.queue.waiting + st.queue.length)
    -- forgotten after the success: the next failure starts at 5 ms again
    assert.equals(0, mgr.controllers.cms.queue:num_requeues(ns .. "/flaky"))
  end)
end)
