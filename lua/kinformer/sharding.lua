--- kinformer.sharding (internal): a sharded manager's membership, ring and handover.
-- docs/controller.md ("Sharding").
--
-- Contract:
-- - Each replica holds a shard Lease of its own, "<group>-<identity>" in the group's namespace,
--   labelled sharding.kinformer.io/group=<group>, with a kinformer.leader_election elector (the
--   only contender for it): renewed every retry_period, and the replica is fenced (writes
--   nothing, reconciles nothing) from the moment it has not renewed it for renew_deadline, as a
--   leader is. Graceful shutdown releases it (holderIdentity "").
-- - Members are the holders of the group's Leases (an informer on them); this replica is one
--   while its elector holds its Lease. A Lease that has not changed for its
--   leaseDurationSeconds + margin, measured on this process's clock from when it saw it change
--   (never its timestamps), is expiring: the manager releases it (holderIdentity "") with an
--   update that carries the resourceVersion seen, so a member that renewed meanwhile (this
--   cache being late) gets a 409 instead of losing its keys. A member whose Lease was released
--   by another finds out at its next renewal and stops (kinformer.leader_election), which it
--   had done anyway at its renew deadline, before anyone could release it.
--   The target ring is the sorted member list; keys are assigned by rendezvous hashing
--   (kinformer.core.ring: a member's leaving moves only its keys).
-- - Handover. Each member publishes on its Lease the ring it acknowledged (annotation
--   sharding.kinformer.io/ring): "I reconcile no key that ring does not give me". A replica that
--   sees the target change first stops what the new ring does not give it (the manager cancels
--   those reconciles), then acknowledges the target ring. It reconciles a key only when (1) the
--   target ring gives it the key, (2) its acknowledgement of that ring is in its own cache of
--   the Leases (so that cache is at least as new as its acknowledgement: every acknowledgement
--   another member wrote before it is in there too), and (3) no other member's acknowledged ring,
--   as cached, gives that member the key. Two replicas both passing (3) for one key would each
--   have written their acknowledgement after the other's cached one, which cannot be: no key is
--   reconciled by two replicas at once while they are not fenced.
-- - decide(key) -> "mine" | "wait" | "not_mine"; update(now) recomputes the members and returns
--   true when the decision of some key may have changed (the manager then looks at its parked
--   keys again) and the seconds until it must be called again.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local clock = require "kinformer.clock"
local leaderelection = require "kinformer.leaderelection"

local type, pairs, ipairs, tostring, tonumber, setmetatable = type, pairs, ipairs, tostring,
  tonumber, setmetatable
local table_sort, table_concat, math_huge, math_min = table.sort, table.concat, math.huge,
  math.min

local _M = {}

local GROUP_LABEL = "sharding.kinformer.io/group"
local RING_ANNOTATION = "sharding.kinformer.io/ring"
_M.GROUP_LABEL, _M.RING_ANNOTATION = GROUP_LABEL, RING_ANNOTATION

local Shard = {}
Shard.__index = Shard

-- A Lease name for identity: lowercase alphanumerics and '-', at most 253 characters.
local function lease_name(group, identity)
  local id = identity:lower():gsub("[^a-z0-9%-%.]", "-"):gsub("^[^a-z0-9]+", "")
  return (group .. "-" .. id):sub(1, 253):gsub("[^a-z0-9]+$", "")
end
_M.lease_name = lease_name

local rings = setmetatable({}, { __mode = "v" }) -- "a,b,c" -> core.ring (shared, cached)

local function ring_of(gen)
  local r = rings[gen]
  if not r then
    local members = {}
    for m in gen:gmatch("[^,]+") do members[#members + 1] = m end
    r = core.ring(members)
    rings[gen] = r
  end
  return r
end
_M.ring_of = ring_of

--- sharding.new{ group =, namespace =, identity =, lease_duration =, margin =, elector =,
--   store = the Leases' store } -> shard
function _M.new(o)
  return setmetatable({
    group = o.group, namespace = o.namespace, identity = o.identity, margin = o.margin,
    elector = o.elector, store = o.store,
    target = "", target_ring = ring_of(""),
    acked = nil, ack = nil, -- the ring this replica acknowledged, and "N:ring" as published
    published = false, -- its acknowledgement is in its own cache of the Leases
    observed = {}, -- lease name -> { rv =, at = }
    expiring = {}, -- Leases of members silent past their duration + margin (to release)
    releasing = {}, -- lease name -> true while a release is in flight
    others = {}, -- identity -> its acknowledgement "N:ring" (live members but this one)
    other_rings = {}, -- identity -> the ring it acknowledged
    generation = 0, handovers = 0, members = {},
  }, Shard)
end

local KNOWN = { group = true, namespace = true, identity = true, lease_duration = true,
  renew_deadline = true, retry_period = true, margin = true }

--- sharding.from_options(sh, client, fname) -> shard with its elector (shard.elector): a
-- manager's `sharding` option, checked (wrong ones raise as fname's argument #1). Its store
-- (the group's Leases) is set by the manager, which runs that informer.
function _M.from_options(sh, client, fname)
  local raise = argcheck.raise
  argcheck.options(sh, KNOWN, fname)
  if type(sh.group) ~= "string" or not sh.group:match("^[a-z0-9][a-z0-9%-]*$")
      or sh.group:match("%-$") or #sh.group > 63 then
    raise(1, fname, "sharding.group must be a DNS label (lowercase letters, digits, '-')")
  end
  local ns = sh.namespace or client.namespace or "default"
  local identity = sh.identity or leaderelection.default_identity()
  if type(identity) ~= "string" or identity == "" or identity:find(",", 1, true) then
    raise(1, fname, "sharding.identity must be a non-empty string without ','")
  end
  local margin = argcheck.number(sh, "margin", fname, 2, 0)
  local shard
  local elector = leaderelection.new{ client = client, namespace = ns, identity = identity,
    lease_name = lease_name(sh.group, identity),
    lease_duration = sh.lease_duration, renew_deadline = sh.renew_deadline,
    retry_period = sh.retry_period, clock = function() return clock.now() end,
    labels = { [GROUP_LABEL] = sh.group },
    annotations = function() return shard:annotations() end }
  shard = _M.new{ group = sh.group, namespace = ns, identity = identity, margin = margin,
                  elector = elector }
  return shard
end

local LEASES = { group = "coordination.k8s.io", version = "v1", resource = "leases",
                 namespaced = true }

--- shard:release_expired(sched, client, guard): one task per expiring member's Lease (at a
-- time) that releases it (holderIdentity "") with the resourceVersion seen: a member that
-- renewed meanwhile keeps it (409).
function Shard:release_expired(sched, client, guard)
  local releasing = self.releasing
  for _, lease in ipairs(self.expiring) do
    local name = lease.metadata.name
    if not releasing[name] then
      releasing[name] = true
      local copy = core.to_table(lease)
      copy.spec.holderIdentity = ""
      copy.metadata.annotations = copy.metadata.annotations or {}
      copy.metadata.annotations[RING_ANNOTATION] = ""
      local who = tostring(lease.spec.holderIdentity)
      sched:spawn(function()
        return client:update(LEASES, copy, { namespace = self.namespace, timeout = 5 })
      end, { name = "release " .. name, guard = guard, on_done = function(ok, res)
        releasing[name] = nil
        if ok and res then
          core.log("info", "manager: shard member " .. who .. " silent past its lease: its " ..
            "Lease released, its keys move")
        end
      end })
    end
  end
end

--- shard:annotations() -> the annotations the elector writes on this replica's Lease
function Shard:annotations()
  return { [RING_ANNOTATION] = self.ack or "" }
end

--- shard:update(now, on_target) -> changed, seconds until the next update is due.
-- on_target(ring, old_ring) runs when the target ring changed, before it is acknowledged: the
-- manager cancels the reconciles the new ring does not give this replica and queues the keys
-- it takes over.
function Shard:update(now, on_target)
  local live, others, due, expiring = {}, {}, math_huge, {}
  local me_live = self.elector:is_leader()
  local published = false
  local seen = {}
  for _, lease in ipairs(self.store:list()) do
    local md, spec = lease.metadata, lease.spec
    local name = md.name
    seen[name] = true
    local o = self.observed[name]
    if not o or o.rv ~= md.resourceVersion then
      o = { rv = md.resourceVersion, at = now }
      self.observed[name] = o
    end
    local holder = type(spec) == "table" and spec.holderIdentity
    local ann = md.annotations
    local ack = ann and ann[RING_ANNOTATION]
    if holder == self.identity then
      published = self.ack ~= nil and ack == self.ack
    elseif type(holder) == "string" and holder ~= "" then
      -- A member until its Lease is released, by itself (a graceful stop) or by a member that
      -- saw it expire: that release carries the resourceVersion it saw, so a member that
      -- renewed meanwhile (a stale cache here) is never dropped.
      live[#live + 1] = holder
      others[holder] = type(ack) == "string" and ack or ""
      local duration = tonumber(spec.leaseDurationSeconds) or 15
      local expires = o.at + duration + self.margin
      if now >= expires then
        expiring[#expiring + 1] = lease
      elseif expires - now < due then
        due = expires - now
      end
    end
  end
  for name in pairs(self.observed) do
    if not seen[name] then self.observed[name] = nil end
  end
  if me_live then live[#live + 1] = self.identity end
  table_sort(live)
  local target = table_concat(live, ",")
  local changed = false
  if target ~= self.target then
    local old = self.target_ring
    self.target = target
    self.target_ring = ring_of(target)
    self.generation = self.generation + 1
    self.members = live
    changed = true
    if on_target then on_target(self.target_ring, old) end
  end
  if me_live and self.acked ~= target then -- everything the new ring takes away was stopped
    self.acked = target
    self.handovers = self.handovers + 1
    -- numbered: a cache showing an older acknowledgement of the same ring is not taken for
    -- this one
    self.ack = self.handovers .. ":" .. target
    published = false
    self.elector:renew_soon()
    self.renew_wanted = true -- the manager ticks its elector at once (manager/schedule.lua)
    changed = true
  end
  if published ~= self.published then
    self.published = published
    changed = true
  end
  for id, ack in pairs(others) do
    if self.others[id] ~= ack then changed = true end
  end
  for id in pairs(self.others) do
    if others[id] == nil then changed = true end
  end
  self.others = others
  if changed then
    local rs = {}
    for id, ack in pairs(others) do
      if ack ~= "" then rs[id] = ring_of(ack:match("^%d+:(.*)$") or "") end
    end
    self.other_rings = rs
  end
  self.expiring = expiring
  return changed, due
end

--- shard:owns(key) -> whether the target ring gives this replica key
function Shard:owns(key)
  return self.target_ring:owner(key) == self.identity
end

--- shard:decide(key) -> "mine" | "wait" | "not_mine" (see the contract)
function Shard:decide(key)
  if self.target_ring:owner(key) ~= self.identity then return "not_mine" end
  if not self.published or not self.elector:is_leader() then return "wait" end
  for id, ring in pairs(self.other_rings) do
    if ring:owner(key) == id then return "wait" end
  end
  return "mine"
end

--- shard:status() -> { identity, lease, members, ring, generation, handovers, acknowledged,
--   published, others = { identity = acknowledged ring } }
function Shard:status()
  local others = {}
  for id, ack in pairs(self.others) do others[id] = ack end
  return { identity = self.identity, group = self.group, lease = self.namespace .. "/" ..
           lease_name(self.group, self.identity), members = #self.members,
           ring = self.target, generation = self.generation, handovers = self.handovers,
           acknowledged = self.acked, published = self.published, others = others }
end

return _M
