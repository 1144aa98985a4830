--- kinformer.workqueue.ready (internal): the work queue's ready items, by priority.
--
-- Contract:
-- - Holds the items a work queue can hand out now, each at an integer priority. The queue
--   (kinformer.workqueue) keeps an item here at most once: push adds one that is not here,
--   promote moves one that is here to a higher priority. n counts the items here.
-- - pop hands out the highest priority first and, within one priority, the item pushed there
--   first (a promoted item counts as pushed at its new priority when it was promoted). One
--   exception keeps lower priorities moving (anti-starvation): while an item of a lower
--   priority than the highest is ready, at most every - 1 items in a row come from the
--   highest; the next pop hands out the oldest lower-priority item (the one pushed first,
--   whatever its priority), and the count starts again. every = false turns it off (strict
--   priority, as controller-runtime's priority queue).
-- - Plain Lua state of one thread; the caller owns it.
--
-- Representation: one FIFO ring per priority ("level"), levels sorted highest first. Each
-- entry is an item and a sequence number (the push order across levels, for "oldest"). A
-- promotion cannot take an item out of the middle of its old ring in O(1), so it leaves that
-- entry behind as stale and counts it in `stale` (item -> the priority of its one stale entry,
-- or { [priority] = entries } when it has more); pop skips it. An item's entries in one ring
-- are in push order and only the last can be live, so the first entry of item met in a ring
-- is stale exactly when item has a stale entry counted at that priority. A level left with
-- only stale entries is emptied at once, so every stale entry is skipped or purged once (O(1)
-- amortized) and an empty level holds nothing.
local type, next, ipairs, math_floor = type, next, ipairs, math.floor
local table_insert, table_remove = table.insert, table.remove
local map = require "kinformer.workqueue.map"

local map_new, map_put, map_del = map.new, map.put, map.del

local _M = {}

local RING_MIN = 16   -- entries; a ring doubles when full and halves below a quarter full
local MAX_LEVELS = 16 -- past this many levels, empty ones (other than priority 0) are dropped

-- Slots hold false when empty, so every index stays in the table's array part. Entry k of a
-- ring is its slots 2k - 1 (the item) and 2k (its sequence number).
local function new_ring(cap)
  local r = {}
  for i = 1, 2 * cap do r[i] = false end
  return r
end

local function new_level(prio)
  return { prio = prio, live = 0, n = 0, first = 1, cap = RING_MIN, ring = new_ring(RING_MIN) }
end

--- ready.new(every) -> r: every, an integer >= 2, or false (no anti-starvation).
function _M.new(every)
  local zero = new_level(0)
  return {
    n = 0,                  -- live items, every level
    levels = { zero },      -- highest priority first; priority 0 is always there
    by_prio = { [0] = zero },
    seq = 0,
    stale = map_new(),      -- item -> priority | { [priority] = stale entries in that level }
    stale_n = 0,
    every = every,
    streak = 0,             -- items handed out in a row from the top while a lower one waited
  }
end

-- Moves the level's entries, in order, to a new ring of cap entries.
local function resize(L, cap)
  local ring, first, old_cap = L.ring, L.first, L.cap
  local fresh = new_ring(cap)
  local i = first
  for j = 1, L.n do
    fresh[2 * j - 1], fresh[2 * j] = ring[2 * i - 1], ring[2 * i]
    i = i + 1
    if i > old_cap then i = 1 end
  end
  L.ring, L.first, L.cap = fresh, 1, cap
end

-- Removes the level's first entry (live or stale) -> item, seq.
local function shift(L)
  local ring, first, cap = L.ring, L.first, L.cap
  local j = 2 * first
  local item, seq = ring[j - 1], ring[j]
  ring[j - 1] = false
  ring[j] = false
  first = first + 1
  if first > cap then first = 1 end
  L.first = first
  local n = L.n - 1
  L.n = n
  if cap > RING_MIN and n < cap / 4 then resize(L, math_floor(cap / 2)) end
  return item, seq
end

-- Forgets one stale entry of item at prio; false if item has none there (the entry is live).
local function drop_stale(r, item, prio)
  local s = r.stale.t[item]
  if not s then return false end
  if s == prio then
    map_del(r.stale, item)
  else
    local c = type(s) == "table" and s[prio]
    if not c then return false end
    if c > 1 then
      s[prio] = c - 1
    else
      s[prio] = nil
      if next(s) == nil then map_del(r.stale, item) end
    end
  end
  r.stale_n = r.stale_n - 1
  return true
end

-- Drops the stale entries at the head of L (which has a live one).
local function skip_stale(r, L)
  local prio = L.prio
  while true do
    local item = L.ring[2 * L.first - 1]
    if not drop_stale(r, item, prio) then return end
    shift(L)
  end
end

-- Empties L, whose entries are all stale.
local function purge(r, L)
  local ring, prio = L.ring, L.prio
  local i = L.first
  for _ = 1, L.n do
    drop_stale(r, ring[2 * i - 1], prio)
    i = i + 1
    if i > L.cap then i = 1 end
  end
  L.ring, L.first, L.n, L.cap = new_ring(RING_MIN), 1, 0, RING_MIN
end

-- The level of prio, created (in order) if there is none.
local function level(r, prio)
  local L = r.by_prio[prio]
  if L then return L end
  local levels = r.levels
  if #levels >= MAX_LEVELS then
    for i = #levels, 1, -1 do
      local E = levels[i]
      if E.live == 0 and E.prio ~= 0 then
        table_remove(levels, i)
        r.by_prio[E.prio] = nil
      end
    end
  end
  L = new_level(prio)
  local i = 1
  while levels[i] and levels[i].prio > prio do i = i + 1 end
  table_insert(levels, i, L)
  r.by_prio[prio] = L
  return L
end

--- ready.push(r, item, prio): item (not in r) becomes ready at priority prio, last of it.
local function push(r, item, prio)
  local L = r.by_prio[prio] or level(r, prio)
  local n, cap = L.n, L.cap
  if n == cap then
    cap = cap * 2
    resize(L, cap)
  end
  local i = L.first + n
  if i > cap then i = i - cap end
  local seq = r.seq + 1
  r.seq = seq
  local ring = L.ring
  ring[2 * i - 1] = item
  ring[2 * i] = seq
  L.n = n + 1
  L.live = L.live + 1
  r.n = r.n + 1
end
_M.push = push

--- ready.promote(r, item, from, to): item, ready at priority from, moves to the end of the
-- higher priority to.
function _M.promote(r, item, from, to)
  local L = r.by_prio[from]
  local stale = r.stale
  local s = stale.t[item]
  if not s then
    map_put(stale, item, from)
  else
    if type(s) ~= "table" then
      s = { [s] = 1 }
      map_put(stale, item, s)
    end
    s[from] = (s[from] or 0) + 1
  end
  r.stale_n = r.stale_n + 1
  L.live = L.live - 1
  r.n = r.n - 1
  if L.live == 0 then purge(r, L) end
  push(r, item, to)
end

-- Hands out the first live item of L (which has one).
local function take(r, L)
  if r.stale_n > 0 then skip_stale(r, L) end
  local item = shift(L)
  local live = L.live - 1
  L.live = live
  r.n = r.n - 1
  if live == 0 and L.n > 0 then purge(r, L) end
  return item
end

--- ready.pop(r) -> item, its priority: the next item by the rules above (r.n must be > 0).
function _M.pop(r)
  local levels = r.levels
  local top = levels[1]
  if levels[2] == nil then return take(r, top), top.prio end
  local i = 1
  while top.live == 0 do
    i = i + 1
    top = levels[i]
  end
  local lower = false
  for j = i + 1, #levels do
    if levels[j].live > 0 then
      lower = true
      break
    end
  end
  if not lower then
    r.streak = 0
    return take(r, top), top.prio
  end
  local every = r.every
  if every and r.streak >= every - 1 then
    r.streak = 0
    local best, best_seq
    for j = i + 1, #levels do
      local L = levels[j]
      if L.live > 0 then
        if r.stale_n > 0 then skip_stale(r, L) end
        local seq = L.ring[2 * L.first]
        if not best or seq < best_seq then best, best_seq = L, seq end
      end
    end
    return take(r, best), best.prio
  end
  r.streak = r.streak + 1
  return take(r, top), top.prio
end

--- ready.counts(r) -> { [priority] = ready items } for the priorities that have some
function _M.counts(r)
  local out = {}
  for _, L in ipairs(r.levels) do
    if L.live > 0 then out[L.prio] = L.live end
  end
  return out
end

return _M
