-- Reads of a store of N pods (default 100k) from Lua: calls per second of get, by_index,
-- index_keys, list and list_keys, warm (every result was asked for once before), and the
-- request-path shape: by_index on values of 1-10 objects each, as a router or a reconcile asks.
-- Then the same reads while the store is written (one update between calls): what a read costs
-- when its cached array must be checked, or rebuilt because its own value changed.
-- Runs on Lua 5.4 and on LuaJIT:
--   make bench-lookups   (or: LUA_PATH='lua/?.lua;lua/?/init.lua;;'
--     LUA_CPATH='build/lua5.4/?.so;;' lua5.4 bench/lookups_bench.lua [N] [seconds per row])
local kinformer = require "kinformer"
local gettime = require("socket").gettime

local N = tonumber(arg and arg[1]) or 100000
local BUDGET = tonumber(arg and arg[2]) or 0.5
local NAMESPACES = 10
local SERVICE_SIZE = 10 -- services of 1..10 pods: values of the "service" index

local function pod(i, rv)
  -- Pod i belongs to service s, which has (s % SERVICE_SIZE) + 1 pods.
  return {
    apiVersion = "v1", kind = "Pod",
    metadata = {
      namespace = "ns-" .. (i % NAMESPACES), name = "pod-" .. i, uid = "uid-" .. i,
      resourceVersion = tostring(rv), labels = { app = "app-" .. (i % 200) },
    },
    spec = { nodeName = "node-" .. (i % 1000), containers = { { name = "c", image = "nginx" } } },
    status = { phase = "Running", podIP = "10.0." .. (i % 250) .. "." .. (i % 200) },
  }
end

-- Assign pods to services of sizes 1, 2, ..., 10, 1, 2, ...
local service_of, services = {}, {}
do
  local i, s = 1, 0
  while i <= N do
    local size = (s % SERVICE_SIZE) + 1
    services[#services + 1] = "svc-" .. s
    for _ = 1, size do
      if i > N then break end
      service_of["pod-" .. i] = "svc-" .. s
      i = i + 1
    end
    s = s + 1
  end
end

local store = kinformer.store{ indexers = {
  service = function(p) return { service_of[p.metadata.name] } end,
} }
for i = 1, N do store:add(pod(i, 1)) end
local keys = {}
for i = 1, N do keys[i] = "ns-" .. (i % NAMESPACES) .. "/pod-" .. i end
local nss = {}
for k = 0, NAMESPACES - 1 do nss[#nss + 1] = "ns-" .. k end

-- Runs fn(i) for i = 1, 2, ... until BUDGET seconds passed; returns calls/s. warm() runs first,
-- after a full collection (which lets the store's cached arrays go).
local function rate(fn, warm)
  collectgarbage("collect")
  if warm then warm() end
  local calls, t0 = 0, gettime()
  repeat
    for _ = 1, 64 do calls = calls + 1; fn(calls) end
  until gettime() - t0 >= BUDGET
  return calls / (gettime() - t0)
end

local rows = {}
local function row(label, per_call, r)
  rows[#rows + 1] = { label, per_call, r }
end

-- get: a plain loop over every key (a closure call per get would cost as much as the get).
local get = store.get
for i = 1, N do get(store, keys[i]) end -- warm: every table made once
do
  collectgarbage("collect")
  local calls, t0 = 0, gettime()
  repeat
    for i = 1, N do get(store, keys[i]) end
    calls = calls + N
  until gettime() - t0 >= BUDGET
  row("get(key), every key in turn", 1, calls / (gettime() - t0))
end
row(("by_index(\"namespace\", ns), %d namespaces"):format(NAMESPACES), math.floor(N / NAMESPACES),
  rate(function(c) return store:by_index("namespace", nss[c % NAMESPACES + 1]) end))
row("index_keys(\"namespace\", ns)", math.floor(N / NAMESPACES),
  rate(function(c) return store:index_keys("namespace", nss[c % NAMESPACES + 1]) end))
row("list{ namespace = ns }", math.floor(N / NAMESPACES),
  rate(function(c) return store:list{ namespace = nss[c % NAMESPACES + 1] } end))
row("list()", N, rate(function() return store:list() end))
row("list_keys()", N, rate(function() return store:list_keys() end))
local NS = #services
row(("by_index(\"service\", svc), %d services of 1-10 pods"):format(NS), 5.5,
  rate(function(c) return store:by_index("service", services[c % NS + 1]) end,
    function() for _, svc in ipairs(services) do store:by_index("service", svc) end end))

-- While the store is written: one update of a pod between calls. The read's own value changes
-- (the pod is in it) or another one does.
local rv = 2
local function touch(i)
  rv = rv + 1
  store:update(pod(i, rv))
end
local write_rate = rate(function(c) touch(c % N + 1) end)
row("update(pod) alone (for reference)", 1, write_rate)
row("update + by_index(\"service\") of another service", 5.5, rate(function(c)
  touch(1)
  return store:by_index("service", services[c % NS + 1 == 1 and 2 or c % NS + 1])
end))
row("update + by_index(\"service\") of the pod's own service", 1, rate(function()
  touch(1)
  return store:by_index("service", services[1])
end))

print(("lookups: %d pods, %s, %s"):format(N, jit and jit.version or _VERSION, os.date("!%Y-%m-%d")))
print()
print("| call | objects per call | calls/s |")
print("|---|---:|---:|")
for _, r in ipairs(rows) do
  print(("| %s | %s | %s |"):format(r[1], r[2] == 5.5 and "1-10" or tostring(math.floor(r[2])),
    tostring(math.floor(r[3] + 0.5)):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")))
end
