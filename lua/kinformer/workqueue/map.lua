--- kinformer.workqueue.map (internal): a key -> value map that stays O(1) under churn.
--
-- Lua rehashes a table when a new key finds no free slot, and sizes it from the keys still
-- present: a table holding about 2^k keys while keys come and go would be rebuilt (O(n)) every
-- few inserts (measured: 0.9 ms per add+get+done with 65530 items queued). So a deleted key
-- stays as `false` (adding it again needs no new slot), and the table is rebuilt without them
-- once they outnumber the live keys: O(1) amortized, at most about twice the live keys' memory.
--
-- Contract: m.t[k] reads (a false value means absent); m.live counts the keys present;
-- put's value must not be false or nil. Plain Lua state of one thread; no copies are made.
local pairs = pairs

local _M = {}

local MIN_DEAD = 64

--- map.new() -> m
function _M.new()
  return { t = {}, live = 0, dead = 0 }
end

--- map.put(m, k, v)
function _M.put(m, k, v)
  local t = m.t
  local old = t[k]
  if not old then
    m.live = m.live + 1
    if old == false then m.dead = m.dead - 1 end
  end
  t[k] = v
end

--- map.del(m, k): no-op when k is absent.
function _M.del(m, k)
  local t = m.t
  if not t[k] then return end
  t[k] = false
  local live, dead = m.live - 1, m.dead + 1
  if dead > MIN_DEAD and dead > live then
    local fresh = {}
    for key, v in pairs(t) do
      if v then fresh[key] = v end
    end
    m.t = fresh
    dead = 0
  end
  m.live, m.dead = live, dead
end

return _M
