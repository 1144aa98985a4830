--- kinformer.manager: controllers in a few lines (controller-runtime's Manager). docs/controller.md.
--
-- Contract:
-- - A manager owns a client's shared informers (client:informer: one per resource and scope),
--   its controllers (kinformer.controller), an Event recorder (kinformer.events), optional
--   leader election on a Lease (kinformer.leader_election) and, when kinformer.metrics is
--   installed, a metrics registry (and with metrics_address its HTTP server).
-- - Everything runs on the Lua thread that calls step() / run(): informer handlers, reconciles,
--   Event writes, the elector's attempts and the metrics server's requests, one at a time.
--   step() never waits: it dispatches the informers, ticks the elector, runs the reconciles that
--   are ready (up to a batch), writes queued Events and serves pending metrics requests, then
--   returns how long the caller may wait (on mgr:fds()) before the next step is useful.
-- - Reconciles start once every informer of the controller synced. With leader election the
--   elector starts once every controller synced (a new leader starts warm); only the leader
--   reconciles, and leadership is checked before each reconcile (a lost lease stops reconciling
--   at once); every replica keeps its caches and its queues (which coalesce), and a new leader
--   enqueues every key its sources map their caches to.
-- - run() catches SIGINT / SIGTERM (kinformer.catch_signals): at a signal, the reconcile in
--   flight finishes (Lua cannot cut it short: its REST calls carry their timeouts), no other
--   starts, queued Events are written for up to grace_period seconds, the Lease is released and
--   the informers stop. stop() does the same from user code (also from inside a reconcile: it
--   then takes effect when that reconcile returns).
-- - Errors in user code (reconcile, finalize, map, predicates, callbacks) are logged and counted,
--   never raised out of step / run. Wrong arguments raise at the caller's line.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local clock = require "kinformer.clock"
local controller = require "kinformer.controller"
local events = require "kinformer.events"
local leaderelection = require "kinformer.leaderelection"

local type, tostring, pairs, ipairs, pcall, setmetatable = type, tostring, pairs, ipairs,
  pcall, setmetatable
local math_min, math_huge, string_format = math.min, math.huge, string.format
local raise = argcheck.raise

local metrics = require "kinformer.metrics" -- its HTTP server (lua-socket) loads on first use

local BATCH = 500       -- informer:dispatch batch per step
local RECONCILES = 50   -- most reconciles per step
local STEP_BUDGET = 0.2 -- seconds of reconciles per step (the loop then serves the rest)
local MAX_WAIT = 0.1    -- longest wait step() suggests: bounds how late a delayed item starts

local _M = {}

local Manager = {}
Manager.__index = Manager
_M.Manager = Manager

local KNOWN = { client = true, leader_election = true, metrics_address = true,
  grace_period = true, events = true }
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

--- kinformer.manager{ client = client, leader_election = { lease_name =, namespace =, identity =,
--   lease_duration =, renew_deadline =, retry_period =, on_started_leading =,
--   on_stopped_leading =, on_new_leader = }, metrics_address = "127.0.0.1:8080",
--   grace_period = 30, events = { component =, burst =, refill =, max_queue = } } -> manager
function _M.new(opts)
  local F = "manager"
  opts = argcheck.options(opts, KNOWN, F)
  local client = opts.client
  if type(client) ~= "table" or type(client.informer) ~= "function" then
    raise(1, F, "option 'client' (from kinformer.client) required")
  end
  local grace = argcheck.number(opts, "grace_period", F, 30, 0)
  local address = argcheck.string(opts, "metrics_address", F)
  local self = setmetatable({
    client = client, grace_period = grace, controllers = {}, _order = {},
    _informers = {}, _seen = {}, -- the informers of every controller, each once
    _synced = false, _started = false, _stopping = false, _stopped = false, _rr = 1,
  }, Manager)
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
    lo.on_started_leading = function()
      safe_call("on_started_leading", le.on_started_leading)
      log("info", "leading: every key is enqueued once")
      for _, name in ipairs(self._order) do self.controllers[name]:enqueue_all() end
    end
    lo.on_stopped_leading = function()
      if not self._stopping then log("info", "stopped leading: reconciles paused") end
      safe_call("on_stopped_leading", le.on_stopped_leading,
        self._stopping and "shutdown" or "lost")
    end
    self._elector = leaderelection.new(lo)
  end
  local ok, err = setup_metrics(self, address)
  if not ok then argcheck.fail("manager: metrics server: " .. tostring(err)) end
  return self
end

--- mgr:controller{ name, resource, namespace, label_selector, owns, watches, predicates,
--   finalizer, finalize, reconcile, rate_limiter } -> controller (docs/controller.md)
function Manager:controller(spec)
  if self._stopping then raise(1, "controller", "the manager has stopped") end
  local c = controller.new(self, spec)
  self.controllers[c.name] = c
  self._order[#self._order + 1] = c.name
  for _, inf in ipairs(c:informers()) do
    if not self._seen[inf] then
      self._seen[inf] = true
      self._informers[#self._informers + 1] = inf
      if self._started then -- added to a running manager: its new informers start now
        local ok, err = inf:start()
        if not ok then argcheck.fail("controller " .. c.name .. ": " .. tostring(err)) end
      end
      metrics.collect_informer(self._registry, inf)
    end
  end
  metrics.collect_workqueue(self._registry, c.name, c.queue)
  self._synced = false
  return c
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
    local r, sig = core.wait(self:fds(), math_min(MAX_WAIT, deadline - clock.now()))
    if r == "signal" then -- kept for run, which then shuts down at once
      self._signal = sig
      return nil, "interrupted by " .. sig, sig
    end
  end
  return true
end

--- mgr:is_leader() -> true when this replica may reconcile (always, without leader election)
function Manager:is_leader()
  return not self._elector or self._elector:is_leader()
end

local function observe(self, c, result, seconds)
  self._m_total:inc({ controller = c.name, result = result }, 1)
  if result == "error" then self._m_errors:inc({ controller = c.name }, 1) end
  self._m_time:observe({ controller = c.name }, seconds)
end

-- Runs ready reconciles round-robin over the controllers -> whether work remains ready
local function reconcile_some(self)
  local order, n = self._order, #self._order
  if n == 0 then return false end
  local t0 = clock.now()
  local done = 0
  local idle = 0
  while done < RECONCILES and idle < n do
    local i = self._rr
    self._rr = i % n + 1
    local c = self.controllers[order[i]]
    local key = c:synced() and c.queue:get(0)
    if key then
      idle = 0
      if not self:is_leader() or self._stopping then
        c.queue:add(key) -- kept for when it leads (or dropped by the shut-down queue)
        c.queue:done(key)
        return false
      end
      local t = clock.now()
      local result = c:process(key, self._recorder)
      observe(self, c, result, clock.now() - t)
      done = done + 1
      if self._catching then
        local sig = core.take_signal()
        if sig then
          self._signal = sig
          return false
        end
      end
      if self._stop_requested or clock.now() - t0 >= STEP_BUDGET then break end
    else
      idle = idle + 1
    end
  end
  for _, name in ipairs(order) do
    if self.controllers[name].queue:len() > 0 then return true end
  end
  return false
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
  for _, inf in ipairs(self._informers) do
    if not inf:is_stopped() and inf:dispatch(BATCH) >= BATCH then busy = true end
  end
  local due = MAX_WAIT
  local synced = self:synced()
  if synced and self._elector and not self._stopping then
    due = math_min(due, self._elector:tick())
  end
  if synced and self:is_leader() and not self._stopping and not self._stop_requested then
    if reconcile_some(self) then busy = true end
  end
  if self._recorder:pending() > 0 then self._recorder:flush(10) end
  if self._metrics_server then self._metrics_server:step() end
  if busy then return 0 end
  return due
end

--- mgr:fds() -> the file descriptors step() has work for when readable (the informers', the
-- metrics server's)
function Manager:fds()
  local out = {}
  for _, inf in ipairs(self._informers) do
    if not inf:is_stopped() then out[#out + 1] = inf:fd() end
  end
  if self._metrics_server then -- the listener and each open connection (a slow client's rest)
    for _, fd in ipairs(self._metrics_server:fds()) do out[#out + 1] = fd end
  end
  return out
end

function Manager:_shut_down(reason)
  if self._stopped then return end
  self._stopping = true
  for _, name in ipairs(self._order) do self.controllers[name].queue:shut_down() end
  local deadline = clock.now() + self.grace_period
  while self._recorder:pending() > 0 and clock.now() < deadline do
    if self._recorder:flush(10) == 0 then break end
  end
  if self._elector then self._elector:stop() end
  for _, name in ipairs(self._order) do self.controllers[name]:_shut_down() end
  for _, inf in ipairs(self._informers) do inf:stop() end
  if self._metrics_server then self._metrics_server:close() end
  self._stopped = true
  self._reason = reason
  log("info", "stopped (" .. errtext(reason) .. ")")
end

--- mgr:stop([reason]) -> graceful shutdown (see the contract); from inside a reconcile it takes
-- effect when that reconcile returned.
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
--   events = recorder:status(), leader_election = elector:status() }
function Manager:status()
  local cs = {}
  for _, name in ipairs(self._order) do cs[name] = self.controllers[name]:status() end
  return { synced = self:synced(), leader = self:is_leader(), stopped = self._stopped,
           controllers = cs, events = self._recorder:status(),
           leader_election = self._elector and self._elector:status() or nil }
end

return _M
