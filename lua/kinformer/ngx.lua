--- kinformer.ngx: kinformer inside nginx (libnginx-mod-http-lua or OpenResty, LuaJIT 2.1).
--
-- Life cycle. Informers start in init_worker_by_lua* (never in the master, which forks the workers
-- and runs init_by_lua* again on every reload), one ngx.timer.every per process drives
-- informer:dispatch, kinformer's logger writes to the nginx error log, and the informers stop when
-- the process leaves (reload, quit: the timer fires "premature" and ngx.worker.exiting() is true;
-- exit_worker_by_lua* may call stop() as well). The client's I/O thread starts with the first
-- informer start, so only after fork; it ends when the Lua VM closes at process exit (the
-- client's __gc joins it).
--
-- Request path. Handlers run in the timer, never on a request. A request only reads: an
-- informer's store or a view (below). Nothing there does I/O or waits: a view in the agent model
-- is one ngx.shared lookup.
--
-- Models (docs/openresty.md has the measured costs):
--   "worker"  every worker runs the informers: workers x informers watches on the API server,
--             one cache per worker, every event decoded and handled once per worker;
--   "agent"   one process runs them and publishes what workers need through views kept in
--             lua_shared_dicts: nginx's privileged agent when the nginx core has OpenResty's
--             patch for it (enable_agent() in init_by_lua*), else worker 0 (stock nginx, e.g.
--             Debian's, has no privileged agent; worker 0 then also serves requests).
-- A view is the seam between the two: handlers set(key, value) in the process that runs the
-- informers, requests get(key) anywhere. In the worker model it is a plain Lua table; in the
-- agent model values are encoded into the view's dict and decoded once per worker and change.
--
-- Status. Every process that runs informers samples their status() each status_interval and, with
-- a status dict, publishes it there, so status() / metrics() answer for every process whichever
-- worker serves the request. List/watch failures are logged (warn) when the sample sees them.
local kinformer = require "kinformer"
local core = require "kinformer.core"

local ngx = ngx
if type(ngx) ~= "table" or type(ngx.timer) ~= "table" then
  error("kinformer.ngx runs inside nginx (lua-nginx-module / OpenResty)", 2)
end
local process = require "ngx.process"

local json = require("cjson").new() -- our own instance: a user's cjson settings stay theirs
local json_encode, json_decode = json.encode, json.decode

local type, pairs, ipairs, pcall, error, tostring, setmetatable, next =
  type, pairs, ipairs, pcall, error, tostring, setmetatable, next
local string_format, string_gsub, table_concat, table_sort, math_max, math_floor =
  string.format, string.gsub, table.concat, table.sort, math.max, math.floor
local mono_now = core.now
local ngx_log, ngx_now, get_phase = ngx.log, ngx.now, ngx.get_phase
local timer_every, timer_at = ngx.timer.every, ngx.timer.at
local worker_exiting, worker_id, worker_pid, worker_count =
  ngx.worker.exiting, ngx.worker.id, ngx.worker.pid, ngx.worker.count
local shared = ngx.shared
local NGX_LEVEL = { debug = ngx.DEBUG, info = ngx.INFO, notice = ngx.NOTICE, warn = ngx.WARN,
  error = ngx.ERR }

local _M = { _VERSION = kinformer._VERSION }

-- Process-wide state. `agent` is set in the master by enable_agent() and reaches the workers and
-- the agent through fork; everything else is set by start() in each process.
local model               -- "worker" | "agent" once start() ran (read on the request path)
local S = {
  agent = nil,            -- "privileged" (an agent process exists) or "worker" (worker 0 runs)
  started = false, runs = false, stopped = false, synced = false,
  names = {}, list = {}, by_name = {},    -- informers: sorted names, same order, name -> informer
  rv = {}, rv_at = {},                    -- per informer: last resourceVersion and when it moved
  prev = {},                              -- per informer: the previous status sample (for logs)
  views = {},
  ticks = 0, items = 0, dispatch_errors = 0, view_errors = 0, max_tick = 0,
  continuing = false,
}

local function log(level, ...)
  ngx_log(NGX_LEVEL[level] or ngx.ERR, "kinformer: ", ...)
end

local function ngx_logger(level, msg)
  ngx_log(NGX_LEVEL[level] or ngx.ERR, "kinformer: ", msg)
end

local function argerror(fname, msg)
  error("bad argument #1 to '" .. fname .. "' (" .. msg .. ")", 3)
end

-- "worker", "agent", "single" (master_process off), "master", "signaller" or "helper".
local function process_role()
  local t = process.type()
  if t == "privileged agent" then return "agent" end
  return t
end

-- This process's name in status and metrics: "worker-0", "agent", "single".
local function process_name(role)
  if role == "worker" then return "worker-" .. tostring(worker_id()) end
  return role
end

local function status_key(role)
  if role == "worker" then return "status/worker/" .. tostring(worker_id()) end
  return "status/" .. role
end

--- kngx.enable_agent([connections]) -> "privileged" | "worker"
-- Picks the process of the "agent" model: nginx's privileged agent when the nginx core has
-- OpenResty's privileged-agent patch, else worker 0 (logged once, at notice level). Call it from
-- init_by_lua* (the only phase where nginx can enable the agent); raises elsewhere or when nginx
-- refuses for another reason. Without this call the agent model uses worker 0.
--   init_by_lua_block { require("kinformer.ngx").enable_agent() }
function _M.enable_agent(connections)
  if get_phase() ~= "init" then
    error("kinformer.ngx.enable_agent() must be called from init_by_lua* (phase: " ..
      tostring(get_phase()) .. ")", 2)
  end
  local ok, err = process.enable_privileged_agent(connections)
  if ok then
    S.agent = "privileged"
  elseif tostring(err):find("privileged agent process patch", 1, true) then
    S.agent = "worker"
    log("notice", "this nginx has no privileged agent (OpenResty's nginx patch); the agent ",
      "model runs the informers in worker 0")
  else
    error("kinformer.ngx.enable_agent(): " .. tostring(err), 2)
  end
  return S.agent
end

-- ---- views ----

local View = {}
View.__index = View

--- kngx.view{ name = "routes", dict = "routes", encode = fn, decode = fn } -> view
-- What workers read. In the worker model a view is a Lua table of this process; in the agent
-- model it lives in lua_shared_dict `dict` (default: name), which it owns: the agent deletes the
-- keys it did not publish once its informers synced (left-overs of a previous agent). Values go
-- through encode (default: JSON) into the dict and through decode once per worker and change.
-- Create views at module level (before start), in every process.
--   view:set(key, value) -> true | nil, err    (in the process that runs the informers)
--   view:delete(key)
--   view:get(key) -> value | nil               (anywhere; never blocks)
-- A value handed to set() is shared, not copied, in the worker model: do not modify it after.
function _M.view(opts)
  if type(opts) ~= "table" then argerror("view", "table expected, got " .. type(opts)) end
  for k in pairs(opts) do
    if k ~= "name" and k ~= "dict" and k ~= "encode" and k ~= "decode" then
      argerror("view", "unknown option '" .. tostring(k) .. "'")
    end
  end
  if type(opts.name) ~= "string" then argerror("view", "option 'name' must be a string") end
  if opts.dict ~= nil and type(opts.dict) ~= "string" then
    argerror("view", "option 'dict' must be a string")
  end
  for _, k in ipairs{ "encode", "decode" } do
    if opts[k] ~= nil and type(opts[k]) ~= "function" then
      argerror("view", "option '" .. k .. "' must be a function")
    end
  end
  local v = setmetatable({
    name = opts.name, dict_name = opts.dict or opts.name,
    _encode = opts.encode or json_encode, _decode = opts.decode or json_decode,
    _local = {},        -- worker model: the values
    _cache = {},        -- agent model, readers: key -> { raw, value }
    _published = {},    -- agent model, the agent: keys set since it started
    keys = 0,           -- keys set by this process (the one that runs the informers)
    errors = 0,
  }, View)
  S.views[#S.views + 1] = v
  return v
end

function View:_shm()
  local d = self._dict
  if d == nil then
    d = shared[self.dict_name]
    if d == nil then
      error("kinformer.ngx view '" .. self.name .. "': no lua_shared_dict " .. self.dict_name, 3)
    end
    self._dict = d
  end
  return d
end

function View:set(key, value)
  if model ~= "agent" then
    local t = self._local
    if t[key] == nil then self.keys = self.keys + 1 end
    t[key] = value
    return true
  end
  local ok, s = pcall(self._encode, value)
  local err
  if ok and type(s) == "string" then
    ok, err = self:_shm():safe_set(key, s)
  else
    ok, err = false, "encode failed: " .. tostring(s)
  end
  if not ok then
    self.errors = self.errors + 1
    S.view_errors = S.view_errors + 1
    log("error", "view ", self.name, ": cannot publish ", key, ": ", err)
    return nil, err
  end
  if not self._published[key] then
    self._published[key] = true
    self.keys = self.keys + 1
  end
  return true
end

function View:delete(key)
  if model ~= "agent" then
    local t = self._local
    if t[key] ~= nil then
      t[key] = nil
      self.keys = self.keys - 1
    end
    return
  end
  self:_shm():delete(key)
  if self._published[key] then
    self._published[key] = nil
    self.keys = self.keys - 1
  end
end

function View:get(key)
  if model ~= "agent" then return self._local[key] end
  local raw = self:_shm():get(key)
  local cache = self._cache
  if raw == nil then
    cache[key] = nil
    return nil
  end
  local c = cache[key]
  if c and c[1] == raw then return c[2] end
  local ok, value = pcall(self._decode, raw)
  if not ok then
    log("error", "view ", self.name, ": cannot decode ", key, ": ", value)
    return nil
  end
  cache[key] = { raw, value }
  return value
end

-- The agent: drop what a previous agent published and this one did not (after the first sync).
function View:_sweep()
  local d = self:_shm()
  local n = 0
  for _, k in ipairs(d:get_keys(0)) do
    if not self._published[k] then
      d:delete(k)
      n = n + 1
    end
  end
  if n > 0 then log("info", "view ", self.name, ": removed ", n, " stale keys") end
end

-- ---- the dispatch timer ----

local function dispatch_one(i, inf, batch)
  local ok, n = pcall(inf.dispatch, inf, batch)
  if not ok then
    S.dispatch_errors = S.dispatch_errors + 1
    log("error", "informer ", S.names[i], ": dispatch failed: ", tostring(n))
    return 0
  end
  S.items = S.items + n
  return n
end

-- Dispatches every informer in rounds of one batch each until none has more or the budget is
-- spent; returns true when work is left.
local function drain()
  local list, batch = S.list, S.batch
  local deadline = mono_now() + S.budget
  local t0, total = mono_now(), 0
  local busy = true
  while busy do
    busy = false
    for i = 1, #list do
      local n = dispatch_one(i, list[i], batch)
      total = total + n
      if n >= batch then busy = true end
    end
    if busy and mono_now() >= deadline then break end
  end
  if total > 0 or S.after_more then
    local t1 = mono_now()
    if S.after_dispatch then
      local ok, more = pcall(S.after_dispatch, total)
      if not ok then
        S.dispatch_errors = S.dispatch_errors + 1
        log("error", "after_dispatch raised: ", tostring(more))
        more = false
      end
      S.after_more = more and true or false
      if more then busy = true end
    end
    local t2 = mono_now()
    local took = t2 - t0 -- what requests waiting on this worker waited
    if took > S.max_tick then S.max_tick = took end
    if took > 0.05 then
      log("info", string_format("dispatch tick took %.0f ms: %d items in %.0f ms, " ..
        "after_dispatch %.0f ms", took * 1000, total, (t1 - t0) * 1000, (t2 - t1) * 1000))
    end
  end
  return busy
end

local continue_drain
local function schedule_continuation()
  if S.continuing then return end
  local ok, err = timer_at(0, continue_drain)
  if ok then
    S.continuing = true
  else
    log("warn", "cannot schedule a dispatch continuation: ", err)
  end
end

continue_drain = function(premature)
  S.continuing = false
  if premature or S.stopped then return end
  if drain() then schedule_continuation() end
end

local function status_dict()
  return S.status_dict and shared[S.status_dict]
end

local function set_synced_flag(value)
  local d = status_dict()
  if d and model == "agent" then d:set("agent/synced", value) end
end

local function check_synced()
  for i = 1, #S.list do
    if not S.list[i]:has_synced() then return false end
  end
  S.synced = true
  log("notice", "informers synced in ", string_format("%.3f", ngx_now() - S.started_at), " s")
  if model == "agent" then
    for _, v in ipairs(S.views) do v:_sweep() end
  end
  set_synced_flag(true)
  return true
end

-- A snapshot of this process: informers' status() plus what the timer saw.
local function snapshot(t)
  local role = S.role
  local infs, views = {}, {}
  for i, name in ipairs(S.names) do
    local st = S.list[i]:status()
    st.resource_version_age = t - S.rv_at[i]
    infs[name] = st
  end
  for _, v in ipairs(S.views) do
    local vs = { keys = v.keys, errors = v.errors }
    if model == "agent" then
      local d = shared[v.dict_name]
      vs.dict = v.dict_name
      if d and d.capacity then vs.capacity, vs.free_space = d:capacity(), d:free_space() end
    end
    views[v.name] = vs
  end
  return {
    pid = worker_pid(), process = process_name(role), role = role, model = model,
    time = t, started = S.started_at, synced = S.synced, stopped = S.stopped,
    ticks = S.ticks, items = S.items, dispatch_errors = S.dispatch_errors,
    view_errors = S.view_errors, max_dispatch_seconds = S.max_tick,
    informers = infs, views = views,
  }
end

-- Logs what changed since the last sample: new list/watch errors, recovery.
local function log_transitions(snap)
  for i, name in ipairs(S.names) do
    local st, prev = snap.informers[name], S.prev[i]
    if prev then
      if (st.errors or 0) > (prev.errors or 0) then
        log("warn", "informer ", name, " (", st.resource, "): ", tostring(st.last_error),
          " (phase ", tostring(st.phase), ", ", st.errors, " errors)")
      elseif prev.phase ~= "watching" and st.phase == "watching" and (st.errors or 0) > 0 then
        log("notice", "informer ", name, " (", st.resource, "): watching again at ",
          "resourceVersion ", tostring(st.resource_version))
      end
    end
    S.prev[i] = { errors = st.errors, phase = st.phase }
  end
end

local function publish_status(t)
  local snap = snapshot(t)
  log_transitions(snap)
  local d = status_dict()
  if d then
    -- flags = pid: stop() deletes the entry only if it is still this process's (after a reload
    -- the new worker with the same id may have written it already)
    local ok, err = d:set(S.status_key, json_encode(snap), S.status_ttl, worker_pid())
    if not ok then log("warn", "cannot publish status to ", S.status_dict, ": ", err) end
    if model == "agent" then d:set("agent/synced", S.synced) end
  end
end

local function tick(premature)
  if S.stopped then return end
  if premature or worker_exiting() then
    _M.stop()
    return
  end
  S.ticks = S.ticks + 1
  if drain() then schedule_continuation() end
  local t = ngx_now()
  for i = 1, #S.list do
    local rv = S.list[i]:last_sync_resource_version()
    if rv ~= S.rv[i] then
      S.rv[i], S.rv_at[i] = rv, t
    end
  end
  if not S.synced then check_synced() end
  if t >= S.next_status then
    S.next_status = t + S.status_interval
    publish_status(t)
  end
end

-- ---- start / stop ----

local START_OPTS = { model = true, client = true, informers = true, setup = true,
  interval = true, batch = true, budget = true, status_dict = true, status_interval = true,
  after_dispatch = true }

local function check_number(opts, k, default, min)
  local v = opts[k]
  if v == nil then return default end
  if type(v) ~= "number" or not (v >= min) then
    argerror("start", string_format("option '%s' must be a number >= %g", k, min))
  end
  return v
end

local function stop_all(list)
  for _, inf in ipairs(list) do inf:stop() end
end

--- kngx.start{ model = "worker", client = {...}, informers = { name = {...}, ... },
--              setup = fn(informers, client), after_dispatch = fn(n), interval = 0.1,
--              batch = 20, budget = 0.02, status_dict = "kinformer", status_interval = 1 }
-- -> true | nil, err
-- Call it from init_worker_by_lua* in every process, with the same options everywhere. In the
-- processes the model picks (every worker; or the agent: the privileged agent, else worker 0)
-- it creates the client
-- (kinformer.client(client): nil = kubeconfig / in-cluster) and the informers
-- (client:informer(opts) for each name), calls setup(informers_by_name, client) to add indexers
-- and handlers, starts them and the dispatch timer; elsewhere it only records the model.
--   interval        seconds between dispatch ticks (staleness bound of the cache: one interval)
--   batch, budget   keys per dispatch call (a key may carry many queued changes), and seconds of
--                   dispatching per tick: the rest continues in a zero-delay timer, so requests
--                   get served in between
--   after_dispatch  fn(n) called after a tick that processed n > 0 items (coalesce work there);
--                   returning true asks to be called again soon (work left), with n = 0
--   status_dict     lua_shared_dict where each process publishes its status (default
--                   "kinformer" when that dict exists); status_interval: seconds between samples
-- Returns nil, err when the client or an informer cannot be created or started (nothing keeps
-- running then). Raises on bad options, outside init_worker / timer, or when called twice.
function _M.start(opts)
  if type(opts) ~= "table" then argerror("start", "table expected, got " .. type(opts)) end
  for k in pairs(opts) do
    if not START_OPTS[k] then argerror("start", "unknown option '" .. tostring(k) .. "'") end
  end
  local m = opts.model or "worker"
  if m ~= "worker" and m ~= "agent" then
    argerror("start", "option 'model' must be \"worker\" or \"agent\"")
  end
  if type(opts.informers) ~= "table" or next(opts.informers) == nil then
    argerror("start", "option 'informers' must be a table of name = informer options")
  end
  for name, io in pairs(opts.informers) do
    if type(name) ~= "string" or type(io) ~= "table" then
      argerror("start", "option 'informers' must map names (strings) to option tables")
    end
  end
  if opts.client ~= nil and type(opts.client) ~= "table" then
    argerror("start", "option 'client' must be a table of kinformer.client options")
  end
  for _, k in ipairs{ "setup", "after_dispatch" } do
    if opts[k] ~= nil and type(opts[k]) ~= "function" then
      argerror("start", "option '" .. k .. "' must be a function")
    end
  end
  local interval = check_number(opts, "interval", 0.1, 0.001)
  local batch = math_floor(check_number(opts, "batch", 20, 1))
  local budget = check_number(opts, "budget", 0.02, 0.001)
  local status_interval = check_number(opts, "status_interval", 1, 0.1)
  local sd = opts.status_dict
  if sd ~= nil and type(sd) ~= "string" then
    argerror("start", "option 'status_dict' must be a string")
  end
  if sd == nil and shared.kinformer then sd = "kinformer" end
  if sd ~= nil and not shared[sd] then
    argerror("start", "option 'status_dict': no lua_shared_dict " .. sd)
  end

  local phase = get_phase()
  if phase ~= "init_worker" and phase ~= "timer" then
    error("kinformer.ngx.start() must be called from init_worker_by_lua* (phase: " ..
      tostring(phase) .. "): informers must never start in the master, before fork", 2)
  end
  if S.started then error("kinformer.ngx.start() was already called in this process", 2) end
  local role = process_role()
  if m == "agent" then
    for _, v in ipairs(S.views) do
      if not shared[v.dict_name] then
        error("kinformer.ngx view '" .. v.name .. "': no lua_shared_dict " .. v.dict_name, 2)
      end
    end
  end

  S.started, model, S.role = true, m, role
  S.status_dict, S.status_interval = sd, status_interval
  S.status_ttl = math_max(3 * status_interval, 5)
  S.status_key = status_key(role)
  if m == "worker" then
    S.runs = role == "worker" or role == "single"
  elseif S.agent == "privileged" then
    S.runs = role == "agent" or role == "single"
  else
    S.runs = (role == "worker" and worker_id() == 0) or role == "single"
  end
  kinformer.set_logger(ngx_logger)
  if not S.runs then return true end

  local client, err = kinformer.client(opts.client)
  if not client then
    log("error", "cannot create the client: ", tostring(err))
    S.runs, S.stopped = false, true
    return nil, err
  end
  local names = {}
  for name in pairs(opts.informers) do names[#names + 1] = name end
  table_sort(names)
  local list, by_name = {}, {}
  for i, name in ipairs(names) do
    local inf, ierr = client:informer(opts.informers[name])
    if not inf then
      stop_all(list)
      log("error", "informer ", name, ": ", tostring(ierr))
      S.runs, S.stopped = false, true
      return nil, "informer " .. name .. ": " .. tostring(ierr)
    end
    list[i], by_name[name] = inf, inf
  end
  S.names, S.list, S.by_name, S.client = names, list, by_name, client
  S.batch, S.budget, S.after_dispatch = batch, budget, opts.after_dispatch
  if opts.setup then opts.setup(by_name, client) end
  local t = ngx_now()
  S.started_at, S.next_status = t, t
  for i, inf in ipairs(list) do
    local ok, serr = inf:start()
    if not ok then
      stop_all(list)
      log("error", "informer ", names[i], ": cannot start: ", tostring(serr))
      S.runs, S.stopped = false, true
      return nil, "informer " .. names[i] .. ": " .. tostring(serr)
    end
    S.rv[i], S.rv_at[i] = "", t
  end
  local ok, terr = timer_every(interval, tick)
  if not ok then
    stop_all(list)
    S.runs, S.stopped = false, true
    return nil, "cannot start the dispatch timer: " .. tostring(terr)
  end
  set_synced_flag(false)
  log("notice", "started ", #list, " informer(s) in ", process_name(role), " (model ", m,
    ", server ", tostring(client.server), ")")
  return true
end

--- kngx.stop(): stops this process's informers (idempotent). Called by the timer when the
-- process exits or reloads; exit_worker_by_lua* may call it too.
function _M.stop()
  if not S.runs or S.stopped then return end
  S.stopped = true
  stop_all(S.list)
  local d = status_dict()
  if d then
    local _, flags = d:get(S.status_key)
    if flags == worker_pid() then d:delete(S.status_key) end
  end
  log("notice", "informers stopped in ", process_name(S.role),
    worker_exiting() and " (process exiting)" or "")
end

-- ---- reading ----

--- kngx.model() -> "worker" | "agent" | nil (before start)
function _M.model()
  return model
end

--- kngx.runs_informers() -> true in the processes where start() runs the informers.
function _M.runs_informers()
  return S.runs and not S.stopped
end

--- kngx.informer(name) -> the informer of that name in this process, or nil (e.g. a worker in
-- the agent model).
function _M.informer(name)
  return S.by_name[name]
end

--- kngx.synced() -> true once every informer synced: this process's informers, or in the agent
-- model from a worker, the agent's (through the status dict; false without one). Cheap, but
-- meant for the rare path (e.g. choosing a 503 message), not for every request.
function _M.synced()
  if S.runs then return S.synced end
  if model == "agent" then
    local d = status_dict()
    return d ~= nil and d:get("agent/synced") == true
  end
  return false
end

local function process_keys()
  local keys = { "status/agent", "status/single" }
  for i = 0, worker_count() - 1 do keys[#keys + 1] = "status/worker/" .. i end
  return keys
end

--- kngx.status() -> { model =, served_by = pid, processes = { snapshot, ... } }
-- One snapshot per process that runs informers (from the status dict; this process's own is
-- fresh): pid, process ("worker-0", "agent"), role, synced, age (seconds since the sample),
-- ticks, items, dispatch_errors, view_errors, max_dispatch_seconds, informers = { name =
-- informer:status() plus resource_version_age } (docs/informer.md, docs/openresty.md).
function _M.status()
  local out = { model = model, served_by = worker_pid(), processes = {} }
  local t = ngx_now()
  local own = S.runs and not S.stopped and snapshot(t) or nil
  local d = status_dict()
  if d then
    for _, key in ipairs(process_keys()) do
      local snap
      if own and key == S.status_key then
        snap = own
        own = nil
      else
        local raw = d:get(key)
        if raw then
          local ok, v = pcall(json_decode, raw)
          if ok and type(v) == "table" then snap = v end
        end
      end
      if snap then
        snap.age = math_max(0, t - (snap.time or t))
        out.processes[#out.processes + 1] = snap
      end
    end
  end
  if own then
    own.age = 0
    out.processes[#out.processes + 1] = own
  end
  return out
end

-- Prometheus text format 0.0.4.
local function label_value(v)
  return (string_gsub(tostring(v), '[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

local function num(v)
  if v == true then return "1" end
  if v == false or v == nil then return "0" end
  if v == math_floor(v) and v < 1e15 and v > -1e15 then return string_format("%d", v) end
  return string_format("%.6g", v)
end

-- name, type, help, field (of an informer's status) or function(st, age) -> value | nil
local INFORMER_METRICS = {
  { "kinformer_informer_synced", "gauge", "1 once the informer's initial list is in its cache",
    "synced" },
  { "kinformer_informer_resource_version_age_seconds", "gauge",
    "Seconds since the informer's resourceVersion last advanced",
    function(st, age) return st.resource_version_age and st.resource_version_age + age end },
  { "kinformer_informer_last_event_age_seconds", "gauge", "Seconds since the last watch event",
    function(st, age) return st.last_event_age and st.last_event_age + age end },
  { "kinformer_informer_objects", "gauge", "Objects in the informer's cache", "objects" },
  { "kinformer_informer_queue_length", "gauge", "Keys waiting in the informer's DeltaFIFO",
    "queue_length" },
  { "kinformer_informer_queued_bytes", "gauge",
    "Bytes of the records waiting in the informer's DeltaFIFO", "queued_bytes" },
  { "kinformer_informer_lists_total", "counter", "Lists (initial and relists)", "lists" },
  { "kinformer_informer_relists_total", "counter", "Relists after a failure", "relists" },
  { "kinformer_informer_watches_total", "counter", "Watch requests", "watches" },
  { "kinformer_informer_watch_restarts_total", "counter", "Watches resumed from the last rv",
    "watch_restarts" },
  { "kinformer_informer_watch_events_total", "counter", "Watch events received",
    "watch_events" },
  { "kinformer_informer_errors_total", "counter", "List and watch failures", "errors" },
  { "kinformer_informer_notifications_total", "counter",
    "Notifications produced (adds + updates + deletes)",
    function(st) return (st.adds or 0) + (st.updates or 0) + (st.deletes or 0) end },
  { "kinformer_informer_handler_errors_total", "counter", "Handler functions that raised",
    "handler_errors" },
  { "kinformer_informer_received_bytes_total", "counter", "Bytes received from the API server",
    "bytes" },
}

local PROCESS_METRICS = {
  { "kinformer_process_status_age_seconds", "gauge", "Age of the process's status sample", "age" },
  { "kinformer_process_dispatched_total", "counter", "Items dispatched by the nginx timer",
    "items" },
  { "kinformer_process_dispatch_errors_total", "counter",
    "Dispatch and after_dispatch failures", "dispatch_errors" },
  { "kinformer_process_max_dispatch_seconds", "gauge", "Longest dispatch tick so far",
    "max_dispatch_seconds" },
}

local VIEW_METRICS = {
  { "kinformer_view_keys", "gauge", "Keys a view holds (set by the informer process)", "keys" },
  { "kinformer_view_errors_total", "counter", "Values a view could not publish", "errors" },
  { "kinformer_view_free_bytes", "gauge", "Free space of the view's lua_shared_dict (agent model)",
    "free_space" },
}

--- kngx.metrics([status]) -> text: every process's informers in the Prometheus text format
-- (synced, resource version age, last event age, objects, queue length, lists, relists,
-- watches, events, errors, ...), labels informer, resource, namespace and process.
function _M.metrics(status)
  status = status or _M.status()
  local out = {}
  local procs = status.processes
  for _, m in ipairs(PROCESS_METRICS) do
    out[#out + 1] = "# HELP " .. m[1] .. " " .. m[3]
    out[#out + 1] = "# TYPE " .. m[1] .. " " .. m[2]
    for _, p in ipairs(procs) do
      out[#out + 1] = string_format('%s{process="%s",pid="%s",model="%s"} %s', m[1],
        label_value(p.process), label_value(p.pid), label_value(p.model), num(p[m[4]]))
    end
  end
  for _, m in ipairs(VIEW_METRICS) do
    local head = false
    for _, p in ipairs(procs) do
      local names = {}
      for name in pairs(type(p.views) == "table" and p.views or {}) do names[#names + 1] = name end
      table_sort(names)
      for _, name in ipairs(names) do
        local v = p.views[name][m[4]]
        if v ~= nil then
          if not head then
            out[#out + 1] = "# HELP " .. m[1] .. " " .. m[3]
            out[#out + 1] = "# TYPE " .. m[1] .. " " .. m[2]
            head = true
          end
          out[#out + 1] = string_format('%s{view="%s",process="%s"} %s', m[1], label_value(name),
            label_value(p.process), num(v))
        end
      end
    end
  end
  for _, m in ipairs(INFORMER_METRICS) do
    local head = false
    for _, p in ipairs(procs) do
      local names = {}
      for name in pairs(p.informers or {}) do names[#names + 1] = name end
      table_sort(names)
      for _, name in ipairs(names) do
        local st = p.informers[name]
        local f = m[4]
        local v
        if type(f) == "function" then v = f(st, p.age or 0) else v = st[f] end
        if v ~= nil then
          if not head then
            out[#out + 1] = "# HELP " .. m[1] .. " " .. m[3]
            out[#out + 1] = "# TYPE " .. m[1] .. " " .. m[2]
            head = true
          end
          out[#out + 1] = string_format(
            '%s{informer="%s",resource="%s",namespace="%s",process="%s"} %s', m[1],
            label_value(name), label_value(st.resource or ""),
            label_value(type(st.namespace) == "string" and st.namespace or ""),
            label_value(p.process), num(v))
        end
      end
    end
  end
  out[#out + 1] = ""
  return table_concat(out, "\n")
end

return _M
