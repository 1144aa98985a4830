--- kinformer.manager.schedule (internal): what one step of a manager does, and the tasks it
-- runs: reconciles, the elector's attempts, Event writes.
--
-- Contract:
-- - step(mgr) is the body of mgr:step() (kinformer.manager) and runs on the thread that calls
--   it, never waiting on the API server: reconciles, the elector's attempts and Event writes run
--   as tasks (kinformer.task) on the manager's scheduler, whose REST calls go to the client's
--   I/O thread. A step resumes the tasks whose calls finished, dispatches the informers, starts
--   ready reconciles (up to each controller's max_concurrent_reconciles, never one key twice),
--   serves the metrics server, then returns how long the caller may wait (on mgr:fds()) before
--   the next step is useful: the nearest of a delayed key, the elector's next attempt, the end
--   of the lease, a task's sleep (1 s at most).
-- - Reconciles start once every informer of the controller synced. With leader election the
--   elector starts once every controller synced (a new leader starts warm); only the leader
--   reconciles and writes: every write of a reconcile or of the recorder is checked against
--   leadership right before it is sent (kinformer.task's guard: writes_allowed(mgr) for
--   reconciles, counting the refused ones in mgr.fenced; a refused one fails with err.reason
--   "Fenced"), and the moment leadership ends (the lease lost, or not renewed within
--   renew_deadline, renewal in flight or not) the reconciles in flight are cancelled with their
--   calls, their keys kept for later, and the queued Events dropped. Every replica keeps its
--   caches and its queues (which coalesce); a replica that starts leading enqueues every key
--   its sources map their caches to, at low priority (LOW).
-- - A sharded manager reconciles only the keys its shard owns: keys handed over are cancelled,
--   keys taken over enqueued, keys whose handover is not acknowledged yet parked.
-- - Keeps the manager's task bookkeeping (mgr._reconciles, _elector_task, _events_task,
--   _elector_due, _rr, _prune_at) up to date; the manager's shutdown
--   (kinformer.manager.lifecycle) uses cancel_reconciles and flush_events.
local core = require "kinformer.core"
local errtext = require "kinformer.errtext"
local clock = require "kinformer.clock"
local informer = require "kinformer.informer"

local pairs, ipairs = pairs, ipairs
local math_min, math_max, string_format = math.min, math.max, string.format

local BATCH = 500       -- informer:dispatch batch per step
local RECONCILES = 50   -- most reconciles started per step
local STEP_BUDGET = 0.2 -- seconds of reconciles per step (the loop then serves the rest)
local MAX_WAIT = 1      -- longest wait step() suggests (fds wake it earlier)
local LOW = -100        -- the work queue priority of keys no change caused (controller-runtime's)

local _M = { BATCH = BATCH, LOW = LOW }

local function log(level, msg) core.log(level, "manager: " .. msg) end

local function observe(self, c, result, seconds)
  self._m_total:inc({ controller = c.name, result = result }, 1)
  if result == "error" then self._m_errors:inc({ controller = c.name }, 1) end
  self._m_time:observe({ controller = c.name }, seconds)
end

-- Once a second: forget what the caches caught up with long ago, name unstarted informers.
local function housekeeping(self, now)
  if now < (self._prune_at or 0) then return end
  self._prune_at = now + 1
  informer.warn_unstarted(self.client, 1)
  self._ryow:prune(now)
end

--- schedule.writes_allowed(mgr) -> the guard of the manager's writes (kinformer.task's guard)
function _M.writes_allowed(self)
  return function(method)
    if method == "GET" then return true end
    if self._stopping then self.fenced = self.fenced + 1 return nil, "the manager is stopping" end
    if not self:is_leader() then self.fenced = self.fenced + 1 return nil, "not the leader" end
    return true
  end
end

--- schedule.cancel_reconciles(mgr, why[, only]): cancels every reconcile in flight (those
-- whose key only(key) accepts): its call is cut, its key kept (queued again unless the queue
-- shut down, or only was given: keys handed over are another's now). Without only, the
-- Events task is cancelled too.
local function cancel_reconciles(self, why, only)
  local n = 0
  for t in pairs(self._reconciles) do
    local c, key = t.a, t.b
    if not only or only(key) then
      self._sched:cancel(t)
      self._reconciles[t] = nil
      c.active = c.active - 1
      if not only then c.queue:add(key, LOW) end -- (keys handed over are another's now)
      c.queue:done(key)
      n = n + 1
    end
  end
  if n > 0 then log("info", string_format("%d reconcile(s) in flight cancelled: %s", n, why)) end
  if only then return end
  if self._events_task then
    self._sched:cancel(self._events_task)
    self._events_task = nil
  end
end
_M.cancel_reconciles = cancel_reconciles

-- A reconcile task's function (a = the controller, b = the key)
local function run_process(c, key) return c:process(key, c.manager._recorder) end

-- Its end (not after a cancel)
local function reconcile_done(ok, result, t)
  local c, key = t.a, t.b
  local self = c.manager
  self._reconciles[t] = nil
  c.active = c.active - 1
  if not ok then -- process protects user code: this is the manager's own failure
    log("error", "reconcile " .. key .. " of " .. c.name .. " failed: " .. errtext(result))
    c.queue:add_rate_limited(key)
    c.queue:done(key)
    result = "error"
  end
  observe(self, c, result, clock.now() - t.started)
end

local function start_reconcile(self, c, key)
  c.active = c.active + 1
  local opts = c._task_opts
  if not opts then
    opts = { name = c.name, guard = self._guard, on_done = reconcile_done,
             on_write = function(method, _, obj) self._ryow:note(method, obj) end }
    c._task_opts = opts
  end
  local t = self._sched:spawn(run_process, opts, c, key)
  if t then self._reconciles[t] = true end
end

-- Starts ready reconciles round-robin over the controllers, up to each one's concurrency ->
-- whether work remains ready
local function reconcile_some(self)
  local order, n = self._order, #self._order
  if n == 0 then return false end
  local t0 = clock.now()
  local started, idle = 0, 0
  while started < RECONCILES and idle < n do
    local i = self._rr
    self._rr = i % n + 1
    local c = self.controllers[order[i]]
    local key = c.active < c.max_concurrent and c:synced() and c.queue:get(0)
    local decision = key and self._shard and self._shard:decide(key) or "mine"
    if decision == "not_mine" then -- another replica's: dropped (a ring change enqueues again)
      c.queue:forget(key)
      c.queue:done(key)
    elseif decision == "wait" then -- its handover is not acknowledged yet: parked
      c._parked[key] = true
      c.queue:done(key)
    elseif key then
      idle = 0
      start_reconcile(self, c, key)
      started = started + 1
      if self._catching then
        local sig = core.take_signal()
        if sig then
          self._signal = sig
          return false
        end
      end
      if self._stop_requested or not self:is_leader() or clock.now() - t0 >= STEP_BUDGET then
        break
      end
    else
      idle = idle + 1
    end
  end
  for _, name in ipairs(order) do
    local c = self.controllers[name]
    if c.active < c.max_concurrent and c.queue:next_due() == 0 then return true end
  end
  return false
end

-- The elector's attempts run in a task of their own: a slow API server delays the renewal, not
-- the loop (and is_leader() turns false at the renew deadline meanwhile).
local function tick_elector(self)
  if self._elector_task then return end
  local t
  t = self._sched:spawn(function() return self._elector:tick() end, {
    name = "leader election",
    on_done = function(ok, due)
      self._elector_task = nil
      if not ok then log("error", "leader election raised: " .. errtext(due)) due = 1 end
      self._elector_due = clock.now() + (due or 1)
    end })
  if t then self._elector_task = t end
end

--- schedule.flush_events(mgr): starts a task writing the recorder's queued Events, unless one
-- runs or none is queued (mgr._events_task while it runs).
local function flush_events(self)
  if self._events_task or self._recorder:pending() == 0 then return end
  local t
  t = self._sched:spawn(function() return self._recorder:flush(10) end, {
    name = "events", guard = function(method)
      if method ~= "GET" and not self:is_leader() then return nil, "not the leader" end
      return true
    end,
    on_done = function(ok, err)
      self._events_task = nil
      if not ok then log("error", "writing Events raised: " .. errtext(err)) end
    end })
  if t then self._events_task = t end
end
_M.flush_events = flush_events

-- Leadership changes seen by the loop (the elector's callbacks run inside its task).
local function follow_leadership(self)
  local leading = self:is_leader()
  if leading == self._leading then return leading end
  self._leading = leading
  if leading then
    if not self._elector then return leading end -- the informers' adds queued every key
    log("info", "leading: every key is enqueued once")
    for _, name in ipairs(self._order) do self.controllers[name]:enqueue_all(LOW) end
  else
    log("warn", "not the leader any more: reconciles and writes stop")
    cancel_reconciles(self, "leadership lost")
    local n = self._recorder:discard()
    if n > 0 then log("info", n .. " queued Event(s) dropped: written by the leader only") end
  end
  return leading
end

--- schedule.step(mgr) -> seconds the caller may wait | nil, err, code (the informers could not
-- start): one step (mgr:step() wraps it).
function _M.step(self)
  if not self._started then
    local ok, err, code = self:start()
    if not ok then return nil, err, code end
  end
  local busy = false
  local sleep = self._sched:step() -- tasks whose calls finished go on
  for _, inf in ipairs(self._informers) do
    if not inf:is_stopped() and inf:dispatch(BATCH) >= BATCH then busy = true end
  end
  local now = clock.now()
  local due = math_min(MAX_WAIT, sleep)
  -- Once every informer synced the manager works on; an informer added later (mgr:informer,
  -- ctx:get of another resource) holds back only what reads it.
  if not self._ever_synced then self._ever_synced = self:synced() end
  local synced = self._ever_synced
  local el = self._elector
  if synced and el and not self._stopping then
    if now >= (self._elector_due or 0) then tick_elector(self) end
    if not self._elector_task then -- (an attempt in flight wakes the loop when its call ends)
      due = math_min(due, math_max(0, (self._elector_due or now) - now))
    end
  end
  local leading = synced and follow_leadership(self)
  if synced and self._shard and not self._stopping then
    local me = self._shard.identity
    local changed, sdue = self._shard:update(clock.now(), function(ring, old)
      cancel_reconciles(self, "keys handed over", function(key) return ring:owner(key) ~= me end)
      -- the keys this replica takes over: their last owner may have been cut short
      local function taken(key) return ring:owner(key) == me and old:owner(key) ~= me end
      for _, name in ipairs(self._order) do self.controllers[name]:enqueue_all(0, taken) end
    end)
    if changed then
      for _, name in ipairs(self._order) do self.controllers[name]:unpark() end
    end
    if self._shard.renew_wanted then -- an acknowledgement to publish: no wait for the period
      self._shard.renew_wanted = false
      self._elector_due = 0
      due = 0
    end
    self._shard:release_expired(self._sched, self.client, self._guard)
    due = math_min(due, sdue)
  end
  if leading and el then
    local until_ = el:leading_until()
    if until_ then due = math_min(due, math_max(0, until_ - clock.now())) end
  end
  if leading and not self._stopping and not self._stop_requested then
    if reconcile_some(self) then busy = true end
    for _, name in ipairs(self._order) do
      local c = self.controllers[name]
      if c.active < c.max_concurrent then due = math_min(due, c.queue:next_due()) end
    end
  end
  if leading then flush_events(self) end
  housekeeping(self, now)
  if self._metrics_server then self._metrics_server:step() end
  if busy then return 0 end
  return math_max(0, due)
end

return _M
