-- Leader election on Leases (lua/kinformer/leaderelection.lua) against the fake API server, with
-- each elector on a clock of its own so that expiry is decided by the test, not by sleeping.
-- Ports the scenarios of client-go's leaderelection tests (TestTryAcquireOrRenew: acquire a
-- missing lock, an expired one, not an unexpired one of another, renew our own; release on
-- cancel), plus 409s, outages and callbacks that raise.
local kinformer = require "kinformer"
local fake = require "support.fake_apiserver"

local function clock(start)
  local c = { t = start or 1000 }
  c.fn = function() return c.t end
  return c
end

local function lease_of(srv, name)
  for _, o in ipairs(srv:state("leases", "default").items) do
    if o.metadata.name == name then return o end
  end
end

describe("leader election", function()
  local srv, client, quiet

  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
    quiet = {}
    kinformer.set_logger(function(level, msg) quiet[#quiet + 1] = level .. " " .. msg end)
  end)

  teardown(function()
    kinformer.set_logger(nil)
    srv:stop()
  end)

  before_each(function() srv:clear_faults() end)

  local n = 0
  local function elector(opts)
    n = n + 1
    opts.client = client
    opts.lease_name = opts.lease_name or ("lease-" .. n)
    opts.lease_duration = opts.lease_duration or 15
    opts.renew_deadline = opts.renew_deadline or 10
    opts.retry_period = opts.retry_period or 2
    return kinformer.leader_election(opts)
  end

  it("creates a missing lease and leads; renews it on later ticks", function()
    local c = clock()
    local events = {}
    local le = elector{ identity = "a", clock = c.fn, namespace = "default",
      on_started_leading = function() events[#events + 1] = "started" end,
      on_new_leader = function(id) events[#events + 1] = "new:" .. id end }
    assert.is_false(le:is_leader())
    local due = le:tick()
    assert.is_true(le:is_leader())
    assert.equal(2, due)
    assert.same({ "new:a", "started" }, events)
    local lease = lease_of(srv, le.name)
    assert.equal("a", lease.spec.holderIdentity)
    assert.equal(15, lease.spec.leaseDurationSeconds)
    assert.equal(0, lease.spec.leaseTransitions)
    assert.truthy(lease.spec.renewTime:match("^%d+%-%d+%-%d+T%d+:%d+:%d+%.%d+Z$"))
    local rv = lease.metadata.resourceVersion

    c.t = c.t + 1
    assert.equal(1, le:tick())          -- not due: nothing sent
    assert.equal(rv, lease_of(srv, le.name).metadata.resourceVersion)
    c.t = c.t + 1
    le:tick()                           -- due: renewed
    assert.is_not.equal(rv, lease_of(srv, le.name).metadata.resourceVersion)
    assert.equal(0, lease_of(srv, le.name).spec.leaseTransitions)
    assert.same({ "new:a", "started" }, events)
    le:stop()
  end)

  it("does not take an unexpired lease of another; takes it once expired on its own clock", function()
    local ca, cb = clock(), clock(5000)
    local a = elector{ identity = "a", clock = ca.fn }
    local b_events = {}
    local b = elector{ identity = "b", clock = cb.fn, lease_name = a.name,
      on_new_leader = function(id) b_events[#b_events + 1] = id end,
      on_started_leading = function() b_events[#b_events + 1] = "started" end }
    a:tick()
    assert.is_true(a:is_leader())
    b:tick()
    assert.is_false(b:is_leader())
    assert.equal("a", b:leader())
    assert.same({ "a" }, b_events)
    -- a stops renewing (hung, partitioned); b waits lease_duration from when it saw the lease.
    cb.t = cb.t + 14
    local due = b:tick()
    assert.is_false(b:is_leader())
    -- The next attempt is due when the lease expires for b (1 s), not a retry_period later.
    assert.is_true(due > 0.999 and due < 1.01, tostring(due))
    assert.equal("a", lease_of(srv, a.name).spec.holderIdentity)
    cb.t = cb.t + 1.01
    b:tick()
    assert.is_true(b:is_leader())
    local lease = lease_of(srv, a.name)
    assert.equal("b", lease.spec.holderIdentity)
    assert.equal(1, lease.spec.leaseTransitions)
    assert.same({ "a", "b", "started" }, b_events)
    -- a comes back: its renewal sees b's lease, so a stops leading at once.
    local stopped = 0
    a.on_stopped = function() stopped = stopped + 1 end
    ca.t = ca.t + 2
    a:tick()
    assert.is_false(a:is_leader())
    assert.equal(1, stopped)
    assert.equal("b", a:leader())
    assert.equal("b", lease_of(srv, a.name).spec.holderIdentity)
    b:stop()
  end)

  it("a renewal the lease holder keeps seeing renewed is never taken over", function()
    local ca, cb = clock(), clock()
    local a = elector{ identity = "a", clock = ca.fn }
    local b = elector{ identity = "b", clock = cb.fn, lease_name = a.name }
    a:tick()
    for _ = 1, 20 do -- 40 s of b's time, a renewing every 2 s
      ca.t, cb.t = ca.t + 2, cb.t + 2
      a:tick()
      b:tick()
      assert.is_true(a:is_leader())
      assert.is_false(b:is_leader())
    end
    a:stop()
  end)

  it("releases on stop so that a follower takes over at its next attempt", function()
    local ca, cb = clock(), clock()
    local stopped = 0
    local a = elector{ identity = "a", clock = ca.fn, on_stopped_leading = function() stopped = stopped + 1 end }
    local b = elector{ identity = "b", clock = cb.fn, lease_name = a.name }
    a:tick()
    b:tick()
    assert.is_false(b:is_leader())
    a:stop()
    assert.equal(1, stopped)
    assert.is_false(a:is_leader())
    local lease = lease_of(srv, a.name)
    assert.equal("", lease.spec.holderIdentity)
    assert.equal(1, lease.spec.leaseDurationSeconds)
    a:stop() -- idempotent
    assert.equal(1, stopped)
    assert.equal(math.huge, a:tick())
    cb.t = cb.t + 2.5 -- b's next attempt, well before the old lease would have expired
    b:tick()
    assert.is_true(b:is_leader())
    assert.equal("b", lease_of(srv, a.name).spec.holderIdentity)
    b:stop()
  end)

  it("keeps leading through failed renewals until renew_deadline, then stops", function()
    local c = clock()
    local stopped = 0
    local le = elector{ identity = "a", clock = c.fn, on_stopped_leading = function() stopped = stopped + 1 end }
    le:tick()
    srv:fault{ path = "/leases/" .. le.name .. "$", times = -1, action = { status = 500 } }
    for _ = 1, 4 do
      c.t = c.t + 2
      le:tick()
      assert.is_true(le:is_leader()) -- 2, 4, 6, 8 s since the last renewal
    end
    assert.equal(4, le:status().failures)
    assert.truthy(le:status().last_error:find("500 InternalError", 1, true))
    c.t = c.t + 2 -- 10 s: the deadline
    assert.is_false(le:is_leader()) -- even before the tick that notices
    le:tick()
    assert.equal(1, stopped)
    assert.is_false(le:is_leader())
    -- The server comes back: the lease (ours, not expired for others) is reacquired.
    srv:clear_faults()
    c.t = c.t + 3
    le:tick()
    assert.is_true(le:is_leader())
    le:stop()
  end)

  it("a 409 on the update fails the attempt without taking the lease", function()
    local ca, cb = clock(), clock()
    local a = elector{ identity = "a", clock = ca.fn }
    local b = elector{ identity = "b", clock = cb.fn, lease_name = a.name }
    a:tick()
    cb.t = cb.t + 1
    b:tick()
    cb.t = cb.t + 16 -- expired for b
    srv:fault{ method = "PUT", path = "/leases/" .. a.name .. "$", action = { status = 409 } }
    b:tick()
    assert.is_false(b:is_leader())
    assert.equal(409, tonumber(b:status().last_error:match("^(%d+)")))
    assert.equal("a", lease_of(srv, a.name).spec.holderIdentity)
    cb.t = cb.t + 3
    b:tick()
    assert.is_true(b:is_leader())
    b:stop()
  end)

  it("a callback that raises is logged and the elector goes on", function()
    local c = clock()
    local before = #quiet
    local le = elector{ identity = "a", clock = c.fn,
      on_started_leading = function() error("boom in started") end,
      on_stopped_leading = function() error("boom in stopped") end }
    le:tick()
    assert.is_true(le:is_leader())
    le:stop()
    local logged = table.concat(quiet, "\n", before + 1)
    assert.truthy(logged:find("on_started_leading raised: .*boom in started"))
    assert.truthy(logged:find("on_stopped_leading raised: .*boom in stopped"))
  end)

  it("names the caller's line in argument errors", function()
    local line = debug.getinfo(1, "l").currentline
    local ok, err = pcall(function() kinformer.leader_election{ client = client, colour = 1 } end)
    assert.is_false(ok)
    assert.matches("^[^:]*leaderelection_spec%.lua:" .. (line + 1)
      .. ": bad argument #1 to 'leader_election' %(unknown option 'colour'%)$", err)
  end)

  it("raises for bad options", function()
    assert.has_error(function() kinformer.leader_election() end,
      "bad argument #1 to 'leader_election' (table expected, got nil)")
    assert.has_error(function() kinformer.leader_election{ client = client } end,
      "bad argument #1 to 'leader_election' (lease_name required)")
    assert.has_error(function()
      kinformer.leader_election{ client = client, lease_name = "x", lease_duration = 5, renew_deadline = 10 }
    end, "bad argument #1 to 'leader_election' (lease_duration must be greater than renew_deadline)")
    assert.has_error(function()
      kinformer.leader_election{ client = client, lease_name = "x", retry_period = 9 }
    end, "bad argument #1 to 'leader_election' (renew_deadline must be greater than 1.2 * retry_period)")
    assert.has_error(function()
      kinformer.leader_election{ client = client, lease_name = "x", colour = "red" }
    end, "bad argument #1 to 'leader_election' (unknown option 'colour')")
    local le = kinformer.leader_election{ client = client, lease_name = "x" }
    assert.truthy(le:status().identity:match("^.+_%d+$"))
  end)
end)
