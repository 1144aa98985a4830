-- A handler that records what an informer told it and checks that it is a consistent history of
-- the objects, as client-go promises a handler:
--   * no add for a key the handler already has (no duplicate adds);
--   * no update or delete for a key it does not have;
--   * an update's old object is the version the handler was last given, under the same key;
--   * with `monotonic`, a key's resourceVersion never goes backwards (not after an etcd
--     restore, where older versions come back legitimately).
-- At the end, `live` (key -> resourceVersion the handler believes exists) must equal the
-- server's objects: then every object that vanished got its on_delete (maybe as a tombstone).
--
--   local history = require "support.history"
--   local h = history.new{ monotonic = true }
--   inf:add_handler(h.handler)
--   ... assert(h:check(srv:versions("pods")))
local kinformer = require "kinformer"

local _M = {}

local History = {}
History.__index = History

local function rv_of(obj)
  if kinformer.is_tombstone(obj) then obj = obj.obj end
  return obj and obj.metadata and obj.metadata.resourceVersion
end

--- history.new{ monotonic = false, resync = seconds, raise = false, events = true } -> h
-- h.handler is the table for informer:add_handler (with `resync` when given); with `raise`
-- every handler function raises after recording (a handler that fails on every call). h.events
-- lists every call ("add ns/name", ...) unless `events = false`: a long run (the soak) must not
-- grow its own memory with every notification.
function _M.new(opts)
  opts = opts or {}
  local h = setmetatable({ live = {}, problems = {}, events = {},
                           adds = 0, initial_adds = 0, updates = 0, deletes = 0, tombstones = 0,
                           monotonic = opts.monotonic }, History)
  local function problem(msg)
    h.problems[#h.problems + 1] = msg
  end
  local raise = opts.raise
  local record = opts.events ~= false
  h.handler = {
    resync = opts.resync,
    on_add = function(obj, initial)
      local k = kinformer.key_of(obj)
      if h.live[k] then problem("duplicate add " .. k) end
      h.live[k] = rv_of(obj)
      h.adds = h.adds + 1
      if initial then h.initial_adds = h.initial_adds + 1 end
      if record then h.events[#h.events + 1] = "add " .. k end
      if raise then error("handler raises on add " .. k) end
    end,
    on_update = function(old, new)
      local k = kinformer.key_of(new)
      local have = h.live[k]
      if not have then
        problem("update before add " .. k)
      elseif rv_of(old) ~= have then
        problem(("update of %s from rv %s, but the handler last saw rv %s"):format(k,
          tostring(rv_of(old)), have))
      end
      if kinformer.key_of(old) ~= k then problem("key changed " .. k) end
      local rv = rv_of(new)
      if h.monotonic and have and tonumber(rv) < tonumber(have) then
        problem(("%s went back from rv %s to %s"):format(k, have, rv))
      end
      h.live[k] = rv
      h.updates = h.updates + 1
      if record then h.events[#h.events + 1] = "update " .. k end
      if raise then error("handler raises on update " .. k) end
    end,
    on_delete = function(obj)
      local k = kinformer.key_of(obj)
      if not h.live[k] then problem("delete of unknown " .. k) end
      h.live[k] = nil
      h.deletes = h.deletes + 1
      if kinformer.is_tombstone(obj) then h.tombstones = h.tombstones + 1 end
      if record then h.events[#h.events + 1] = "delete " .. k end
      if raise then error("handler raises on delete " .. k) end
    end,
  }
  return h
end

--- _M.diff(want, have) -> "" when the key -> rv maps are equal, else what differs
function _M.diff(want, have)
  local d = {}
  for k, v in pairs(want) do
    if have[k] ~= v then d[#d + 1] = k .. "=" .. tostring(have[k]) .. " (want " .. v .. ")" end
  end
  for k in pairs(have) do
    if want[k] == nil then d[#d + 1] = k .. " extra" end
  end
  table.sort(d)
  return table.concat(d, ", ")
end

--- h:check(want) -> true | nil, message: the handler's objects equal want (key -> rv) and its
-- history had no problem.
function History:check(want)
  local d = _M.diff(want, self.live)
  if d ~= "" then return nil, "handler view differs: " .. d end
  if #self.problems > 0 then
    return nil, #self.problems .. " history problems: " .. table.concat(self.problems, "; ", 1,
      math.min(#self.problems, 5))
  end
  return true
end

--- h:same(want) -> whether the handler's objects equal want (for polling)
function History:same(want)
  return _M.diff(want, self.live) == ""
end

return _M
