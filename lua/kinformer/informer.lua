--- kinformer.informer: the shared index informer (client-go SharedIndexInformer),
-- docs/semantics.md, section 5. Reached through client:informer (for_client below shares them
-- per client).
--
-- One informer = one reflector (list + watch on the client's I/O thread) filling a DeltaFIFO whose
-- known objects are the informer's store; dispatch() pops the FIFO, applies the deltas to the
-- store in C (core.processor) and hands each notification to the registered handlers here.
--
-- Handlers: every handler sees its events in order; a handler that raises is logged and counted
-- (status().handler_errors) and never stops the others or the informer. A handler added after
-- start first receives on_add(obj, true) for every object already stored (the replay), then live
-- events; its registration's has_synced() becomes true once the informer synced and the replay
-- was delivered. Handlers run on the thread that calls dispatch / wait_for_sync / kinformer.run.
--
-- Re-entry: a handler may add or remove handlers and stop the informer. The handler list is
-- copied on write, so a delivery walks the list it started with; a registration removed
-- meanwhile, or every registration once the informer stopped, gets nothing more (not even the
-- rest of the event in flight). A handler that dispatches (directly, through wait_for_sync or
-- kinformer.run) is refused with an error: a nested dispatch would deliver later events before
-- the handler returned.
--
-- Resync (client-go rules): the informer's `resync` is both the default handler resync and the
-- resync check period. A handler's own resync of 0 means never; below 1 s it is raised to 1 s;
-- below the check period it lowers the check period before start and is raised to it after.
-- An update whose resourceVersion did not change (a resync, or an unchanged object in a relist)
-- reaches only the handlers whose resync was due at the last check; until a check runs (and
-- always when no resync is configured) that is every handler.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local clock = require "kinformer.clock" -- clock.now is read at each use: a spec may replace it

local type, pairs, ipairs, pcall, error, tostring = type, pairs, ipairs, pcall, error, tostring
local setmetatable, getmetatable, string_format, math_min, math_huge = setmetatable,
  getmetatable, string.format, math.min, math.huge
local wait = core.wait
local log = core.log
local raise, fail = argcheck.raise, argcheck.fail

local ADD, UPDATE, DELETE = 1, 2, 3
local MIN_RESYNC = 1.0 -- client-go's minimumResyncPeriod

local _M = {}

local Informer = {}
Informer.__index = Informer

local Registration = {}
Registration.__index = Registration

-- Options a reflector takes as they are.
local REFLECTOR_OPTS = {
  label_selector = true, field_selector = true, watch_list = true, strip_managed_fields = true,
  page_size = true, idle_timeout = true, watch_timeout = true, backoff_initial = true,
  backoff_max = true, max_object_bytes = true, metadata_only = true, gzip = true,
}
local OWN_OPTS = { resource = true, api_version = true, namespace = true, resync = true,
  transform = true }

-- Checks every option of a client:informer call (shared or not) -> res (the client's
-- resolve) | nil, err, "ENOTFOUND" for an unknown resource name.
local function check_options(client, opts)
  if type(opts) ~= "table" then raise(1, "informer", "table expected, got " .. type(opts)) end
  for k in pairs(opts) do
    if not REFLECTOR_OPTS[k] and not OWN_OPTS[k] then
      raise(1, "informer", "unknown option '" .. tostring(k) .. "'")
    end
  end
  local resync = opts.resync
  if resync ~= nil and not (type(resync) == "number" and resync >= 0) then
    raise(1, "informer", "option 'resync' must be a number of seconds >= 0")
  end
  if opts.transform ~= nil and type(opts.transform) ~= "function" then
    raise(1, "informer", "option 'transform' must be a function")
  end
  local mo = opts.metadata_only
  if mo ~= nil and type(mo) ~= "boolean" then -- part of the share key: checked before sharing
    raise(1, "informer", "option 'metadata_only' must be a boolean, got " .. type(mo))
  end
  local res, err, code = client._mapper:resolve(opts)
  if not res then
    if code == "ENOTFOUND" then return nil, err, code end
    raise(1, "informer", err)
  end
  return res
end

-- The key under which a client shares informers: same resource, namespace, selectors and
-- metadata_only (a metadata-only cache and a full one are two informers, as controller-runtime
-- keeps its metadata cache apart from its structured one).
local function share_key(opts, res)
  -- "m:" cannot collide: every path starts with "/".
  return (opts.metadata_only and "m:" or "") .. res.path .. "?l=" .. (opts.label_selector or "")
    .. "&f=" .. (opts.field_selector or "")
end

local new

--- informer.for_client(client, opts) -> informer | nil, err: client:informer's work. The
-- client's live informer for the same resource, namespace, selectors and metadata_only when
-- there is one (the options that change what is cached must agree, or it raises), else a new one.
function _M.for_client(client, opts)
  local res, rerr, rcode = check_options(client, opts)
  if not res then return nil, rerr, rcode end
  local key = share_key(opts, res)
  local shared = client._informers
  if not shared then
    shared = {}
    client._informers = shared
  end
  local inf = shared[key]
  if inf and not inf:is_stopped() then
    local conflict = inf:_conflict(opts)
    if conflict then raise(1, "informer", conflict) end
    return inf
  end
  local err, code
  inf, err, code = new(client._core, opts, res)
  if not inf then return nil, err, code end
  shared[key] = inf
  return inf
end

-- Creates an informer from checked options.
new = function(client_core, opts, res)
  local resync = opts.resync or 0
  local store = core.store{}
  local fifo = core.delta_fifo{ known_objects = store, emit_replaced = true }
  -- Without a transform the store keeps records exactly as listed, so a relist can reuse the
  -- unchanged ones instead of holding a second copy of the cache.
  local ropts = { path = res.path, fifo = fifo, reuse_known = opts.transform == nil }
  for k in pairs(REFLECTOR_OPTS) do ropts[k] = opts[k] end
  local reflector, err, code = argcheck.call(client_core.reflector, client_core, ropts)
  if not reflector then return nil, err, code end
  local proc, perr, pcode = core.processor(fifo, store, opts.transform)
  if not proc then return nil, perr, pcode end
  local self = setmetatable({
    resource = res.resource, group = res.group, version = res.version, path = res.path,
    namespace = opts.namespace, metadata_only = opts.metadata_only == true,
    _store = store, _fifo = fifo, _reflector = reflector, _proc = proc,
    _handlers = {},           -- registrations, in the order added; replaced, never changed
    _pending = 0,             -- registrations with queued notifications (the replay)
    _default_resync = resync, -- defaultEventHandlerResyncPeriod
    _resync_check = resync,   -- resyncCheckPeriod
    _next_check = math_huge,
    _started = false, _stopped = false,
    _handler_errors = 0, _last_handler_error = nil,
    _strip = opts.strip_managed_fields ~= false, _transform = opts.transform,
  }, Informer)
  self._name = res.resource .. (opts.namespace and (" in " .. opts.namespace) or "")
  self._sink = function(kind, obj, old, initial, is_resync)
    self:_distribute(kind, obj, old, initial, is_resync)
  end
  return self
end

-- ---- delivery ----

local function deliver(self, reg, kind, obj, old, initial)
  local fn, ok, err
  if kind == ADD then
    fn = reg.on_add
    if fn then ok, err = pcall(fn, obj, initial) end
  elseif kind == UPDATE then
    fn = reg.on_update
    if fn then ok, err = pcall(fn, old, obj) end
  else
    fn = reg.on_delete
    if fn then ok, err = pcall(fn, obj) end
  end
  if fn and not ok then
    reg._errors = reg._errors + 1
    self._handler_errors = self._handler_errors + 1
    local what = kind == ADD and "on_add" or kind == UPDATE and "on_update" or "on_delete"
    local msg = string_format("informer %s: handler #%d %s raised: %s", self._name, reg.id, what,
      errtext(err))
    self._last_handler_error = msg
    log("error", msg)
  end
end

function Informer:_distribute(kind, obj, old, initial, is_resync)
  local hs = self._handlers
  for i = 1, #hs do
    if self._stopped then return end -- stopped by a handler
    local reg = hs[i]
    if not reg.removed and (not is_resync or reg.syncing) then
      local q = reg.queue
      if q then
        q[#q + 1] = { kind, obj, old, initial }
      else
        deliver(self, reg, kind, obj, old, initial)
      end
    end
  end
end

-- Delivers up to max queued notifications (the replays); returns how many.
function Informer:_drain(max)
  local n = 0
  for _, reg in ipairs(self._handlers) do
    local q = reg.queue
    if q then
      local pos = reg.qpos
      while pos <= #q and n < max do
        local e = q[pos]
        q[pos] = false
        pos = pos + 1
        n = n + 1
        deliver(self, reg, e[1], e[2], e[3], e[4])
        if reg.queue ~= q or self._stopped then break end -- removed or stopped by a handler
      end
      reg.qpos = pos
      if pos > #q and reg.queue == q then
        reg.queue = nil
        self._pending = self._pending - 1
      end
      if n >= max or self._stopped then break end
    end
  end
  return n
end

-- client-go sharedProcessor.shouldResync: which handlers are due, and whether any is.
function Informer:_should_resync(t)
  local any = false
  for _, reg in ipairs(self._handlers) do
    local due = reg._resync_period > 0 and t >= reg.next_resync
    reg.syncing = due
    if due then
      any = true
      reg.next_resync = t + reg._resync_period
    end
  end
  return any
end

local function dispatch(self, max)
  self._reflector:drain_log() -- the reflector's failure / recovery lines, logged on this thread
  local n = 0
  if self._pending > 0 then n = self:_drain(max) end
  if self._resync_check > 0 then
    local t = clock.now()
    if t >= self._next_check then
      self._next_check = t + self._resync_check
      if self:_should_resync(t) then self._fifo:resync() end
    end
  end
  if n < max then
    n = n + self._proc:dispatch(max - n, #self._handlers > 0 and self._sink or nil)
  end
  if self._pending > 0 then self._proc:signal() end
  return n
end

--- informer:dispatch(max) -> n: processes up to max queued items (default 100) without blocking
-- and runs the handlers; returns how many it processed (0: nothing was pending). Raises when
-- called from inside one of this informer's handlers.
function Informer:dispatch(max)
  if max ~= nil and not (type(max) == "number" and max >= 1) then
    raise(1, "dispatch", "a number >= 1 expected")
  end
  max = max or 100
  if self._dispatching then fail("kinformer: dispatch called from inside a handler") end
  if not self._started or self._stopped then return 0 end
  self._dispatching = true
  -- Protected, so that an error escaping the loop does not leave the informer marked busy.
  local ok, n = pcall(dispatch, self, max)
  self._dispatching = false
  if not ok then error(n, 0) end
  return n
end

-- ---- handlers ----

local function determine_resync(desired, check, name)
  if desired == 0 then return 0 end
  if check == 0 then
    log("warn", string_format("informer %s: handler resync of %gs ignored: the informer was " ..
      "created with resync = 0, so it never resyncs", name, desired))
    return 0
  end
  if desired < check then return check end
  return desired
end

--- informer:add_handler{ on_add = fn(obj, is_in_initial_list), on_update = fn(old, new),
--                        on_delete = fn(obj_or_tombstone), resync = seconds } -> registration
-- | nil, err (the informer stopped). Any subset of the three functions.
function Informer:add_handler(h)
  if type(h) ~= "table" then
    raise(1, "add_handler", "table expected, got " .. type(h))
  end
  for k, v in pairs(h) do
    if k == "on_add" or k == "on_update" or k == "on_delete" then
      if type(v) ~= "function" then
        raise(1, "add_handler", k .. " must be a function")
      end
    elseif k ~= "resync" then
      raise(1, "add_handler", "unknown field '" .. tostring(k) .. "'")
    end
  end
  if self._stopped then
    return nil, "informer " .. self._name .. " has stopped; handler not added", "ECLOSED"
  end
  local resync = h.resync
  if resync == nil then resync = self._default_resync end
  if not (type(resync) == "number" and resync >= 0) then
    raise(1, "add_handler", "resync must be a number of seconds >= 0")
  end
  if resync > 0 then
    if resync < MIN_RESYNC then resync = MIN_RESYNC end
    if resync < self._resync_check then
      if self._started then
        log("warn", string_format("informer %s: handler resync %gs is below the resync check " ..
          "period and is raised to %gs", self._name, resync, self._resync_check))
        resync = self._resync_check
      else
        self._resync_check = resync
        for _, r in ipairs(self._handlers) do
          r._resync_period = determine_resync(r.requested_resync, resync, self._name)
        end
      end
    end
  end
  self._next_id = (self._next_id or 0) + 1
  local t = clock.now()
  local reg = setmetatable({
    informer = self, id = self._next_id,
    on_add = h.on_add, on_update = h.on_update, on_delete = h.on_delete,
    requested_resync = resync,
    _resync_period = determine_resync(resync, self._resync_check, self._name),
    syncing = true, _errors = 0, qpos = 1,
  }, Registration)
  reg.next_resync = t + reg._resync_period
  if self._started then
    -- The replay: every stored object as an initial add, before any live event.
    local q = {}
    for i, obj in ipairs(self._store:list()) do q[i] = { ADD, obj, nil, true } end
    reg.queue = q
    self._pending = self._pending + 1
    self._proc:signal()
  end
  local hs, copy = self._handlers, {}
  for i = 1, #hs do copy[i] = hs[i] end
  copy[#hs + 1] = reg
  self._handlers = copy
  return reg
end

--- informer:remove_handler(reg) -> true: idempotent; also after stop.
function Informer:remove_handler(reg)
  if getmetatable(reg) ~= Registration then
    raise(1, "remove_handler", "registration expected")
  end
  if reg.removed or reg.informer ~= self then return true end
  local hs, copy = self._handlers, {}
  for i = 1, #hs do
    if hs[i] ~= reg then copy[#copy + 1] = hs[i] end
  end
  self._handlers = copy
  if reg.queue then
    reg.queue = nil
    self._pending = self._pending - 1
  end
  reg.removed = true
  return true
end

--- registration:has_synced(): the informer synced and this handler got the initial objects.
function Registration:has_synced()
  return not self.removed and self.queue == nil and self.informer:has_synced()
end

--- The number of times this handler raised.
function Registration:errors()
  return self._errors
end

--- The resync period this handler got (seconds; 0: never), after client-go's adjustments.
function Registration:resync_period()
  return self._resync_period
end

-- ---- indexes and the store ----

--- informer:add_indexers{ name = fn(obj) -> { "value", ... } } -> true | nil, err
-- Before or after start; existing objects are indexed at once.
function Informer:add_indexers(indexers)
  if type(indexers) ~= "table" then
    raise(1, "add_indexers", "table expected, got " .. type(indexers))
  end
  -- A name that exists already is nil, msg, "EEXIST"; a malformed table raises in the store,
  -- re-raised here at the caller's line.
  return argcheck.call(self._store.add_indexers, self._store, indexers)
end

--- informer:store() -> the informer's cache (read-only: get, get_by_key, list, list_keys,
-- by_index, index_keys, list_index_func_values, index, len).
function Informer:store()
  if not self._started and not self._store_taken then
    self._store_taken = clock.now() -- a manager names a store nobody starts (warn_unstarted)
  end
  return self._store
end

--- informer.warn_unstarted(client, grace): logs once per informer of client whose store() was
-- taken more than grace seconds ago while nobody started it (an empty store nobody fills is a
-- trap, not an error: a manager calls this for its client).
function _M.warn_unstarted(client, grace)
  local now = clock.now()
  for _, inf in pairs(client._informers or {}) do
    local t = inf._store_taken
    if t and not inf._started and not inf._stopped and not inf._unstarted_warned
        and now - t >= grace then
      inf._unstarted_warned = true
      core.log("warn", "informer " .. inf._name .. ": its store was taken but the informer " ..
        "was never started: it stays empty (in a manager, mgr:informer{...} returns the " ..
        "informers the manager runs; elsewhere call informer:start())")
    end
  end
end

-- ---- life cycle ----

--- informer:start() -> true | nil, err. Starts listing and watching (on the client's I/O thread).
function Informer:start()
  if self._stopped then return nil, "informer " .. self._name .. " has stopped", "ECLOSED" end
  if self._started then return true end
  local ok, err, code = self._reflector:start()
  if not ok then return nil, err, code end
  self._started = true
  if self._resync_check > 0 then self._next_check = clock.now() + self._resync_check end
  return true
end

--- informer:stop(): stops the watch and the handlers for good (a stopped informer stays stopped).
function Informer:stop()
  if self._stopped then return end
  self._stopped = true
  self._reflector:stop()
  self._fifo:close()
  self._proc:signal()
  if self._on_stop then self._on_stop(self) end
end

function Informer:is_stopped()
  return self._stopped
end

--- informer:has_synced(): the initial list was delivered to the store (and the handlers).
--- informer:mirror(segment, slot) -> true | nil, err, code: also write every change of the
-- cache into the shared store in slot `slot` (1-16) of `segment` (kinformer.core.shm), where
-- other processes read it. For kinformer.ngx's shared model; call it before start().
function Informer:mirror(segment, slot)
  return self._proc:mirror(segment, slot)
end

--- informer:mirror_retain() -> true | nil, err, code: once synced, drops from the shared store
-- what a previous writer left there and this informer's list did not bring.
function Informer:mirror_retain()
  return self._proc:mirror_retain()
end

function Informer:has_synced()
  return self._started and self._fifo:has_synced()
end

function Informer:last_sync_resource_version()
  if not self._started then return "" end
  return self._reflector:last_sync_resource_version()
end

--- informer:resync_check_period() -> seconds (0: the informer never resyncs).
function Informer:resync_check_period()
  return self._resync_check
end

--- informer:fd() -> a file descriptor that is readable while work is pending (for event loops).
function Informer:fd()
  return self._proc:fd()
end

-- Why the informer is not synced, for wait_for_sync.
function Informer:_not_synced(waited)
  local st = self._reflector:status()
  local why
  if st.last_error then
    why = st.last_error
  elseif st.listed then
    why = "the initial list is still being processed"
  else
    why = "the initial list has not completed (" .. (st.phase or "?") .. ")"
  end
  return string_format("informer %s not synced after %gs: %s", self._name, waited, why)
end

--- informer:wait_for_sync(timeout) -> true | nil, err. Dispatches while it waits (handlers run);
-- err says why it is not synced (e.g. "... 403 Forbidden: pods is forbidden ...").
function Informer:wait_for_sync(timeout)
  if timeout ~= nil and not (type(timeout) == "number" and timeout >= 0) then
    raise(1, "wait_for_sync", "number of seconds >= 0 expected")
  end
  if not self._started then
    return nil, "informer " .. self._name .. " is not started", "EINVAL"
  end
  local t0 = clock.now()
  local deadline = timeout and t0 + timeout or math_huge
  local fds = { self:fd() }
  while true do
    self:dispatch(1000)
    if self._stopped then
      return nil, "informer " .. self._name .. " stopped before it synced", "ECLOSED"
    end
    if self:has_synced() and self._pending == 0 then return true end
    local left = deadline - clock.now()
    if left <= 0 then return nil, self:_not_synced(timeout), "ETIMEDOUT" end
    wait(fds, math_min(left, 0.1))
  end
end

--- informer:status() -> table (see docs/informer.md).
function Informer:status()
  local st = self._reflector:status()
  local p = self._proc:status()
  local ix = self._store:status()
  local resyncs = {} -- each handler's effective resync, in the order added
  for i, reg in ipairs(self._handlers) do resyncs[i] = reg._resync_period end
  return {
    resource = self.resource, namespace = self.namespace,
    started = self._started, stopped = self._stopped, synced = self:has_synced(),
    phase = self._stopped and "stopped" or st.phase,
    resource_version = st.resource_version,
    last_error = st.last_error, last_error_code = st.last_error_code,
    last_error_reason = st.last_error_reason, last_error_age = st.last_error_age,
    last_event_age = st.last_event_age,
    lists = st.lists, relists = st.relists, watches = st.watches,
    watch_restarts = st.watch_restarts, watch_events = st.events, errors = st.errors,
    bytes = st.bytes,
    queue_length = p.queue_length, queued_deltas = p.queued_deltas,
    queued_bytes = p.queued_bytes, objects = self._store:len(),
    adds = p.adds, updates = p.updates, deletes = p.deletes,
    processing_errors = p.errors, last_processing_error = p.last_error,
    index_errors = ix.index_errors, last_index_error = ix.last_index_error,
    handlers = #self._handlers, handler_errors = self._handler_errors,
    last_handler_error = self._last_handler_error,
    resync_check_period = self._resync_check, handler_resyncs = resyncs,
  }
end

-- The options that change what is cached: a shared informer must agree on them.
function Informer:_conflict(opts)
  if (opts.strip_managed_fields ~= false) ~= self._strip then
    return "strip_managed_fields differs from the shared informer's"
  end
  -- A caller without a transform expects whole objects: absent vs present differs too.
  if opts.transform ~= self._transform then
    return "transform differs from the shared informer's"
  end
end

_M.Informer = Informer
_M.Registration = Registration

--- kinformer.run({ informers... }, { timeout = s, done = fn }) -> reason
-- reason: "done", "timeout", "stopped" (every informer stopped), "SIGINT" or "SIGTERM".
function _M.run(informers, opts)
  if type(informers) ~= "table" then
    raise(1, "run", "list of informers expected")
  end
  if getmetatable(informers) == Informer then informers = { informers } end
  opts = opts or {}
  if type(opts) ~= "table" then raise(2, "run", "table expected") end
  local timeout, done = opts.timeout, opts.done
  if timeout ~= nil and not (type(timeout) == "number" and timeout >= 0) then
    raise(2, "run", "timeout must be a number of seconds >= 0")
  end
  if done ~= nil and type(done) ~= "function" then
    raise(2, "run", "done must be a function")
  end
  local fds = {}
  for i, inf in ipairs(informers) do
    if getmetatable(inf) ~= Informer then
      raise(1, "run", "item " .. i .. " is not an informer")
    end
    fds[i] = inf:fd()
  end
  local deadline = timeout and clock.now() + timeout or math_huge
  local BATCH = 500
  local function loop()
    while true do
      local busy, live = false, false
      for _, inf in ipairs(informers) do
        if not inf._stopped then
          live = true
          if inf:dispatch(BATCH) >= BATCH then busy = true end
        end
      end
      if not live then return "stopped" end
      if done and done() then return "done" end
      local left = deadline - clock.now()
      if left <= 0 then return "timeout" end
      local r, sig = wait(fds, busy and 0 or math_min(left, 0.1))
      if r == "signal" then return sig end
    end
  end
  local was_catching = core.catch_signals(true)
  local ok, reason = pcall(loop)
  if not was_catching then core.catch_signals(false) end
  if not ok then error(reason, 0) end
  return reason
end

return _M
