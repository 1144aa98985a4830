--- kinformer.context (internal): the ctx a controller's reconcile and finalize get: the key,
-- the client, the primary and other objects from the manager's caches (read-your-own-writes),
-- Events, the owner-reference and write-only-what-changed helpers with the primary as owner, a
-- log line naming the controller and the key. docs/controller.md.
--
-- Contract: context.new{ client, key, controller (name), manager, _store (the primary's),
-- _recorder, _controller } -> ctx. Its methods run inside the reconcile's task
-- (kinformer.task): their REST calls and waits for a cache to sync yield, not block.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local clock = require "kinformer.clock"
local task = require "kinformer.task"
local objects = require "kinformer.objects"

local type, tostring, pairs, ipairs, setmetatable = type, tostring, pairs, ipairs, setmetatable
local string_format = string.format
local raise = argcheck.raise

local _M = {}

local Ctx = {}
Ctx.__index = Ctx

-- The informer of ctx's controller (or of the manager) for resource.
local function cache_for(ctx, resource)
  local c = ctx._controller
  for _, s in ipairs(c.sources) do
    if s.resource == resource and s.kind ~= "watches" then return s.informer end
  end
  return ctx.manager:informer{ resource = resource, namespace = c.namespace }
end

-- Waits (inside a task) until inf synced, up to timeout seconds -> true | nil, err
local function wait_synced(inf, timeout)
  if inf:has_synced() then return true end
  local t = task.current()
  local deadline = clock.now() + timeout
  while t and clock.now() < deadline do
    t:sleep(0.01)
    if inf:has_synced() then return true end
  end
  return nil, "cache of " .. tostring(inf:status().resource or "?") .. " not synced"
end

--- ctx:get([resource, key]) -> object | nil (absent) | nil, err. Without arguments the
-- primary; with them an object of resource from the caches the manager runs (the
-- controller's own sources, else an informer the manager starts now and waits for). Objects
-- this manager's reconciles wrote are not read older than that write (docs/controller.md).
function Ctx:get(resource, key)
  local c = self._controller
  if resource == nil then
    if self._obj and not self.manager._ryow:wrote(c.gk, self.key) then return self._obj end
    return self.manager:_fresh(c.gk, self.key, self._store, c.resource)
  end
  if type(resource) ~= "string" then raise(1, "get", "resource name expected") end
  if type(key) ~= "string" then raise(2, "get", "object key (\"namespace/name\") expected") end
  local inf = cache_for(self, resource)
  local ok, err = wait_synced(inf, 30)
  if not ok then return nil, err end
  local res = self.client:resolve(resource)
  return self.manager:_fresh((res.group or "") .. "/" .. res.kind, key, inf:store(), resource)
end

--- ctx:list(resource [, opts]) -> list of cached objects (store:list's options), from the same
-- caches as ctx:get(resource, key)
function Ctx:list(resource, opts)
  if type(resource) ~= "string" then raise(1, "list", "resource name expected") end
  local inf = cache_for(self, resource)
  local ok, err = wait_synced(inf, 30)
  if not ok then return nil, err end
  return inf:store():list(opts)
end

--- ctx:event(obj, "Normal" | "Warning", reason, message) -> true | false, why: queues an Event
-- (written by the manager's loop after the reconcile).
function Ctx:event(obj, etype, reason, message)
  return self._recorder:record(obj, etype, reason, message)
end

--- ctx:set_controller_reference(obj) -> obj | nil, err: the primary as obj's controller
-- (kinformer.objects.set_controller_reference)
function Ctx:set_controller_reference(obj)
  local owner = self:get()
  if owner == nil then
    return nil, setmetatable({ reason = "NotFound", message = self.key .. " is gone" },
                             { __tostring = function(e) return e.reason .. ": " .. e.message end })
  end
  return objects.set_controller_reference(owner, obj)
end

-- opts with `current` reading resource from the manager's caches (read-your-own-writes)
local function cached_current(ctx, resource, opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.current == nil then
    o.current = function(ns, name)
      if ns == nil or ns == "" then -- namespaced: the client's namespace, as the GET would
        local res = ctx.client:resolve(resource)
        ns = res.namespaced and (ctx.client.namespace or "default") or nil
      end
      return ctx:get(resource, ns and (ns .. "/" .. name) or name)
    end
  end
  return o
end

--- ctx:create_or_update(resource, obj, mutate [, opts]) -> obj, op | nil, err:
-- kinformer.objects.create_or_update reading the current object from the manager's caches
function Ctx:create_or_update(resource, obj, mutate, opts)
  return objects.create_or_update(self.client, resource, obj, mutate,
                                  cached_current(self, resource, opts))
end

--- ctx:apply_if_changed(resource, desired [, opts]) -> obj, op | nil, err:
-- kinformer.objects.apply_if_changed reading the current object from the manager's caches;
-- field_manager defaults to the controller's name
function Ctx:apply_if_changed(resource, desired, opts)
  local o = cached_current(self, resource, opts)
  if o.field_manager == nil then o.field_manager = self.controller end
  return objects.apply_if_changed(self.client, resource, desired, o)
end

--- ctx:log(level, message): a log line naming the controller and the key ("info" and above
-- show by default: a manager sets the default logger to its log_level, "info").
function Ctx:log(level, msg)
  core.log(level, string_format("controller %s: %s: %s", self.controller, self.key, tostring(msg)))
end

--- context.new(fields) -> ctx
function _M.new(fields) return setmetatable(fields, Ctx) end

return _M
