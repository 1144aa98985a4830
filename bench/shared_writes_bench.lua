-- What a write costs the shared cache's writer as one index value grows: N pods in ONE
-- namespace (the namespace index's value holds all of them), listed (dispatched 100 at a time),
-- then updated one at a time, each dispatched (index function, local store, segment).
-- Microseconds per pod listed and per update with the segment mirrored, and without (the
-- informer's local store alone), for N = 1k, 10k, 100k.
--   make bench-shared-writes   (or: LUA_PATH='lua/?.lua;lua/?/init.lua;;'
--     LUA_CPATH='build/lua5.4/?.so;;' lua5.4 bench/shared_writes_bench.lua [updates = 5000])
local core = require "kinformer.core"
local kinformer = require "kinformer"
local gettime = require("socket").gettime

local UPDATES = tonumber(arg and arg[1]) or 5000

local function pod(i, rv)
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = { namespace = "one", name = "pod-" .. i, uid = "uid-" .. i,
                 resourceVersion = tostring(rv), labels = { app = "app-" .. (i % 200) } },
    spec = { nodeName = "node-" .. (i % 100), containers = { { name = "c", image = "nginx" } } },
    status = { phase = "Running", podIP = "10.0." .. (i % 250) .. "." .. (i % 200) },
  }
end

-- us per pod listed and per update for n pods, mirrored into a segment or not
local function run(n, mirrored)
  local store = kinformer.store{ indexers = {
    by_node = function(p) return { p.spec.nodeName } end } }
  local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
  local proc = core.processor(fifo, store)
  local seg
  if mirrored then
    seg = core.shm(n * 3 * 1024 + 64 * 1024 * 1024)
    assert(proc:mirror(seg, 1))
  end
  local pods = {}
  for i = 1, n do pods[i] = pod(i, 1) end
  collectgarbage()
  local t0 = gettime()
  for i = 1, n do fifo:update(pods[i]) end
  while proc:dispatch(100) > 0 do end
  local list_us = (gettime() - t0) * 1e6 / n
  local objs = {}
  for u = 1, UPDATES do objs[u] = pod((u * 7919) % n + 1, 1 + u) end
  collectgarbage()
  t0 = gettime()
  for u = 1, UPDATES do
    fifo:update(objs[u])
    proc:dispatch(1)
  end
  local us = (gettime() - t0) * 1e6 / UPDATES
  if mirrored then assert(proc:status().shared.failures == 0, "segment full") end
  return list_us, us
end

print(("# shared-cache writes, %s, %s, %d updates per row"):format(
  os.date("!%Y-%m-%d %H:%M UTC"), _VERSION, UPDATES))
print()
print("| pods in the one namespace | us per pod listed: local store / mirrored | us per update: local store / mirrored | the segment's share of an update, us |")
print("|---:|---:|---:|---:|")
for _, n in ipairs{ 1000, 10000, 100000 } do
  local plain_list, plain = run(n, false)
  local mirrored_list, mirrored = run(n, true)
  print(("| %d | %.1f / %.1f | %.1f / %.1f | %.1f |"):format(n, plain_list, mirrored_list, plain,
    mirrored, mirrored - plain))
end
