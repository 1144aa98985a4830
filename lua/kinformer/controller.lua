--- kinformer.controller (internal): one controller of a kinformer.manager: its sources (the
-- primary resource, `owns`, `watches`), its work queue and the processing of one key (the
-- finalizer steps, the user's reconcile, the result). docs/controller.md.
--
-- Contract:
-- - Sources are handlers on the client's shared informers. Each event passes the source's
--   predicates (kinformer.predicates; the controller's own apply to every source, a source's
--   add to them), then maps to keys of primaries ("ns/name", or "name" for cluster-scoped
--   primaries) that are added to the controller's work queue. Deletes map too (a tombstone's
--   last known object). Handlers only add keys: they never call user code but `map` and custom
--   predicates, whose errors are logged and counted (the event is dropped).
-- - Level-triggered: the work queue coalesces a key added while queued and never hands a key to
--   two reconciles at once (kinformer.workqueue's dirty / processing rule).
-- - Priorities (the work queue's): keys from the initial list, from objects created more than
--   a minute ago (a relist's adds), from resyncs (an update that kept the resourceVersion) and
--   from a new leader's enqueue_all wait at LOW behind keys from real changes (priority 0).
-- - process(key) runs in a task of the manager (kinformer.task: its REST calls do not block
--   the thread; up to max_concurrent_reconciles keys at once, never one twice): finalizer
--   steps, then reconcile(req, ctx). The primary it acts on is read through the manager's
--   read-your-own-writes rule (mgr:_fresh, kinformer.ryow). Results: nil / true -> forget; a number n > 0 ->
--   forget, add_after(n); 0 -> add_rate_limited; raise or nil, err -> add_rate_limited, logged
--   (409 Conflict at info level), counted.
-- - Finalizers: the finalizer is added (update with the resourceVersion precondition) before a
--   live primary's first reconcile; with deletionTimestamp set, finalize(obj, ctx) runs and only
--   this finalizer is removed once it succeeded. With a label_selector, a primary that leaves
--   the selection while it carries the finalizer (it is gone from the cache, not from the
--   server) is released the same way: finalize(obj, ctx) runs on the server's copy and the
--   finalizer is removed, since nothing would remove it later.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local clock = require "kinformer.clock"
local predicates = require "kinformer.predicates"
local workqueue = require "kinformer.workqueue"
local resources = require "kinformer.resources"
local context = require "kinformer.context"
local rbac = require "kinformer.rbac"

local type, tostring, tonumber, pairs, ipairs, pcall, setmetatable = type, tostring,
  tonumber, pairs, ipairs, pcall, setmetatable
local string_format = string.format
local key_of, split_key, is_tombstone, to_table = core.key_of, core.split_key,
  core.is_tombstone, core.to_table
local raise, fail = argcheck.raise, argcheck.fail

local _M = {}

local WRITE_TIMEOUT = 10
local LOW = -100 -- kinformer.manager's LOW
local OLD_OBJECT = 60 -- seconds: an add of an object created earlier is no change (a relist)

local Controller = {}
Controller.__index = Controller
_M.Controller = Controller

local SPEC = { name = true, resource = true, namespace = true, label_selector = true,
  owns = true, watches = true, predicates = true, finalizer = true, reconcile = true,
  finalize = true, rate_limiter = true, max_concurrent_reconciles = true, rbac = true }
local SOURCE = { resource = true, map = true, predicates = true, namespace = true,
  label_selector = true }

local function check_predicates(list, what)
  if list == nil then return nil end
  if type(list) ~= "table" then raise(1, "controller", what .. " must be a list of functions") end
  local out = {}
  for i, p in ipairs(list) do
    if type(p) ~= "function" then
      raise(1, "controller", string_format("%s[%d] must be a function", what, i))
    end
    out[i] = p
  end
  return out
end

local function informer_for(mgr, what, resource, namespace, label_selector)
  if type(resource) ~= "string" or resource == "" then
    raise(1, "controller", what .. ": resource name (string) expected")
  end
  local inf, err = mgr.client:informer{ resource = resource, namespace = namespace,
                                        label_selector = label_selector }
  if not inf then fail(string_format("controller %s: %s", what, tostring(err))) end
  return inf
end

local function find(list, s)
  if type(list) ~= "table" then return nil end
  for i, v in ipairs(list) do if v == s then return i end end
end

-- The controller ownerReference of obj, if it names a primary of this controller.
local function controller_owner(self, obj)
  local md = type(obj) == "table" and obj.metadata
  local refs = md and md.ownerReferences
  if not refs then return nil end
  for _, ref in ipairs(refs) do
    if ref.controller == true then
      local api = type(ref.apiVersion) == "string" and ref.apiVersion or ""
      local group = api:find("/", 1, true) and api:match("^([^/]*)/") or ""
      if ref.kind == self.kind and group == self.group and type(ref.name) == "string" then
        if self.namespaced then return (md.namespace or "") .. "/" .. ref.name end
        return ref.name
      end
      return nil -- one controller reference at most
    end
  end
end

local function add_keys(self, keys, priority)
  local q = self.queue
  local shard = self.manager._shard -- a sharded manager queues only this replica's keys
  for _, k in ipairs(keys) do
    if not shard or shard:owns(k) then q:add(k, priority) end
  end
end

-- Seconds since the epoch of an RFC 3339 UTC time ("2026-11-28T03:00:00Z"), or nil.
local function epoch(ts)
  if type(ts) ~= "string" then return nil end
  local y, mo, d, h, mi, sec = ts:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then y, mo = y - 1, mo + 12 end -- days from civil (Howard Hinnant's)
  local floor = math.floor -- (no // on LuaJIT)
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * (mo - 3) + 2) / 5) + tonumber(d) - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
end

-- The work queue priority of an event: LOW when it is no change (see the contract).
local function priority_of(etype, obj, old, initial)
  if etype == "add" then
    if initial then return LOW end
    local created = epoch(obj and obj.metadata.creationTimestamp)
    if created and os.time() - created > OLD_OBJECT then return LOW end
  elseif etype == "update" and old and obj
      and old.metadata.resourceVersion == obj.metadata.resourceVersion then
    return LOW
  end
  return 0
end

-- Runs the predicates on ev -> pass
local function passes(self, src, ev)
  for _, list in ipairs{ self.predicates, src.predicates } do
    for _, p in ipairs(list) do
      local ok, res = pcall(p, ev)
      if not ok then
        self.source_errors = self.source_errors + 1
        core.log("error", string_format("controller %s: predicate on %s raised: %s", self.name,
          src.resource, errtext(res)))
        return false
      end
      if not res then
        self.filtered = self.filtered + 1
        return false
      end
    end
  end
  return true
end

-- One key a map returned ("ns/name", "name" or { namespace =, name = }) -> the primary's key, or
-- nil, why when it cannot name a primary: a namespaced primary needs a namespace, a
-- cluster-scoped one none, and both parts must be names the API server could have given.
local function map_key(self, k)
  local ns, name
  if type(k) == "string" then
    ns, name = k:match("^([^/]*)/(.*)$")
    if not ns then name = k end
    if ns == "" then return nil, ("%q has an empty namespace"):format(k) end
  elseif type(k) == "table" then
    local ok
    ok, ns, name = pcall(function() return k.namespace, k.name end)
    if not ok then return nil, "reading the key table raised" end
    if ns ~= nil and type(ns) ~= "string" then return nil, "namespace is a " .. type(ns) end
    if type(name) ~= "string" then return nil, "name is a " .. type(name) end
    if ns == "" then ns = nil end
  else
    return nil, "a " .. type(k) .. " (a string or { namespace =, name = } expected)"
  end
  local why = resources.path_segment_error(name)
  if why then return nil, ("name %q %s"):format(name, why) end
  if ns then
    why = resources.namespace_error(ns)
    if why then return nil, "namespace " .. why end
  end
  if self.namespaced and not ns then
    return nil, ("%q has no namespace (%s is namespaced)"):format(name, self.resource)
  elseif self.namespaced == false and ns then
    return nil, ("%q has a namespace (%s is cluster-scoped)"):format(ns .. "/" .. name,
      self.resource)
  end
  return ns and (ns .. "/" .. name) or name
end

-- The keys src maps obj (a cached object, or nil for a tombstone without one) to.
local function keys_of(self, src, obj, tomb_key)
  if src.kind == "primary" then
    if obj then return { (key_of(obj)) } end
    return { tomb_key }
  end
  if not obj then return {} end
  if src.kind == "owns" then
    local k = controller_owner(self, obj)
    return k and { k } or {}
  end
  local ok, res = pcall(src.map, obj)
  if not ok then
    self.source_errors = self.source_errors + 1
    core.log("error", string_format("controller %s: map of %s raised: %s", self.name,
      src.resource, errtext(res)))
    return {}
  end
  if res == nil then return {} end
  if type(res) == "string" then res = { res } end
  if type(res) ~= "table" then
    self.source_errors = self.source_errors + 1
    core.log("error", string_format("controller %s: map of %s returned a %s (a list of keys " ..
      "expected)", self.name, src.resource, type(res)))
    return {}
  end
  local keys = {}
  for _, k in ipairs(res) do
    local key, why = map_key(self, k)
    if key then
      keys[#keys + 1] = key
    else
      self.source_errors = self.source_errors + 1
      if not src.bad_key_logged then -- once per source: a broken map would flood the log
        src.bad_key_logged = true
        core.log("error", string_format("controller %s: map of %s returned an invalid key: %s "
          .. "(dropped; further invalid keys are dropped and counted in source_errors)",
          self.name, src.resource, why))
      end
    end
  end
  return keys
end

local function handle(self, src, etype, obj, old, initial)
  local tomb_key
  if is_tombstone(obj) then
    tomb_key = obj.key
    obj = obj.obj
  end
  if etype == "delete" and src.kind == "primary" and self.finalizer and self.label_selector then
    local md = obj and obj.metadata
    if md and find(md.finalizers, self.finalizer) then -- maybe out of the selection, not gone
      self._departed[tomb_key or key_of(obj)] = true
    end
  end
  local ev = { type = etype, object = obj, old = old }
  -- The start of a deletion always reaches a controller with a finalizer (kube-apiserver moves
  -- the generation then, but a predicate must not be able to hide it).
  local deleting = self.finalizer and src.kind == "primary" and etype == "update"
    and obj and obj.metadata.deletionTimestamp and not (old and old.metadata.deletionTimestamp)
  if obj and not deleting and not passes(self, src, ev) then return end
  local prio = priority_of(etype, obj, old, initial)
  add_keys(self, keys_of(self, src, obj, tomb_key), prio)
  if etype == "update" and src.kind ~= "primary" and old then
    add_keys(self, keys_of(self, src, old), prio) -- an owner or a mapping that changed: both
  end
end

local function add_source(self, src)
  src.registration = src.informer:add_handler{
    on_add = function(obj, initial) handle(self, src, "add", obj, nil, initial) end,
    on_update = function(old, new) handle(self, src, "update", new, old) end,
    on_delete = function(obj) handle(self, src, "delete", obj) end,
  }
  self.sources[#self.sources + 1] = src
end

--- controller.new(mgr, spec) -> controller (mgr:controller's work; spec: docs/controller.md)
function _M.new(mgr, spec)
  local F = "controller"
  if type(spec) ~= "table" then raise(1, F, "table expected, got " .. type(spec)) end
  argcheck.options(spec, SPEC, F)
  local name = spec.name
  if type(name) ~= "string" or name == "" then raise(1, F, "option 'name' (string) required") end
  if mgr.controllers[name] then raise(1, F, "a controller named '" .. name .. "' exists") end
  if type(spec.reconcile) ~= "function" then
    raise(1, F, "option 'reconcile' (function) required")
  end
  local namespace = argcheck.string(spec, "namespace", F)
  local selector = argcheck.string(spec, "label_selector", F)
  local finalizer = argcheck.string(spec, "finalizer", F)
  argcheck.func(spec, "finalize", F)
  if finalizer and not spec.finalize then raise(1, F, "option 'finalize' required with 'finalizer'") end
  if spec.finalize and not finalizer then raise(1, F, "option 'finalizer' required with 'finalize'") end
  if finalizer and not finalizer:find("/", 1, true) then
    raise(1, F, "option 'finalizer' must be a qualified name (\"example.com/cleanup\")")
  end
  local owns, watches = spec.owns or {}, spec.watches or {}
  if type(owns) ~= "table" then raise(1, F, "option 'owns' must be a list") end
  if type(watches) ~= "table" then raise(1, F, "option 'watches' must be a list") end
  local preds = check_predicates(spec.predicates, "predicates")
  local concurrency = argcheck.number(spec, "max_concurrent_reconciles", F, 1, 1)
  if concurrency ~= math.floor(concurrency) or concurrency == math.huge then
    raise(1, F, "option 'max_concurrent_reconciles' must be a whole number >= 1")
  end

  local primary = informer_for(mgr, name, spec.resource, namespace, selector)
  local res = mgr.client:resolve(spec.resource)
  local self = setmetatable({
    name = name, manager = mgr, client = mgr.client, resource = spec.resource,
    group = res.group or "", version = res.version, kind = res.kind,
    gk = (res.group or "") .. "/" .. res.kind,
    namespaced = res.namespaced, namespace = namespace, finalizer = finalizer,
    reconcile = spec.reconcile, finalize = spec.finalize, label_selector = selector,
    predicates = preds or {}, primary = primary, sources = {},
    max_concurrent = concurrency, active = 0, -- reconciles allowed and running at once
    _departed = {}, -- keys of primaries that left the cache with our finalizer on them
    _parked = {}, -- a sharded manager's keys waiting for their handover
    reconciles = 0, errors = 0, conflicts = 0, requeues = 0, filtered = 0,
    source_errors = 0, finalizes = 0, last_error = nil,
    rbac = rbac.check(spec.rbac, F), -- rules declared for mgr:rbac
  }, Controller)
  self.queue = workqueue.new{ name = name, rate_limiter = spec.rate_limiter,
    clock = function() return clock.now() end,
    wait = function() end } -- never waits: the manager only asks with a timeout of 0
  add_source(self, { kind = "primary", resource = spec.resource, informer = primary,
                     predicates = preds and {} or predicates.DEFAULT })
  for i, o in ipairs(owns) do
    local r, p = o, nil
    if type(o) == "table" then
      argcheck.options(o, SOURCE, F)
      if o.map then raise(1, F, "owns[" .. i .. "]: 'map' is for watches") end
      r, p = o.resource, check_predicates(o.predicates, "owns[" .. i .. "].predicates")
    end
    local inf = informer_for(mgr, "owns[" .. i .. "]", r, namespace)
    add_source(self, { kind = "owns", resource = r, informer = inf,
                       predicates = p or (preds and {} or predicates.DEFAULT) })
  end
  for i, w in ipairs(watches) do
    local what = "watches[" .. i .. "]"
    if type(w) ~= "table" then raise(1, F, what .. " must be a table") end
    argcheck.options(w, SOURCE, F)
    if type(w.map) ~= "function" then raise(1, F, what .. ".map (function) required") end
    local p = check_predicates(w.predicates, what .. ".predicates")
    local inf = informer_for(mgr, what, w.resource, w.namespace or namespace, w.label_selector)
    add_source(self, { kind = "watches", resource = w.resource, informer = inf, map = w.map,
                       predicates = p or (preds and {} or predicates.DEFAULT) })
  end
  return self
end

--- controller:informers() -> the informers of its sources (the primary first)
function Controller:informers()
  local out = {}
  for i, s in ipairs(self.sources) do out[i] = s.informer end
  return out
end

--- controller:synced() -> every source's informer synced and replayed to its handler
function Controller:synced()
  if self._synced then return true end
  for _, s in ipairs(self.sources) do
    if not s.registration:has_synced() then return false end
  end
  self._synced = true
  return true
end

--- controller:unpark(): the keys parked for a handover go back into the queue
function Controller:unpark()
  local parked = self._parked
  if next(parked) == nil then return end
  self._parked = {}
  for k in pairs(parked) do self.queue:add(k) end
end

--- controller:enqueue_all([priority [, only]]): every key its sources map their cached objects
-- to (a new leader looks at everything once); with only, the keys only(key) is true for.
function Controller:enqueue_all(priority, only)
  for _, s in ipairs(self.sources) do
    for _, obj in ipairs(s.informer:store():list()) do
      local keys = keys_of(self, s, obj)
      if only then
        local n = 0
        for i = 1, #keys do
          if only(keys[i]) then
            n = n + 1
            keys[n] = keys[i]
          end
        end
        for i = #keys, n + 1, -1 do keys[i] = nil end
      end
      add_keys(self, keys, priority)
    end
  end
end

-- ---- processing ----

-- Adds (add = true) or removes this controller's finalizer -> written object | nil, err. An
-- update carrying the resourceVersion read: a stale copy gets 409 Conflict (retried after the
-- cache catches up), so another party's finalizer can never be dropped.
local function write_finalizer(self, obj, add, idx)
  local copy = to_table(obj)
  local list = copy.metadata.finalizers or {}
  if add then
    list[#list + 1] = self.finalizer
  else
    table.remove(list, idx)
  end
  copy.metadata.finalizers = list
  return self.client:update(self.resource, copy, { timeout = WRITE_TIMEOUT })
end

local function is_conflict(err)
  if type(err) == "table" then return err.code == 409 end
  return type(err) == "string" and err:find("409 Conflict", 1, true) ~= nil
end

-- finalize(obj, ctx), then this controller's finalizer off obj -> "done" | nil, err
local function finalize_and_release(self, obj, ctx, idx)
  self.finalizes = self.finalizes + 1
  local ok, r1, r2 = pcall(self.finalize, obj, ctx)
  if not ok then return nil, r1 end
  if r1 == nil and r2 ~= nil then return nil, r2 end
  local res, err = write_finalizer(self, obj, false, idx)
  if not res and not (type(err) == "table" and err.code == 404) then return nil, err end
  return "done"
end

-- The finalizer steps for a cached primary -> "reconcile" (go on, ctx may carry the written
-- object), "done", or nil, err
local function finalizer_step(self, obj, ctx)
  local md = obj.metadata
  local idx = find(md.finalizers, self.finalizer)
  if md.deletionTimestamp then
    if not idx then return "done" end -- nothing of ours left: the deletion is someone else's
    return finalize_and_release(self, obj, ctx, idx)
  end
  if idx then return "reconcile" end
  local res, err = write_finalizer(self, obj, true)
  if not res then return nil, err end
  ctx._obj = res
  return "reconcile"
end

-- A primary that left the cache with our finalizer on it: gone, or out of the selection? ->
-- "done" | nil, err
local function release_departed(self, key, ctx)
  local ns, name = split_key(key)
  local inside, err = self.client:list(self.resource, { namespace = ns ~= "" and ns or nil,
    label_selector = self.label_selector, field_selector = "metadata.name=" .. name,
    timeout = WRITE_TIMEOUT })
  if not inside then return nil, err end
  if #inside.items > 0 then return "done" end -- still selected: the cache brings it back
  local obj
  obj, err = self.client:get(self.resource, key, { timeout = WRITE_TIMEOUT })
  if not obj then
    if type(err) == "table" and err.code == 404 then return "done" end
    return nil, err
  end
  local idx = find(obj.metadata.finalizers, self.finalizer)
  if not idx then return "done" end
  core.log("info", string_format("controller %s: %s left the selection (%s): finalizing and " ..
    "removing %s", self.name, key, self.label_selector, self.finalizer))
  return finalize_and_release(self, obj, ctx, idx)
end

--- controller:process(key, recorder) -> result: "success", "requeue", "requeue_after",
-- "error" (the queue already updated and done(key) called). Runs in a task of the manager.
function Controller:process(key, recorder)
  local q = self.queue
  local store = self.primary:store()
  local ns, name = split_key(key)
  local ctx = context.new{ client = self.client, key = key, controller = self.name,
                          manager = self.manager, _store = store, _recorder = recorder,
                          _controller = self }
  local obj, err = self.manager:_fresh(self.gk, key, store, self.resource)
  local step = "reconcile"
  if err ~= nil then
    step = nil
  elseif obj == nil then
    if self._departed[key] then
      self._departed[key] = nil
      step, err = release_departed(self, key, ctx)
    end
  else
    self._departed[key] = nil
    if self.finalizer then step, err = finalizer_step(self, obj, ctx) end
    if step == "reconcile" and not ctx._obj then ctx._obj = obj end
  end
  local result
  if step == "reconcile" then
    self.reconciles = self.reconciles + 1
    local ok, r1, r2 = pcall(self.reconcile, { key = key, namespace = ns ~= "" and ns or nil,
                                               name = name }, ctx)
    if not ok then
      err = r1 == nil and "reconcile raised nil" or r1
    elseif r1 == nil and r2 ~= nil then
      err = r2
    elseif type(r1) == "number" and r1 >= 0 and r1 < math.huge then
      q:forget(key)
      if r1 > 0 then
        q:add_after(key, r1)
        result = "requeue_after"
      else
        q:add_rate_limited(key)
        result = "requeue"
      end
    elseif r1 == nil or r1 == true then
      result = "success"
    elseif type(r1) == "number" then
      err = ("reconcile returned %s: a requeue delay must be a finite number of seconds >= 0")
        :format(r1 ~= r1 and "NaN" or tostring(r1))
    else
      err = "reconcile returned a " .. type(r1) .. " (nothing, a number of seconds, or nil, err " ..
        "expected)"
    end
  elseif step == "done" then
    result = "success"
  end
  if err ~= nil then
    q:add_rate_limited(key)
    result = "error"
    if is_conflict(err) then
      self.conflicts = self.conflicts + 1
      core.log("info", string_format("controller %s: %s: conflict, retrying: %s", self.name, key,
        errtext(err)))
    else
      self.errors = self.errors + 1
      local text = errtext(err)
      self.last_error = string_format("%s: %s", key, text)
      core.log("error", string_format("controller %s: reconcile %s failed (retry %d): %s",
        self.name, key, q:num_requeues(key), text))
    end
  elseif result == "success" then
    q:forget(key)
  end
  if result == "requeue" or result == "requeue_after" then self.requeues = self.requeues + 1 end
  q:done(key)
  return result
end

--- controller:status() -> table (docs/controller.md)
function Controller:status()
  local qs = self.queue:status()
  return { name = self.name, resource = self.resource, reconciles = self.reconciles,
           errors = self.errors, conflicts = self.conflicts, requeues = self.requeues,
           active = self.active, max_concurrent_reconciles = self.max_concurrent,
           filtered = self.filtered,
           source_errors = self.source_errors, finalizes = self.finalizes,
           last_error = self.last_error, synced = self:synced(), queue = qs }
end

-- Stops its handlers and its queue (the informers are the client's: shared).
function Controller:_shut_down()
  self.queue:shut_down()
  for _, s in ipairs(self.sources) do s.informer:remove_handler(s.registration) end
end

return _M
