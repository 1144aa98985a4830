--- kinformer.predicates: event filters for the manager's controllers (controller-runtime's
-- predicate package). docs/controller.md, "Predicates".
--
-- Contract: a predicate is a function(ev) -> truthy to let an event through, where
-- ev = { type = "add" | "update" | "delete", object = obj, old = old_obj (updates only) }.
-- A source with several predicates lets an event through only when every one does (AND). The
-- built-ins filter updates only: adds and deletes always pass (as controller-runtime's
-- GenerationChangedPredicate and friends). Without predicates a source lets through every add,
-- every delete, and the updates whose resourceVersion changed (resyncs and unchanged objects of
-- a relist are dropped). A predicate that raises is logged by the manager and counts as false.
-- Objects are the informers' cached objects: read them, never modify them.
local type, pairs, ipairs, select = type, pairs, ipairs, select
local argcheck = require "kinformer.argcheck"

local _M = {}

local function md(obj) return type(obj) == "table" and obj.metadata or nil end

-- Two string maps (labels, annotations) hold the same pairs; nil and {} are the same.
local function same_map(a, b)
  a, b = a or {}, b or {}
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

--- predicates.resource_version_changed: updates whose resourceVersion moved (the default).
function _M.resource_version_changed(ev)
  if ev.type ~= "update" then return true end
  local o, n = md(ev.old), md(ev.object)
  return not (o and n) or o.resourceVersion ~= n.resourceVersion
end

--- predicates.generation_changed: updates whose metadata.generation moved (spec changes; not
-- status or metadata writes). Objects without a generation always pass.
function _M.generation_changed(ev)
  if ev.type ~= "update" then return true end
  local o, n = md(ev.old), md(ev.object)
  if not (o and n) or n.generation == nil then return true end
  return o.generation ~= n.generation
end

--- predicates.labels_changed: updates whose metadata.labels changed.
function _M.labels_changed(ev)
  if ev.type ~= "update" then return true end
  local o, n = md(ev.old), md(ev.object)
  return not (o and n) or not same_map(o.labels, n.labels)
end

--- predicates.annotations_changed: updates whose metadata.annotations changed.
function _M.annotations_changed(ev)
  if ev.type ~= "update" then return true end
  local o, n = md(ev.old), md(ev.object)
  return not (o and n) or not same_map(o.annotations, n.annotations)
end

local function check_list(fname, ...)
  local n = select("#", ...)
  if n == 0 then argcheck.raise(1, fname, "at least one predicate expected") end
  local list = { ... }
  for i = 1, n do
    if type(list[i]) ~= "function" then
      argcheck.raise(i, fname, "predicate (function) expected, got " .. type(list[i]))
    end
  end
  return list
end

--- predicates.any(p1, p2, ...) -> a predicate true when one of them is (OR).
function _M.any(...)
  local list = check_list("any", ...)
  return function(ev)
    for _, p in ipairs(list) do if p(ev) then return true end end
    return false
  end
end

--- predicates.all(p1, p2, ...) -> a predicate true when every one is (AND).
function _M.all(...)
  local list = check_list("all", ...)
  return function(ev)
    for _, p in ipairs(list) do if not p(ev) then return false end end
    return true
  end
end

--- predicates.negate(p) -> a predicate true when p is false.
function _M.negate(p)
  check_list("negate", p)
  return function(ev) return not p(ev) end
end

--- predicates.label_selector{ key = "value", ... } -> passes events whose object carries every
-- one of these labels (for updates: the new object or the old one, so an object leaving the
-- selection is still seen once).
function _M.label_selector(want)
  if type(want) ~= "table" then argcheck.raise(1, "label_selector", "table expected") end
  local function match(obj)
    local m = md(obj)
    local labels = m and m.labels or {}
    for k, v in pairs(want) do if labels[k] ~= v then return false end end
    return true
  end
  return function(ev)
    return match(ev.object) or (ev.old ~= nil and match(ev.old))
  end
end

_M.DEFAULT = { _M.resource_version_changed }

return _M
