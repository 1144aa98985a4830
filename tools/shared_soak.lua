-- A longer churn of the shared cache at the documented size (make soak-shared): OBJECTS pods of
-- about 5 KB mirrored into a segment of 1.2x their JSON plus 20%, every one updated ROUNDS
-- times (a reader polling after every 100), then half deleted and added back. Prints the
-- figures; exits 1 when a write failed for good or the reader ended apart from the writer.
local core = require "kinformer.core"
local kinformer = require "kinformer"

local objects = tonumber(arg[1]) or 2000
local rounds = tonumber(arg[2]) or 50
local collect = arg[3] ~= "nogc"
local pad = string.rep("x", 4800)

local function pod(i, rv)
  return { apiVersion = "v1", kind = "Pod",
    metadata = { namespace = "ns", name = "p" .. i, resourceVersion = tostring(rv),
                 annotations = { pad = pad } },
    spec = { nodeName = "n" .. (i % 20) } }
end

local json = #kinformer.encode(pod(1, 1)) * objects
local seg = core.shm(math.floor(json * 1.2 * 1.2))
local store = kinformer.store{ indexers = { by_node = function(p) return { p.spec.nodeName } end } }
local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
local proc = core.processor(fifo, store)
assert(proc:mirror(seg, 1))
local reader = seg:store(1)
local seen, peak, updates = {}, 0, 0
local function poll()
  reader:poll(1e9, function(kind, obj)
    seen[obj.metadata.name] = kind ~= 3 and obj.metadata.resourceVersion or nil
  end)
  -- The tables poll handed out hold their records until Lua collects them.
  if collect then collectgarbage() end
  local used = seg:stats().used
  if used > peak then peak = used end
end
local function step(i, o, delete)
  if delete then fifo:delete(o) else fifo:update(o) end
  updates = updates + 1
  if i % 100 == 0 then proc:dispatch(1000); poll() end
end

local t0 = os.clock()
for i = 1, objects do step(i, pod(i, 1)) end
for r = 2, rounds + 1 do
  for i = 1, objects do step(i, pod(i, r)) end
end
for i = 2, objects, 2 do step(i, pod(i, 0), true) end
for i = 2, objects, 2 do step(i, pod(i, rounds + 2)) end
for _ = 1, 10 do proc:dispatch(1000); collectgarbage(); poll() end
local cpu = os.clock() - t0
local st = proc:status().shared
local same = true
for _, o in ipairs(store:list()) do
  same = same and seen[o.metadata.name] == o.metadata.resourceVersion
end
same = same and reader:len() == #store:list()
print(string.format("| objects | reader collects after each poll | JSON | segment | writes | failed (then written again) | dirty at the end | peak use | log drops | reader resyncs | reader equals writer | CPU s |"))
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
print(string.format("| %d | %s | %.1f MB | %.1f MB | %d | %d | %d | %.1f MB (%.0f%%) | %d | %d | %s | %.1f |",
  objects, tostring(collect), json / 1e6, seg:stats().size / 1e6, updates, st.failures, st.dirty, peak / 1e6,
  100 * peak / seg:stats().size, st.log_drops, reader:status().resyncs, tostring(same), cpu))
os.exit((st.dirty == 0 and same) and 0 or 1)
