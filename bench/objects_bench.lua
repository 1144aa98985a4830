-- Cached objects on LuaJIT (and Lua 5.4): the memory a cache of lazily decoded objects costs
-- against the JSON it keeps, and the CPU time of reading a routing field, first and warm.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/luajit/?.so;;' \
--     luajit bench/objects_bench.lua [slices = 2000] [pods = 100000]
--
-- Memory (LuaJIT only: it needs ffi for glibc's mallinfo2): Lua heap (collectgarbage("count"),
-- after a full collection) + C heap in use (mallinfo2: the records, the store, member indexes)
-- over the process's own baseline, against the JSON bytes of the records. Three states:
--   cache     the records in a store, each object handed out once (a pinned, unread table)
--   handlers  + what an index/handler reads: metadata.name, metadata.labels
--   routing   + the routing fields: slices' endpoints[i].addresses and conditions, ports;
--             pods' spec.nodeName and status.podIP (spec and status decoded whole)
-- Read speed (CPU seconds, os.clock): over the slices, (first) the table handed out from a record
-- plus the first read of endpoints[i].addresses[1] for every endpoint, (warm) the same reads
-- again on the same tables, many times. Run it with an older build's core.so in LUA_CPATH for
-- an A/B. Objects are made from JSON like the fake API server's (pods: its generator's template,
-- managedFields stripped as the informer does by default).
local kinformer = require "kinformer"
local cjson = require "cjson"

local SLICES = tonumber(arg[1]) or 2000
local PODS = tonumber(arg[2]) or 100000
local ffi = rawget(_G, "jit") and require "ffi"
if ffi then
  ffi.cdef [[
    struct kinf_bench_mallinfo2 { size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks,
                                  uordblks, fordblks, keepcost; };
    struct kinf_bench_mallinfo2 mallinfo2(void);
  ]]
end

-- Lua heap bytes and C heap bytes in use, after a full collection.
local function mem()
  collectgarbage()
  collectgarbage()
  if not ffi then return collectgarbage("count") * 1024, 0 end
  local m = ffi.C.mallinfo2()
  return collectgarbage("count") * 1024, tonumber(m.uordblks) + tonumber(m.hblkhd)
end

-- An EndpointSlice as bench/openresty_bench.lua makes them (10 endpoints, 7 ready), with the
-- metadata the API server adds.
local function slice(i)
  local eps = {}
  for j = 1, 10 do
    eps[j] = { addresses = { ("10.%d.%d.%d"):format(math.floor(i / 250), i % 250, j) },
               conditions = { ready = j <= 7, serving = j <= 7, terminating = false },
               nodeName = "node-" .. (j % 50) }
  end
  return cjson.encode{
    apiVersion = "discovery.k8s.io/v1", kind = "EndpointSlice",
    metadata = { name = ("svc-%d-abcde"):format(i), namespace = "bench",
                 uid = ("%08x-aaaa-4bbb-8ccc-dddddddddddd"):format(i),
                 resourceVersion = tostring(1000 + i), creationTimestamp = "2026-11-20T10:00:00Z",
                 labels = { ["kubernetes.io/service-name"] = "svc-" .. i,
                            ["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io" } },
    addressType = "IPv4", ports = { { name = "http", port = 8080, protocol = "TCP" } },
    endpoints = eps }
end

local pod_template
local function pod(i)
  if not pod_template then
    local p = assert(io.popen([[python3 -c '
import sys, json, random
sys.path.insert(0, "tools/fake-apiserver")
from fakeapi.generate import Deployment
p = Deployment(random.Random(1), "ns-0", "frontend", 100, 1790000000)._pod(True)
del p["metadata"]["managedFields"]
print(json.dumps(dict(apiVersion="v1", kind="Pod", **p), separators=(",", ":")))']]))
    pod_template = p:read("*l")
    p:close()
    assert(pod_template and pod_template:find("@@NAME@@"), "cannot make the pod template")
  end
  local v = {
    NAME = "frontend-" .. i, UID = ("%08x-1111-4222-8333-444444444444"):format(i), RV = tostring(i),
    CTIME = "2026-11-20T10:00:00Z", STIME = "2026-11-20T10:00:07Z", NODE = "node-" .. (i % 50),
    HOSTIP = "10.0.0." .. (i % 50 + 2), CID = ("%064x"):format(i),
    PODIP = ("10.%d.%d.%d"):format(64 + math.floor(i / 65024), math.floor(i / 254) % 256, i % 254 + 1),
  }
  return (pod_template:gsub("@@([A-Z0-9_]+)@@", v))
end

-- Records for n objects made by make(i) -> JSON, queued in a FIFO (no Lua table kept).
local function records(n, make)
  local fifo = kinformer.delta_fifo{}
  for b = 1, n, 1000 do
    for i = b, math.min(n, b + 999) do assert(fifo:add(cjson.decode(make(i)))) end
    collectgarbage() -- the tables handed in go; their records stay in the FIFO
  end
  return fifo
end

local function read_handlers(o)
  local md = o.metadata
  local _ = md.name, md.labels
end

local function read_routing_slice(o)
  local n = 0
  local _ = o.ports[1].port
  for _, ep in ipairs(o.endpoints) do
    if ep.conditions.ready ~= false then n = n + #ep.addresses[1] end
  end
  return n
end

local function read_routing_pod(o)
  local _ = o.spec.nodeName, o.status.podIP
end

local function memory(name, n, make, routing)
  local lua0, c0 = mem()
  local fifo = records(n, make)
  local store = kinformer.store{}
  local json = 0
  for _ = 1, n do
    local o = fifo:pop()[1].object
    json = json + #kinformer.encode(o)
    assert(store:add(o)) -- the store pins the table it was handed
  end
  fifo = nil -- luacheck: ignore
  local rows = {}
  local function row(state)
    local lua, c = mem()
    rows[#rows + 1] = ("| %s | %d | %.1f MB | %s | %.1f MB | %.1f MB | %.2fx |"):format(name, n,
      json / 1e6, state, (lua - lua0) / 1e6, (c - c0) / 1e6, (lua - lua0 + c - c0) / json)
  end
  row("cache")
  for _, o in ipairs(store:list()) do read_handlers(o) end
  row("handlers")
  for _, o in ipairs(store:list()) do routing(o) end
  row("routing")
  return rows
end

local function reads()
  local fifo = records(SLICES, slice)
  local eps = 0
  -- first: the table made from the record, then the first read of every endpoint's address
  local first = 0
  local ROUNDS = 20
  for _ = 1, ROUNDS do
    collectgarbage()
    collectgarbage() -- the previous round's tables go: list() makes new ones
    local t0 = os.clock()
    local objs = fifo:list()
    for i = 1, #objs do
      local e = objs[i].endpoints
      for j = 1, #e do local _ = e[j].addresses[1] end
    end
    first = first + os.clock() - t0
  end
  local objs = fifo:list()
  for i = 1, #objs do eps = eps + #objs[i].endpoints end
  -- warm: the same reads on the same tables
  local WARM = 2000
  local t0 = os.clock()
  local sink = 0
  for _ = 1, WARM do
    for i = 1, #objs do
      local e = objs[i].endpoints
      for j = 1, #e do sink = sink + #e[j].addresses[1] end
    end
  end
  local warm = os.clock() - t0
  return ("| %d slices (%d endpoints) | %.0f us per slice (%.2f s CPU for %d rounds) | %.1f ns per endpoint read (%.2f s CPU for %d rounds) |")
    :format(#objs, eps, first / ROUNDS / #objs * 1e6, first, ROUNDS, warm / WARM / eps * 1e9, warm, WARM)
end

print(("# %s, %s"):format(rawget(_G, "jit") and jit.version or _VERSION, package.searchpath("kinformer.core", package.cpath)))
print("\n| read speed | first read (table + endpoints[i].addresses[1]) | warm read |")
print("|---|---:|---:|")
print(reads())
print("\n| objects | n | JSON kept | state | Lua heap | C heap | (Lua + C) / JSON |")
print("|---|---:|---:|---|---:|---:|---:|")
for _, r in ipairs(memory("EndpointSlices", SLICES, slice, read_routing_slice)) do print(r) end
if PODS > 0 then
  for _, r in ipairs(memory("pods", PODS, pod, read_routing_pod)) do print(r) end
end
