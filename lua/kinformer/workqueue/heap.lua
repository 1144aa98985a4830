--- kinformer.workqueue.heap (internal): the delaying queue's binary min-heap.
--
-- Contract: a heap is a Lua array of entries { item =, at =, seq = , pos = }, ordered by ready
-- time `at`, then by insertion order `seq` (unique per queue, so the order is total). The heap
-- keeps each entry's `pos` equal to its index, which up(h, e.pos) needs after an entry's `at`
-- moved earlier (client-go's heap.Fix). The caller owns the entries; one thread.
local math_floor = math.floor

local _M = {}

local function less(a, b)
  return a.at < b.at or (a.at == b.at and a.seq < b.seq)
end

--- heap.up(h, i): restores the order after h[i] was appended or moved earlier.
function _M.up(h, i)
  local e = h[i]
  while i > 1 do
    local p = math_floor(i / 2)
    local pe = h[p]
    if not less(e, pe) then break end
    h[i] = pe
    pe.pos = i
    i = p
  end
  h[i] = e
  e.pos = i
end

local function down(h, i)
  local n = #h
  local e = h[i]
  while true do
    local c = 2 * i
    if c > n then break end
    if c < n and less(h[c + 1], h[c]) then c = c + 1 end
    local ce = h[c]
    if not less(ce, e) then break end
    h[i] = ce
    ce.pos = i
    i = c
  end
  h[i] = e
  e.pos = i
end

--- heap.pop(h) -> the earliest entry (h must not be empty).
function _M.pop(h)
  local top = h[1]
  local n = #h
  local last = h[n]
  h[n] = nil
  if n > 1 then
    h[1] = last
    down(h, 1)
  end
  return top
end

return _M
