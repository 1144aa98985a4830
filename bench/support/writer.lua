-- The write-only-what-changed controller of the manager benchmarks: each reconcile makes at
-- most one write of its primary, a JSON merge PATCH of one annotation, skipped when the object
-- carries the value already (its own write coming back through the watch).
--
--   local writer = require "bench.support.writer"
--   mgr:controller{ resource = "configmaps", namespace = ns,
--     reconcile = writer.reconcile{ annotation = writer.DATA_BYTES, value = writer.data_bytes,
--                                   on_write = function(req, value) ... end } }
local pairs, tostring, type = pairs, tostring, type

local _M = { _VERSION = "0.1" }

_M.DATA_BYTES = "bench.kinformer.io/data-bytes"
_M.TOUCHED = "bench.kinformer.io/touched"
_M.TOUCHED_AT = "fake.kinformer.io/touched-at" -- set by the fake server's POST /_fake/modify

--- writer.data_bytes(cm) -> the total length of the object's data values, as a string
function _M.data_bytes(cm)
  local bytes = 0
  local data = cm.data
  if type(data) == "table" then
    for _, v in pairs(data) do if type(v) == "string" then bytes = bytes + #v end end
  end
  return tostring(bytes)
end

--- writer.touched(cm) -> the fake server's touched-at annotation of the object, or "0"
function _M.touched(cm)
  local ann = cm.metadata.annotations
  return type(ann) == "table" and ann[_M.TOUCHED_AT] or "0"
end

--- writer.reconcile{ resource = "configmaps", annotation =, value = fn(obj) -> string,
--   on_write = fn(req, value), on_fail = fn(req, err) } -> a reconcile function for
-- mgr:controller: PATCHes annotation = value(primary) unless the primary carries it; on_write
-- runs when the write succeeded, on_fail when it failed (the reconcile then returns nil, err:
-- the manager retries the key).
function _M.reconcile(o)
  local resource, annotation, value = o.resource or "configmaps", o.annotation, o.value
  local on_write, on_fail = o.on_write, o.on_fail
  return function(req, ctx)
    local obj = ctx:get()
    if not obj then return end
    local v = value(obj)
    local ann = obj.metadata.annotations
    if type(ann) == "table" and ann[annotation] == v then return end -- written: nothing to do
    local res, err = ctx.client:patch(resource, req.key,
      { metadata = { annotations = { [annotation] = v } } })
    if not res then
      if on_fail then on_fail(req, err) end
      return nil, err
    end
    if on_write then on_write(req, v) end
  end
end

return _M
