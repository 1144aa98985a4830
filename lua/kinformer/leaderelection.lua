--- kinformer.leader_election: one active replica among several, on a coordination.k8s.io/v1 Lease
-- (client-go's tools/leaderelection with its LeaseLock). docs/leaderelection.md.
--
-- Contract:
-- - The elector is driven by tick(): each call that is due makes one attempt (a GET of the Lease,
--   then a create or an update carrying the resourceVersion it read: optimistic concurrency, a
--   409 just fails the attempt) and returns the seconds until the next one is due. Calls that
--   are not due cost nothing. A follower tries every retry_period (jittered by up to 20%), and
--   also at the moment the holder's lease expires by its observation; a leader renews every
--   retry_period.
-- - A lease held by another identity is taken over only once it has not changed for
--   lease_duration as measured on this process's monotonic clock from when this process last
--   saw it change (client-go's observedTime; the Lease's own timestamps are not trusted).
-- - A leader that has not renewed for renew_deadline stops leading: on_stopped_leading runs at
--   the tick that notices, and is_leader() is false from that moment even between ticks.
--   renew_deadline < lease_duration, so it stops before another replica may take over.
-- - stop() releases a held lease (holderIdentity "", leaseDurationSeconds 1, as client-go's
--   ReleaseOnCancel) so a successor need not wait for it to expire, then runs
--   on_stopped_leading. After stop(), tick() does nothing.
-- - Callbacks run inside tick() / stop(); one that raises is logged and the elector goes on.
-- - labels (a table) and annotations (a function returning a table) are written on the Lease
--   with every create and update (merged into what it carries): a sharded manager publishes
--   its members' Leases and acknowledgements so.
-- - A leader that finds the Lease released or taken by someone else (holderIdentity not its
--   own) stops leading at that attempt and competes again from the next one on.
-- - Each attempt is a REST call (docs/rest.md) with a timeout of retry_period (at least 1 s):
--   a blocking request, or inside a task (kinformer.task; a manager ticks its elector so) one
--   the task waits for while the thread goes on.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"

local type, tostring, pairs, pcall = type, tostring, pairs, pcall
local math_random, math_max, math_min = math.random, math.max, math.min
local os_date = os.date

-- Leases are built in: named by a table, they resolve without the server's discovery.
local LEASES = { group = "coordination.k8s.io", version = "v1", resource = "leases",
                 namespaced = true }

local Elector = {}
Elector.__index = Elector

local _M = {}

-- Every argument error of leader_election is about its one options table.
local function bad_option(msg)
  argcheck.raise(1, "leader_election", msg)
end

local function log(level, msg) core.log(level, "leader election: " .. msg) end

local function default_identity()
  local host = os.getenv("HOSTNAME")
  if not host or host == "" then
    local f = io.open("/proc/sys/kernel/hostname")
    host = f and f:read("l") or "kinformer"
    if f then f:close() end
  end
  local f = io.open("/proc/self/stat")
  local pid = f and f:read("l"):match("^(%d+)") or tostring(math_random(1e9))
  if f then f:close() end
  return host .. "_" .. pid
end

_M.default_identity = default_identity

local KNOWN = {
  client = true, lease_name = true, namespace = true, identity = true, lease_duration = true,
  renew_deadline = true, retry_period = true, on_started_leading = true,
  on_stopped_leading = true, on_new_leader = true, release_on_cancel = true, clock = true,
  labels = true, annotations = true,
  wall_clock = true,
}

--- kinformer.leader_election{ client, lease_name, namespace, identity, lease_duration = 15,
--    renew_deadline = 10, retry_period = 2, on_started_leading = fn(), on_stopped_leading = fn(),
--    on_new_leader = fn(identity), release_on_cancel = true } -> elector
function _M.new(opts)
  if type(opts) ~= "table" then bad_option("table expected, got " .. type(opts)) end
  argcheck.options(opts, KNOWN, "leader_election")
  local client = opts.client
  if type(client) ~= "table" or type(client.get) ~= "function" then
    bad_option("client (from kinformer.client) required")
  end
  if type(opts.lease_name) ~= "string" or opts.lease_name == "" then
    bad_option("lease_name required")
  end
  local ns = opts.namespace or client.namespace or "default"
  if type(ns) ~= "string" or ns == "" then bad_option("namespace must be a string") end
  local identity = opts.identity or default_identity()
  if type(identity) ~= "string" or identity == "" then bad_option("identity must be a non-empty string") end
  local function num(name, default)
    local v = opts[name]
    if v == nil then return default end
    if type(v) ~= "number" or not (v > 0) then bad_option(name .. " must be a number > 0") end
    return v
  end
  local lease_duration = num("lease_duration", 15)
  local renew_deadline = num("renew_deadline", 10)
  local retry_period = num("retry_period", 2)
  -- client-go's checks: the leader must give up before the lease can expire for others, and
  -- retry more than once within the deadline.
  if lease_duration <= renew_deadline then bad_option("lease_duration must be greater than renew_deadline") end
  if renew_deadline <= 1.2 * retry_period then bad_option("renew_deadline must be greater than 1.2 * retry_period") end
  if opts.labels ~= nil and type(opts.labels) ~= "table" then bad_option("labels must be a table") end
  for _, name in pairs{ "on_started_leading", "on_stopped_leading", "on_new_leader", "clock", "wall_clock",
                        "annotations" } do
    if opts[name] ~= nil and type(opts[name]) ~= "function" then bad_option(name .. " must be a function") end
  end
  local release = opts.release_on_cancel
  if release == nil then release = true end
  return setmetatable({
    client = client, name = opts.lease_name, namespace = ns, identity = identity,
    lease_duration = lease_duration, renew_deadline = renew_deadline, retry_period = retry_period,
    on_started = opts.on_started_leading, on_stopped = opts.on_stopped_leading,
    on_new_leader = opts.on_new_leader, release_on_cancel = release,
    labels = opts.labels, annotations = opts.annotations,
    now = opts.clock or core.now, wall = opts.wall_clock or core.wall_time,
    next_at = -math.huge, leading = false, stopped = false,
    observed = nil, observed_time = nil, -- the last Lease spec seen, and when it changed
    last_renew = nil, reported_leader = nil,
    attempts = 0, failures = 0, transitions_seen = 0, last_error = nil,
  }, Elector)
end

local function micro_time(self)
  local t = self.wall()
  local sec = math.floor(t)
  return os_date("!%Y-%m-%dT%H:%M:%S", sec) .. (".%06dZ"):format(math_min(999999, math.floor((t - sec) * 1e6)))
end

local function call(self, name, fn, ...)
  if not fn then return end
  local ok, err = pcall(fn, ...)
  if not ok then log("error", name .. " raised: " .. errtext(err)) end
end

-- Whether two observations are the same record: any write changes the resourceVersion (the
-- timestamps alone could repeat within a clock tick).
local function same_spec(a, b)
  if a == nil or b == nil then return a == b end
  return a.rv == b.rv and a.holderIdentity == b.holderIdentity and a.renewTime == b.renewTime
    and a.acquireTime == b.acquireTime and a.leaseTransitions == b.leaseTransitions
    and a.leaseDurationSeconds == b.leaseDurationSeconds
end

local function of_type(v, t) if type(v) == t then return v end end

-- A Lease's spec as this file reads it: each field of its type or nil. A holderIdentity of
-- another type (only a broken server sends one) is a holder that is not us, named by its type.
local function clean_spec(spec)
  local holder = spec.holderIdentity
  if holder ~= nil and type(holder) ~= "string" and type(holder) ~= "userdata" then -- userdata: null
    holder = "(a holderIdentity of type " .. type(holder) .. ")"
  end
  return { holderIdentity = of_type(holder, "string"), renewTime = of_type(spec.renewTime, "string"),
           acquireTime = of_type(spec.acquireTime, "string"),
           leaseTransitions = of_type(spec.leaseTransitions, "number"),
           leaseDurationSeconds = of_type(spec.leaseDurationSeconds, "number") }
end

local function observe(self, lease, spec, now)
  spec = clean_spec(spec)
  spec.rv = type(lease) == "table" and type(lease.metadata) == "table"
    and of_type(lease.metadata.resourceVersion, "string") or nil
  if not same_spec(self.observed, spec) then
    self.observed, self.observed_time = spec, now
  end
  local holder = spec.holderIdentity
  if holder == "" then holder = nil end
  if holder ~= self.reported_leader then
    self.reported_leader = holder
    if holder then call(self, "on_new_leader", self.on_new_leader, holder) end
  end
end

local function fail(self, err)
  self.failures = self.failures + 1
  self.last_error = errtext(err)
  return false
end

local function stop_leading(self, why)
  if not self.leading then return end
  self.leading = false
  log(why == "stop" and "info" or "warn",
      ("%s stopped leading lease %s/%s (%s)"):format(self.identity, self.namespace, self.name, why))
  call(self, "on_stopped_leading", self.on_stopped)
end

-- One attempt to acquire or renew: -> true when this identity holds the lease now.
local function try_acquire_or_renew(self, now)
  local client, opts = self.client, { namespace = self.namespace,
                                      timeout = math_max(1, self.retry_period) }
  self.attempts = self.attempts + 1
  local stamp = micro_time(self)
  local lease, err = client:get(LEASES, self.name, opts)
  if not lease then
    if err.code ~= 404 then return fail(self, err) end
    local spec = { holderIdentity = self.identity,
                   leaseDurationSeconds = math.ceil(self.lease_duration),
                   acquireTime = stamp, renewTime = stamp, leaseTransitions = 0 }
    local created
    created, err = client:create(LEASES, {
      apiVersion = "coordination.k8s.io/v1", kind = "Lease",
      metadata = { name = self.name, namespace = self.namespace, labels = self.labels,
                   annotations = self.annotations and self.annotations() or nil },
      spec = spec }, opts)
    if not created then return fail(self, err) end
    observe(self, created, created.spec or spec, now)
    self.last_error = nil
    return true
  end
  local spec = type(lease.spec) == "table" and lease.spec or {}
  observe(self, lease, spec, now)
  spec = clean_spec(spec)
  local holder = spec.holderIdentity
  if holder == "" then holder = nil end
  if self.leading and holder ~= self.identity then
    -- Released or taken while this replica thought it led: it stops now, and competes again
    -- from the next attempt on (never leads on across someone else's write).
    stop_leading(self, holder and ("lease taken by " .. holder) or "lease released by another")
    self.last_error = nil
    return false
  end
  local lease_seconds = tonumber(spec.leaseDurationSeconds) or self.lease_duration
  if holder and holder ~= self.identity and self.observed_time + lease_seconds > now then
    self.last_error = nil
    self.expires_at = self.observed_time + lease_seconds
    return false -- held by another, not expired
  end
  local transitions = tonumber(spec.leaseTransitions) or 0
  local new = { holderIdentity = self.identity,
                leaseDurationSeconds = math.ceil(self.lease_duration), renewTime = stamp,
                acquireTime = spec.acquireTime, leaseTransitions = transitions }
  if holder ~= self.identity then
    new.acquireTime = stamp
    new.leaseTransitions = transitions + 1
  end
  lease.spec = new
  if self.labels or self.annotations then
    local md = lease.metadata
    for field, t in pairs{ labels = self.labels, annotations = self.annotations and self.annotations() } do
      local have = type(md[field]) == "table" and md[field] or {}
      for k, v in pairs(t) do have[k] = v end
      md[field] = have
    end
  end
  local updated
  updated, err = client:update(LEASES, lease, opts)
  if not updated then return fail(self, err) end -- 409: someone else wrote first
  observe(self, updated, updated.spec or new, now)
  self.last_error = nil
  return true
end


--- elector:tick() -> seconds until the next attempt is due
function Elector:tick()
  if self.stopped then return math.huge end
  local now = self.now()
  if now < self.next_at then
    if self.leading and now - self.last_renew >= self.renew_deadline then
      stop_leading(self, "renew deadline passed")
    end
    return self.next_at - now
  end
  self.expires_at = nil
  local ok = try_acquire_or_renew(self, now)
  now = self.now() -- the attempt took time
  if ok then
    self.last_renew = now
    if not self.leading then
      self.leading = true
      self.transitions_seen = self.transitions_seen + 1
      log("info", ("%s started leading lease %s/%s"):format(self.identity, self.namespace, self.name))
      call(self, "on_started_leading", self.on_started)
    end
    self.next_at = now + self.retry_period
  else
    if self.leading and now - self.last_renew >= self.renew_deadline then
      stop_leading(self, "renew deadline passed: " .. tostring(self.last_error or "lease taken"))
    elseif self.leading and self.observed and self.observed.holderIdentity ~= self.identity
        and self.observed.holderIdentity ~= nil and self.observed.holderIdentity ~= "" then
      stop_leading(self, "lease taken by " .. self.observed.holderIdentity)
    end
    local period = self.retry_period
    if not self.leading then period = period * (1 + 0.2 * math_random()) end
    self.next_at = now + period
    -- A follower also tries the moment another's lease expires (by its own observation), so
    -- a killed leader is replaced within lease_duration + retry_period (+ jitter).
    if self.expires_at and self.expires_at < self.next_at then
      self.next_at = math_max(now, self.expires_at + 0.001)
    end
  end
  if self.stopped then return math.huge end -- a callback stopped us
  return math_max(0, self.next_at - self.now())
end

--- elector:is_leader() -> true while this replica holds a lease it renewed within renew_deadline
function Elector:is_leader()
  return self.leading and (self.now() - self.last_renew) < self.renew_deadline
end

--- elector:renew_soon(): the next tick makes an attempt (a leader publishes new annotations)
function Elector:renew_soon()
  self.next_at = -math.huge
end

--- elector:leading_until() -> the monotonic time at which is_leader() turns false unless a
-- renewal succeeds first (nil when not leading)
function Elector:leading_until()
  if not self.leading then return nil end
  return self.last_renew + self.renew_deadline
end

--- elector:leader() -> the identity of the current holder as last seen, or nil
function Elector:leader() return self.reported_leader end

--- elector:stop(): releases the lease if held (release_on_cancel), then on_stopped_leading.
function Elector:stop()
  if self.stopped then return end
  self.stopped = true
  if self.leading and self.release_on_cancel then
    local opts = { namespace = self.namespace, timeout = math_max(1, self.retry_period) }
    local lease, err = self.client:get(LEASES, self.name, opts)
    if lease and type(lease.spec) == "table" and lease.spec.holderIdentity == self.identity then
      local stamp = micro_time(self)
      lease.spec = { holderIdentity = "", leaseDurationSeconds = 1, renewTime = stamp,
                     acquireTime = stamp, leaseTransitions = lease.spec.leaseTransitions }
      local ok
      ok, err = self.client:update(LEASES, lease, opts)
      if not ok then log("warn", "failed to release lease: " .. errtext(err)) end
    elseif not lease then
      log("warn", "failed to release lease: " .. errtext(err))
    end
  end
  stop_leading(self, "stop")
end

--- elector:status() -> { identity, is_leader, leader, attempts, failures, last_error,
--   leaderships, lease = "ns/name" }
function Elector:status()
  return { identity = self.identity, is_leader = self:is_leader(), leader = self.reported_leader,
           attempts = self.attempts, failures = self.failures, last_error = self.last_error,
           leaderships = self.transitions_seen, lease = self.namespace .. "/" .. self.name }
end

return _M
