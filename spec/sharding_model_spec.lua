-- The sharding handover against a model (kinformer.sharding alone, no server, no processes):
-- replicas whose caches of the members' Leases lag behind the server by random amounts (a
-- watch stuck for seconds), whose API calls stall (no renewal: fenced at the renew deadline),
-- joins, graceful leaves and kills in random order, acknowledgements written late, expired
-- members released with a resourceVersion precondition, reconciles that start and end at
-- random. After every step the invariant is checked: no key is being
-- reconciled by two replicas at once. Seeded runs, so a failure names its seed.
local sharding = require "kinformer.sharding"

local GROUP_LABEL, RING = sharding.GROUP_LABEL, sharding.RING_ANNOTATION

-- Times in model seconds: a step is 0.01 s. Leases last 3 s, members release a Lease silent
-- for 3 s + 1 s, a replica that has not renewed for 2 s stops (its elector's renew deadline).
local DURATION, MARGIN, DEADLINE = 3, 1, 2

local function model(seed, steps)
  local rnd = math.random
  math.randomseed(seed)
  local now = 0
  local log = {}      -- the server's Lease writes, in order: { name =, holder =, ack =, rv = }
  local head = {}     -- lease name -> its latest write
  local rv = 0
  local replicas = {} -- id -> replica
  local keys = {}
  for i = 1, 40 do keys[i] = "ns/k" .. i end
  local next_id = 0

  local function write(name, holder, ack)
    rv = rv + 1
    local w = { name = name, holder = holder, ack = ack, rv = tostring(rv) }
    log[#log + 1] = w
    head[name] = w
  end

  -- A replica's cache of the Leases: the server's log up to `seen`
  local function store_of(r)
    return { list = function()
      local by = {}
      for i = 1, r.seen do by[log[i].name] = log[i] end
      local out = {}
      for name, l in pairs(by) do
        out[#out + 1] = { metadata = { name = name, resourceVersion = l.rv,
                                       annotations = { [RING] = l.ack },
                                       labels = { [GROUP_LABEL] = "g" } },
                          spec = { holderIdentity = l.holder, leaseDurationSeconds = DURATION } }
      end
      return out
    end }
  end

  local function leading(r) return r.alive and r.holds and now - r.renewed < DEADLINE end

  local function join()
    next_id = next_id + 1
    local id = "r" .. next_id
    local r = { id = id, seen = 0, busy = {}, alive = true, holds = true, renewed = now }
    r.elector = { is_leader = function() return leading(r) end, renew_soon = function() end }
    r.shard = sharding.new{ group = "g", namespace = "ns", identity = id, margin = MARGIN,
                            elector = r.elector, store = store_of(r) }
    write(id, id, "")
    r.seen = #log -- it read its own create back
    replicas[id] = r
  end

  -- Its elector's attempt: a GET, then an update with what it acknowledged. A Lease released by
  -- another (or held by another) is lost: it stops, and takes its Lease again next time.
  local function renew(r)
    local h = head[r.id]
    if r.holds and h.holder ~= r.id then
      r.holds = false
      return
    end
    write(r.id, r.id, r.holds and (r.shard.ack or "") or "")
    r.holds = true
    r.renewed = now
  end

  local function alive()
    local out = {}
    for _, r in pairs(replicas) do if r.alive then out[#out + 1] = r end end
    table.sort(out, function(a, b) return a.id < b.id end)
    return out
  end

  local function check(step)
    local holder = {}
    for _, r in ipairs(alive()) do
      for k in pairs(r.busy) do
        assert(not holder[k], ("seed %d step %d: %s reconciled by %s and %s"):format(seed, step,
          k, tostring(holder[k]), r.id))
        holder[k] = r.id
      end
    end
  end

  for _ = 1, 3 do join() end
  for step = 1, steps do
    local rs = alive()
    local r = rs[rnd(#rs)]
    local what = rnd(100)
    if what <= 25 then -- its cache catches up by a few writes (unless its watch is stuck)
      if not r.watch_stuck then r.seen = math.min(#log, r.seen + rnd(3)) end
    elseif what <= 45 then -- it looks at its cache, and releases what expired there
      r.shard:update(now, function(ring)
        for k in pairs(r.busy) do
          if ring:owner(k) ~= r.id then r.busy[k] = nil end -- cancelled
        end
      end)
      if leading(r) then
        for _, lease in ipairs(r.shard.expiring) do
          local h = head[lease.metadata.name]
          if h.rv == lease.metadata.resourceVersion then -- the precondition holds
            write(h.name, "", "")
          end
        end
      end
    elseif what <= 60 then -- its elector's attempt (not every replica renews in time)
      if not r.stalled then renew(r) end
    elseif what <= 85 then -- a reconcile starts, if the shard says so
      local k = keys[rnd(#keys)]
      if leading(r) and not r.busy[k] and r.shard:decide(k) == "mine" then r.busy[k] = true end
    elseif what <= 93 then -- one ends
      for k in pairs(r.busy) do r.busy[k] = nil break end
    elseif what <= 95 and #rs < 5 then
      join()
    elseif what <= 96 and #rs > 1 then -- a graceful leave: it stops, then releases its Lease
      r.busy = {}
      r.alive = false
      write(r.id, "", "")
    elseif what <= 97 and #rs > 1 then -- killed: nothing more from it
      r.busy = {}
      r.alive = false
    elseif what <= 98 then -- its API calls stall for a while (its renewals too), or recover
      r.stalled = not r.stalled
    elseif what <= 99 then -- its watch of the Leases is stuck for a while (a stale cache)
      r.watch_stuck = not r.watch_stuck
    end
    now = now + 0.01
    -- a replica past its renew deadline is fenced: the manager cancels what it runs
    for _, x in ipairs(alive()) do
      if not leading(x) then x.busy = {} end
    end
    check(step)
  end
end

describe("kinformer.sharding handover (model)", function()
  it("never has one key reconciled by two replicas, over 200 seeded runs", function()
    for seed = 1, 200 do model(seed, 3000) end
  end)

  it("a silent member keeps its keys until its Lease is released (a stale cache never drops it)",
    function()
    local leases = {}
    local function lease(name, holder, ack, rv)
      leases[name] = { metadata = { name = name, resourceVersion = rv,
                                    annotations = { [RING] = ack } },
                       spec = { holderIdentity = holder, leaseDurationSeconds = DURATION } }
    end
    local store = { list = function()
      local out = {}
      for _, l in pairs(leases) do out[#out + 1] = l end
      return out
    end }
    local elector = { is_leader = function() return true end, renew_soon = function() end }
    local r = sharding.new{ group = "g", namespace = "ns", identity = "r", margin = MARGIN,
                            elector = elector, store = store }
    lease("m", "m", "1:m,r", "1")
    lease("r", "r", "", "2")
    r:update(0)
    lease("r", "r", r.ack, "3") -- r's acknowledgement, back in its cache
    r:update(0.1)
    local k -- a key of m's
    for i = 1, 100 do
      if require("kinformer.core").ring{ "m", "r" }:owner("ns/k" .. i) == "m" then
        k = "ns/k" .. i
        break
      end
    end
    assert.equals("not_mine", r:decide(k))
    -- m is silent for its duration + margin, as this cache sees it: expiring, still a member
    r:update(DURATION + MARGIN + 1)
    assert.equals(1, #r.expiring)
    assert.equals("m", r.expiring[1].spec.holderIdentity)
    assert.equals("not_mine", r:decide(k))
    -- released (by r's update with resourceVersion "1", or by m itself): its keys move
    lease("m", "", "", "4")
    r:update(DURATION + MARGIN + 2)
    lease("r", "r", r.ack, "5")
    r:update(DURATION + MARGIN + 3)
    assert.equals("mine", r:decide(k))
  end)
end)
