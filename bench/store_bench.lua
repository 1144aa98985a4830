-- Store and DeltaFIFO operations per second from Lua at N objects (default 100k).
-- Run: make bench-core   (or: LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 bench/store_bench.lua [N])
local kinformer = require "kinformer"
local gettime = require("socket").gettime

local N = tonumber(arg and arg[1]) or 100000
local NODES = 1000 -- 100 pods per node at 100k

local function pod(i, rv)
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = {
      namespace = "ns-" .. (i % 50), name = "pod-" .. i, uid = "uid-" .. i,
      resourceVersion = tostring(rv), labels = { app = "app-" .. (i % 200), tier = "web" },
    },
    spec = { nodeName = "node-" .. (i % NODES), containers = { { name = "c", image = "nginx:1.25" } } },
    status = { phase = "Running", podIP = "10.0." .. (i % 250) .. "." .. (i % 200) },
  }
end

local function measure(label, count, fn)
  collectgarbage("collect")
  local t0 = gettime()
  fn()
  local dt = gettime() - t0
  print(string.format("| %-46s | %10d | %8.3f | %12.0f |", label, count, dt, count / dt))
end

print(string.format("kinformer store benchmark: %d objects, %s, %s", N, _VERSION, os.date("!%Y-%m-%d")))
print("| operation                                      |        ops |    s     |        ops/s |")
print("|------------------------------------------------|------------|----------|--------------|")

local store = kinformer.store{ indexers = { by_node = function(p) return { p.spec.nodeName } end } }
local pods = {}
for i = 1, N do pods[i] = pod(i, 1) end

measure("add (user tables: encode + index fn)", N, function()
  for i = 1, N do store:add(pods[i]) end
end)
local updated = {}
for i = 1, N do updated[i] = pod(i, 2) end
measure("update (user tables, node unchanged)", N, function()
  for i = 1, N do store:update(updated[i]) end
end)

-- The informer path: objects kinformer decoded itself are written without re-encoding.
local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
for i = 1, N do fifo:update(pod(i, 3)) end
local popped = {}
measure("fifo pop (decode record -> table)", N, function()
  for i = 1, N do popped[i] = fifo:pop()[1].object end
end)
measure("update (decoded tables: no encode)", N, function()
  for i = 1, N do store:update(popped[i]) end
end)

-- Reading the cache with a label selector: store:list{ label_selector } matches in C from the
-- records (and pushes only the matches) against the same filter in Lua over list(). The first
-- query of each is cold: nothing has located or decoded metadata.labels yet.
local function lua_filter(objs, app)
  local out = {}
  for _, p in ipairs(objs) do
    local l = p.metadata.labels
    if l and l.app == app then out[#out + 1] = p end
  end
  return out
end
local matched = {}
measure("list{ label_selector }, cold (1 query)", 1, function()
  matched[1] = #store:list{ label_selector = "app=app-7" }
end)
measure("Lua filter over list(), cold (1 query)", 1, function()
  matched[2] = #lua_filter(store:list(), "app-7")
end)
assert(matched[1] == matched[2] and matched[1] == N // 200, "selector and Lua filter disagree")
local SELECTS = math.max(5, 2000000 // N)
measure("list{ label_selector = \"app=...\" } (" .. (N // 200) .. " hits)", SELECTS, function()
  for j = 1, SELECTS do store:list{ label_selector = "app=app-" .. (j % 200) } end
end)
measure("Lua filter over list(), same", SELECTS, function()
  for j = 1, SELECTS do lua_filter(store:list(), "app-" .. (j % 200)) end
end)
measure("list{ namespace, label_selector }", SELECTS * 10, function()
  for j = 1, SELECTS * 10 do
    store:list{ namespace = "ns-" .. (j % 50), label_selector = "app=app-" .. (j % 200) }
  end
end)
measure("Lua filter over by_index(\"namespace\"), same", SELECTS * 10, function()
  for j = 1, SELECTS * 10 do
    lua_filter(store:by_index("namespace", "ns-" .. (j % 50)), "app-" .. (j % 200))
  end
end)

local keys = {}
for i = 1, N do keys[i] = "ns-" .. (i % 50) .. "/pod-" .. i end
local GETS = 10 * N
measure("get_by_key (warm)", GETS, function()
  local get = store.get_by_key
  for j = 1, GETS do get(store, keys[(j % N) + 1]) end
end)
local QUERIES = 20000
measure("by_index (by_node, ~" .. (N // NODES) .. " objects each)", QUERIES, function()
  for j = 1, QUERIES do store:by_index("by_node", "node-" .. (j % NODES)) end
end)
measure("index_keys (namespace, ~" .. (N // 50) .. " keys, sorted)", 200, function()
  for j = 1, 200 do store:index_keys("namespace", "ns-" .. (j % 50)) end
end)
measure("fifo add + pop (user tables)", N, function()
  for i = 1, N do fifo:add(pods[i]) end
  for i = 1, N do fifo:pop() end
end)
print(string.format("Lua memory after run: %.1f MB", collectgarbage("count") / 1024))
