--- kinformer.manager: controllers in a few lines (controller-runtime's Manager). docs/controller.md.
--
-- Contract:
-- - A manager owns a client's shared informers (client:informer: one per resource and scope),
--   its controllers (kinformer.controller), an Event recorder (kinformer.events), optional
--   leader election on a Lease (kinformer.leader_election) or sharding (kinformer.sharding) and,
--   when kinformer.metrics is installed, a metrics registry (and with metrics_address its HTTP
--   server). This file builds it, registers its controllers and informers and answers about it.
-- - Everything runs on the Lua thread that calls step() / run(), and nothing there waits on
--   the API server: reconciles, the elector's attempts and Event writes run as tasks
--   (kinformer.task) whose REST calls go to the client's I/O thread. What a step does, when
--   reconciles start and how leadership fences writes: kinformer.manager.schedule.
-- - Read-your-own-writes: an object a reconcile wrote through the client (any write that
--   returned the object) is not read older than that write by a later reconcile: ctx:get()
--   and the primary handed to a reconcile wait (the task sleeps while the informers catch up)
--   until the cache holds that resourceVersion or a newer one, for up to 2 s, then read
--   the object from the server instead.
-- - run() catches SIGINT / SIGTERM and shuts down gracefully at a signal, stop() from user code
--   (also from inside a reconcile: it then takes effect when the step ends); how, and within
--   which time: kinformer.manager.lifecycle.
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
local sharding = require "kinformer.sharding"
local ryow = require "kinformer.ryow"
local rbac = require "kinformer.rbac"
local schedule = require "kinformer.manager.schedule"
local lifecycle = require "kinformer.manager.lifecycle"

local type, tostring, pairs, ipairs, pcall, setmetatable = type, tostring, pairs, ipairs,
  pcall, setmetatable
local math_min, math_huge = math.min, math.huge
local raise = argcheck.raise

local metrics = require "kinformer.metrics" -- its HTTP server (lua-socket) loads on first use

local BATCH = schedule.BATCH -- informer:dispatch batch per step

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
  self._guard = schedule.writes_allowed(self)
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

--- mgr:_fresh(gk, key, store, resource) -> the object to act on | nil (gone) | nil, err
-- (kinformer.ryow: store's copy, or the manager's own newer write)
function Manager:_fresh(gk, key, store, resource)
  return self._ryow:fresh(gk, key, store, resource)
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

-- One step's work (kinformer.manager.schedule)
Manager._step = schedule.step

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

-- The graceful shutdown (kinformer.manager.lifecycle): at a signal in run, at mgr:stop
Manager._shut_down = lifecycle.shut_down

--- mgr:stop([reason]) -> graceful shutdown (see kinformer.manager.lifecycle); from inside a
-- reconcile it takes effect when the step ends.
Manager.stop = lifecycle.stop

--- mgr:run{ timeout = seconds } -> reason: "SIGINT" / "SIGTERM", "timeout", "stopped"
-- (mgr:stop was called), or nil, err when the informers cannot start. Blocks; shuts down
-- gracefully before it returns.
Manager.run = lifecycle.run

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

_M.LOW = schedule.LOW

return _M
