--- kinformer.ngx.shared (internal): the reading side of the shared model in one process: the
-- store kngx.store(name) hands out, the polling of every store this process reads, and the
-- "synced" flag of the segment.
--
-- Contract:
-- - Before the writer created a store (at start, or while a new segment waits for its first
--   writer) kngx.store(name) is a stand-in with the same read methods, which answers as an empty
--   store does (get -> nil, list / by_index / ... -> {}, len -> 0) and forwards to the real
--   store once it exists. So a request can read without checking first; kngx.synced() says
--   whether what it read is a complete cache.
-- - Every store that has handlers or that this process's requests opened (kngx.store) is polled
--   by the dispatch timer: a reader's cache of tables forgets replaced and deleted objects only
--   when it polls, and what it holds the segment cannot reuse.
-- - The synced flag lives in the segment itself (a bit of its flags word, core.shm_flags), set
--   once by a writer whose informers synced into that segment, and never cleared: it says "this
--   segment has held a complete list", whichever generation of workers reads it, also a new
--   binary's (nginx's shared dicts start empty after a binary upgrade; the segment does not). A
--   new segment starts unsynced.
local core = require "kinformer.core"
local nprocess = require "kinformer.ngx.process"
local argcheck = require "kinformer.argcheck"

local type, pairs, setmetatable, tostring = type, pairs, setmetatable, tostring
local S = nprocess.state
local shm_flags = core.shm_flags
local SYNCED = 1 -- the segment's flag: a writer's informers synced into it
local raise = argcheck.raise

local _M = {}

-- Whether the store of name exists (cheap once it does: a table lookup).
local function created(name)
  if S.created[name] then return true end
  local r = S.readers[name]
  if not r then return false end
  local n, _, code = r:len()
  if n or code ~= "ENOTFOUND" then
    S.created[name] = true
    return true
  end
  return false
end
_M.created = created


local function check_string(v, n, fname)
  if type(v) ~= "string" and type(v) ~= "number" then
    raise(n, fname, "string expected, got " .. type(v))
  end
end

-- Method -> what an empty store answers, after the checks a store makes of its arguments.
local EMPTY = {
  get = function(key) check_string(key, 1, "get") return nil end,
  get_by_key = function(key) check_string(key, 1, "get_by_key") return nil end,
  list = function(opts)
    if opts ~= nil and type(opts) ~= "table" then
      raise(1, "list", "table expected, got " .. type(opts))
    end
    return {}
  end,
  by_index = function(index, value)
    check_string(index, 1, "by_index")
    check_string(value, 2, "by_index")
    return {}
  end,
  index_keys = function(index, value)
    check_string(index, 1, "index_keys")
    check_string(value, 2, "index_keys")
    return {}
  end,
  list_index_func_values = function(index)
    check_string(index, 1, "list_index_func_values")
    return {}
  end,
  len = function() return 0 end,
}
EMPTY.list_keys = EMPTY.list

local Standin = {}
Standin.__index = Standin
for m, empty in pairs(EMPTY) do
  Standin[m] = function(self, ...)
    local name = self.name
    if created(name) then
      local r = S.readers[name]
      return r[m](r, ...)
    end
    return empty(...)
  end
end
function Standin:status() return S.readers[self.name]:status() end
Standin.__len = function(self) return self:len() end

--- shared.store(name) -> the reader of name (once its store exists), else its stand-in; nil
-- for a name this process does not read. Marks the store as read (polled from now on).
function _M.store(name)
  local r = S.readers[name]
  if not r then return nil end
  if not S.opened[name] then S.opened[name] = true end
  if S.created[name] or created(name) then return r end
  local s = S.standins[name]
  if not s then
    s = setmetatable({ name = name }, Standin)
    S.standins[name] = s
  end
  return s
end

--- shared.segment_synced() -> true once a writer's informers synced into this segment
function _M.segment_synced()
  return S.segment ~= nil and shm_flags(S.segment) % 2 == SYNCED
end

--- shared.mark_synced(): the writer's informers synced into this segment (never cleared).
function _M.mark_synced()
  if S.segment then shm_flags(S.segment, SYNCED) end
end

return _M
