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
--   "shared"  one process (chosen as for "agent") runs them and mirrors every cache into a
--             segment of shared memory mapped in the master (shared_memory() in init_by_lua*;
--             kept across reloads of the same size, and taken over by the new writer);
--             every process reads it with the store API (store(name)) and its handlers see every
--             change, in order (the handlers option), from the same dispatch timer.
-- A view is the seam between the two: handlers set(key, value) in the process that runs the
-- informers, requests get(key) anywhere. In the worker model it is a plain Lua table; in the
-- agent model values are encoded into the view's dict and decoded once per worker and change.
--
-- Status. Every process that runs informers samples their status() each status_interval and, with
-- a status dict, publishes it there, so status() / metrics() answer for every process whichever
-- worker serves the request. List/watch failures are logged (warn) when the sample sees them.
--
-- The parts: kinformer.ngx.view (views), kinformer.ngx.status (samples, status()),
-- kinformer.ngx.metrics (Prometheus text), kinformer.ngx.process (role, log, shared state).
-- This module holds the life cycle (enable_agent, start, the dispatch timer, stop) and the
-- public API.
local kinformer = require "kinformer"
local core = require "kinformer.core"

local ngx = ngx
if type(ngx) ~= "table" or type(ngx.timer) ~= "table" then
  error("kinformer.ngx runs inside nginx (lua-nginx-module / OpenResty)", 2)
end
local process = require "ngx.process"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local nprocess = require "kinformer.ngx.process"
local view = require "kinformer.ngx.view"
local status = require "kinformer.ngx.status"
local metrics = require "kinformer.ngx.metrics"
local nshared = require "kinformer.ngx.shared"
local resources = require "kinformer.resources"

local type, pairs, ipairs, pcall, tostring, next = type, pairs, ipairs, pcall, tostring, next
local string_format, table_sort, math_max, math_floor =
  string.format, table.sort, math.max, math.floor
local mono_now = core.now
local ngx_now, get_phase = ngx.now, ngx.get_phase
local timer_every, timer_at = ngx.timer.every, ngx.timer.at
local worker_exiting, worker_id, worker_pid = ngx.worker.exiting, ngx.worker.id, ngx.worker.pid
local shared = ngx.shared
local S, log, status_dict = nprocess.state, nprocess.log, nprocess.status_dict
local process_role, process_name = nprocess.role, nprocess.name
local raise, fail = argcheck.raise, argcheck.fail

local _M = { _VERSION = kinformer._VERSION }

--- kngx.enable_agent([connections]) -> "privileged" | "worker"
-- Picks the process of the "agent" model: nginx's privileged agent when the nginx core has
-- OpenResty's privileged-agent patch, else worker 0 (logged once, at notice level). Call it from
-- init_by_lua* (the only phase where nginx can enable the agent); raises elsewhere or when nginx
-- refuses for another reason. Without this call the agent model uses worker 0.
--   init_by_lua_block { require("kinformer.ngx").enable_agent() }
function _M.enable_agent(connections)
  if get_phase() ~= "init" then
    fail("kinformer.ngx.enable_agent() must be called from init_by_lua* (phase: " ..
      tostring(get_phase()) .. ")")
  end
  local ok, err = process.enable_privileged_agent(connections)
  if ok then
    S.agent = "privileged"
  elseif tostring(err):find("privileged agent process patch", 1, true) then
    S.agent = "worker"
    log("notice", "this nginx has no privileged agent (OpenResty's nginx patch); the agent ",
      "model runs the informers in worker 0")
  else
    fail("kinformer.ngx.enable_agent(): " .. tostring(err))
  end
  return S.agent
end

--- kngx.shared_memory(size) -> true
-- Maps the segment of the "shared" model: size in bytes, or a string with a k / m / g suffix
-- ("256m"). Call it from init_by_lua* (the master maps it, the workers it forks share it). A
-- reload with the same size keeps the segment: the new workers read what the old writer left,
-- and the new writer takes it over once the old one has exited. So does a binary upgrade (USR2):
-- the new master finds the segment among the descriptors it inherited (a memfd; no `env`
-- directive needed). A reload or an upgrade with another size maps a new, empty one. Raises in
-- another phase, on a bad size, or when the memory cannot be mapped.
--   init_by_lua_block { require("kinformer.ngx").shared_memory("256m") }
function _M.shared_memory(size)
  if get_phase() ~= "init" then
    fail("kinformer.ngx.shared_memory() must be called from init_by_lua* (phase: " ..
      tostring(get_phase()) .. ")")
  end
  local bytes = size
  if type(size) == "string" then
    local n, unit = size:match("^%s*(%d+)%s*([kKmMgG]?)%s*$")
    local mult = ({ [""] = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3 })[(unit or ""):lower()]
    bytes = n and mult and tonumber(n) * mult
  end
  if not (type(bytes) == "number" and bytes >= 65536 and bytes < math.huge) then
    raise(1, "shared_memory", "size must be at least 64k (bytes, or \"256m\"), got " ..
      tostring(size))
  end
  local seg, reused, id, inherited = core.shm_named("kinformer.ngx", math_floor(bytes))
  if not seg then fail("kinformer.ngx.shared_memory(): " .. tostring(reused)) end
  S.segment, S.segment_id = seg, id
  if inherited then
    log("notice", "shared memory kept from the previous binary")
  elseif reused then
    log("notice", "shared memory kept from the previous configuration")
  end
  return true
end

-- ---- views ----

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
  return view.new(opts)
end

-- ---- the dispatch timer ----

local function dispatch_one(i, inf, batch)
  local ok, n = pcall(inf.dispatch, inf, batch)
  if not ok then
    S.dispatch_errors = S.dispatch_errors + 1
    log("error", "informer ", S.names[i], ": dispatch failed: ", errtext(n))
    return 0
  end
  S.items = S.items + n
  return n
end

-- Dispatches every informer in rounds of one batch each until none has more or the budget is
-- spent (shared model: then polls the shared stores); returns true when work is left.
local NONE = {}

local function drain()
  local list, batch = S.claiming and NONE or S.list, S.batch
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
  if S.model == "shared" then
    local max = batch * 50
    local n = nshared.poll(max)
    total = total + n
    if n >= max then busy = true end
  end
  if total > 0 or S.after_more then
    local t1 = mono_now()
    if S.after_dispatch then
      local ok, more = pcall(S.after_dispatch, total)
      if not ok then
        S.dispatch_errors = S.dispatch_errors + 1
        log("error", "after_dispatch raised: ", errtext(more))
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

-- The informers of this process synced (first call after they did: logs, retains, sweeps).
local function informers_synced()
  if S.informers_synced then return true end
  if S.claiming then return false end
  for i = 1, #S.list do
    if not S.list[i]:has_synced() then return false end
  end
  if S.model == "shared" then
    -- A writer that took over drops what its predecessor left and its list did not bring.
    for i = 1, #S.list do
      local ok, err = S.list[i]:mirror_retain()
      if not ok then log("error", "informer ", S.names[i], ": shared store: ", errtext(err)) end
    end
    nshared.mark_synced()
  end
  S.informers_synced = true
  log("notice", "informers synced in ", string_format("%.3f", ngx_now() - S.started_at), " s")
  if S.model == "agent" then
    for _, v in ipairs(view.all) do v:_sweep() end
  end
  status.set_synced_flag(true)
  return true
end

local function check_synced()
  if S.runs then informers_synced() end
  if S.model == "shared" and S.role ~= "agent" then return nshared.reader_synced() end
  S.synced = S.informers_synced
  return S.synced
end

-- An informer's options with a built-in resource name (pods, services,
-- endpointslices.discovery.k8s.io, ...) resolved from kinformer's table: a worker makes no
-- blocking discovery request for them (nginx would queue that worker's connections meanwhile).
-- Other names, and any name given with api_version, go through discovery.
local function offline_resource(io)
  if type(io.resource) ~= "string" or io.api_version ~= nil then return io end
  local res = resources.resolve{ resource = io.resource }
  if not res then return io end
  local copy = {}
  for k, v in pairs(io) do copy[k] = v end
  copy.resource = { group = res.group, version = res.version, resource = res.resource,
                    namespaced = res.namespaced }
  return copy
end

local function stop_all(list)
  for _, inf in ipairs(list) do inf:stop() end
end

local function start_informers()
  local t = ngx_now()
  S.started_at = t
  for i, inf in ipairs(S.list) do
    local ok, serr = inf:start()
    if not ok then
      stop_all(S.list)
      log("error", "informer ", S.names[i], ": cannot start: ", tostring(serr))
      return nil, "informer " .. S.names[i] .. ": " .. tostring(serr)
    end
    S.rv[i], S.rv_at[i] = "", t
  end
  return true
end

-- Shared model: the informers mirror into the segment and start once this process is its
-- writer (shared.claim_writer); true (started), "wait" (the previous writer still runs), or
-- nil, err.
local function claim_and_start()
  local ok, err = nshared.claim_writer()
  if ok == "wait" then return ok end
  if not ok then
    stop_all(S.list)
    return nil, err
  end
  return start_informers()
end

local function tick(premature)
  if S.stopped then return end
  if premature or worker_exiting() then
    _M.stop()
    return
  end
  S.ticks = S.ticks + 1
  if S.claiming and not claim_and_start() then S.runs, S.claiming = false, false end
  if drain() then schedule_continuation() end
  local t = ngx_now()
  for i = 1, #S.list do
    local rv = S.list[i]:last_sync_resource_version()
    if rv ~= S.rv[i] then
      S.rv[i], S.rv_at[i] = rv, t
    end
  end
  if not (S.synced and (S.informers_synced or not S.runs)) then check_synced() end
  if t >= S.next_status then
    S.next_status = t + S.status_interval
    status.publish(t)
  end
end

-- ---- start / stop ----

local START_OPTS = { model = true, client = true, informers = true, setup = true,
  interval = true, batch = true, budget = true, status_dict = true, status_interval = true,
  after_dispatch = true, handlers = true }

local function check_number(opts, k, default, min)
  return argcheck.number(opts, k, "start", default, min)
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
--   interval        seconds between dispatch ticks (staleness bound of the cache: one interval;
--                   shared model: every process ticks four times per interval, a change reaches
--                   every worker within half of it plus the work)
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
  if type(opts) ~= "table" then raise(1, "start", "table expected, got " .. type(opts)) end
  argcheck.options(opts, START_OPTS, "start")
  local m = opts.model or "worker"
  if m ~= "worker" and m ~= "agent" and m ~= "shared" then
    raise(1, "start", "option 'model' must be \"worker\", \"agent\" or \"shared\"")
  end
  if type(opts.informers) ~= "table" or next(opts.informers) == nil then
    raise(1, "start", "option 'informers' must be a table of name = informer options")
  end
  for name, io in pairs(opts.informers) do
    if type(name) ~= "string" or type(io) ~= "table" then
      raise(1, "start", "option 'informers' must map names (strings) to option tables")
    end
  end
  if opts.client ~= nil and type(opts.client) ~= "table" then
    raise(1, "start", "option 'client' must be a table of kinformer.client options")
  end
  argcheck.func(opts, "setup", "start")
  argcheck.func(opts, "after_dispatch", "start")
  if opts.handlers ~= nil then
    if m ~= "shared" then
      raise(1, "start", "option 'handlers' is for the shared model (elsewhere: add_handler in setup)")
    end
    if type(opts.handlers) ~= "table" then
      raise(1, "start", "option 'handlers' must map informer names to handler tables")
    end
    for name, h in pairs(opts.handlers) do
      if opts.informers[name] == nil or type(h) ~= "table" then
        raise(1, "start", "option 'handlers': " .. tostring(name) ..
          " must name an informer and map to { on_add =, on_update =, on_delete = }")
      end
      for k, f in pairs(h) do
        if (k ~= "on_add" and k ~= "on_update" and k ~= "on_delete") or type(f) ~= "function" then
          raise(1, "start", "option 'handlers': " .. name .. "." .. tostring(k) ..
            " is not on_add / on_update / on_delete = function")
        end
      end
    end
  end
  local interval = check_number(opts, "interval", 0.1, 0.001)
  local batch = math_floor(check_number(opts, "batch", 20, 1))
  local budget = check_number(opts, "budget", 0.02, 0.001)
  local status_interval = check_number(opts, "status_interval", 1, 0.1)
  local sd = argcheck.string(opts, "status_dict", "start")
  if sd == nil and shared.kinformer then sd = "kinformer" end
  if sd ~= nil and not shared[sd] then
    raise(1, "start", "option 'status_dict': no lua_shared_dict " .. sd)
  end

  local phase = get_phase()
  if phase ~= "init_worker" and phase ~= "timer" then
    fail("kinformer.ngx.start() must be called from init_worker_by_lua* (phase: " ..
      tostring(phase) .. "): informers must never start in the master, before fork")
  end
  if S.started then fail("kinformer.ngx.start() was already called in this process") end
  local role = process_role()
  if m == "shared" and not S.segment then
    fail("kinformer.ngx: model \"shared\" needs kinformer.ngx.shared_memory(size) in init_by_lua*")
  end
  -- Only the master hands the segment's descriptor to a new binary: a program a worker runs
  -- (io.popen, an exec credential plugin) must not inherit the cache.
  if m == "shared" then core.shm_named_private() end
  if m == "agent" then
    for _, v in ipairs(view.all) do
      if not shared[v.dict_name] then
        fail("kinformer.ngx view '" .. v.name .. "': no lua_shared_dict " .. v.dict_name)
      end
    end
  end

  S.started, S.model, S.role = true, m, role
  view.set_model(m)
  S.status_dict, S.status_interval = sd, status_interval
  S.status_ttl = math_max(3 * status_interval, 5)
  S.status_key = nprocess.status_key(role)
  local names = {}
  for name in pairs(opts.informers) do names[#names + 1] = name end
  table_sort(names)
  if m == "shared" and #names > 16 then
    raise(1, "start", "the shared model takes at most 16 informers, got " .. #names)
  end
  if m == "worker" then
    S.runs = role == "worker" or role == "single"
  elseif S.agent == "privileged" then
    S.runs = role == "agent" or role == "single"
  else
    S.runs = (role == "worker" and worker_id() == 0) or role == "single"
  end
  kinformer.set_logger(nprocess.logger)
  S.batch, S.budget, S.after_dispatch = batch, budget, opts.after_dispatch
  -- Shared model: the writer and every reader tick four times per interval (a reader's tick is
  -- an atomic load when nothing changed), so a change reaches every worker's handlers within
  -- half an interval plus the work: the writer's tick, then the reader's.
  S.tick_every = m == "shared" and interval / 4 or interval
  if m == "shared" and role ~= "agent" then
    -- Every worker reads every shared store (informer i in slot i) and runs the handlers; the
    -- privileged agent serves no request and has no handler to run.
    for i, name in ipairs(names) do
      S.readers[name] = S.segment:store(i)
      S.shared_names[i] = name
    end
    S.handlers = opts.handlers or {}
  end
  if not S.runs then
    if m ~= "shared" or role == "agent" then return true end
    local t = ngx_now()
    S.started_at, S.next_status = t, t
    local ok, terr = timer_every(S.tick_every, tick)
    if not ok then return nil, "cannot start the dispatch timer: " .. tostring(terr) end
    return true
  end

  local client, err = kinformer.client(opts.client)
  if not client then
    log("error", "cannot create the client: ", tostring(err))
    S.runs, S.stopped = false, true
    return nil, err
  end
  local list, by_name = {}, {}
  for i, name in ipairs(names) do
    local inf, ierr = client:informer(offline_resource(opts.informers[name]))
    if not inf then
      stop_all(list)
      log("error", "informer ", name, ": ", tostring(ierr))
      S.runs, S.stopped = false, true
      return nil, "informer " .. name .. ": " .. tostring(ierr)
    end
    list[i], by_name[name] = inf, inf
  end
  S.names, S.list, S.by_name, S.client = names, list, by_name, client
  if opts.setup then opts.setup(by_name, client) end
  local t = ngx_now()
  S.started_at, S.next_status = t, t
  for i = 1, #list do S.rv[i], S.rv_at[i] = "", t end
  local started, serr
  if m == "shared" then started, serr = claim_and_start() else started, serr = start_informers() end
  if not started then
    S.runs, S.stopped = false, true
    return nil, serr
  end
  local ok, terr = timer_every(S.tick_every, tick)
  if not ok then
    stop_all(list)
    S.runs, S.stopped = false, true
    return nil, "cannot start the dispatch timer: " .. tostring(terr)
  end
  status.set_synced_flag(false)
  log("notice", "started ", #list, " informer(s) in ", process_name(role), " (model ", m,
    ", server ", tostring(client.server), ")")
  return true
end

--- kngx.stop(): stops this process's informers (idempotent). Called by the timer when the
-- process exits or reloads; exit_worker_by_lua* may call it too.
function _M.stop()
  if S.stopped or not (S.runs or (S.model == "shared" and next(S.readers) ~= nil)) then return end
  S.stopped = true
  stop_all(S.list) -- empty in a shared-model reader
  local d = status_dict()
  if d then
    local _, flags = d:get(S.status_key)
    if flags == worker_pid() then d:delete(S.status_key) end
  end
  if S.runs then
    log("notice", "informers stopped in ", process_name(S.role),
      worker_exiting() and " (process exiting)" or "")
  end
end

-- ---- reading ----

--- kngx.model() -> "worker" | "agent" | nil (before start)
function _M.model()
  return S.model
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

--- kngx.store(name) -> the cache of informer `name` as this process reads it: in the shared
-- model the shared store (get, get_by_key, list, list_keys, by_index, index_keys,
-- list_index_func_values, len, status; objects decoded lazily from the shared memory), in every
-- process; elsewhere the informer's store where this process runs it, else nil. Shared model:
-- before the writer created the store it answers as an empty store (get -> nil, lists and
-- by_index -> {}, len -> 0) and becomes the real one once that exists; a store read here is
-- polled by the dispatch timer from then on.
function _M.store(name)
  if S.model == "shared" then return nshared.store(name) end
  local inf = S.by_name[name]
  return inf and inf:store()
end

--- kngx.synced() -> whether what this process reads is a complete cache: its informers synced
-- (worker model); the agent's, through the status dict (agent model, false without one); a
-- writer synced into this segment and this process's stores with handlers polled it (shared
-- model: a flag in the segment, so it survives a reload or a binary upgrade that keeps the
-- segment; a worker started with such a segment, respawned too, is synced from its first
-- request, before its timer first ran). Cheap once true; until then each call checks the
-- segment and the stores.
function _M.synced()
  if S.model == "shared" then
    if S.synced then return true end
    if S.started and S.role ~= "agent" and S.shared_names then return nshared.reader_synced() end
    return false
  end
  if S.runs then return S.informers_synced == true end
  if S.model == "agent" then
    local d = status_dict()
    return d ~= nil and d:get("agent/synced") == true
  end
  return false
end

--- kngx.status() -> { model =, served_by = pid, processes = { snapshot, ... } }
-- One snapshot per process that runs informers (from the status dict; this process's own is
-- fresh): pid, process ("worker-0", "agent"), role, synced, age (seconds since the sample),
-- ticks, items, dispatch_errors, view_errors, max_dispatch_seconds, informers = { name =
-- informer:status() plus resource_version_age } (docs/informer.md, docs/openresty.md).
_M.status = status.collect

--- kngx.metrics([status]) -> text: every process's informers in the Prometheus text format
-- (synced, resource version age, last event age, objects, queue length, lists, relists,
-- watches, events, errors, ...), labels informer, resource, namespace and process.
function _M.metrics(st)
  return metrics.text(st or status.collect())
end

return _M
