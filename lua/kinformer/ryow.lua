--- kinformer.ryow (internal): a manager's reads of its own writes (controller-runtime's
-- read-your-own-writes client). docs/controller.md ("Caches lag, but not behind your own
-- writes").
--
-- Contract:
-- - note(method, obj) remembers the resourceVersion of an object a reconcile wrote (the
--   response of any write but GET; a Status response or an object without name, kind or
--   resourceVersion is ignored), under "group/Kind" and its key ("ns/name" or "name"); a DELETE
--   that removed the object remembers that it is gone.
-- - fresh(gk, key, store, resource) -> the object to act on | nil (gone) | nil, err: store's
--   copy, unless a write of key was noted and the copy is older (resourceVersions compared as
--   integers, kube-apiserver's; others only for equality). Then, inside a task
--   (kinformer.task), it sleeps POLL at a time while the informers catch up, for up to TIMEOUT
--   after the write, and else reads the object from the server (a GET through client). Outside
--   a task it reads the server at once. A write it saw caught up is forgotten.
-- - prune(now) forgets writes older than TIMEOUT; wrote(gk, key) says whether one is noted.
-- - stale_waits counts the reads that waited, fresh_reads those that read the server.
local clock = require "kinformer.clock"
local task = require "kinformer.task"

local type, tonumber, pairs, setmetatable = type, tonumber, pairs, setmetatable

local _M = { TIMEOUT = 2, POLL = 0.005 }

local Ryow = {}
Ryow.__index = Ryow

--- ryow.new(client) -> state
function _M.new(client)
  return setmetatable({ client = client, written = {}, stale_waits = 0, fresh_reads = 0 }, Ryow)
end

local function group_of(api_version)
  if type(api_version) ~= "string" then return nil end
  return api_version:match("^([^/]*)/") or ""
end

-- Whether resourceVersion a is the same as or newer than b.
local function caught_up(a, b)
  if a == b then return true end
  local x, y = tonumber(a), tonumber(b)
  return x ~= nil and y ~= nil and x >= y
end

function Ryow:note(method, obj)
  local md = type(obj) == "table" and obj.metadata
  if type(md) ~= "table" or type(md.name) ~= "string" or type(obj.kind) ~= "string"
      or type(md.resourceVersion) ~= "string" then return end
  local group = group_of(obj.apiVersion)
  if not group or obj.kind == "Status" then return end
  local ns = md.namespace
  local key = (type(ns) == "string" and ns ~= "") and (ns .. "/" .. md.name) or md.name
  local gk = group .. "/" .. obj.kind
  local w = self.written[gk]
  if not w then
    w = {}
    self.written[gk] = w
  end
  w[key] = { rv = md.resourceVersion, at = clock.now(),
             deleted = method == "DELETE" and not md.deletionTimestamp or nil }
end

function Ryow:wrote(gk, key)
  local w = self.written[gk]
  return w ~= nil and w[key] ~= nil
end

function Ryow:fresh(gk, key, store, resource)
  local obj = store:get_by_key(key)
  local written = self.written[gk]
  local w = written and written[key]
  if not w then return obj end
  local t = task.current()
  local waited = false
  while true do
    if w.deleted then
      if obj == nil then break end
    elseif obj ~= nil and caught_up(obj.metadata.resourceVersion, w.rv) then
      break
    end
    if not t or clock.now() - w.at >= _M.TIMEOUT then
      written[key] = nil
      self.fresh_reads = self.fresh_reads + 1
      local got, err = self.client:get(resource, key)
      if got then return got end
      if type(err) == "table" and err.code == 404 then return nil end
      return nil, err
    end
    if not waited then self.stale_waits = self.stale_waits + 1 end
    waited = true
    t:sleep(_M.POLL)
    obj = store:get_by_key(key)
    if written[key] ~= w then w = written[key] or w end -- a newer write meanwhile
  end
  if written[key] == w then written[key] = nil end
  return obj
end

function Ryow:prune(now)
  for _, written in pairs(self.written) do
    for k, w in pairs(written) do
      if now - w.at > _M.TIMEOUT then written[k] = nil end
    end
  end
end

return _M
