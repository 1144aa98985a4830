-- A sharded kinformer.manager: the ring (rendezvous hashing) alone, then replicas as child
-- processes (spec/support/shard_child.lua), one user each, under churn: every key reconciled,
-- a replica SIGKILLed, one added, one stopped with SIGTERM, and the server's request log shows
-- that no key was reconciled by two replicas at overlapping times; a dead replica's keys move
-- within its lease duration + 2 s; a write stalled past the lease duration moves nothing.
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"
local replica = require "support.replica"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep

describe("kinformer.core.ring", function()
  local function keys(n)
    local out = {}
    for i = 1, n do out[i] = "ns-" .. (i % 17) .. "/object-" .. i end
    return out
  end

  it("spreads 10,000 keys over 4 members within 20% of the mean, and agrees on any order",
    function()
    local r1 = core.ring{ "alpha", "beta", "gamma", "delta" }
    local r2 = core.ring{ "delta", "gamma", "beta", "alpha" }
    local n = {}
    for _, k in ipairs(keys(10000)) do
      local o = r1:owner(k)
      assert.equals(o, r2:owner(k))
      n[o] = (n[o] or 0) + 1
    end
    for _, m in ipairs{ "alpha", "beta", "gamma", "delta" } do
      assert.is_true(math.abs(n[m] - 2500) <= 500, m .. " owns " .. tostring(n[m]))
    end
    assert.equals(4, r1:size())
    assert.is_nil(core.ring{}:owner("x"))
  end)

  it("moves only a leaving member's keys, and a new member takes its share from each", function()
    local four = core.ring{ "a", "b", "c", "d" }
    local three = core.ring{ "a", "c", "d" }
    local five = core.ring{ "a", "b", "c", "d", "e" }
    local moved, to_e = 0, 0
    for _, k in ipairs(keys(10000)) do
      if four:owner(k) ~= "b" then
        assert.equals(four:owner(k), three:owner(k))
      else
        moved = moved + 1
      end
      if five:owner(k) ~= four:owner(k) then
        assert.equals("e", five:owner(k))
        to_e = to_e + 1
      end
    end
    assert.is_true(moved > 2000 and moved < 3000)
    assert.is_true(to_e > 1600 and to_e < 2400)
  end)

  it("raises for a member that is not a string", function()
    assert.has_error(function() core.ring{ "a", 1 } end)
  end)
end)

describe("kinformer.manager sharding", function()
  local srv
  local children = {}
  local NS = "sh"
  local USERS = { "a", "b", "c", "d" }

  setup(function()
    local args = { "--token", "admin" }
    for _, u in ipairs(USERS) do
      args[#args + 1] = "--user-token"
      args[#args + 1] = u .. "=t-" .. u
    end
    srv = fake.start{ quiet = true, args = args }
  end)
  teardown(function()
    for _, c in ipairs(children) do c:close() end
    if srv then srv:stop() end
  end)

  local function start(id, ns)
    local c = replica.start("spec/support/shard_child.lua", { srv.url, id, "t-" .. id, ns })
    children[#children + 1] = c
    return c
  end

  -- n ConfigMaps c1..cn; the first `slow` of them labelled slow=true
  local function configmaps(ns, n, slow)
    local items = {}
    for i = 1, n do
      items[i] = { apiVersion = "v1", kind = "ConfigMap", metadata = { namespace = ns,
                   name = "c" .. i, labels = i <= (slow or 0) and { slow = "true" } or nil },
                   data = { v = "0" } }
    end
    srv:objects(items, "configmaps")
  end

  -- key -> who wrote it last, from the server's state
  local function writers(ns)
    local out = {}
    for _, o in ipairs(srv:state("configmaps", ns).items) do
      local a = o.metadata.annotations
      out[o.metadata.name] = a and a["sharding.example.com/by"] or false
    end
    return out
  end

  -- The reconciles the replicas printed: { name = { { who, b, e }, ... } } (e nil: no end)
  local function spans(replicas)
    local out = {}
    for who, c in pairs(replicas) do
      local open = {}
      for what, name, t in c:output():gmatch("([be]) (%S+) ([%d%.]+)\n") do
        t = tonumber(t)
        if what == "b" then
          local s = { who = who, b = t }
          open[name] = s
          out[name] = out[name] or {}
          table.insert(out[name], s)
        elseif open[name] then
          open[name].e = t
          open[name] = nil
        end
      end
    end
    return out
  end

  local function wait_until(seconds, fn)
    local deadline = now() + seconds
    while now() < deadline do
      if fn() then return true end
      sleep(0.1)
    end
    return fn()
  end

  it("every key reconciled by one replica at a time through a kill, a join and a stop",
    function()
    configmaps(NS, 2000, 30)
    local a, b, c = start("a", NS), start("b", NS), start("c", NS)
    assert.truthy(wait_until(20, function()
      for _, w in pairs(writers(NS)) do if not w then return false end end
      return true
    end), a:output() .. b:output() .. c:output())
    local by = {}
    for _, w in pairs(writers(NS)) do by[w] = (by[w] or 0) + 1 end
    for _, id in ipairs{ "a", "b", "c" } do -- each its share (2,000 / 3, within 20%)
      assert.is_true(math.abs((by[id] or 0) - 667) <= 133, id .. ": " .. tostring(by[id]))
    end
    -- From now on the writes of c1..c30 take 1 s and they change all the time: every replica
    -- keeps its 4 reconciles busy with them, so when keys move, reconciles of moving keys are
    -- in flight, and the new owner gets to them within a second.
    srv:fault{ method = "PATCH", path = "/namespaces/" .. NS .. "/configmaps/c([1-9]|[12][0-9]|30)$",
               times = -1, action = { type = "stall", seconds = 1 } }
    srv:control("POST", "/_fake/modify", { resource = "configmaps", namespace = NS,
                                           label_selector = "slow=true", count = 2000, rate = 100 })
    srv:control("POST", "/_fake/modify", { resource = "configmaps", namespace = NS,
                                           count = 1500, rate = 100 })
    sleep(1)
    -- b dies: its keys move once its Lease is 3 s + 1 s silent
    local b_keys = {}
    for name, w in pairs(writers(NS)) do
      if w == "b" and not (tonumber(name:match("^c(%d+)$")) <= 30) then b_keys[name] = true end
    end
    local killed = now()
    os.execute("kill -KILL " .. b.pid) -- its reconciles in flight end here
    assert.truthy(wait_until(15, function() -- and were reconciled by their new owners
      local w = writers(NS)
      for name in pairs(b_keys) do if w[name] == "b" then return false end end
      return true
    end))
    -- when a and c dropped b from their rings (the keys moved)
    local function dropped_at(r)
      for t in r:output():gmatch("members 2 at ([%d%.]+)") do
        if tonumber(t) > killed then return tonumber(t) end
      end
    end
    local moved_after = math.max(dropped_at(a), dropped_at(c)) - killed
    assert.is_true(moved_after < 3 + 2, "b's keys moved after " .. moved_after .. " s")
    local d = start("d", NS)
    assert.truthy(d:wait_for("member", 10), d:output())
    sleep(2)
    assert.equals(0, c:signal("TERM"))
    local stopped = now()
    assert.matches("reason SIGTERM", c:output())
    sleep(4)
    srv:clear_faults()
    srv:control("POST", "/_fake/modify", { resource = "configmaps", namespace = NS, count = 200 })
    sleep(3)
    -- no key reconciled by two replicas at overlapping times
    local n_spans, by_who = 0, {}
    for name, list in pairs(spans{ a = a, b = b, c = c, d = d }) do
      for i, x in ipairs(list) do
        n_spans = n_spans + 1
        by_who[x.who] = (by_who[x.who] or 0) + 1
        local xe = x.e or (x.who == "b" and killed) or (x.who == "c" and stopped) or now()
        for j = i + 1, #list do
          local y = list[j]
          if y.who ~= x.who then
            local ye = y.e or (y.who == "b" and killed) or (y.who == "c" and stopped) or now()
            assert.is_true(xe <= y.b or ye <= x.b, ("%s: %s [%.3f, %.3f] overlaps %s [%.3f, %.3f]")
              :format(name, x.who, x.b, xe, y.who, y.b, ye))
          end
        end
      end
    end
    assert.is_true(n_spans > 4000)
    for _, id in ipairs{ "a", "b", "c", "d" } do assert.is_true((by_who[id] or 0) > 100, id) end
    -- the last changes were reconciled by the replicas alive at the end
    for name, w in pairs(writers(NS)) do
      assert.is_true(w == "a" or w == "d", name .. " last written by " .. tostring(w))
    end
    assert.equals(0, a:signal("TERM"))
    assert.equals(0, d:signal("TERM"))
  end)

  it("one replica alone owns every key; its status and metrics say so; stop releases its Lease",
    function()
    local kinformer = require "kinformer"
    local ns = "sh-one"
    configmaps(ns, 50)
    local client = assert(kinformer.client{ server = srv.url, token = "admin" })
    kinformer.set_logger(function() end)
    local mgr = kinformer.manager{ client = client, sharding = { group = "solo", namespace = ns,
      identity = "only-one", lease_duration = 3, renew_deadline = 2, retry_period = 0.5 } }
    local n = 0
    mgr:controller{ name = "c", resource = "configmaps", namespace = ns,
      reconcile = function() n = n + 1 end }
    local deadline = now() + 10
    while n < 50 and now() < deadline do
      local w = assert(mgr:step())
      core.wait(mgr:fds(), math.min(w, 0.05))
    end
    assert.equals(50, n)
    local st = mgr:status().sharding
    assert.same({ 1, 50, 50, true, "only-one" }, { st.members, st.keys_owned, st.keys,
                                                   st.published, st.ring })
    local text = mgr:registry():text()
    assert.matches('kinformer_shard_keys_owned{group="solo"} 50', text, 1, true)
    assert.matches('kinformer_shard_members{group="solo"} 1', text, 1, true)
    mgr:stop()
    kinformer.set_logger(nil, "warn")
    local code, lease = srv:request("GET", "/apis/coordination.k8s.io/v1/namespaces/" .. ns ..
      "/leases/solo-only-one", nil, { Authorization = "Bearer admin" })
    assert.equals(200, code)
    assert.equals("", lease.spec.holderIdentity)
    assert.equals("solo", lease.metadata.labels["sharding.kinformer.io/group"])
    assert.has_error(function()
      kinformer.manager{ client = client, sharding = { group = "x" },
                         leader_election = { lease_name = "y" } }
    end)
    assert.has_error(function() kinformer.manager{ client = client, sharding = { group = "Bad_Name" } } end)
  end)

  it("a write stalled past the lease duration hands nothing over", function()
    local ns = "sh-stall"
    configmaps(ns, 20)
    local a, b = start("a", ns), start("b", ns)
    assert.truthy(a:wait_for("member", 10) and b:wait_for("member", 10))
    sleep(1.5)
    local ring = core.ring{ "a", "b" }
    local owner = ring:owner(ns .. "/c1")
    srv:clear_requests() -- (before b joined, a owned every key)
    srv:fault{ method = "PATCH", path = "/namespaces/" .. ns .. "/configmaps/c1$",
               action = { type = "stall", seconds = 5 } }
    srv:control("POST", "/_fake/modify", { resource = "configmaps", namespace = ns, count = 20 })
    sleep(6)
    local patches = 0
    for _, r in ipairs(srv:requests()) do
      if r.method == "PATCH" and r.path == "/api/v1/namespaces/" .. ns .. "/configmaps/c1" then
        assert.equals(owner, r.user)
        patches = patches + 1
      end
    end
    assert.is_true(patches >= 1)
    assert.truthy(a:output():find("members 2", 1, true))
    assert.equals(0, a:signal("TERM"))
    assert.equals(0, b:signal("TERM"))
  end)
end)
