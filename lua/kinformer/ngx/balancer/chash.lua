--- kinformer.ngx.balancer.chash (internal): a consistent-hash ring over a balancer's peers. Pure Lua
-- (specs run it on Lua 5.4 with their own hash function).
--
-- Contract: ring(ids, hash) places points_for(#ids) points per peer on a circle of 32-bit
-- hashes (hash(id .. "#" .. j), the ketama construction nginx's `hash ... consistent` uses:
-- 160 per peer, fewer past 100 peers so that a ring stays at about 16,000 points, at least 16
-- per peer: a worker builds it on the first request after a change) and
-- lookup(ring, h) gives the index (into ids) of the peer owning the first point at or after h.
-- A key's peer depends only on the peers' ids, not on their order: when a peer leaves, only
-- the keys it owned move (to the next points on the circle); when one joins, it takes about
-- 1/n of the keys, from every other peer. hash must return integers in [0, 2^32).
local math_floor = math.floor
local table_sort = table.sort

local _M = {}

local POINTS, TOTAL, MIN = 160, 16000, 16

--- chash.points_for(n) -> points per peer on a ring of n peers
function _M.points_for(n)
  if n * POINTS <= TOTAL then return POINTS end
  local k = math_floor(TOTAL / n)
  return k < MIN and MIN or k
end
local SHIFT = 65536 -- a point and its peer's index packed into one exact double

--- chash.ring(ids, hash) -> { points = { h, ... } sorted, owner = { index, ... }, n = #points }
function _M.ring(ids, hash)
  local packed, n = {}, 0
  local per = _M.points_for(#ids)
  for i = 1, #ids do
    local id = ids[i]
    for j = 1, per do
      n = n + 1
      packed[n] = hash(id .. "#" .. j) * SHIFT + i
    end
  end
  table_sort(packed)
  local points, owner = {}, {}
  for k = 1, n do
    local v = packed[k]
    local h = math_floor(v / SHIFT)
    points[k], owner[k] = h, v - h * SHIFT
  end
  return { points = points, owner = owner, n = n }
end

--- chash.position(ring, h) -> the position (1..n) of the first point at or after h
function _M.position(r, h)
  local points, n = r.points, r.n
  if n == 0 then return nil end
  if h > points[n] then return 1 end
  local lo, hi = 1, n
  while lo < hi do
    local mid = math_floor((lo + hi) / 2)
    if points[mid] < h then lo = mid + 1 else hi = mid end
  end
  return lo
end

--- chash.lookup(ring, h) -> the index of the peer owning h, or nil (no peer)
function _M.lookup(r, h)
  local pos = _M.position(r, h)
  return pos and r.owner[pos]
end

return _M
