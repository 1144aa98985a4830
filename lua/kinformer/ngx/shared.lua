--- kinformer.ngx.shared (internal): the shared model in one process: the store kngx.store(name)
-- hands out, the polling of every store this process reads (its handlers' events), when this
-- process counts as synced, the "synced" flag of the segment, and the claim of the writer's role.
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

local errtext = require "kinformer.errtext"

local type, pairs, ipairs, pcall, setmetatable, tostring = type, pairs, ipairs, pcall,
  setmetatable, tostring
local string_format = string.format
local ngx_now = ngx.now
local S, log = nprocess.state, nprocess.log
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

local function handler_error(name, what, err)
  S.dispatch_errors = S.dispatch_errors + 1
  log("error", "shared store ", name, ": ", what, " handler raised: ", errtext(err))
end

--- shared.poll(max) -> n: hands this process's handlers the changes of each shared store since
-- the last poll, at most `max` per store; returns how many they were handed.
function _M.poll(max)
  local total = 0
  for _, name in ipairs(S.shared_names) do
    local h = S.handlers[name]
    -- A store nobody reads and nobody listens to makes no table; one that only requests read
    -- is polled without a handler (its cached tables of replaced or deleted objects go; no
    -- snapshot, no table is made), or its cache of tables would keep every object it handed out.
    if not h and not S.opened[name] then goto continue end
    if not h then
      local ok, n, _, code = pcall(S.readers[name].poll, S.readers[name], max)
      if not ok then
        S.dispatch_errors = S.dispatch_errors + 1
        log("error", "shared store ", name, ": poll failed: ", errtext(n))
      elseif not n and code ~= "ENOTFOUND" then -- the reader logged it (once)
        S.dispatch_errors = S.dispatch_errors + 1
      end
      goto continue
    end
    local on_add, on_update, on_delete = h.on_add, h.on_update, h.on_delete
    local ok, n, err = pcall(S.readers[name].poll, S.readers[name], max,
      function(kind, obj, old, initial)
        local hok, herr = true, nil
        if kind == 1 then
          if on_add then hok, herr = pcall(on_add, obj, initial) end
        elseif kind == 2 then
          if on_update then hok, herr = pcall(on_update, old, obj) end
        elseif on_delete then
          hok, herr = pcall(on_delete, obj)
        end
        if not hok then handler_error(name, ({ "on_add", "on_update", "on_delete" })[kind], herr) end
      end)
    if not ok then
      S.dispatch_errors = S.dispatch_errors + 1
      log("error", "shared store ", name, ": poll failed: ", errtext(n))
    elseif n then
      total = total + n
    elseif err and not S.reader_waiting then
      -- Not created yet (the writer has not started): said once.
      S.reader_waiting = true
      log("info", "shared store ", name, ": ", tostring(err))
    end
    ::continue::
  end
  return total
end

--- shared.reader_synced() -> whether a process that reads (the writer's included): synced once the segment has held
-- a complete list (this writer's, or a previous generation's) and this process had it: its
-- stores exist, and the ones with handlers were polled (the handlers were told).
function _M.reader_synced()
  if not _M.segment_synced() then return false end
  for _, name in ipairs(S.shared_names) do
    if not created(name) then return false end
    if S.handlers[name] and (S.readers[name]:status().cursor or 0) == 0 then return false end
  end
  S.synced = true
  return true
end

--- shared.claim_writer() -> true | "wait" | nil, err: this process's informers mirror into the
-- segment (S.list, slot i for the i-th), which makes it the segment's writer. After a reload
-- that kept the segment, the previous generation's writer holds that role until its process
-- exits (or dies): "wait", and the caller asks again each tick, while every worker serves what
-- the old writer left.
function _M.claim_writer()
  for i, inf in ipairs(S.list) do
    if not S.mirrored[i] then
      local ok, err, code = inf:mirror(S.segment, i)
      if not ok then
        if code == "EBUSY" and i == 1 then -- another live process writes the segment
          local t = ngx_now()
          if not S.claiming then
            S.claiming, S.claim_since = true, t
            log("notice", "the previous writer of the shared memory still runs: taking over ",
              "once it has exited")
          elseif t - S.claim_since > 10 and not S.claim_warned then
            S.claim_warned = true
            log("warn", "the previous writer of the shared memory still runs after 10 s ",
              "(an old worker waiting for its connections to close): the shared cache is not ",
              "updated meanwhile")
          end
          return "wait"
        end
        log("error", "informer ", S.names[i], ": cannot write the shared store: ", tostring(err))
        return nil, "informer " .. S.names[i] .. ": " .. tostring(err)
      end
      S.mirrored[i] = true
    end
  end
  if S.claiming then
    log("notice", string_format("took the shared memory over after %.3f s",
      ngx_now() - S.claim_since))
  end
  S.claiming = false
  return true
end

return _M
