--- kinformer.manager: controllers in a few lines (controller-runtime's Manager). docs/controller.md.
--
-- Contract:
-- - A manager owns a client's shared informers (client:informer: one per resource and scope),
--   its controllers (kinformer.controller), an Event recorder (kinformer.events), optional
--   leader election on a Lease (kinformer.leader_election) and, when kinformer.metrics is
--   installed, a metrics registry (and with metrics_address its HTTP server).
-- - Everything runs on the Lua thread that calls step() / run(), and nothing there waits on
--   the API server: reconciles, the elector's attempts and Event writes run as tasks
--   (kinformer.task) whose REST calls go to the client's I/O thread; step() resumes the tasks
--   whose calls finished, dispatches the informers, starts ready reconciles (up to each
--   controller's max_concurrent_reconciles, never one key twice), serves the metrics server,
--   then returns how long the caller may wait (on mgr:fds()) before the next step is useful:
--   the nearest of a delayed key, the elector's next attempt, the end of the lease, a task's
--   sleep (1 s at most).
-- - Reconciles start once every informer of the controller synced. With leader election the
--   elector starts once every controller synced (a new leader starts warm); only the leader
--   reconciles and writes: every write of a reconcile or of the recorder is checked against
--   leadership right before it is sent (kinformer.task's guard; a refused one fails with
--   err.reason "Fenced"), and the moment leadership ends (the lease lost, or not renewed within
--   renew_deadline, renewal in flight or not) the reconciles in flight are cancelled with their
--   calls, their keys kept for later, and the queued Events dropped. Every replica keeps its
--   caches and its queues (which coalesce); a replica that starts leading enqueues every key
--   its sources map their caches to, at low priority.
-- - Read-your-own-writes: an object a reconcile wrote through the client (any write that
--   returned the object) is not read older than that write by a later reconcile: ctx:get()
--   and the primary handed to a reconcile wait (the task sleeps while the informers catch up)
--   until the cache holds that resourceVersion or a newer one, for up to 2 s, then read
--   the object from the server instead.
-- - run() catches SIGINT / SIGTERM (kinformer.catch_signals): at a signal the reconciles in
--   flight are cancelled (their calls cut), queued Events are written for up to grace_period
--   seconds, the Lease is released (one GET and one update, each within max(1, retry_period)
--   seconds) and the informers stop: run returns within grace_period + 2 x max(1,
--   retry_period) seconds of the signal whatever the API server does. stop() does the same
--   from user code (also from inside a reconcile: it then takes effect when the step ends).
-- - Errors in user code (reconcile, finalize, map, predicates, callbacks) are logged and counted,
--   never raised out of step / run. Wrong arguments raise at the caller's line.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local clock = require "kinformer.clock"
local controller = require "kinformer.controller"
local events = require "kinformer.events"
local leaderelection = require "kinformer.leaderelection"
local task = require "kinformer.task"
local informer = require "kinformer.informer"
local sharding = require "kinformer.sharding"
local ryow = require "kinformer.ryow"
local rbac = require "kinformer.rbac"

local type, tostring, pairs, ipairs, pcall, setmetatable = type, tostring, pairs, ipairs,
  pcall, setmetatable
local math_min, math_max, math_huge, string_format = math.min, math.max, math.huge,
  string.format
local raise = argcheck.raise

local metrics = require "kinformer.metrics" -- its HTTP server (lua-socket) loads on first use

local BATCH = 500       -- informer:dispatch batch per step
local RECONCILES = 50   -- most reconciles started per step
local STEP_BUDGET = 0.2 -- seconds of reconciles per step (the loop then serves the rest)
local MAX_WAIT = 1      -- longest wait step() suggests (fds wake it earlier)
local LOW = -100        -- the work queue priority of keys no change caused (controller-runtime's)

local _M = {}

local Manager = {}
Manager.__index = Manager
_M.Manager = Manager

local KNOWN = { client = true, leader_election = true, metrics_address = true,
  grace_period = true, events = true, log_level = true, sharding = true, rbac = true }
local LE_KNOWN = { lease_name = true, namespace = true, identity = true, lease_duration = true,
  renew_deadline = true, retry_period = true, on_started_leading = true,
  on_stopped_leading = true, on_new_leader = true, release_on_cancel = true }

local function log(level, msg) core.log(level, "manager: " .. msg) end

local function safe_call(name, fn, ...)
  if not fn then return end
  local ok, err = pcall(fn, ...)
  if not ok then log("error", name .. " raised: " .. errtext(err)) end
end

local function setup_metrics(self, address)
  local reg = metrics.registry()
  self._registry = reg
  self._m_total = reg:counter("controller_runtime_reconcile_total",
    "Total number of reconciliations per controller", { "controller", "result" })
  self._m_errors = reg:counter("controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller", { "controller" })
  self._m_time = reg:histogram("controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller", { "controller" },
    { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60 })
  metrics.collect_client(reg, self.client)
  if self._elector then metrics.collect_leader(reg, self._elector) end
  if address then
    local srv, err = metrics.server{ address = address, registry = reg,
      healthz = function() return not self._stopped end,
      readyz = function() return self:synced() end }
    if not srv then return nil, err end
    self._metrics_server = srv
  end
  return true
end

local writes_allowed -- (defined with the tasks below)
local LEVELS = { debug = true, info = true, warn = true, error = true }

--- kinformer.manager{ client = client, leader_election = { lease_name =, namespace =, identity =,
--   lease_duration =, renew_deadline =, retry_period =, on_started_leading =,
--   on_stopped_leading =, on_new_leader = }, metrics_address = "127.0.0.1:8080",
--   grace_period = 5, events = { component =, burst =, refill =, max_queue = },
--   log_level = "info", rbac = { { apiGroups =, resources =, verbs = }, ... } } -> manager
-- log_level: the default logger's level from now on (kinformer.set_logger), unless a logger or
-- a level was set before; false leaves it alone.
function _M.new(opts)
  local F = "manager"
  opts = argcheck.options(opts, KNOWN, F)
  local client = opts.client
  if type(client) ~= "table" or type(client.informer) ~= "function" then
    raise(1, F, "option 'client' (from kinformer.client) required")
  end
  local grace = argcheck.number(opts, "grace_period", F, 5, 0)
  local address = argcheck.string(opts, "metrics_address", F)
  local level = opts.log_level
  if level == nil then level = "info" end
  if level ~= false and not LEVELS[level] then
    raise(1, F, "option 'log_level' must be one of debug, info, warn, error (or false)")
  end
  local self = setmetatable({
    client = client, grace_period = grace, controllers = {}, _order = {},
    _informers = {}, _seen = {}, -- the informers the manager runs, each once
    _synced = false, _started = false, _stopping = false, _stopped = false, _rr = 1,
    _sched = task.scheduler(client._core), _reconciles = {}, -- task -> { c, key, t0 }
    _ryow = ryow.new(client), -- the reconciles' own writes (read-your-own-writes)
    _leading = false, fenced = 0,
    _rbac = rbac.check(opts.rbac, F), -- rules declared for mgr:rbac
  }, Manager)
  self._guard = writes_allowed(self)
  if level and core.default_log_level then core.default_log_level(level) end
  local eopts = opts.events
  if eopts ~= nil and type(eopts) ~= "table" then raise(1, F, "option 'events' must be a table") end
  local ro = { client = client }
  for k, v in pairs(eopts or {}) do ro[k] = v end
  self._recorder = events.recorder(ro)
  local le = opts.leader_election
  if le ~= nil then
    if type(le) ~= "table" then raise(1, F, "option 'leader_election' must be a table") end
    argcheck.options(le, LE_KNOWN, F)
    local lo = {}
    for k, v in pairs(le) do lo[k] = v end
    lo.client = client
    lo.clock = function() return clock.now() end
    lo.on_started_leading = function() safe_call("on_started_leading", le.on_started_leading) end
    lo.on_stopped_leading = function()
      safe_call("on_stopped_leading", le.on_stopped_leading,
        self._stopping and "shutdown" or "lost")
    end
    self._elector = leaderelection.new(lo)
  end
  local sh = opts.sharding
  if sh ~= nil then
    if type(sh) ~= "table" then raise(1, F, "option 'sharding' must be a table") end
    if le ~= nil then raise(1, F, "options 'sharding' and 'leader_election' exclude each other") end
    self._shard = sharding.from_options(sh, client, F)
    self._elector = self._shard.elector
  end
  local ok, err = setup_metrics(self, address)
  if not ok then argcheck.fail("manager: metrics server: " .. tostring(err)) end
  if self._shard then -- the members' Leases, cached
    self._shard.store = self:informer{ resource = "leases", namespace = self._shard.namespace,
      label_selector = sharding.GROUP_LABEL .. "=" .. self._shard.group }:store()
    metrics.collect_sharding(self._registry, self)
  end
  return self
end

-- Registers inf with the manager (started now if the manager runs).
local function run_informer(self, inf, who)
  if self._seen[inf] then return end
  self._seen[inf] = true
  self._informers[#self._informers + 1] = inf
  if self._started then -- added to a running manager: it starts now
    local ok, err = inf:start()
    if not ok then argcheck.fail(who .. ": " .. tostring(err)) end
  end
  metrics.collect_informer(self._registry, inf)
end

--- mgr:controller{ name, resource, namespace, label_selector, owns, watches, predicates,
--   finalizer, finalize, reconcile, rate_limiter, max_concurrent_reconciles } -> controller
--   (docs/controller.md)
function Manager:controller(spec)
  if self._stopping then raise(1, "controller", "the manager has stopped") end
  local c = controller.new(self, spec)
  self.controllers[c.name] = c
  self._order[#self._order + 1] = c.name
  for _, inf in ipairs(c:informers()) do run_informer(self, inf, "controller " .. c.name) end
  metrics.collect_workqueue(self._registry, c.name, c.queue)
  self._synced = false
  return c
end

--- mgr:informer{ resource =, namespace =, label_selector =, ... } -> informer: the client's
-- shared informer with these options (client:informer), run by the manager: started with it
-- (at once if it runs) and dispatched by its steps. The way to the caches a manager keeps for
-- maps and reconciles (an informer nobody starts stays empty).
function Manager:informer(opts)
  if self._stopping then raise(1, "informer", "the manager has stopped") end
  if type(opts) ~= "table" then raise(1, "informer", "options table expected") end
  local inf, err = self.client:informer(opts)
  if not inf then argcheck.fail("manager: informer: " .. tostring(err)) end
  run_informer(self, inf, "informer")
  self._synced = false
  return inf
end

--- mgr:store(resource [, opts]) -> the store of mgr:informer{ resource = resource, ... }
function Manager:store(resource, opts)
  local o = { resource = resource }
  for k, v in pairs(opts or {}) do o[k] = v end
  return self:informer(o):store()
end

--- mgr:start() -> true | nil, err: starts the informers (step and run call it).
function Manager:start()
  if self._stopped then return nil, "the manager has stopped", "ECLOSED" end
  for _, inf in ipairs(self._informers) do
    local ok, err, code = inf:start()
    if not ok then return nil, err, code end
  end
  self._started = true
  return true
end

--- mgr:synced() -> every controller's informers synced (what /readyz reports)
function Manager:synced()
  if self._synced then return true end
  for _, name in ipairs(self._order) do
    if not self.controllers[name]:synced() then return false end
  end
  for _, inf in ipairs(self._informers) do
    if not inf:has_synced() then return false end
  end
  self._synced = self._started
  return self._synced
end

--- mgr:wait_for_sync([timeout]) -> true | nil, err: starts the informers and dispatches them
-- (handlers fill the queues; no reconcile, no lease attempt) until every controller's informers
-- synced. For scripts that report "started" before they compete for the lease; step / run do
-- not need it.
function Manager:wait_for_sync(timeout)
  if timeout ~= nil and not (type(timeout) == "number" and timeout >= 0) then
    raise(1, "wait_for_sync", "number of seconds >= 0 expected")
  end
  local ok, err, code = self:start()
  if not ok then return nil, err, code end
  local deadline = clock.now() + (timeout or math_huge)
  while not self:synced() do
    for _, inf in ipairs(self._informers) do inf:dispatch(BATCH) end
    if self:synced() then break end
    if clock.now() >= deadline then
      for _, inf in ipairs(self._informers) do
        if not inf:has_synced() then return nil, inf:_not_synced(timeout), "ETIMEDOUT" end
      end
      return nil, "manager: handlers not synced after " .. tostring(timeout) .. "s", "ETIMEDOUT"
    end
    local r, sig = core.wait(self:fds(), math_min(0.1, deadline - clock.now()))
    if r == "signal" then -- kept for run, which then shuts down at once
      self._signal = sig
      return nil, "interrupted by " .. sig, sig
    end
  end
  return true
end

--- mgr:is_leader() -> true when this replica may reconcile and write (always, without leader
-- election)
function Manager:is_leader()
  return not self._elector or self._elector:is_leader()
end

local function observe(self, c, result, seconds)
  self._m_total:inc({ controller = c.name, result = result }, 1)
  if result == "error" then self._m_errors:inc({ controller = c.name }, 1) end
  self._m_time:observe({ controller = c.name }, seconds)
end

--- mgr:_fresh(gk, key, store, resource) -> the object to act on | nil (gone) | nil, err
-- (kinformer.ryow: store's copy, or the manager's own newer write)
function Manager:_fresh(gk, key, store, resource)
  return self._ryow:fresh(gk, key, store, resource)
end

-- Once a second: forget what the caches caught up with long ago, name unstarted informers.
local function housekeeping(self, now)
  if now < (self._prune_at or 0) then return end
  self._prune_at = now + 1
  informer.warn_unstarted(self.client, 1)
  self._ryow:prune(now)
end

-- ---- the tasks ----

function writes_allowed(self)
  return function(method)
    if method == "GET" then return true end
    if self._stopping then self.fenced = self.fenced + 1 return nil, "the manager is stopping" end
    if not self:is_leader() then self.fenced = self.fenced + 1 return nil, "not the leader" end
    return true
  end
end

-- Cancels every reconcile in flight: its call is cut, its key kept (queued again unless the
-- queue shut down).
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

--- mgr:step() -> seconds the caller may wait before the next step (0: work is ready) | nil,
-- "stopped" | nil, err (the informers could not start). Never blocks on a wait: for event
-- loops (wait on mgr:fds()) and OpenResty timers.
function Manager:step()
  if self._stopped then return nil, "stopped" end
  if self._in_step then raise(1, "step", "called from inside the manager's own step") end
  self._in_step = true
  local ok, w, err, code = pcall(self._step, self)
  self._in_step = false
  if not ok then error(w, 0) end
  if self._stop_requested then self:_shut_down(self._stop_requested) end
  if self._stopped and w then return nil, "stopped" end
  return w, err, code
end

function Manager:_step()
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

--- mgr:fds() -> the file descriptors step() has work for when readable (the informers', the
-- client's finished calls', the metrics server's)
function Manager:fds()
  local out = {}
  for _, inf in ipairs(self._informers) do
    if not inf:is_stopped() then out[#out + 1] = inf:fd() end
  end
  out[#out + 1] = self._sched:fd()
  if self._metrics_server then -- the listener and each open connection (a slow client's rest)
    for _, fd in ipairs(self._metrics_server:fds()) do out[#out + 1] = fd end
  end
  return out
end

-- Runs the scheduler until fn() is true or the deadline passed (shutdown only).
local function drive_until(self, fn, deadline)
  while not fn() and clock.now() < deadline do
    local w = self._sched:step()
    if fn() then break end
    local left = deadline - clock.now()
    if left <= 0 then break end
    core.wait({ self._sched:fd() }, math_min(w, left, 0.05))
  end
end

function Manager:_shut_down(reason)
  if self._stopped then return end
  self._stopping = true
  cancel_reconciles(self, "shutting down")
  if self._elector_task then
    self._sched:cancel(self._elector_task)
    self._elector_task = nil
  end
  for _, name in ipairs(self._order) do self.controllers[name].queue:shut_down() end
  local deadline = clock.now() + self.grace_period
  if self:is_leader() then
    while self._recorder:pending() > 0 and clock.now() < deadline do
      flush_events(self)
      drive_until(self, function() return self._events_task == nil end, deadline)
      if self._recorder:pending() > 0 and self._events_task == nil then
        break -- nothing written: the server is unreachable
      end
    end
  end
  if self._events_task then self._sched:cancel(self._events_task) end
  if self._elector then self._elector:stop() end
  for _, name in ipairs(self._order) do self.controllers[name]:_shut_down() end
  for _, inf in ipairs(self._informers) do inf:stop() end
  if self._metrics_server then self._metrics_server:close() end
  self._stopped = true
  self._reason = reason
  log("info", "stopped (" .. errtext(reason) .. ")")
end

--- mgr:stop([reason]) -> graceful shutdown (see the contract); from inside a reconcile it takes
-- effect when the step ends.
function Manager:stop(reason)
  reason = reason or "stopped"
  if self._in_step then
    self._stop_requested = self._stop_requested or reason
    return
  end
  self:_shut_down(reason)
end

--- mgr:run{ timeout = seconds } -> reason: "SIGINT" / "SIGTERM", "timeout", "stopped"
-- (mgr:stop was called), or nil, err when the informers cannot start. Blocks; shuts down
-- gracefully before it returns.
function Manager:run(opts)
  opts = argcheck.options(opts, { timeout = true }, "run")
  local timeout = argcheck.number(opts, "timeout", "run", math_huge, 0)
  if self._stopped then return nil, "the manager has stopped" end
  local ok, err, code = self:start()
  if not ok then return nil, err, code end
  local was = core.catch_signals(true)
  self._catching = true
  local deadline = clock.now() + timeout
  local function loop()
    if self._signal then return self._signal end
    while true do
      local w, serr = self:step()
      if self._stopped then return self._reason end
      if not w then return nil, serr end
      if self._signal then return self._signal end
      local left = deadline - clock.now()
      if left <= 0 then return "timeout" end
      local r, sig = core.wait(self:fds(), math_min(w, left))
      if r == "signal" then return sig end
    end
  end
  local pok, reason, rerr = pcall(loop)
  self._catching = false
  if pok and reason then self:_shut_down(reason) end
  if not was then core.catch_signals(false) end
  if not pok then error(reason, 0) end
  return reason, rerr
end

-- The shard's status with the keys of the primaries this replica owns now.
function Manager:_shard_status()
  local st = self._shard:status()
  local owned, total = 0, 0
  for _, name in ipairs(self._order) do
    for _, key in ipairs(self.controllers[name].primary:store():list_keys()) do
      total = total + 1
      if self._shard:owns(key) then owned = owned + 1 end
    end
  end
  st.keys_owned, st.keys = owned, total
  return st
end

--- mgr:rbac([opts]) -> the RBAC rules the manager needs, or their manifests (kinformer.rbac)
function Manager:rbac(opts) return rbac.for_manager(self, opts) end

--- mgr:recorder() -> the manager's Event recorder (kinformer.events)
function Manager:recorder() return self._recorder end

--- mgr:registry() -> the metrics registry (nil without kinformer.metrics)
function Manager:registry() return self._registry end

--- mgr:metrics_address() -> "127.0.0.1:PORT" of the metrics server (nil without one)
function Manager:metrics_address()
  return self._metrics_server and self._metrics_server:address() or nil
end

--- mgr:elector() -> the leader elector (nil without leader election)
function Manager:elector() return self._elector end

--- mgr:status() -> { synced, leader, stopped, controllers = { name = controller:status() },
--   events = recorder:status(), leader_election = elector:status(), fenced, stale_waits,
--   fresh_reads }
function Manager:status()
  local cs = {}
  for _, name in ipairs(self._order) do cs[name] = self.controllers[name]:status() end
  return { synced = self:synced(), leader = self:is_leader(), stopped = self._stopped,
           controllers = cs, events = self._recorder:status(),
           leader_election = self._elector and self._elector:status() or nil,
           fenced = self.fenced, stale_waits = self._ryow.stale_waits,
           fresh_reads = self._ryow.fresh_reads,
           sharding = self._shard and self:_shard_status() or nil }
end

_M.LOW = LOW

return _M
