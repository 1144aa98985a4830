-- kinformer.manager and its controllers against one shared fake API server: sources (owns,
-- watches, deletes), predicates, results and backoff (a fake clock), finalizers, Events,
-- misuse; then replicas as child processes (leader election, SIGTERM during a reconcile).
local kinformer = require "kinformer"
local clock = require "kinformer.clock"
local fake = require "support.fake_apiserver"
local proc = require "support.proc"
local socket = require "socket"

local drive_mod = require "support.drive"

local srv, client
local new_ns = drive_mod.namespaces("mgr-") -- tests share the server, never their objects
local drive = drive_mod.steps

local function cm(ns, name, fields)
  local o = { apiVersion = "v1", kind = "ConfigMap",
              metadata = { namespace = ns, name = name }, data = { v = "1" } }
  for k, v in pairs(fields or {}) do o.metadata[k] = v end
  return o
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

-- Clean-ups of the running test, run after it in reverse order, pass or fail (busted keeps
-- only one finally per test).
local deferred = {}
local function defer(fn) deferred[#deferred + 1] = fn end
local function run_deferred()
  for i = #deferred, 1, -1 do pcall(deferred[i]) end
  deferred = {}
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
  teardown(function()
    kinformer.set_logger(nil, "warn")
    if srv then srv:stop() end
  end)
  -- Reconciles that fail on purpose log errors: kept off the test output.
  before_each(function() kinformer.set_logger(function() end) end)
  after_each(run_deferred)

  it("reconciles each primary, and an owned object's change reconciles its owner", function()
    local ns = new_ns()
    local parent = assert(client:create("configmaps", cm(ns, "parent")))
    assert(client:create("configmaps", cm(ns, "other")))
    local mgr, calls = manager_for(ns, { owns = { "secrets" } })
    defer(function() mgr:stop() end)
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
    defer(function() mgr:stop() end)
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
    defer(function() mgr:stop() end)
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
    defer(function() clock.now = real_now end)
    local times, fail_n = {}, 4
    local mgr, calls = manager_for(ns, { reconcile = function()
      times[#times + 1] = t
      if #times <= fail_n then
        if #times % 2 == 0 then error("boom " .. #times) end
        return nil, "failed " .. #times
      end
      if #times == fail_n + 1 then return 2.5 end -- requeue after 2.5 s
    end })
    defer(function() mgr:stop() end)
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

  it("adds the finalizer first, finalizes until it succeeds, removes only its own", function()
    local ns = new_ns()
    local mgr, calls, c
    local finalized, fail_first = 0, 2
    mgr, calls, c = manager_for(ns, {
      finalizer = "example.com/cleanup",
      finalize = function(obj, ctx)
        finalized = finalized + 1
        assert.equals(ns .. "/doomed", ctx.key)
        if finalized == 1 then error("cleanup failed") end
        if finalized <= fail_first then return nil, "still failing" end
        -- Another event for the key while the cache still holds the copy with our finalizer:
        -- the manager must not finalize again.
        c.queue:add(ctx.key)
      end,
      reconcile = function(req, ctx)
        local obj = ctx:get()
        if obj then -- live: the finalizer is there before the first reconcile
          local fins = obj.metadata.finalizers or {}
          assert.truthy(fins[1] == "example.com/cleanup" or fins[2] == "example.com/cleanup")
        end
      end,
    })
    defer(function() mgr:stop() end)
    local obj = assert(client:create("configmaps", cm(ns, "doomed",
      { finalizers = { "other.io/keep" } })))
    assert.truthy(drive(mgr, 5, function() return #calls >= 1 end))
    obj = assert(client:get("configmaps", ns .. "/doomed"))
    assert.same({ "other.io/keep", "example.com/cleanup" }, obj.metadata.finalizers)
    -- Deleted while finalizers remain: the server only sets deletionTimestamp (graceful
    -- deletion) and the manager finalizes.
    assert(client:delete("configmaps", ns .. "/doomed"))
    assert.truthy(drive(mgr, 5, function() return finalized >= 3 end))
    drive(mgr, 0.5)
    assert.equals(3, finalized)
    obj = assert(client:get("configmaps", ns .. "/doomed")) -- the other party's finalizer keeps it
    assert.same({ "other.io/keep" }, obj.metadata.finalizers)
    assert.is_string(obj.metadata.deletionTimestamp)
    -- The other party removes its finalizer: the object goes, and its key is reconciled once
    -- more (ctx:get() is nil then).
    local n = #calls
    obj.metadata.finalizers = {}
    assert(client:update("configmaps", obj))
    assert.truthy(drive(mgr, 5, function() return #calls > n end))
    assert.is_nil(client:get("configmaps", ns .. "/doomed"))
    drive(mgr, 0.3)
    assert.equals(3, finalized)
    local st = mgr:status().controllers.cms
    assert.equals(2, st.errors)
  end)

  it("a primary that leaves the label selection is finalized and released", function()
    local ns = new_ns()
    local finalized = {}
    local mgr, calls = manager_for(ns, {
      label_selector = "app=web",
      finalizer = "example.com/cleanup",
      finalize = function(obj) finalized[#finalized + 1] = obj.metadata.name end,
    })
    defer(function() mgr:stop() end)
    assert(client:create("configmaps", cm(ns, "w1", { labels = { app = "web" } })))
    assert(client:create("configmaps", cm(ns, "w2", { labels = { app = "web" } })))
    assert.truthy(drive(mgr, 5, function() return #calls >= 2 end))
    local obj = assert(client:get("configmaps", ns .. "/w1"))
    assert.same({ "example.com/cleanup" }, obj.metadata.finalizers)
    -- w1 loses its label: out of the selection, so the finalizer must not stay behind
    assert(client:patch("configmaps", ns .. "/w1", { metadata = { labels = { app = "other" } } }))
    assert.truthy(drive(mgr, 5, function() return #finalized >= 1 end))
    assert.same({ "w1" }, finalized)
    assert.truthy(drive(mgr, 5, function()
      local o = client:get("configmaps", ns .. "/w1")
      return o and (o.metadata.finalizers == nil or #o.metadata.finalizers == 0)
    end))
    -- so a DELETE now completes at once
    assert(client:delete("configmaps", ns .. "/w1"))
    assert.is_nil(client:get("configmaps", ns .. "/w1"))
    -- w2, deleted while selected, is finalized as usual
    assert(client:delete("configmaps", ns .. "/w2"))
    assert.truthy(drive(mgr, 5, function() return #finalized >= 2 end))
    assert.truthy(drive(mgr, 5, function() return client:get("configmaps", ns .. "/w2") == nil end))
    drive(mgr, 0.3)
    assert.same({ "w1", "w2" }, finalized)
  end)

  it("aggregates repeated Events into one with a count, written off the reconcile path",
    function()
    local ns = new_ns()
    local obj = assert(client:create("configmaps", cm(ns, "noisy")))
    local writes_in_reconcile, n = 0, 0
    -- Event requests the server has seen (the informers' own requests go on meanwhile).
    local function event_requests()
      local k = 0
      for _, r in ipairs(srv:requests()) do
        if r.path:find("/events", 1, true) then k = k + 1 end
      end
      return k
    end
    local mgr, calls = manager_for(ns, { reconcile = function(req, ctx)
      n = n + 1
      local before = event_requests()
      ctx:event(ctx:get(), "Normal", "Synced", "all good")
      if n == 1 then ctx:event(ctx:get(), "Warning", "Odd", "something odd") end
      writes_in_reconcile = writes_in_reconcile + (event_requests() - before)
      if n < 3 then return 0.01 end
    end })
    defer(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return #calls >= 3 end))
    assert.truthy(drive(mgr, 5, function() return mgr:recorder():pending() == 0 end))
    assert.equals(0, writes_in_reconcile)
    local evs = assert(client:list("events", { namespace = ns })).items
    table.sort(evs, function(a, b) return a.reason > b.reason end)
    assert.equals(2, #evs)
    assert.equals("Synced", evs[1].reason)
    assert.equals(3, evs[1].count)
    assert.equals("Normal", evs[1].type)
    assert.equals(1, evs[2].count)
    assert.equals("Warning", evs[2].type)
    local inv = evs[1].involvedObject
    assert.same({ "ConfigMap", "v1", ns, "noisy", obj.metadata.uid },
      { inv.kind, inv.apiVersion, inv.namespace, inv.name, inv.uid })
    assert.truthy(inv.resourceVersion)
    assert.equals("kinformer", evs[1].source.component)
    -- as kubectl describe shows them
    local kc = fake.kubeconfig(srv, {})
    local p = assert(io.popen(("kubectl --kubeconfig %s -n %s describe configmap noisy 2>&1")
      :format(proc.quote(kc), ns)))
    local described = p:read("a")
    p:close()
    os.remove(kc)
    assert.matches("Normal%s+Synced%s+%S+ %(x3 over %S+%)%s+kinformer%s+all good", described)
    assert.matches("Warning%s+Odd%s+%S+%s+kinformer%s+something odd", described)
    local st = mgr:recorder():status()
    assert.equals(4, st.recorded)
    assert.equals(2, st.aggregated)
  end)

  it("rate-limits Events per object and drops them when the server is unreachable", function()
    local t = 0
    local real_now = clock.now
    clock.now = function() return t end
    defer(function() clock.now = real_now end)
    local rec = kinformer.events.recorder{ client = client, burst = 3, refill = 10 }
    local obj = { apiVersion = "v1", kind = "ConfigMap",
                  metadata = { namespace = "x", name = "o", uid = "u" } }
    for i = 1, 5 do rec:record(obj, "Normal", "R" .. i, "m") end
    assert.equals(2, rec:status().rate_limited)
    t = 10
    assert.is_true(rec:record(obj, "Normal", "R6", "m"))
    assert.is_false(rec:record(obj, "Normal", "R7", "m"))
    -- Unreachable: bounded attempts, then dropped; record never blocks.
    local dead = assert(kinformer.client{ server = "http://127.0.0.1:9" })
    local rec2 = kinformer.events.recorder{ client = dead, max_attempts = 2, max_queue = 2 }
    for i = 1, 3 do rec2:record(obj, "Normal", "D" .. i, "m") end
    assert.equals(1, rec2:status().dropped) -- the queue was full
    for _ = 1, 4 do
      rec2:flush()
      t = t + 2
    end
    local st = rec2:status()
    assert.equals(0, st.pending)
    assert.equals(3, st.dropped)
    assert.equals(0, st.written)
  end)

  it("retries a 409 Conflict without error-level noise", function()
    local ns = new_ns()
    local lines = {}
    kinformer.set_logger(function(level, msg) lines[#lines + 1] = level .. " " .. msg end,
      "debug")
    local obj = assert(client:create("configmaps", cm(ns, "c")))
    local stale = kinformer.to_table(obj)
    obj.data = { v = "2" }
    assert(client:update("configmaps", obj))
    local n = 0
    local mgr, calls = manager_for(ns, { reconcile = function()
      n = n + 1
      if n == 1 then return client:update("configmaps", stale) end
    end })
    defer(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return #calls >= 2 end))
    local st = mgr:status().controllers.cms
    assert.equals(1, st.conflicts)
    assert.equals(0, st.errors)
    local info
    for _, l in ipairs(lines) do
      assert.is_nil(l:match("^error .*409"), l)
      info = info or l:match("^info controller cms: .*conflict")
    end
    assert.truthy(info)
  end)

  it("with leader election reconciles only while leading; losing the lease stops at once",
    function()
    local ns = new_ns()
    assert(client:create("configmaps", cm(ns, "tick")))
    local mgr
    local n, not_leading = 0, 0
    mgr = kinformer.manager{ client = client, leader_election = { lease_name = "loss",
      namespace = ns, identity = "me", lease_duration = 2, renew_deadline = 1.5,
      retry_period = 0.25 } }
    mgr:controller{ name = "tick", resource = "configmaps", namespace = ns,
      reconcile = function()
        n = n + 1
        if not mgr:elector():is_leader() then not_leading = not_leading + 1 end
        return 0.02
      end }
    defer(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return n >= 5 end))
    assert.is_true(mgr:is_leader())
    -- The Lease cannot be renewed: after renew_deadline it stops leading, and reconciling.
    srv:fault{ path = "/leases/", times = -1, action = { status = 500 } }
    defer(function() srv:clear_faults() end)
    assert.truthy(drive(mgr, 4, function() return not mgr:is_leader() end))
    local at_loss = n
    drive(mgr, 0.5)
    assert.equals(at_loss, n)
    assert.equals(0, not_leading)
    -- Renewals work again: it leads again (the lease is still its own) and goes on.
    srv:clear_faults()
    assert.truthy(drive(mgr, 5, function() return n > at_loss + 3 end))
    assert.equals(0, not_leading)
  end)

  it("serves /metrics (promtool-clean), /healthz and /readyz at metrics_address", function()
    local ns = new_ns()
    assert(client:create("configmaps", cm(ns, "m1")))
    assert(client:create("configmaps", cm(ns, "m2")))
    local mgr = kinformer.manager{ client = client, metrics_address = "127.0.0.1:0" }
    local n = 0
    mgr:controller{ name = "met", resource = "configmaps", namespace = ns,
      reconcile = function(req, ctx)
        n = n + 1
        assert(ctx.client:get("configmaps", req.key)) -- a REST call, for its metrics
        if req.name == "m2" and n <= 2 then error("x") end
      end }
    defer(function() mgr:stop() end)
    assert.truthy(drive(mgr, 5, function() return n >= 3 end))
    local addr = mgr:metrics_address()
    assert.matches("^127%.0%.0%.1:%d+$", addr)
    -- curl runs in the background: the manager answers it from its own loop, between steps.
    local function fetch(path)
      local out = os.tmpname()
      os.execute(("curl -s -o '%s' -w '%%{http_code}' 'http://%s%s' > '%s.code' 2>/dev/null &")
        :format(out, addr, path, out))
      local code
      assert.truthy(drive(mgr, 5, function()
        local f = io.open(out .. ".code")
        if f then code = f:read("a") f:close() end
        return code ~= nil and #code == 3
      end), "no answer for " .. path)
      local f = assert(io.open(out))
      local body = f:read("a")
      f:close()
      os.remove(out)
      os.remove(out .. ".code")
      return tonumber(code), body
    end
    local code, text = fetch("/metrics")
    assert.equals(200, code)
    assert.truthy(text:find('controller_runtime_reconcile_total{controller="met",result="success"} 2',
      1, true), text)
    assert.truthy(text:find('controller_runtime_reconcile_total{controller="met",result="error"} 1',
      1, true))
    assert.truthy(text:find('controller_runtime_reconcile_errors_total{controller="met"} 1', 1, true))
    assert.truthy(text:find('controller_runtime_reconcile_time_seconds_count{controller="met"} 3',
      1, true))
    assert.truthy(text:find('\nworkqueue_adds_total{controller="met",name="met"}', 1, true), text)
    assert.truthy(text:find("\nkinformer_informer_synced{", 1, true), text)
    assert.truthy(text:find("\nrest_client_requests_total{", 1, true), text)
    local file = os.tmpname()
    local f = assert(io.open(file, "w"))
    f:write(text)
    f:close()
    local p = assert(io.popen("promtool check metrics < '" .. file .. "' 2>&1; echo \"exit=$?\""))
    local out = p:read("a")
    p:close()
    os.remove(file)
    assert.matches("exit=0%s*$", out)
    assert.equals(200, (fetch("/healthz")))
    assert.equals(200, (fetch("/readyz")))
  end)

  it("raises misuse at the caller's line; errors in user code never stop it", function()
    local mgr = kinformer.manager{ client = client }
    local ok, err = pcall(function() mgr:controller{ name = "x", reconcile = print } end)
    assert.is_false(ok)
    assert.matches("manager_spec%.lua:%d+: bad argument #1 to 'controller' %(x: resource name", err)
    ok, err = pcall(function() mgr:controller{ name = "x", resource = "configmaps" } end)
    assert.matches("manager_spec%.lua:%d+: .*'reconcile' %(function%) required", err)
    ok, err = pcall(function() mgr:controller{ name = "x", resource = "configmaps",
      reconcile = print, finalizer = "example.com/f" } end)
    assert.matches("manager_spec%.lua:%d+: .*'finalize' required", err)
    ok, err = pcall(function() mgr:controller{ name = "x", resource = "nosuchthings",
      reconcile = print } end)
    assert.matches("manager_spec%.lua:%d+: controller x: unknown resource", err)
    ok, err = pcall(function() kinformer.manager{ client = client, bogus = 1 } end)
    assert.matches("manager_spec%.lua:%d+: .*unknown option 'bogus'", err)
    ok, err = pcall(function() mgr:run{ timeout = -1 } end)
    assert.matches("manager_spec%.lua:%d+: .*timeout", err)

    local ns = new_ns()
    assert(client:create("configmaps", cm(ns, "p")))
    assert(client:create("secrets", { apiVersion = "v1", kind = "Secret",
      metadata = { namespace = ns, name = "s" } }))
    local mgr2, calls = manager_for(ns, {
      predicates = { function(ev)
        if ev.object.kind == "Secret" and ev.type == "update" then error("bad predicate") end
        return true
      end },
      watches = { { resource = "secrets", namespace = ns, map = function() error("bad map") end } },
      reconcile = function() error({ "not even a string" }) end,
    })
    defer(function() mgr2:stop() end)
    assert.truthy(drive(mgr2, 5, function() return #calls >= 2 end)) -- retried after the error
    local st = mgr2:status().controllers.cms
    assert.is_true(st.source_errors >= 1)
    assert.is_true(st.errors >= 2)
    assert.equals("stopped", mgr2:run{ timeout = 0.1 } == "timeout" and "stopped" or "?")
  end)
end)

-- ---- replicas in child processes ----

local replica = require "support.replica"

local function start_child(url, id, ns, mode)
  local c = replica.start("spec/support/manager_child.lua", { url, id, ns, mode })
  defer(function() c:close() end)
  return c
end

describe("kinformer.manager replicas", function()
  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
  end)
  teardown(function() if srv then srv:stop() end end)
  after_each(run_deferred)

  it("only the leader reconciles: no two replicas ever reconcile at the same time", function()
    local ns = new_ns()
    for i = 1, 3 do assert(client:create("configmaps", cm(ns, "c" .. i))) end
    local a = start_child(srv.url, "a", ns, "busy")
    assert.truthy(a:wait_for("leading"), a:output())
    local b = start_child(srv.url, "b", ns, "busy")
    socket.sleep(1)
    assert.equals(0, a:signal("TERM"))
    assert.matches("reason SIGTERM", a:output())
    assert.truthy(b:wait_for("leading", 3), b:output()) -- the lease was released: at once
    socket.sleep(0.5)
    -- Each replica's reconciles, from the request log: [begin, end] intervals.
    local spans, open = {}, {}
    for _, r in ipairs(srv:requests()) do
      local who, what = r.path:match("/namespaces/" .. ns:gsub("%-", "%%-")
        .. "/configmaps/marker%.(%a+)%.(%a+)$")
      if what == "begin" then open[who] = r.time end
      if what == "end" and open[who] then
        spans[#spans + 1] = { who = who, b = open[who], e = r.time }
        open[who] = nil
      end
    end
    local by = {}
    for _, s in ipairs(spans) do by[s.who] = (by[s.who] or 0) + 1 end
    assert.is_true((by.a or 0) >= 5 and (by.b or 0) >= 5,
      ("reconciles: a %d, b %d"):format(by.a or 0, by.b or 0))
    for i, x in ipairs(spans) do
      for j = i + 1, #spans do
        local y = spans[j]
        if x.who ~= y.who then
          assert.is_true(x.e <= y.b or y.e <= x.b, ("%s [%f, %f] overlaps %s [%f, %f]"):format(
            x.who, x.b, x.e, y.who, y.b, y.e))
        end
      end
    end
    -- and a stopped for good before b began
    local last_a, first_b = 0, math.huge
    for _, s in ipairs(spans) do
      if s.who == "a" then last_a = math.max(last_a, s.e) else first_b = math.min(first_b, s.b) end
    end
    assert.is_true(last_a <= first_b)
  end)

  it("SIGTERM during a reconcile: it is cancelled at its next call, nothing else starts, the " ..
     "lease is released",
    function()
    local ns = new_ns()
    for i = 1, 3 do assert(client:create("configmaps", cm(ns, "c" .. i))) end
    local a = start_child(srv.url, "slow", ns, "slow")
    assert.truthy(a:wait_for("begin "), a:output())
    assert.equals(0, a:signal("TERM"))
    local out = a:output()
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.same({ "leading", "begin", "end", "reason" },
      { lines[1], (lines[2] or ""):match("^%a+"), (lines[3] or ""):match("^%a+"),
        (lines[4] or ""):match("^%a+") }, out)
    assert.equals(lines[2]:sub(7), lines[3]:sub(5))
    assert.equals("reason SIGTERM", lines[4])
    assert.equals(4, #lines, out)
    local code, lease = srv:request("GET", "/apis/coordination.k8s.io/v1/namespaces/" .. ns
      .. "/leases/mgr-spec")
    assert.equals(200, code)
    assert.equals("", lease.spec.holderIdentity)
  end)
end)
