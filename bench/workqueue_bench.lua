-- bench/workqueue_bench.lua: add+get+done cost with about 2^16 items queued while items come and
-- go (Lua rehashes a table holding ~2^k keys under churn unless the queue guards against it),
-- at priority 0 only (client-go's FIFO) and with priorities: a backlog of low-priority keys
-- (an initial list at -100) while priority-0 keys come and go, and promotions of queued keys.
-- Keys are made before the clock starts, so the figures are the queue's own cost.
-- Usage: lua5.4 bench/workqueue_bench.lua  (or luajit)
local root = (arg and arg[0] or ""):match("^(.*)/bench/workqueue_bench%.lua$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/" .. (_VERSION == "Lua 5.4" and "lua5.4" or "luajit") .. "/?.so;"
  .. package.cpath
local workqueue = require "kinformer.workqueue"
local socket = require "socket"

local ROUNDS = 100000
local SIZES = { 1000, 10000, 65530, 100000 }

local keys = {}
for i = 1, SIZES[#SIZES] + ROUNDS do keys[i] = "k" .. i end

-- us per round of fn(q, i) for i = n + 1 .. n + ROUNDS, after fill(q, n)
local function measure(n, fill, fn)
  local q = workqueue()
  fill(q, n)
  collectgarbage()
  local t0 = socket.gettime()
  for i = n + 1, n + ROUNDS do fn(q, i) end
  return (socket.gettime() - t0) / ROUNDS * 1e6
end

local function fill_at(prio)
  return function(q, n)
    for i = 1, n do q:add(keys[i], prio) end
  end
end

-- one new key at priority 0, then get + done
local function churn(q, i)
  q:add(keys[i])
  q:done(q:get(0))
end

-- promote queued key i - n (at -100) to 0, add a new key at -100, get + done
local function promote(n)
  return function(q, i)
    q:add(keys[i - n], 0)
    q:add(keys[i], -100)
    q:done(q:get(0))
  end
end

print("| items queued | priority 0 only | backlog at -100, adds at 0 | promotions |")
print("|---:|---:|---:|---:|")
for _, n in ipairs(SIZES) do
  print(string.format("| %d | %.2f | %.2f | %.2f |", n,
    measure(n, fill_at(nil), churn),
    measure(n, fill_at(-100), churn),
    measure(n, fill_at(-100), promote(n))))
end
