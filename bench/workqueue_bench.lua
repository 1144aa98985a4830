-- bench/workqueue_bench.lua: add+get+done cost with about 2^16 items queued while items come and
-- go (Lua rehashes a table holding ~2^k keys under churn unless the queue guards against it).
-- Usage: lua5.4 bench/workqueue_bench.lua  (or luajit)
local root = (arg and arg[0] or ""):match("^(.*)/bench/workqueue_bench%.lua$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/" .. (_VERSION == "Lua 5.4" and "lua5.4" or "luajit") .. "/?.so;"
  .. package.cpath
local workqueue = require "kinformer.workqueue"
local socket = require "socket"
print("| items queued | add+get+done, us each |")
print("|---:|---:|")
for _, n in ipairs{ 1000, 10000, 65530, 100000 } do
  local q = workqueue()
  for i = 1, n do q:add("k" .. i) end
  local t0 = socket.gettime()
  local rounds = 20000
  for i = n + 1, n + rounds do
    q:add("k" .. i)
    q:done(q:get(0))
  end
  print(string.format("| %d | %.2f |", n, (socket.gettime() - t0) / rounds * 1e6))
end
