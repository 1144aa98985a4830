-- The shared model against the worker model, inside Debian's nginx: memory of W workers
-- holding P pods and S EndpointSlices, lookups from a worker (get over every pod, by_index of
-- every service), how long a change takes to reach every worker, and the CPU per 1,000 watch
-- events of all nginx processes.
--
--   make bench-shared       (or: LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' \
--     lua5.4 bench/shared_bench.lua [pods = 100000] [slices = 2000] [workers = 16] [events = 20000])
--
-- Configurations: the worker model with 1 worker (the reference: one cache), the worker model
-- with W workers, the shared model with W workers. Memory is the proportional set size (PSS,
-- /proc/PID/smaps_rollup) summed over the master and every worker, so shared memory counts once
-- however many workers map it; "over empty" subtracts the same configuration's PSS with empty
-- informers. Everything runs on loopback on this machine with the fake API server.
local socket = require "socket"
local cjson = require "cjson"
_G.KINFORMER_ROOT = _G.KINFORMER_ROOT or "."
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"

local PODS = tonumber(arg[1]) or 100000
local SLICES = tonumber(arg[2]) or 2000
local WORKERS = tonumber(arg[3]) or 16
local EVENTS = tonumber(arg[4]) or 20000
local now, sleep = socket.gettime, socket.sleep

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function pss_kb(pid)
  return tonumber((read("/proc/" .. pid .. "/smaps_rollup") or ""):match("\nPss:%s+(%d+)")) or 0
end

local function cpu_seconds(pids)
  local t = 0
  for _, pid in ipairs(pids) do
    local s = read("/proc/" .. pid .. "/stat")
    if s then
      local f = {}
      for w in s:gsub("^.-%) ", ""):gmatch("%S+") do f[#f + 1] = w end
      t = t + tonumber(f[12]) + tonumber(f[13])
    end
  end
  return t / 100
end

local PROBE = [[
local kngx = require "kinformer.ngx"
local kinformer = require "kinformer"
local cjson = require "cjson"
local M = {}
local MODEL, EMPTY = os.getenv("BENCH_MODEL"), os.getenv("BENCH_EMPTY") == "1"
local seen, at = {}, {} -- handlers: slice key -> resourceVersion, and when they saw it
local function on(o)
  local key = kinformer.key_of(o)
  seen[key] = o.metadata.resourceVersion
  ngx.update_time()
  at[key] = ngx.now()
end
local handlers = { on_add = on, on_update = function(_, o) on(o) end,
                   on_delete = function(o) seen[kinformer.key_of(o)] = nil end }
function M.init()
  if MODEL == "shared" then
    kngx.enable_agent()
    kngx.shared_memory(os.getenv("BENCH_SHM"))
  end
end
function M.init_worker()
  local ns = EMPTY and "nothing-here" or nil
  assert(kngx.start{
    model = MODEL, client = { server = os.getenv("KINFORMER_SERVER") }, interval = 0.05,
    informers = {
      pods = { resource = "pods", namespace = ns },
      slices = { resource = "endpointslices.discovery.k8s.io", namespace = ns },
    },
    setup = function(infs)
      assert(infs.pods:add_indexers{ by_node = function(p) return { p.spec.nodeName } end })
      assert(infs.slices:add_indexers{ service = function(s)
        return { s.metadata.labels["kubernetes.io/service-name"] } end })
      if MODEL ~= "shared" then assert(infs.slices:add_handler(handlers)) end
    end,
    handlers = MODEL == "shared" and { slices = handlers } or nil,
  })
end
-- /info: this worker's view: objects, whether synced, a slice's version as its handlers saw it
-- and when (seconds since the epoch)
function M.info()
  local pods, slices = kngx.store("pods"), kngx.store("slices")
  local key = ngx.var.arg_key or ""
  ngx.say(cjson.encode{ pid = ngx.worker.pid(), synced = kngx.synced(),
    pods = pods and pods:len() or 0, slices = slices and slices:len() or 0,
    rv = seen[key] or "", at = at[key] or 0 })
end
-- /lookups: get of every pod, then by_index of every service, repeated for at least 0.3 s each
-- (warm: one pass first)
function M.lookups()
  local clock = require("kinformer.core").now
  local pods, slices = kngx.store("pods"), kngx.store("slices")
  local keys = pods:list_keys()
  local services = slices:list_index_func_values("service")
  for i = 1, #keys do local _ = pods:get(keys[i]) end
  for i = 1, #services do local _ = slices:by_index("service", services[i]) end
  local n, t0 = 0, clock()
  repeat
    for i = 1, #keys do local _ = pods:get(keys[i]) end
    n = n + #keys
  until clock() - t0 >= 0.3
  local get = n / (clock() - t0)
  n, t0 = 0, clock()
  repeat
    for i = 1, #services do local _ = slices:by_index("service", services[i]) end
    n = n + #services
  until clock() - t0 >= 0.3
  ngx.say(cjson.encode{ get = get, by_index = n / (clock() - t0) })
end
return M
]]

local function probe_dir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  local f = assert(io.open(dir .. "/bench_probe.lua", "w"))
  f:write(PROBE)
  f:close()
  return dir
end

local function start_nginx(srv, dir, model, workers, empty)
  local port = openresty.free_port()
  local inst = openresty.start{ name = "shared-bench", env = { KINFORMER_SERVER = srv.url,
    BENCH_MODEL = model, BENCH_EMPTY = empty and "1" or "0",
    BENCH_SHM = tostring(math.max(64, math.ceil(PODS * 7.5 / 1024 + SLICES * 3 / 1024))) .. "m" },
    conf = openresty.lua_conf{ workers = workers, dir = dir, port = port,
      env = { "KINFORMER_SERVER", "BENCH_MODEL", "BENCH_EMPTY", "BENCH_SHM" }, http = [[
    lua_shared_dict kinformer 4m;
    init_by_lua_block { require("bench_probe").init() }
    init_worker_by_lua_block { require("bench_probe").init_worker() }]], locations = [[
        location = /info { content_by_lua_block { require("bench_probe").info() } }
        location = /lookups { content_by_lua_block { require("bench_probe").lookups() } }]] } }
  inst.port = port
  inst.workers = workers
  return inst
end

-- Every worker's /info (requests until each pid answered); nil when some did not within
-- `wait` seconds (a worker busy with its first list).
local function infos(inst, wait)
  local seen, n, deadline = {}, 0, now() + (wait or 60)
  repeat
    local code, body = openresty.get(inst.port, "localhost", "/info" .. (inst.query or ""))
    if code == 200 then
      local d = cjson.decode(body)
      if not seen[d.pid] then seen[d.pid], n = d, n + 1 end
    end
  until n == inst.workers or now() > deadline
  return n == inst.workers and seen or nil
end

local function wait_synced(inst, pods, slices, timeout)
  local t0, deadline = now(), now() + (timeout or 900)
  repeat
    local all = infos(inst, 5)
    local ok = all ~= nil
    for _, d in pairs(all or {}) do
      if not (d.synced and d.pods == pods and d.slices == slices) then ok = false end
    end
    if ok then return now() - t0 end
    sleep(0.5)
  until now() > deadline
  error("never synced")
end

local function pids(inst)
  local out = { inst.pid }
  for _, c in ipairs(inst:children()) do out[#out + 1] = c.pid end
  return out
end

-- The worker that runs the informers (its client's I/O and scanner threads: 3 in all).
local function writer_pid(inst)
  for _, c in ipairs(inst:children()) do
    if openresty.threads(c.pid) == 3 then return c.pid end
  end
end

local function total_pss_mb(inst)
  collectgarbage()
  local kb = 0
  for _, pid in ipairs(pids(inst)) do kb = kb + pss_kb(pid) end
  return kb / 1024
end

local function measure(srv, dir, model, workers)
  local r = { model = model, workers = workers }
  -- Empty informers first: the configuration's own footprint.
  local inst = start_nginx(srv, dir, model, workers, true)
  wait_synced(inst, 0, 0, 60)
  sleep(1)
  r.empty_mb = total_pss_mb(inst)
  inst:stop()
  inst = start_nginx(srv, dir, model, workers, false)
  local ok, err = pcall(function()
    r.sync_s = wait_synced(inst, PODS, SLICES)
    sleep(2)
    r.pss_mb = total_pss_mb(inst)
    local w = writer_pid(inst)
    r.writer_mb = w and pss_kb(w) / 1024 or 0
    r.segment_mb = 0
    if model == "shared" and w then -- the segment: the pages the writer touched (all of them)
      local smaps = read("/proc/" .. w .. "/smaps") or ""
      -- an anonymous shared mapping, or a memfd (kngx.shared_memory keeps it in one)
      for size, rss in smaps:gmatch("\n[%x]+%-[%x]+ rw%-s 00000000 00:%x+ %d+%s+/[%w:._-]+ %(deleted%)\nSize:%s+(%d+) kB\nKernelPageSize:%s+%d+ kB\nMMUPageSize:%s+%d+ kB\nRss:%s+(%d+) kB") do
        if tonumber(size) >= 65536 then r.segment_mb = r.segment_mb + tonumber(rss) / 1024 end
      end
    end
    local code, body = openresty.get(inst.port, "localhost", "/lookups")
    assert(code == 200, "/lookups: " .. tostring(code) .. " " .. tostring(body) .. " " .. inst:log():sub(-600))
    local lk = cjson.decode(body)
    r.get, r.by_index = lk.get, lk.by_index
    -- A change reaching every worker's handlers: a slice relabelled, 10 times; from just before
    -- the write to the API server to the last worker's handler call (its clock, read there).
    local lat = {}
    local slice = srv:state("endpointslices.discovery.k8s.io").items[1]
    local key = slice.metadata.namespace .. "/" .. slice.metadata.name
    for i = 1, 10 do
      slice.metadata.labels["bench"] = tostring(i)
      slice.metadata.resourceVersion = nil
      local t0 = now()
      local res = srv:objects({ slice }, "endpointslices.discovery.k8s.io")
      local want = res.resourceVersion
      inst.query = "?key=" .. key
      local last
      repeat
        last = 0
        for _, d in pairs(assert(infos(inst), "not every worker answered")) do
          if d.rv ~= want then last = nil break end
          last = math.max(last, d.at)
        end
      until last or now() - t0 > 5
      lat[#lat + 1] = (last or now()) - t0
      sleep(0.1 + math.random() * 0.05) -- not in step with the dispatch timer
    end
    table.sort(lat)
    r.change_ms, r.change_max_ms = lat[5] * 1000, lat[10] * 1000
    -- CPU per 1,000 events: a burst of MODIFIED slices.
    local c0, wc0 = cpu_seconds(pids(inst)), cpu_seconds{ writer_pid(inst) }
    srv:modify("endpointslices.discovery.k8s.io", EVENTS, { hold = true })
    srv:release()
    local t0 = now()
    repeat sleep(0.2) until now() - t0 > 60 or (function()
      local head = srv:resource_version()
      for _, d in pairs(infos(inst) or {}) do if not d.synced then return false end end
      return head > 0 and cpu_seconds(pids(inst)) - c0 > 0 and now() - t0 > 3
    end)()
    sleep(2)
    r.cpu_ms_per_1000 = (cpu_seconds(pids(inst)) - c0) * 1000 / (EVENTS / 1000)
    r.writer_cpu_ms_per_1000 = (cpu_seconds{ writer_pid(inst) } - wc0) * 1000 / (EVENTS / 1000)
  end)
  inst:stop()
  if not ok then error(err) end
  return r
end

local function main()
  print(("# shared model benchmark, %s, %d pods, %d EndpointSlices, %d workers, load %s"):format(
    os.date("!%Y-%m-%d %H:%M UTC"), PODS, SLICES, WORKERS, (read("/proc/loadavg") or ""):match("^(%S+ %S+ %S+)")))
  local srv = fake.start{ args = { "--pods", tostring(PODS), "--history",
    tostring(EVENTS + 1000) }, quiet = true }
  -- SLICES Services in namespace "bench", one EndpointSlice each, 10 endpoints (7 ready).
  local batch = {}
  for i = 1, SLICES do
    local eps = {}
    for j = 1, 10 do
      eps[j] = { addresses = { ("10.%d.%d.%d"):format(i // 250, i % 250, j) },
                 conditions = { ready = j <= 7 }, nodeName = "node-" .. j }
    end
    batch[#batch + 1] = { apiVersion = "discovery.k8s.io/v1", kind = "EndpointSlice",
      metadata = { name = ("svc-%d-abcde"):format(i), namespace = "bench",
                   labels = { ["kubernetes.io/service-name"] = "svc-" .. i } },
      addressType = "IPv4", ports = { { name = "http", port = 8080, protocol = "TCP" } },
      endpoints = eps }
    if #batch == 500 or i == SLICES then
      srv:objects(batch)
      batch = {}
    end
  end
  local dir = probe_dir()
  local rows = {}
  for _, c in ipairs{ { "worker", 1 }, { "shared", WORKERS }, { "worker", WORKERS } } do
    io.stderr:write(("measuring model %s, %d worker(s)\n"):format(c[1], c[2]))
    local ok, r = pcall(measure, srv, dir, c[1], c[2])
    rows[#rows + 1] = ok and r or { model = c[1], workers = c[2], failed = tostring(r) }
  end
  srv:stop()
  os.execute("rm -rf " .. dir)
  local ref = rows[1]
  print()
  print("| model, workers | synced s | PSS MB (over empty) | x one worker | of which: the informers' worker / the shared segment, MB | get calls/s in a worker | by_index calls/s | change in every worker, median / max ms | CPU ms per 1,000 events: all processes / the informers' worker |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
  for _, r in ipairs(rows) do
    if r.failed or ref.failed then
      print(("| %s, %d | failed: %s | | | | | | | |"):format(r.model, r.workers, r.failed or ref.failed))
      goto continue
    end
    local over, ref_over = r.pss_mb - r.empty_mb, ref.pss_mb - ref.empty_mb
    print(("| %s, %d | %.1f | %.0f (%.0f) | %.2f | %.0f / %s | %.0f | %.0f | %.0f / %.0f | %.0f / %.0f |"):format(
      r.model, r.workers, r.sync_s, r.pss_mb, over, over / ref_over, r.writer_mb,
      r.model == "shared" and ("%.0f"):format(r.segment_mb) or "-", r.get, r.by_index,
      r.change_ms, r.change_max_ms, r.cpu_ms_per_1000, r.writer_cpu_ms_per_1000))
    ::continue::
  end
end

main()
