-- kinformer.manager's reconciles as tasks against the fake API server: N at once over
-- non-blocking calls and never one key twice, keys from real changes ahead of the initial list,
-- read-your-own-writes (the cache waited for, or the server read), delayed keys on time, and
-- the caches a controller reaches through ctx and the manager.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"

local drive_mod = require "support.drive"

local srv, client
local new_ns = drive_mod.namespaces("conc-")
local drive = drive_mod.steps

local function cms(ns, n, prefix)
  local items = {}
  for i = 1, n do
    items[i] = { apiVersion = "v1", kind = "ConfigMap",
                 metadata = { namespace = ns, name = (prefix or "c") .. i }, data = { v = "1" } }
  end
  srv:objects(items, "configmaps")
end

describe("kinformer.manager concurrency", function()
  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
  end)
  teardown(function()
    kinformer.set_logger(nil, "warn")
    if srv then srv:stop() end
  end)
  before_each(function() kinformer.set_logger(function() end) end)
  after_each(function() srv:clear_faults() end)

  it("runs up to max_concurrent_reconciles at once over stalled writes, never one key twice",
    function()
    local ns = new_ns()
    cms(ns, 12)
    srv:fault{ method = "PATCH", path = "/namespaces/" .. ns .. "/configmaps/", times = -1,
               action = { type = "stall", seconds = 0.3 } }
    local mgr = kinformer.manager{ client = client }
    local active, by_key, max_active, twice, done = 0, {}, 0, 0, {}
    mgr:controller{ name = "conc", resource = "configmaps", namespace = ns,
      max_concurrent_reconciles = 4,
      reconcile = function(req, ctx)
        active = active + 1
        by_key[req.key] = (by_key[req.key] or 0) + 1
        if by_key[req.key] > 1 then twice = twice + 1 end
        if active > max_active then max_active = active end
        local obj = ctx:get()
        local ok, err = ctx.client:patch("configmaps", req.key, { metadata = { annotations = {
          seen = obj.data.v } } })
        active = active - 1
        by_key[req.key] = by_key[req.key] - 1
        if not ok then return nil, err end
        done[req.key] = obj.data.v
      end }
    local t0 = core.now()
    local n = function() local k = 0 for _ in pairs(done) do k = k + 1 end return k end
    assert.truthy(drive(mgr, 10, function() return n() >= 6 end))
    srv:modify("configmaps", 12, { namespace = ns }) -- every key again, many while processing
    assert.truthy(drive(mgr, 20, function()
      return n() == 12 and active == 0 and mgr:status().controllers.conc.queue.depth == 0
    end))
    local took = core.now() - t0
    assert.equals(4, max_active)
    assert.equals(0, twice)
    assert.is_true(took < 12 * 2 * 0.3, "took " .. took .. " s: not concurrent")
    local st = mgr:status().controllers.conc
    assert.equals(4, st.max_concurrent_reconciles)
    assert.equals(0, st.errors)
    mgr:stop()
  end)

  it("a new object's reconcile starts ahead of 10,000 queued initial keys", function()
    local ns = new_ns()
    cms(ns, 10000)
    -- every reconcile waits 50 ms on the server: the initial keys stay queued
    srv:fault{ method = "GET", path = "/configmaps/slow$", times = -1,
               action = { type = "stall", seconds = 0.05 } }
    local mgr = kinformer.manager{ client = client }
    local order = {}
    mgr:controller{ name = "prio", resource = "configmaps", namespace = ns,
      max_concurrent_reconciles = 2,
      reconcile = function(req, ctx)
        order[#order + 1] = { key = req.key, t = core.now() }
        ctx.client:get("configmaps", ns .. "/slow")
      end }
    assert.truthy(drive(mgr, 30, function() return #order >= 10 end))
    local before = #order
    local t0 = core.now()
    assert(client:create("configmaps", { metadata = { name = "fresh", namespace = ns } }))
    local at
    assert.truthy(drive(mgr, 5, function()
      for i = before + 1, #order do
        if order[i].key == ns .. "/fresh" then at = i return true end
      end
    end))
    local waited = order[at].t - t0
    -- started at most the reconciles already running, none queued before it
    assert.is_true(at - before <= 3, ("%d reconciles went first"):format(at - before - 1))
    assert.is_true(waited < 0.5, "started after " .. waited .. " s")
    local q = mgr:status().controllers.prio.queue
    assert.is_true(q.depth > 9000)
    mgr:stop()
  end)

  local function counter_manager(ns, stall)
    assert(client:create("configmaps", { metadata = { name = "k", namespace = ns,
      annotations = { seen = "1", count = "1" } }, data = { v = "1" } }))
    -- the watch after its first event holds the next ones for `stall` seconds
    srv:fault{ watch = true, path = "/namespaces/" .. ns .. "/configmaps$", after_events = 1,
               action = { type = "stall", seconds = stall } }
    local mgr = kinformer.manager{ client = client }
    local runs = 0
    mgr:controller{ name = "count", resource = "configmaps", namespace = ns,
      reconcile = function(req, ctx)
        runs = runs + 1
        local obj = ctx:get()
        local a = obj.metadata.annotations
        if a.seen ~= obj.data.v then -- one increment per change of data.v
          local ok, err = ctx.client:patch("configmaps", req.key, { metadata = { annotations = {
            seen = obj.data.v, count = tostring(tonumber(a.count) + 1) } } })
          if not ok then return nil, err end
        end
        return 0.01 -- look again soon: before the watch brought the write back
      end }
    assert.truthy(drive(mgr, 10, function() return mgr:synced() and runs > 0 end))
    return mgr, function() return runs end
  end

  it("read-your-own-writes: a reconcile after its own write waits for the cache", function()
    local ns = new_ns()
    local mgr, runs = counter_manager(ns, 1)
    assert(client:patch("configmaps", ns .. "/k", { data = { v = "2" } })) -- event 1: delivered
    local r0 = runs()
    assert.truthy(drive(mgr, 5, function() return runs() > r0 + 20 end))
    local obj = assert(client:get("configmaps", ns .. "/k"))
    assert.equals("2", obj.metadata.annotations.count)
    local st = mgr:status()
    assert.is_true(st.stale_waits >= 1)
    assert.equals(0, st.fresh_reads)
    mgr:stop()
  end)

  it("read-your-own-writes: a cache later than the timeout gives way to a fresh read",
    function()
    local ns = new_ns()
    local mgr, runs = counter_manager(ns, 3.5)
    assert(client:patch("configmaps", ns .. "/k", { data = { v = "2" } }))
    local r0 = runs()
    assert.truthy(drive(mgr, 8, function() return runs() > r0 + 20 end))
    local obj = assert(client:get("configmaps", ns .. "/k"))
    assert.equals("2", obj.metadata.annotations.count)
    assert.is_true(mgr:status().fresh_reads >= 1)
    mgr:stop()
  end)

  it("starts a requeue-after and a backoff within milliseconds of their time", function()
    local ns = new_ns()
    cms(ns, 1)
    local mgr = kinformer.manager{ client = client }
    local times = {}
    mgr:controller{ name = "timing", resource = "configmaps", namespace = ns,
      reconcile = function()
        times[#times + 1] = core.now()
        if #times <= 2 then return nil, "fails" end -- backoff: 5 ms, then 10 ms
        if #times <= 4 then return 0.05 end
      end }
    assert.truthy(drive(mgr, 5, function() return #times >= 5 end))
    local gaps = {}
    for i = 2, #times do gaps[i - 1] = times[i] - times[i - 1] end
    local want = { 0.005, 0.01, 0.05, 0.05 }
    for i, w in ipairs(want) do
      assert.is_true(gaps[i] >= w - 0.001 and gaps[i] < w + 0.015,
        ("gap %d: %.4f s, want %.3f"):format(i, gaps[i], w))
    end
    mgr:stop()
  end)

  it("hands a controller the caches it runs; a cache nobody starts is named in a warning",
    function()
    local ns = new_ns()
    cms(ns, 2)
    assert(client:create("secrets", { metadata = { name = "s1", namespace = ns },
                                      data = { k = "dg==" } }))
    local logs = {}
    kinformer.set_logger(function(level, msg) logs[#logs + 1] = level .. " " .. msg end)
    local mgr = kinformer.manager{ client = client }
    local seen = {}
    mgr:controller{ name = "caches", resource = "configmaps", namespace = ns,
      reconcile = function(req, ctx)
        local s = ctx:get("secrets", ns .. "/s1")
        seen[req.key] = { secret = s and s.metadata.name, n = #ctx:list("configmaps") }
      end }
    assert.truthy(drive(mgr, 10, function() return seen[ns .. "/c2"] ~= nil end))
    assert.same({ secret = "s1", n = 2 }, seen[ns .. "/c1"])
    assert.equals(2, mgr:store("configmaps", { namespace = ns }):len())
    -- an informer created aside and never started: its store is empty, and the log says why
    local aside = client:informer{ resource = "configmaps", namespace = ns, label_selector = "x=y" }
    assert.equals(0, aside:store():len())
    drive(mgr, 2.2) -- a second after the store was taken, at the manager's next look
    local warned = false
    for _, l in ipairs(logs) do
      if l:find("^warn informer") and l:find("never started", 1, true) then warned = true end
    end
    assert.is_true(warned, table.concat(logs, "\n"))
    mgr:stop()
  end)
end)
